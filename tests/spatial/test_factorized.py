from __future__ import annotations

import pytest
import torch
from posenc.spatial import Factorized2D, patch_coords
from torch.export import Dim, export


def test_sum_of_row_and_column_tables():
    enc = Factorized2D((3, 5), 8)
    rows, cols = enc.rows.weight.detach(), enc.cols.weight.detach()
    coords = torch.tensor([[2, 4], [0, 1]])
    expected = torch.stack([rows[2] + cols[4], rows[0] + cols[1]])
    torch.testing.assert_close(enc(coords), expected, rtol=0, atol=0)
    full = enc.encode_grid((3, 5)).reshape(3, 5, 8)
    torch.testing.assert_close(full, rows[:, None] + cols[None, :], rtol=0, atol=0)


def test_fractional_coordinates_interpolate_each_axis():
    enc = Factorized2D(4, 2)
    rows, cols = enc.rows.weight.detach(), enc.cols.weight.detach()
    got = enc(torch.tensor([[1.25, 2.5]]))[0]
    expected = 0.75 * rows[1] + 0.25 * rows[2] + 0.5 * cols[2] + 0.5 * cols[3]
    torch.testing.assert_close(got, expected)


def test_grid_larger_than_tables_uses_fractional_coordinates():
    enc = Factorized2D((3, 3), 4)
    full = enc.encode_grid((5, 2)).reshape(5, 2, 4)
    rows, cols = enc.rows.weight.detach(), enc.cols.weight.detach()
    # 5 rows spread over a 3-row table: 0, 0.5, 1, 1.5, 2; 2 cols fit: indices 0, 1.
    expected_rows = torch.stack([rows[0], (rows[0] + rows[1]) / 2, rows[1],
                                 (rows[1] + rows[2]) / 2, rows[2]])
    torch.testing.assert_close(full, expected_rows[:, None] + cols[None, :2])


def test_mae_keep_indices_equal_encoding_all_then_gathering():
    enc = Factorized2D(6, 8)
    coords = patch_coords((4, 6))
    keep = torch.randperm(24)[:9]
    torch.testing.assert_close(enc(coords[keep]), enc(coords)[keep], rtol=0, atol=0)


def test_outside_tables_raises_naming_the_axis():
    enc = Factorized2D((3, 5), 8)
    with pytest.raises(ValueError, match="cols must lie in"):
        enc(torch.tensor([[0, 5]]))
    with pytest.raises(ValueError, match="rows must lie in"):
        enc(torch.tensor([[-1.0, 0.0]]))


def test_grid_within_tables_indexes_them_exactly():
    enc = Factorized2D((4, 6), 8)
    rows, cols = enc.rows.weight.detach(), enc.cols.weight.detach()
    for grid in [(1, 1), (4, 6), (2, 5), (1, 6)]:
        expected = rows[: grid[0], None] + cols[None, : grid[1]]
        got = enc.encode_grid(grid).reshape(*grid, 8)
        torch.testing.assert_close(got, expected, rtol=0, atol=0)


def test_last_patch_of_a_long_axis_is_exactly_the_last_table_row():
    enc = Factorized2D((3, 7), 4)
    rows, cols = enc.rows.weight.detach(), enc.cols.weight.detach()
    full = enc.encode_grid((41, 1000)).reshape(41, 1000, 4)
    torch.testing.assert_close(full[-1, -1], rows[-1] + cols[-1], rtol=0, atol=0)
    torch.testing.assert_close(full[20, 0], rows[1] + cols[0], rtol=0, atol=0)


class _AddGrid(torch.nn.Module):
    """``(B, H, W, dim)`` patches -> ``(B, H * W, dim)`` with the grid encoding added."""

    def __init__(self):
        super().__init__()
        self.enc = Factorized2D((4, 5), 8)

    def forward(self, x):
        return x.flatten(1, 2) + self.enc.encode_grid((x.shape[1], x.shape[2]))


def test_encode_grid_exports_with_dynamic_grid_size_beyond_the_tables():
    model = _AddGrid()
    rows, cols = Dim("rows", min=1, max=64), Dim("cols", min=1, max=64)
    program = export(model, (torch.zeros(1, 3, 3, 8),),
                     dynamic_shapes={"x": {1: rows, 2: cols}})
    for grid in [(3, 3), (4, 5), (9, 2), (1, 1), (7, 11), (1, 40)]:
        x = torch.randn(1, *grid, 8)
        torch.testing.assert_close(program.module()(x), model(x), rtol=0, atol=0)
