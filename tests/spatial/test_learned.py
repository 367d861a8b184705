from __future__ import annotations

import pytest
import torch
from posenc.spatial import Learned2D, patch_coords
from timm.layers import resample_abs_pos_embed


def _timm_resample(enc: Learned2D, new, antialias=True, interpolation="bicubic"):
    posemb = enc.weight.detach().reshape(1, -1, enc.dim)
    out = resample_abs_pos_embed(posemb, new_size=list(new), old_size=list(enc.grid_size),
                                 num_prefix_tokens=0, interpolation=interpolation,
                                 antialias=antialias)
    return out[0].reshape(*new, enc.dim)


@pytest.mark.parametrize("new", [(7, 7), (3, 3), (4, 9), (6, 2)])
@pytest.mark.parametrize("antialias", [True, False])
def test_resample_agrees_with_timm(new, antialias):
    enc = Learned2D((5, 5), 16, antialias=antialias)
    torch.testing.assert_close(enc.resample(new), _timm_resample(enc, new, antialias),
                               rtol=0, atol=1e-6)


def test_resample_from_non_square_grid_agrees_with_timm():
    enc = Learned2D((3, 6), 8, interpolation="bilinear")
    torch.testing.assert_close(enc.resample((5, 4)),
                               _timm_resample(enc, (5, 4), interpolation="bilinear"),
                               rtol=0, atol=1e-6)


def test_resample_is_differentiable_and_identity_at_own_grid():
    enc = Learned2D((4, 4), 8)
    assert enc.resample((4, 4)) is enc.weight
    enc.encode_grid((6, 3)).sum().backward()
    assert enc.weight.grad is not None and enc.weight.grad.abs().sum() > 0


def test_integer_coords_index_the_grid():
    enc = Learned2D((3, 4), 8)
    coords = torch.tensor([[2, 3], [0, 1]])
    torch.testing.assert_close(enc(coords), enc.weight.detach()[[2, 0], [3, 1]], rtol=0, atol=0)
    torch.testing.assert_close(enc(patch_coords((3, 4))), enc.weight.detach().reshape(12, 8),
                               rtol=0, atol=0)


def test_fractional_coords_interpolate_bilinearly():
    enc = Learned2D((3, 4), 2)
    w = enc.weight.detach()
    r, c = 1.25, 2.5
    expected = (0.75 * 0.5 * w[1, 2] + 0.75 * 0.5 * w[1, 3]
                + 0.25 * 0.5 * w[2, 2] + 0.25 * 0.5 * w[2, 3])
    torch.testing.assert_close(enc(torch.tensor([[r, c]]))[0], expected)


def test_coords_outside_the_grid_raise():
    enc = Learned2D((3, 4), 8)
    with pytest.raises(ValueError, match=r"\[0, 2\] x \[0, 3\]"):
        enc(torch.tensor([[3.0, 0.0]]))
    with pytest.raises(ValueError, match="stored grid"):
        enc(torch.tensor([[0, -1]]))


def test_mae_keep_indices_equal_encoding_all_then_gathering():
    enc = Learned2D((4, 5), 8)
    coords = patch_coords((4, 5))
    keep = torch.stack([torch.randperm(20)[:7] for _ in range(2)])
    torch.testing.assert_close(enc(coords[keep]), enc(coords)[keep], rtol=0, atol=0)


@pytest.mark.parametrize("num_prefix", [0, 1, 5])
def test_load_timm_pos_embed_with_and_without_prefix(num_prefix):
    pos_embed = torch.randn(1, num_prefix + 12, 8)
    enc = Learned2D((3, 4), 8)
    prefix = enc.load_timm_pos_embed(pos_embed, num_prefix, grid_size=(3, 4))
    torch.testing.assert_close(prefix, pos_embed[:, :num_prefix])
    torch.testing.assert_close(enc.encode_grid((3, 4)), pos_embed[0, num_prefix:])


def test_load_timm_pos_embed_resamples_like_timm():
    pos_embed = torch.randn(1, 1 + 16, 8)
    enc = Learned2D((6, 5), 8)
    enc.load_timm_pos_embed(pos_embed, num_prefix_tokens=1)  # square 4x4 source inferred
    expected = resample_abs_pos_embed(pos_embed, new_size=[6, 5], num_prefix_tokens=1)
    torch.testing.assert_close(enc.encode_grid((6, 5)), expected[0, 1:], rtol=0, atol=1e-6)


def test_from_timm_pos_embed():
    pos_embed = torch.randn(1, 1 + 6, 8)
    enc = Learned2D.from_timm_pos_embed(pos_embed, num_prefix_tokens=1, grid_size=(2, 3))
    assert enc.grid_size == (2, 3)
    torch.testing.assert_close(enc.weight.detach().reshape(6, 8), pos_embed[0, 1:])


def test_load_errors():
    enc = Learned2D((3, 3), 8)
    with pytest.raises(ValueError, match="square"):
        enc.load_timm_pos_embed(torch.randn(1, 1 + 12, 8), num_prefix_tokens=1)
    with pytest.raises(ValueError, match="dim"):
        enc.load_timm_pos_embed(torch.randn(1, 9, 4))
    with pytest.raises(ValueError, match="holds 6 patches"):
        enc.load_timm_pos_embed(torch.randn(1, 9, 8), grid_size=(2, 3))


def test_bad_constructor_arguments():
    with pytest.raises(TypeError, match="dim"):
        Learned2D(3, 4.0)
    with pytest.raises(ValueError, match="grid_size"):
        Learned2D((3, 0), 4)
    with pytest.raises(ValueError, match="interpolation"):
        Learned2D(3, 4, interpolation="area")


def test_load_rejects_bad_prefix_counts_and_tables():
    enc = Learned2D((3, 4), 8)
    pos_embed = torch.randn(1, 1 + 12, 8)
    with pytest.raises(TypeError, match="num_prefix_tokens must be an int, got bool"):
        enc.load_timm_pos_embed(pos_embed, True, (3, 4))
    with pytest.raises(TypeError, match="num_prefix_tokens must be an int, got float"):
        enc.load_timm_pos_embed(pos_embed, 1.0, (3, 4))
    with pytest.raises(ValueError, match=r"num_prefix_tokens must be in \[0, 12\], got -1"):
        enc.load_timm_pos_embed(pos_embed, -1, (3, 4))
    with pytest.raises(ValueError, match=r"num_prefix_tokens must be in \[0, 12\], got 13"):
        enc.load_timm_pos_embed(pos_embed, 13)
    with pytest.raises(ValueError, match="pos_embed must be finite"):
        enc.load_timm_pos_embed(torch.full((1, 12, 8), float("nan")), 0, (3, 4))
    with pytest.raises(TypeError, match="pos_embed must be a floating tensor, got torch.int64"):
        enc.load_timm_pos_embed(torch.zeros(1, 12, 8, dtype=torch.long), 0, (3, 4))
    with pytest.raises(TypeError, match="pos_embed must be a torch.Tensor, got list"):
        Learned2D.from_timm_pos_embed([[1.0]])
    with pytest.raises(ValueError, match=r"pos_embed must be a \(1, num_prefix_tokens"):
        Learned2D.from_timm_pos_embed(torch.zeros(12, 8))
    with pytest.raises(ValueError, match=r"num_prefix_tokens must be in \[0, 12\], got -1"):
        Learned2D.from_timm_pos_embed(pos_embed, -1)
    assert (enc.weight != 0).all()  # nothing was half-loaded
