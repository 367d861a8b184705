"""Additive 1D encodings ``positions -> (..., dim)``: sinusoidal ("Attention Is All You
Need", section 3.5), a learned table (BERT/GPT-2), the classic input layer, and NoPE."""

from __future__ import annotations

import math

import torch
import torch.nn.functional as F
from torch import Tensor, nn

from ._checks import (
    check_base,
    check_choice,
    check_even,
    check_output_dtype,
    check_positions,
    check_positive_int,
)
from .encoding import LAYOUTS, Float64Buffers, PositionEncoding, angles

__all__ = ["sinusoidal_inv_freq", "sinusoidal_encoding", "SinusoidalEncoding", "LearnedEncoding",
           "InputEmbedding", "NoPE"]


def sinusoidal_inv_freq(dim: int, base: float = 10000.0) -> Tensor:
    """``(dim // 2,)`` float64 frequencies ``base ** (-2i / dim)``."""
    check_even(dim, "dim")
    base = check_base(base)
    return base ** (-torch.arange(0, dim, 2, dtype=torch.float64) / dim)


def sinusoidal_encoding(positions: Tensor, inv_freq: Tensor, layout: str = "interleaved") -> Tensor:
    """Sin/cos features ``(..., 2F)`` of ``(...)`` positions at ``(F,)`` angular frequencies
    ``inv_freq`` in ``layout``: float32, or float64 if ``positions`` is."""
    check_choice(layout, "layout", LAYOUTS)
    theta = angles(positions, inv_freq)
    if layout == "half":
        return torch.cat((theta.sin(), theta.cos()), dim=-1)
    return torch.stack((theta.sin(), theta.cos()), dim=-1).flatten(-2)


class SinusoidalEncoding(Float64Buffers):
    """Sinusoidal encoding, PE(p, 2i) = sin(p / base^(2i/dim)), PE(p, 2i+1) = cos(.), of even
    width ``dim`` (``layout="half"``: ``[sin..., cos...]``)."""

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
        """``(N,)`` or ``(B, N)`` positions -> ``(*positions.shape, dim)`` of ``dtype``."""
        positions = check_positions(positions)
        check_output_dtype(dtype)
        return sinusoidal_encoding(positions, self.inv_freq64, self.layout).to(dtype)

    def extra_repr(self) -> str:
        return f"dim={self.dim}, base={self.base}, layout={self.layout!r}"


class LearnedEncoding(PositionEncoding):
    """A trainable ``(num_positions, dim)`` table: integer positions index it, fractional ones
    interpolate linearly; positions outside ``[0, num_positions - 1]`` raise."""

    kind = "additive"

    def __init__(self, num_positions: int, dim: int) -> None:
        super().__init__()
        self.num_positions = check_positive_int(num_positions, "num_positions")
        self.dim = check_positive_int(dim, "dim")
        self.weight = nn.Parameter(torch.empty(num_positions, dim))
        self.reset_parameters()

    def reset_parameters(self) -> None:
        nn.init.trunc_normal_(self.weight, std=0.02)

    def forward(self, positions: Tensor) -> Tensor:
        """``(N,)`` or ``(B, N)`` positions -> ``(*positions.shape, dim)`` in the table dtype."""
        positions = check_positions(positions)
        if not torch.compiler.is_compiling() and positions.numel():
            low, high = positions.min().item(), positions.max().item()
            if low < 0 or high > self.num_positions - 1:
                raise ValueError(f"positions must lie in [0, {self.num_positions - 1}] for a table "
                                 f"of num_positions={self.num_positions}, got values in [{low}, "
                                 f"{high}]; use resize() to extend the table")
        if not positions.is_floating_point():
            return self.weight[positions]
        floor = positions.floor()
        frac = (positions - floor).unsqueeze(-1).to(self.weight.dtype)
        lower = floor.long()
        upper = (lower + 1).clamp(max=self.num_positions - 1)
        return torch.lerp(self.weight[lower], self.weight[upper], frac)

    @torch.no_grad()
    def resize(self, new_num_positions: int) -> LearnedEncoding:
        """Resample the table to ``new_num_positions`` rows (linear, ``align_corners=False``, as
        timm). Returns ``self``."""
        check_positive_int(new_num_positions, "new_num_positions")
        table = self.weight.detach().float().T[None]  # (1, dim, num_positions)
        resized = F.interpolate(table, size=new_num_positions, mode="linear", align_corners=False)
        self.weight = nn.Parameter(resized[0].T.to(self.weight.dtype).contiguous())
        self.num_positions = new_num_positions
        return self

    def extra_repr(self) -> str:
        return f"num_positions={self.num_positions}, dim={self.dim}"


class InputEmbedding(nn.Module):
    """Token embedding * sqrt(dim) + an additive position ``encoding`` (None: NoPE), then
    ``dropout``."""

    def __init__(self, vocab_size: int, dim: int, encoding: nn.Module | None,
                 dropout: float = 0.0) -> None:
        super().__init__()
        self.dim = check_positive_int(dim, "dim")
        self.token = nn.Embedding(check_positive_int(vocab_size, "vocab_size"), dim)
        self.encoding = encoding
        self.dropout = nn.Dropout(dropout)

    def forward(self, tokens: Tensor, positions: Tensor | None = None) -> Tensor:
        """``(B, N)`` token ids (and optional ``(N,)``/``(B, N)`` positions, default
        ``0..N-1``) -> ``(B, N, dim)``."""
        x = self.token(tokens) * math.sqrt(self.dim)
        if self.encoding is not None:
            if positions is None:
                positions = torch.arange(tokens.shape[-1], device=tokens.device)
            x = x + self.encoding(positions).to(x.dtype)
        return self.dropout(x)


class NoPE(PositionEncoding):
    """No position encoding: a 0-d zero as additive; ``None`` to the attention."""

    kind = "none"

    def forward(self, positions: Tensor) -> Tensor:
        """Any positions -> 0-d zero of float32 on the positions' device."""
        return positions.new_zeros((), dtype=torch.float32)
