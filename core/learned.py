"""Learned absolute position table, and the classic Transformer input layer."""

from __future__ import annotations

import math

import torch
import torch.nn.functional as F
from torch import Tensor, nn

from .encoding import PositionEncoding
from .validation import check_positions, check_positive_int

__all__ = ["LearnedEncoding", "InputEmbedding"]


class LearnedEncoding(PositionEncoding):
    """A trainable ``(num_positions, dim)`` table (BERT/GPT-2 style).

    Integer positions index the table; fractional positions interpolate linearly between
    the two neighbouring rows. Positions outside ``[0, num_positions - 1]`` raise.

    Args:
        num_positions: rows of the table.
        dim: embedding width.
    """

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
                raise ValueError(
                    f"positions must lie in [0, {self.num_positions - 1}] for a table of "
                    f"num_positions={self.num_positions}, got values in [{low}, {high}]; "
                    "use resize() to extend the table")
        if not positions.is_floating_point():
            return self.weight[positions]
        floor = positions.floor()
        frac = (positions - floor).unsqueeze(-1).to(self.weight.dtype)
        lower = floor.long()
        upper = (lower + 1).clamp(max=self.num_positions - 1)
        return torch.lerp(self.weight[lower], self.weight[upper], frac)

    @torch.no_grad()
    def resize(self, new_num_positions: int) -> LearnedEncoding:
        """Resample the table to ``new_num_positions`` rows by linear interpolation.

        Rows are treated as samples over the same span (``align_corners=False``, as timm
        resamples position tables), so the encoding of relative location is kept.
        Returns ``self``.
        """
        check_positive_int(new_num_positions, "new_num_positions")
        table = self.weight.detach().float().T[None]  # (1, dim, num_positions)
        resized = F.interpolate(table, size=new_num_positions, mode="linear", align_corners=False)
        self.weight = nn.Parameter(resized[0].T.to(self.weight.dtype).contiguous())
        self.num_positions = new_num_positions
        return self

    def extra_repr(self) -> str:
        return f"num_positions={self.num_positions}, dim={self.dim}"


class InputEmbedding(nn.Module):
    """Token embedding * sqrt(dim) + additive position encoding, then dropout.

    Args:
        vocab_size: number of token ids.
        dim: embedding width.
        encoding: an additive encoding ``positions -> (..., dim)``, or ``None`` (NoPE).
        dropout: dropout probability after the sum.
    """

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
