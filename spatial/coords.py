"""Patch and video coordinates: what every encoding in posenc.spatial is a function of.

A patch token sits at ``(row, col)`` on the patch grid, row-major
([`patch_coords`][posenc.spatial.patch_coords]); a clip token at ``(t, row, col)``, frame-major
([`video_coords`][posenc.spatial.video_coords]), ``t`` a frame index or the frame's real time in any
unit, so irregularly timed frames are encoded at their true times. Coordinates are explicit per
token, ``(N, D)`` or ``(B, N, D)``, so subsets (MAE keep indices, patch dropout) and packed batches
are just other coordinate tensors. [`GridPositions`][posenc.spatial.coords.GridPositions] /
[`VideoPositions`][posenc.spatial.coords.VideoPositions] add the prefix-token count and (2D) the
grid. [`CoordAugment`][posenc.spatial.coords.CoordAugment] is DINOv3's training-time coordinate
augmentation.
"""

from __future__ import annotations

import math
from typing import Any, NamedTuple, TypeVar

import torch
from posenc.core._checks import (
    check_choice,
    check_float,
    check_int,
    check_output_dtype,
    check_position_dtype,
    check_position_shape,
    check_position_values,
    check_positions,
    check_positive_float,
)
from torch import Tensor, nn

__all__ = ["COORD_NORMALIZE", "NORMALIZE", "CoordAugment", "GridPositions", "as_grid_positions",
           "check_grid_size", "check_rotate_inputs", "grid_position_shape",
           "patch_coords", "VideoPositions", "as_video_positions", "video_coords",
           "video_position_shape"]


#: The coordinate systems every 2D encoding takes: patch indices or DINOv3's unit coordinates.
NORMALIZE = (None, "unit")
#: Every coordinate system [`patch_coords`][posenc.spatial.patch_coords] makes (RoPE2D takes them
#: all).
COORD_NORMALIZE = (*NORMALIZE, "unit_min", "unit_max", "pixel")
T = TypeVar("T")


def check_grid_size(grid_size: object, name: str = "grid_size") -> tuple[int, int]:
    """``int`` or ``(rows, cols)`` -> ``(rows, cols)`` of positive ints (``TypeError`` for
    anything else, ``ValueError`` below 1); symbolic sizes (``torch.SymInt``) pass as they are."""
    if isinstance(grid_size, (int, torch.SymInt)) and not isinstance(grid_size, bool):
        grid_size = (grid_size, grid_size)
    if not isinstance(grid_size, (tuple, list, torch.Size)) or len(grid_size) != 2:
        raise TypeError(f"{name} must be an int or a (rows, cols) pair, got "
                        f"{type(grid_size).__name__} ({grid_size!r})")
    for value in grid_size:
        if isinstance(value, torch.SymInt):
            continue
        if isinstance(value, bool) or not isinstance(value, int):
            raise TypeError(f"{name} must hold ints, got {type(value).__name__} in "
                            f"{tuple(grid_size)!r}")
        if value < 1:
            raise ValueError(f"{name} must hold positive ints, got {tuple(grid_size)!r}")
    return grid_size[0], grid_size[1]


def patch_coords(grid_size: int | tuple[int, int], normalize: str | None = None, *,
                 device: torch.device | str | None = None,
                 dtype: torch.dtype = torch.float32) -> Tensor:
    """``(rows * cols, 2)`` patch coordinates ``(row, col)`` in row-major order (as timm
    flattens the grid): token ``i`` is at ``(i // cols, i % cols)``.

    Args:
        grid_size: ``rows`` (square) or ``(rows, cols)``.
        normalize: one of `COORD_NORMALIZE`:

            - ``None``: patch indices ``0 .. rows-1``.
            - ``"unit"``: patch centres ``2 * (i + 0.5) / rows - 1`` in ``[-1, 1]`` per axis
              (DINOv3, ``normalize_coords="separate"``).
            - ``"unit_min"``/``"unit_max"``: the same with both axes divided by the smaller /
              larger side (DINOv3 ``"min"``/``"max"``), keeping the aspect ratio.
            - ``"pixel"``: ``linspace(-1, 1, rows)`` per axis (timm's ``in_pixels=True``,
              rotary-embedding-torch's ``freqs_for="pixel"``); a single patch sits at -1.
        device: of the result.
        dtype: of the result (a floating dtype).
    """
    rows, cols = check_grid_size(grid_size)
    check_choice(normalize, "normalize", COORD_NORMALIZE)
    check_output_dtype(dtype)
    denominator = {"unit_min": min(rows, cols), "unit_max": max(rows, cols)}.get(normalize)
    axes = []
    for size in (rows, cols):
        axis = torch.arange(size, device=device, dtype=dtype)
        if normalize == "pixel":
            # linspace(-1, 1, size) on arange (linspace would specialise a dynamic export size),
            # dividing by a tensor max(size - 1, 1): a Python `size > 1` is decided once when
            # traced, and the graph then divides by 0 on a one-patch axis.
            axis = axis * (2.0 / axis[-1:].clamp(min=1)) - 1.0
        if normalize in ("unit", "unit_min", "unit_max"):
            axis = (axis + 0.5) * (2.0 / (denominator or size)) - 1.0
        axes.append(axis)
    grid = torch.stack(torch.meshgrid(*axes, indexing="ij"), dim=-1)
    return grid.reshape(-1, 2)


class GridPositions(NamedTuple):
    """Patch coordinates plus what a ViT's attention needs to know about them.

    Attributes:
        coords: ``(N, 2)`` or ``(B, N, 2)`` coordinates of the N patch tokens.
        grid_size: the ``(rows, cols)`` grid the (integer) coordinates lie on, to which
            grid-based tables resize; or None.
        num_prefix_tokens: tokens without a position (cls, registers) before the patch tokens,
            unrotated and zero-biased.
    """

    coords: Tensor
    grid_size: tuple[int, int] | None = None
    num_prefix_tokens: int = 0


def as_grid_positions(positions: Tensor | GridPositions, name: str = "positions") -> GridPositions:
    """Validate ``(N, 2)``/``(B, N, 2)`` coordinates or a
    [`GridPositions`][posenc.spatial.coords.GridPositions]: non-finite values raise, then
    [`grid_position_shape`][posenc.spatial.coords.grid_position_shape] (integers come back as int64;
    a [`GridPositions`][posenc.spatial.coords.GridPositions] as the same object when nothing
    changed, so encodings can tell self-attention, ``query is key``, from cross-attention)."""
    check_position_values(positions, name)
    return grid_position_shape(positions, name)


def grid_position_shape(positions: Tensor | GridPositions,
                        name: str = "positions") -> GridPositions:
    """[`as_grid_positions`][posenc.spatial.coords.as_grid_positions] without reading values (types
    and shapes only)."""
    return _position_shape(positions, GridPositions, name)


def _position_shape(positions: object, cls: type[T], name: str) -> T:
    """``positions`` as a ``cls`` with checked shapes; the same object when nothing changed."""
    trailing = (2,) if cls is GridPositions else (3,)
    if not isinstance(positions, cls):
        return cls(check_position_shape(positions, name, trailing=trailing))
    coords = check_position_shape(positions.coords, f"{name}.coords", trailing=trailing)
    if getattr(positions, "grid_size", None) is not None:
        check_grid_size(positions.grid_size, f"{name}.grid_size")
    check_int(positions.num_prefix_tokens, f"{name}.num_prefix_tokens", ge=0)
    return positions if coords is positions.coords else positions._replace(coords=coords)


def check_generator(generator: object) -> None:
    """Refuse a ``generator`` that is neither a ``torch.Generator`` nor None."""
    if generator is not None and not isinstance(generator, torch.Generator):
        raise TypeError(f"generator must be a torch.Generator or None, got "
                        f"{type(generator).__name__}")


class CoordAugment(nn.Module):
    """DINOv3's coordinate augmentation (timm's ``_apply_coord_augs``, drawing alike): in
    training mode one random transform of the whole call, in eval mode the identity. In order:
    ``coords + s`` (``s ~ U[-shift_coords, shift_coords]`` per axis), ``coords * j`` (``log j ~
    U[-log J, log J]`` per axis), ``coords * r`` (``log r ~ U[-log R, log R]`` shared).

    Args:
        shift_coords: largest shift, a finite number >= 0, or None (no step, no draw).
        jitter_coords: largest per-axis scale factor ``J >= 1``, or None.
        rescale_coords: largest shared scale factor ``R >= 1``, or None.
    """

    def __init__(self, shift_coords: float | None = None, jitter_coords: float | None = None,
                 rescale_coords: float | None = None) -> None:
        super().__init__()
        self.shift_coords = None if shift_coords is None else check_float(
            shift_coords, "shift_coords", ge=0)
        # Factors: J < 1 names the same range as 1/J, refused rather than silently inverted.
        self.jitter_coords = None if jitter_coords is None else check_float(
            jitter_coords, "jitter_coords", ge=1)
        self.rescale_coords = None if rescale_coords is None else check_float(
            rescale_coords, "rescale_coords", ge=1)

    @property
    def active(self) -> bool:
        """Whether any step is configured."""
        return self.config != (None, None, None)

    @property
    def config(self) -> tuple[float | None, float | None, float | None]:
        """``(shift_coords, jitter_coords, rescale_coords)``."""
        return self.shift_coords, self.jitter_coords, self.rescale_coords

    def forward(self, coords: Tensor, *, generator: torch.Generator | None = None) -> Tensor:
        """Transform ``(N, 2)``/``(B, N, 2)`` int, float32 or float64 coordinates (training
        mode; else returned as given) into float32 (from integers) or float64 ones.
        ``generator``: on ``coords``' device, where the draws are made; None: the global one."""
        if not isinstance(coords, Tensor):
            raise TypeError(f"coords must be a torch.Tensor, got {type(coords).__name__}")
        if coords.dtype == torch.bool or coords.is_complex():
            raise TypeError(f"coords must be an integer or floating tensor, got {coords.dtype}")
        check_position_dtype(coords, "coords")
        if coords.ndim not in (2, 3) or coords.shape[-1] != 2:
            raise ValueError(f"coords must have shape (N, 2) or (B, N, 2), got "
                             f"{tuple(coords.shape)}")
        check_generator(generator)
        if not self.training or not self.active:
            return coords
        if not coords.is_floating_point():
            coords = coords.float()

        def draw(count: int, bound: float) -> Tensor:
            return torch.empty(count, device=coords.device, dtype=coords.dtype).uniform_(
                -bound, bound, generator=generator)

        if self.shift_coords is not None:
            coords = coords + draw(2, self.shift_coords)
        if self.jitter_coords is not None:
            coords = coords * draw(2, math.log(self.jitter_coords)).exp()
        if self.rescale_coords is not None:
            coords = coords * draw(1, math.log(self.rescale_coords)).exp()
        return coords

    def extra_repr(self) -> str:
        return (f"shift_coords={self.shift_coords}, jitter_coords={self.jitter_coords}, "
                f"rescale_coords={self.rescale_coords}")


def check_rotate_inputs(x: Any, coords: Tensor, num_prefix_tokens: int, head_dim: int,
                        num_heads: int | None) -> None:
    """Check a rotary ``rotate(x, positions)``: ``x`` ``(B, H, P + N, head_dim)`` (``H =
    num_heads`` unless None), ``coords`` ``(N, D)`` or ``(B or 1, N, D)``."""
    if not isinstance(x, Tensor):
        raise TypeError(f"x must be a torch.Tensor, got {type(x).__name__}")
    if x.ndim != 4 or x.shape[-1] != head_dim or (num_heads and x.shape[1] != num_heads):
        want = "H" if not num_heads else f"H={num_heads}"
        raise ValueError(f"x must have shape (B, {want}, N, head_dim={head_dim}), got "
                         f"{tuple(x.shape)}")
    tokens = num_prefix_tokens + coords.shape[-2]
    if tokens != x.shape[-2] or (coords.ndim == 3 and coords.shape[0] not in (1, x.shape[0])):
        dims = coords.shape[-1]
        raise ValueError(f"positions of shape {tuple(coords.shape)} with "
                         f"{num_prefix_tokens} prefix tokens do not match x of "
                         f"shape {tuple(x.shape)}: expected (N, {dims}) or (B, N, {dims}) with "
                         f"prefix + N = {x.shape[-2]}, B = {x.shape[0]}")


def video_coords(grid_size: int | tuple[int, int], frames: int | Tensor, *,
                 time_scale: float = 1.0, device: torch.device | str | None = None,
                 dtype: torch.dtype = torch.float32) -> Tensor:
    """``(t, row, col)`` coordinates of every patch of every frame, frame-major then row-major:
    ``(T * rows * cols, 3)``, or ``(B, T * rows * cols, 3)`` for ``(B, T)`` times.

    Args:
        grid_size: the patch grid of one frame, ``rows`` (square) or ``(rows, cols)``.
        frames: ``T`` (``t`` is then the frame index), or the frames' times in any unit and
            spacing, ``(T,)`` shared by the batch or ``(B, T)``.
        time_scale: multiplies ``t`` (e.g. ``fps`` for seconds, Qwen2.5-VL's
            ``tokens_per_second``).
        device: of the result (with ``frames`` a tensor: its device).
        dtype: of the result when ``frames`` is an int; frame times keep their floating dtype,
            integer times give float64.
    """
    grid_size = check_grid_size(grid_size)
    scale = check_positive_float(time_scale, "time_scale")
    if isinstance(frames, Tensor):
        frames = check_positions(frames, "frames")
        if frames.shape[-1] < 1:
            raise ValueError(f"frames must hold at least one frame time, got shape "
                             f"{tuple(frames.shape)}")
    else:
        check_int(frames, "frames", ge=1)
        check_output_dtype(dtype)
    return _video_coords(grid_size, frames, scale, device, dtype)


def _video_coords(grid_size: tuple[int, int], frames: int | Tensor, scale: float,
                  device: torch.device | str | None, dtype: torch.dtype) -> Tensor:
    """[`video_coords`][posenc.spatial.video_coords] of checked arguments: reads no values."""
    rows, cols = grid_size
    if isinstance(frames, Tensor):
        work = frames.dtype if frames.is_floating_point() else torch.float64
        times, device = frames.to(work), frames.device
    else:
        work = dtype
        times = torch.arange(frames, device=device, dtype=work)
    if scale != 1.0:
        times = times * scale
    spatial = patch_coords((rows, cols), device=device, dtype=work)  # (rows * cols, 2)
    per_frame = spatial.shape[0]
    t = times[..., :, None, None].expand(*times.shape, per_frame, 1)
    space = spatial.expand(*times.shape, per_frame, 2)
    return torch.cat((t, space), dim=-1).flatten(-3, -2)


class VideoPositions(NamedTuple):
    """[`GridPositions`][posenc.spatial.coords.GridPositions] (without a grid) of
    ``(N, 3)``/``(B, N, 3)`` ``(t, row, col)`` video coordinates ``coords``."""

    coords: Tensor
    num_prefix_tokens: int = 0


def as_video_positions(positions: Tensor | VideoPositions,
                       name: str = "positions") -> VideoPositions:
    """[`as_grid_positions`][posenc.spatial.coords.as_grid_positions] for ``(N, 3)``/``(B, N, 3)``
    coordinates or a [`VideoPositions`][posenc.spatial.coords.VideoPositions]; a 2D
    [`GridPositions`][posenc.spatial.coords.GridPositions] is a ``TypeError``."""
    check_position_values(positions, name)
    return video_position_shape(positions, name)


def video_position_shape(positions: Tensor | VideoPositions,
                         name: str = "positions") -> VideoPositions:
    """[`as_video_positions`][posenc.spatial.coords.as_video_positions] without reading values."""
    if isinstance(positions, GridPositions):
        raise TypeError(f"{name} must be (N, 3)/(B, N, 3) (t, row, col) coordinates or a "
                        f"VideoPositions, got a GridPositions of 2D (row, col) coordinates: "
                        f"make them with posenc.spatial.video_coords")
    return _position_shape(positions, VideoPositions, name)
