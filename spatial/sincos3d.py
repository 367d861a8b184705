"""Fixed 3D sin-cos encoding: a 1D sinusoidal encoding of each of ``t``, ``row`` and ``col``."""

from __future__ import annotations

import torch
from posenc.core.buffers import Float64Buffers
from posenc.core.sinusoidal import sinusoidal_encoding, sinusoidal_inv_freq
from posenc.core.validation import (
    check_base,
    check_choice,
    check_even,
    check_output_dtype,
    check_position_shape,
    check_position_values,
)
from torch import Tensor

from .rope3d import check_sections
from .video import video_coords

__all__ = ["SinCos3D"]

# The words of SinCos2D's layouts, with time first.
LAYOUTS = ("t_rows_cols", "t_cols_rows")


class SinCos3D(Float64Buffers):
    """Additive 3D sin-cos encoding of ``(t, row, col)`` video coordinates.

    Axis ``a`` gets ``sections[a]`` frequencies ``base ** (-i / sections[a])``: the 1D
    sinusoidal encoding of width ``2 * sections[a]``, as a ``"half"`` block ``[sin(p f_0), ...,
    cos(p f_0), ...]`` (the vocabulary of :mod:`posenc.core.angles`). The blocks follow
    ``layout``:

    - ``"t_rows_cols"``: time, then rows, then columns (:class:`SinCos2D`'s ``"rows_cols"``
      after a time block).
    - ``"t_cols_rows"``: time, then columns, then rows (MAE's column-first 2D order after a
      time block); with the default sections this is the layout of diffusers'
      ``get_3d_sincos_pos_embed`` (CogVideoX: a quarter of the channels for time, the MAE 2D
      encoding in the rest), without its interpolation scales (scale the coordinates).

    Args:
        dim: embedding width (even, >= 6).
        base: wavelength base.
        sections: sin/cos pairs per axis ``(t, row, col)``, summing to ``dim // 2``; None:
            rows and columns ``3 * dim // 16`` each, time the rest (a quarter of the channels
            when ``dim % 16 == 0``).
        layout: block order, see above.

    ``t`` is a frame index or a time in any unit (irregular spacing is fine); the encoding is
    absolute, so give times from a fixed origin (``posenc.temporal.time_positions(...,
    origin=...)``) in a unit that keeps them O(1..1000).
    """

    kind = "additive"

    def __init__(self, dim: int, base: float = 10000.0, *,
                 sections: tuple[int, int, int] | None = None,
                 layout: str = "t_rows_cols") -> None:
        super().__init__()
        self.dim = check_even(dim, "dim")
        self.sections = check_sections(sections, dim // 2, what="dim // 2")
        self.base = check_base(base)
        self.layout = check_choice(layout, "layout", LAYOUTS)
        self.reset_float64_buffers()

    def float64_buffers(self) -> dict[str, Tensor]:
        return {"inv_freq64": torch.cat([sinusoidal_inv_freq(2 * s, self.base)
                                         for s in self.sections])}

    def forward(self, coords: Tensor, *, dtype: torch.dtype = torch.float32) -> Tensor:
        """``(N, 3)``/``(B, N, 3)`` ``(t, row, col)`` coordinates -> ``(..., N, dim)`` of
        ``dtype`` (pass the dtype of the tokens it is added to)."""
        check_position_values(coords, "coords")
        return self._forward(coords, dtype=dtype)

    def _forward(self, coords: Tensor, *, dtype: torch.dtype = torch.float32) -> Tensor:
        coords = check_position_shape(coords, "coords", trailing=(3,))
        check_output_dtype(dtype)
        freqs = self.inv_freq64.split(self.sections)
        order = (0, 1, 2) if self.layout == "t_rows_cols" else (0, 2, 1)
        blocks = [sinusoidal_encoding(coords[..., a], freqs[a], "half") for a in order]
        return torch.cat(blocks, dim=-1).to(dtype)

    def encode_video(self, grid_size: int | tuple[int, int], frames: int | Tensor, *,
                     time_scale: float = 1.0, dtype: torch.dtype = torch.float32) -> Tensor:
        """The encoding of every patch of every frame: :func:`video_coords` ``(grid_size,
        frames, time_scale=...)`` -> ``(T * rows * cols, dim)`` or ``(B, T * rows * cols,
        dim)`` for ``(B, T)`` frame times, of ``dtype``."""
        device = frames.device if isinstance(frames, Tensor) else self.inv_freq64.device
        coords = video_coords(grid_size, frames, time_scale=time_scale, device=device)
        return self(coords, dtype=dtype)

    def extra_repr(self) -> str:
        return (f"dim={self.dim}, base={self.base}, sections={self.sections}, "
                f"layout={self.layout!r}")
