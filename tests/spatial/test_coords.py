from __future__ import annotations

import pytest
import torch
from posenc.spatial import patch_coords
from posenc.spatial.coords import GridPositions, as_grid_positions, check_grid_size


def test_patch_coords_are_row_major_row_col():
    coords = patch_coords((2, 3))
    expected = torch.tensor([[0, 0], [0, 1], [0, 2], [1, 0], [1, 1], [1, 2]], dtype=torch.float32)
    assert coords.dtype == torch.float32
    torch.testing.assert_close(coords, expected, rtol=0, atol=0)


def test_patch_coords_follow_timm_flatten_order():
    # timm flattens the NCHW patch map with x.flatten(2): token i is at (i // W, i % W).
    rows, cols = 3, 5
    grid = torch.arange(rows * cols).reshape(1, 1, rows, cols).float()
    token_index = grid.flatten(2)[0, 0].long()
    coords = patch_coords((rows, cols))
    torch.testing.assert_close(coords[token_index, 0], (token_index // cols).float())
    torch.testing.assert_close(coords[token_index, 1], (token_index % cols).float())


def test_unit_coords_are_patch_centres_in_minus_one_one():
    coords = patch_coords((2, 4), normalize="unit")
    torch.testing.assert_close(coords[:4, 1], torch.tensor([-0.75, -0.25, 0.25, 0.75]))
    torch.testing.assert_close(coords[::4, 0], torch.tensor([-0.5, 0.5]))


def test_unit_coords_agree_across_resolutions():
    # The same image at twice the resolution: each coarse patch is the mean of 2x2 fine ones.
    coarse = patch_coords((3, 4), normalize="unit").reshape(3, 4, 2)
    fine = patch_coords((6, 8), normalize="unit").reshape(3, 2, 4, 2, 2).mean(dim=(1, 3))
    torch.testing.assert_close(fine, coarse)


def test_square_grid_from_int_and_bad_sizes():
    assert patch_coords(3).shape == (9, 2)
    assert check_grid_size(4) == (4, 4)
    with pytest.raises(ValueError, match="grid_size"):
        patch_coords((0, 3))
    with pytest.raises(TypeError, match="grid_size"):
        patch_coords((2, 3, 4))
    with pytest.raises(ValueError, match="normalize"):
        patch_coords(3, normalize="minmax")


def test_grid_positions_validation():
    coords = patch_coords(2)
    assert as_grid_positions(coords) == GridPositions(coords)
    with pytest.raises(ValueError, match=r"\(N, 2\)"):
        as_grid_positions(torch.zeros(4, 3))
    with pytest.raises(ValueError, match="finite"):
        as_grid_positions(torch.tensor([[0.0, float("nan")]]))
    with pytest.raises(ValueError, match="num_prefix_tokens"):
        as_grid_positions(GridPositions(coords, (2, 2), -1))


def test_grid_positions_come_back_widened_and_as_the_same_object():
    coords = patch_coords(2)
    positions = GridPositions(coords, (2, 2), 1)
    # The same object: encodings tell self-attention (``query is key``) from cross-attention.
    assert as_grid_positions(positions) is positions
    narrow = GridPositions(coords.to(torch.int32), (2, 2), 1)
    for given in (narrow, narrow.coords):
        widened = as_grid_positions(given).coords
        assert widened.dtype == torch.int64
        torch.testing.assert_close(widened, coords.long(), rtol=0, atol=0)


@pytest.mark.parametrize("grid_size, type_name", [
    (("a", 3), "str"), ((3.0, 3), "float"), ((True, 3), "bool"), (3.0, "float"), ("3", "str"),
])
def test_grid_size_of_the_wrong_type_is_a_type_error(grid_size, type_name):
    with pytest.raises(TypeError, match=rf"^grid_size must .*{type_name}"):
        check_grid_size(grid_size)


def test_grid_size_below_one_is_a_value_error():
    with pytest.raises(ValueError, match=r"^grid_size must hold positive ints, got \(3, 0\)"):
        check_grid_size((3, 0))


def test_num_prefix_tokens_of_the_wrong_type_is_a_type_error():
    with pytest.raises(TypeError, match=r"positions.num_prefix_tokens must be an int, got bool"):
        as_grid_positions(GridPositions(patch_coords(2), (2, 2), True))
    with pytest.raises(TypeError, match=r"positions.num_prefix_tokens must be an int, got float"):
        as_grid_positions(GridPositions(patch_coords(2), (2, 2), 1.0))


@pytest.mark.parametrize("dtype", ["float32", torch.int64, float])
def test_patch_coords_dtype_must_be_a_floating_torch_dtype(dtype):
    with pytest.raises(TypeError, match=r"^dtype must be a floating torch.dtype"):
        patch_coords(3, dtype=dtype)
