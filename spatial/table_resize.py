"""Resizing a learned relative-position table (Swin's layout, :class:`RelativeBias2D`'s) to
the offsets of another patch grid: bicubic as an image (timm's
``resize_rel_pos_bias_table_simple``) or BEiT's geometric placement (timm's
``resize_rel_pos_bias_table``), on the device and differentiable.
"""

from __future__ import annotations

import torch
import torch.nn.functional as F
from posenc.core.validation import check_choice
from torch import Tensor

from .coords import check_grid_size

__all__ = ["RESIZE", "resize_relative_table"]

#: The ways a learned relative table is resized to another grid (:func:`resize_relative_table`).
RESIZE = ("bicubic", "geometric")


def _geometric_axis(src: int, dst: int, device: torch.device) -> Tensor:
    """``(src,)`` float32 offsets at which BEiT places a table axis of ``src = 2n - 1`` entries
    when it is stretched to ``dst = 2n' - 1``: ``0, +-1, +-(1 + q), +-(1 + q + q^2), ...``, with
    ``q`` found by BEiT's bisection in ``[1.01, 1.5]`` so that the outermost offset is about
    ``n' - 1`` (timm's ``resize_rel_pos_bias_table``, its ``_calc``, step for step: the result
    is the last midpoint tried)."""
    half = src // 2
    left, right = 1.01, 1.5
    while right - left > 1e-6:
        q = (left + right) / 2.0
        if (1.0 - q ** half) / (1.0 - q) > dst // 2:
            right = q
        else:
            left = q
    # Made on the device from sizes alone: a tensor built from a Python list would be copied
    # from the host, which waits for the device's queued work.
    outer = torch.cumsum(q ** torch.arange(half, device=device, dtype=torch.float32), dim=0)
    return torch.cat((-outer.flip(0), outer.new_zeros(1), outer))


def _linear_weights(points: Tensor, targets: Tensor) -> Tensor:
    """``(T, S)`` weights of 1D linear interpolation from values at the increasing ``(S,)``
    ``points`` to the ``(T,)`` ``targets``; a target outside the points takes the nearest end
    value (as timm's ``RegularGridInterpolator``)."""
    size = points.shape[0]
    if size == 1:
        return targets.new_ones(targets.shape[0], 1)
    clamped = torch.minimum(torch.maximum(targets, points[0]), points[-1])
    right = torch.searchsorted(points, clamped).clamp(1, size - 1)
    low, high = points[right - 1], points[right]
    weight = (clamped - low) / (high - low)
    out = targets.new_zeros(targets.shape[0], size)
    out.scatter_(1, (right - 1)[:, None], (1.0 - weight)[:, None])
    return out.scatter_add(1, right[:, None], weight[:, None])


def resize_relative_table(table: Tensor, grid_size: int | tuple[int, int],
                          new_grid_size: int | tuple[int, int], mode: str = "bicubic") -> Tensor:
    """Resize a learned relative-position table to the offsets of another grid.

    Args:
        table: ``((2r - 1)(2c - 1), H)`` values per offset, in :class:`RelativeBias2D`'s (Swin's)
            layout, for ``grid_size = (r, c)``.
        grid_size: ``rows`` or ``(rows, cols)`` of the table's grid.
        new_grid_size: the same for the target grid ``(r', c')``.
        mode: how offsets between the table's entries are read:

            - ``"bicubic"``: the table as an image, ``F.interpolate(mode="bicubic",
              align_corners=False)`` to ``(2r' - 1, 2c' - 1)``: timm's
              ``resize_rel_pos_bias_table_simple``.
            - ``"geometric"``: BEiT's fine-tuning resize. The table's entries are placed at
              geometrically growing offsets ``0, +-1, +-(1 + q), ...`` (``q`` in ``[1.01, 1.5]``,
              spreading them over the new grid's offsets: fine near zero, coarse far away) and
              read at the new grid's integer offsets by linear interpolation (the nearest end
              value beyond them): timm 1.0.31's ``resize_rel_pos_bias_table`` without
              scipy (its default), equal to it to float32 rounding. As there, both axes are
              placed so whenever the grid changes, an unchanged axis too (``q`` is at least
              1.01, so it is read slightly inside its entries), and shrinking reads the
              table's middle (the offsets the smaller grid has).

    Returns:
        ``((2r' - 1)(2c' - 1), H)``, ``table``'s dtype and device (computed in float32;
        differentiable in ``table``). ``"geometric"`` returns ``table`` itself for the same
        grid; ``"bicubic"`` then interpolates onto the same points, which gives it back.
    """
    old, new = check_grid_size(grid_size, "grid_size"), check_grid_size(new_grid_size,
                                                                        "new_grid_size")
    check_choice(mode, "mode", RESIZE)
    if not isinstance(table, Tensor):
        raise TypeError(f"table must be a torch.Tensor, got {type(table).__name__}")
    rows, cols = old
    if table.ndim != 2 or table.shape[0] != (2 * rows - 1) * (2 * cols - 1):
        raise ValueError(f"table must have shape ((2 rows - 1) * (2 cols - 1), heads) = "
                         f"({(2 * rows - 1) * (2 * cols - 1)}, H) for grid_size {old}, got "
                         f"{tuple(table.shape)}")
    heads = table.shape[1]
    image = table.float().t().reshape(heads, 2 * rows - 1, 2 * cols - 1)
    if mode == "bicubic":
        resized = F.interpolate(image[None], size=(2 * new[0] - 1, 2 * new[1] - 1),
                                mode="bicubic", align_corners=False)[0]
    elif tuple(old) == tuple(new):
        return table
    else:
        # Bilinear on the rectilinear grid of placed offsets, one 1D interpolation per axis.
        row_w, col_w = (_linear_weights(
            _geometric_axis(2 * n - 1, 2 * m - 1, table.device),
            torch.arange(1 - m, m, device=table.device, dtype=torch.float32))
            for n, m in zip(old, new, strict=True))
        resized = torch.einsum("ij,hjk,lk->hil", row_w, image, col_w)
    return resized.reshape(heads, -1).t().to(table.dtype)
