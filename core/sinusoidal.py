"""Fixed sinusoidal encoding ("Attention Is All You Need", section 3.5)."""

from __future__ import annotations

import torch
from torch import Tensor

from .angles import LAYOUTS, angles
from .buffers import Float64Buffers
from .validation import (
    check_base,
    check_choice,
    check_even,
    check_output_dtype,
    check_position_shape,
    check_position_values,
)

__all__ = ["sinusoidal_inv_freq", "sinusoidal_encoding", "SinusoidalEncoding"]


def sinusoidal_inv_freq(dim: int, base: float = 10000.0) -> Tensor:
    """``(dim // 2,)`` float64 frequencies ``base ** (-2i / dim)``."""
    check_even(dim, "dim")
    base = check_base(base)
    return base ** (-torch.arange(0, dim, 2, dtype=torch.float64) / dim)


def sinusoidal_encoding(positions: Tensor, inv_freq: Tensor, layout: str = "interleaved") -> Tensor:
    """Sin/cos features of ``positions`` at angular frequencies ``inv_freq``: the one
    implementation behind every sinusoidal encoding (1D, 2D, elapsed time).

    Args:
        positions: ``(...)`` int or float positions (any unit: tokens, seconds, ...).
        inv_freq: ``(F,)`` angular frequencies, float64 for full precision.
        layout: ``"interleaved"`` gives ``[sin f0, cos f0, sin f1, cos f1, ...]`` (the paper's
            PE(p, 2i), PE(p, 2i+1)); ``"half"`` gives ``[sin f0.., cos f0..]`` (see
            :mod:`posenc.core.angles` for the layout vocabulary).

    Returns:
        ``(..., 2F)`` in the angles' dtype: float32, float64 if ``positions`` is float64 (the
        encoding modules then cast to their ``dtype=``).
    """
    check_choice(layout, "layout", LAYOUTS)
    theta = angles(positions, inv_freq)
    if layout == "half":
        return torch.cat((theta.sin(), theta.cos()), dim=-1)
    return torch.stack((theta.sin(), theta.cos()), dim=-1).flatten(-2)


class SinusoidalEncoding(Float64Buffers):
    """Additive sinusoidal encoding, PE(p, 2i) = sin(p / base^(2i/dim)), PE(p, 2i+1) = cos(.).

    No maximum length; fractional positions are legal.

    Args:
        dim: embedding width (even).
        base: wavelength base.
        layout: ``"interleaved"`` (the paper's table) or ``"half"`` ([sin..., cos...]).
    """

    kind = "additive"

    def __init__(self, dim: int, base: float = 10000.0, layout: str = "interleaved") -> None:
        super().__init__()
        self.dim = check_even(dim, "dim")
        self.base = check_base(base)
        self.layout = check_choice(layout, "layout", LAYOUTS)
        self.reset_float64_buffers()

    def float64_buffers(self) -> dict[str, Tensor]:
        return {"inv_freq64": sinusoidal_inv_freq(self.dim, self.base)}

    def forward(self, positions: Tensor, *, dtype: torch.dtype = torch.float32) -> Tensor:
        """``(N,)`` or ``(B, N)`` positions -> ``(*positions.shape, dim)`` of ``dtype`` (pass
        the dtype of the tokens it is added to). Float64 positions keep float64 angles; the
        output is rounded once, to ``dtype``."""
        check_position_values(positions)
        return self._forward(positions, dtype=dtype)

    def _forward(self, positions: Tensor, *, dtype: torch.dtype = torch.float32) -> Tensor:
        positions = check_position_shape(positions)
        check_output_dtype(dtype)
        return sinusoidal_encoding(positions, self.inv_freq64, self.layout).to(dtype)

    def extra_repr(self) -> str:
        return f"dim={self.dim}, base={self.base}, layout={self.layout!r}"
