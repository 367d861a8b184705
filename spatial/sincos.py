"""Fixed 2D sin-cos encoding: a 1D sinusoidal encoding of the row and one of the column."""

from __future__ import annotations

import torch
from posenc.core.buffers import Float64Buffers
from posenc.core.sinusoidal import sinusoidal_encoding, sinusoidal_inv_freq
from posenc.core.validation import (
    check_base,
    check_choice,
    check_output_dtype,
    check_position_shape,
    check_position_values,
    check_positive_int,
)
from torch import Tensor

from .coords import NORMALIZE, patch_coords

__all__ = ["SinCos2D"]

# The words of posenc.core.angles' layout vocabulary, with the order of the two axes.
LAYOUTS = ("rows_cols", "cols_rows", "half")


class SinCos2D(Float64Buffers):
    """Additive 2D sin-cos encoding (MAE, timm's ``build_sincos2d_pos_embed``).

    Each axis gets ``dim / 4`` frequencies ``base ** (-4i / dim)``, i.e. the 1D sinusoidal
    encoding of width ``dim / 2``; the channel order is named by ``layout`` (in the vocabulary
    of :mod:`posenc.core.angles`):

    - ``"rows_cols"``: ``[sin(row f), cos(row f), sin(col f), cos(col f)]``, half the channels
      for rows then half for columns; equals timm ``build_sincos2d_pos_embed(...,
      interleave_sin_cos=True)``.
    - ``"cols_rows"``: ``[sin(col f), cos(col f), sin(row f), cos(row f)]``; exactly MAE's
      ``get_2d_sincos_pos_embed``. (timm's ``reverse_coord=True`` is not this: it also
      transposes the token order.)
    - ``"half"``: ``[sin(row f), sin(col f), cos(row f), cos(col f)]``, the 1D ``"half"``
      layout over the angles of both axes (channel ``i`` and ``i + dim/2`` hold the sin and
      cos of one angle); timm's ``build_sincos2d_pos_embed`` with its default arguments
      (``interleave_sin_cos=False``).

    Args:
        dim: embedding width (divisible by 4).
        base: wavelength base (``temperature`` in timm).
        layout: channel order, see above.
        normalize: coordinate system used for whole grids (:meth:`encode_grid`): ``None``
            (patch indices, as MAE/timm) or ``"unit"`` (see :func:`patch_coords`).
    """

    kind = "additive"

    def __init__(self, dim: int, base: float = 10000.0, *, layout: str = "rows_cols",
                 normalize: str | None = None) -> None:
        super().__init__()
        if check_positive_int(dim, "dim") % 4:
            raise ValueError(f"dim must be a positive multiple of 4 (a sin and a cos per axis), "
                             f"got {dim!r}")
        self.dim = dim
        self.base = check_base(base)
        self.layout = check_choice(layout, "layout", LAYOUTS)
        self.normalize = check_choice(normalize, "normalize", NORMALIZE)
        self.reset_float64_buffers()

    def float64_buffers(self) -> dict[str, Tensor]:
        return {"inv_freq64": sinusoidal_inv_freq(self.dim // 2, self.base)}

    def forward(self, coords: Tensor, *, dtype: torch.dtype = torch.float32) -> Tensor:
        """``(N, 2)``/``(B, N, 2)`` (row, col) coordinates -> ``(..., N, dim)`` of ``dtype``
        (pass the dtype of the tokens it is added to)."""
        check_position_values(coords, "coords")
        return self._forward(coords, dtype=dtype)

    def _forward(self, coords: Tensor, *, dtype: torch.dtype = torch.float32) -> Tensor:
        coords = check_position_shape(coords, "coords", trailing=(2,))
        check_output_dtype(dtype)
        if self.layout == "cols_rows":
            coords = coords.flip(-1)
        # (..., N, axis, [sin f.., cos f..]) -> (..., N, axis, sin|cos, F)
        enc = sinusoidal_encoding(coords, self.inv_freq64, "half").unflatten(-1, (2, -1))
        if self.layout == "half":
            enc = enc.transpose(-3, -2)
        return enc.flatten(-3).to(dtype)

    def encode_grid(self, grid_size: int | tuple[int, int], *,
                    dtype: torch.dtype = torch.float32) -> Tensor:
        """``(rows * cols, dim)`` encoding of a whole grid in row-major order, of ``dtype``."""
        # Coordinates made from the grid's shape: no value to check.
        return self._forward(patch_coords(grid_size, self.normalize,
                                          device=self.inv_freq64.device), dtype=dtype)

    def extra_repr(self) -> str:
        return (f"dim={self.dim}, base={self.base}, layout={self.layout!r}, "
                f"normalize={self.normalize!r}")
