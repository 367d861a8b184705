"""Factorized learned encoding: a row table plus a column table (NaViT)."""

from __future__ import annotations

import torch
from posenc.core import LearnedEncoding, PositionEncoding
from posenc.core.validation import check_positions, check_positive_int
from torch import Tensor

from .coords import check_grid_size

__all__ = ["Factorized2D"]


class Factorized2D(PositionEncoding):
    """``encoding(row, col) = rows[row] + cols[col]`` with two learned 1D tables (NaViT).

    Each table is a :class:`posenc.core.LearnedEncoding`: integer coordinates index it,
    fractional ones interpolate linearly between neighbouring rows, coordinates outside
    ``[0, max - 1]`` raise.

    Args:
        max_grid_size: ``max`` or ``(max_rows, max_cols)``, the table lengths.
        dim: embedding width.
    """

    kind = "additive"

    def __init__(self, max_grid_size: int | tuple[int, int], dim: int) -> None:
        super().__init__()
        self.max_grid_size = check_grid_size(max_grid_size, "max_grid_size")
        self.dim = check_positive_int(dim, "dim")
        self.rows = LearnedEncoding(self.max_grid_size[0], dim)
        self.cols = LearnedEncoding(self.max_grid_size[1], dim)

    def reset_parameters(self) -> None:
        self.rows.reset_parameters()
        self.cols.reset_parameters()

    def forward(self, coords: Tensor) -> Tensor:
        """``(N, 2)``/``(B, N, 2)`` (row, col) coordinates -> ``(..., N, dim)``."""
        coords = check_positions(coords, "coords", trailing=(2,))  # integers as int64
        if not torch.compiler.is_compiling() and coords.numel():
            for axis, name in enumerate(("row", "col")):
                low, high = coords[..., axis].min().item(), coords[..., axis].max().item()
                size = self.max_grid_size[axis]
                if low < 0 or high > size - 1:
                    raise ValueError(
                        f"coords {name}s must lie in [0, {size - 1}] for "
                        f"max_grid_size={self.max_grid_size}, got values in [{low}, {high}]")
        return self.rows(coords[..., 0]) + self.cols(coords[..., 1])

    def encode_grid(self, grid_size: int | tuple[int, int]) -> Tensor:
        """``(rows * cols, dim)`` encoding of a whole grid in row-major order.

        An axis that fits in its table uses patch indices ``0 .. n-1`` (NaViT); a longer axis is
        spread over the whole table with fractional coordinates ``linspace(0, max - 1, n)``
        (NaViT's fractional variant), so any grid size works. Both go through the same
        interpolating lookup (an integer position interpolates to exactly its row), so the
        choice is made on tensors and ``torch.export`` keeps the grid size dynamic.
        """
        rows, cols = check_grid_size(grid_size)
        device = self.rows.weight.device
        row_pos, col_pos = (_axis_positions(n, size, device)
                            for n, size in zip((rows, cols), self.max_grid_size, strict=True))
        return (self.rows(row_pos)[:, None] + self.cols(col_pos)[None, :]).flatten(0, 1)

    def extra_repr(self) -> str:
        return f"max_grid_size={self.max_grid_size}, dim={self.dim}"


def _axis_positions(n: int, size: int, device: torch.device) -> Tensor:
    """``(n,)`` float32 table positions of ``n`` patches on a table of ``size`` rows: ``0 .. n-1``
    when they fit, else ``i * (size - 1) / (n - 1)`` (exactly ``size - 1`` at the last patch)."""
    steps = torch.arange(n, device=device, dtype=torch.float32)
    # n - 1 as a tensor, not a Python comparison, so export does not specialise on the table
    # size; clamped to 1 so that n = 1 does not divide by zero.
    last = steps[-1:].clamp(min=1)
    return torch.where(last > size - 1, steps * (size - 1) / last, steps)
