from __future__ import annotations

import pytest
import torch
from posenc.spatial import SinCos2D, patch_coords
from spatial_refs import mae_sincos_2d
from timm.layers import build_sincos2d_pos_embed


@pytest.mark.parametrize("layout, timm_kwargs", [
    ("rows_cols", {"interleave_sin_cos": True}),
    ("half", {}),
])
@pytest.mark.parametrize("grid", [(4, 4), (3, 7)])
def test_sincos2d_equals_timm_build_sincos2d_pos_embed(layout, timm_kwargs, grid):
    enc = SinCos2D(64, layout=layout)
    expected = build_sincos2d_pos_embed(list(grid), dim=64, **timm_kwargs)
    got = enc.encode_grid(grid)
    assert got.shape == (grid[0] * grid[1], 64)
    # timm forms angles in float32; posenc in float64 (then float32): they agree to ~1e-6.
    torch.testing.assert_close(got, expected, rtol=0, atol=2e-6)


def test_cols_rows_layout_is_mae():
    got = SinCos2D(32, layout="cols_rows").encode_grid((5, 6)).double()
    expected = torch.from_numpy(mae_sincos_2d(32, 5, 6))
    torch.testing.assert_close(got, expected, rtol=0, atol=1e-6)


def test_default_layout_is_rows_then_cols():
    enc = SinCos2D(16, base=100.0)
    out = enc(torch.tensor([[2.0, 5.0]]))[0]
    f = 100.0 ** (-torch.arange(4, dtype=torch.float64) / 4)
    expected = torch.cat([(2 * f).sin(), (2 * f).cos(), (5 * f).sin(), (5 * f).cos()])
    torch.testing.assert_close(out.double(), expected, rtol=0, atol=1e-6)


def test_mae_keep_indices_equal_encoding_all_then_gathering():
    enc = SinCos2D(32)
    coords = patch_coords((4, 6))
    keep = torch.stack([torch.randperm(24)[:10] for _ in range(3)])  # (B, K)
    kept = enc(coords[keep])
    torch.testing.assert_close(kept, enc(coords)[keep], rtol=0, atol=0)
    assert kept.shape == (3, 10, 32)


def test_fractional_and_large_coordinates_stay_accurate():
    enc = SinCos2D(8, base=10000.0)
    big = torch.tensor([[1e5 + 0.25, 3.5]])
    f = 10000.0 ** (-torch.arange(2, dtype=torch.float64) / 2)
    expected = torch.cat([((1e5 + 0.25) * f).sin(), ((1e5 + 0.25) * f).cos(), (3.5 * f).sin(),
                          (3.5 * f).cos()])
    torch.testing.assert_close(enc(big)[0].double(), expected, rtol=0, atol=1e-6)


@pytest.mark.parametrize("dim", [6, 10, 2])
def test_dim_must_be_a_multiple_of_four(dim):
    with pytest.raises(ValueError, match=f"dim must be a positive multiple of 4.*got {dim}"):
        SinCos2D(dim)
    with pytest.raises(ValueError, match="dim must be >= 1, got 0"):
        SinCos2D(0)


def test_bad_coords():
    with pytest.raises(ValueError, match="coords"):
        SinCos2D(8)(torch.zeros(3, 3))
    with pytest.raises(ValueError, match="layout"):
        SinCos2D(8, layout="mae")
