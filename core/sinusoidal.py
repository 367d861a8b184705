"""Fixed sinusoidal encoding ("Attention Is All You Need", section 3.5)."""

from __future__ import annotations

import torch
from torch import Tensor

from .angles import angles
from .buffers import Float64Buffers
from .validation import check_base, check_choice, check_even, check_positions

__all__ = ["sinusoidal_inv_freq", "sinusoidal_encoding", "SinusoidalEncoding"]

LAYOUTS = ("interleaved", "concat")


def sinusoidal_inv_freq(dim: int, base: float = 10000.0) -> Tensor:
    """``(dim // 2,)`` float64 frequencies ``base ** (-2i / dim)``."""
    check_even(dim, "dim")
    base = check_base(base)
    return base ** (-torch.arange(0, dim, 2, dtype=torch.float64) / dim)


def sinusoidal_encoding(positions: Tensor, inv_freq: Tensor, layout: str = "interleaved") -> Tensor:
    """Sin/cos features of ``positions`` at angular frequencies ``inv_freq``.

    Args:
        positions: ``(...)`` int or float positions (any unit: tokens, seconds, ...).
        inv_freq: ``(F,)`` angular frequencies, float64 for full precision.
        layout: ``"interleaved"`` gives ``[sin f0, cos f0, sin f1, cos f1, ...]`` (the paper's
            PE(p, 2i), PE(p, 2i+1)); ``"concat"`` gives ``[sin f0.., cos f0..]``.

    Returns:
        ``(..., 2F)`` float32 (float64 if ``positions`` is float64).
    """
    check_choice(layout, "layout", LAYOUTS)
    theta = angles(positions, inv_freq)
    if layout == "concat":
        return torch.cat((theta.sin(), theta.cos()), dim=-1)
    return torch.stack((theta.sin(), theta.cos()), dim=-1).flatten(-2)


class SinusoidalEncoding(Float64Buffers):
    """Additive sinusoidal encoding, PE(p, 2i) = sin(p / base^(2i/dim)), PE(p, 2i+1) = cos(.).

    No maximum length; fractional positions are legal.

    Args:
        dim: embedding width (even).
        base: wavelength base.
        layout: ``"interleaved"`` (the paper's table) or ``"concat"`` ([sin..., cos...]).
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

    def forward(self, positions: Tensor) -> Tensor:
        """``(N,)`` or ``(B, N)`` positions -> ``(*positions.shape, dim)`` float32 (float64
        for float64 positions)."""
        positions = check_positions(positions)
        return sinusoidal_encoding(positions, self.inv_freq64, self.layout)

    def extra_repr(self) -> str:
        return f"dim={self.dim}, base={self.base}, layout={self.layout!r}"
