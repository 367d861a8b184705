from __future__ import annotations

import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st
from posenc.core import MultiheadAttention, apply_rotation
from posenc.spatial import RoPE2D, patch_coords
from posenc.spatial.coords import GridPositions
from posenc.spatial.rope import init_mixed_freqs
from spatial_refs import (
    dinov3_angles,
    ropevit_mixed_init,
    rotate_pairs_half,
    rotate_pairs_interleaved,
)
from timm.layers.pos_embed_sincos import init_random_2d_freqs

HEAD_DIM, HEADS = 16, 3


def _score(enc: RoPE2D, q: torch.Tensor, k: torch.Tensor, pq, pk) -> torch.Tensor:
    """Per-head q.k after rotating q at position pq and k at pk: (H,)."""
    rot = enc.rotation(torch.tensor([pq, pk], dtype=torch.float32))
    x = torch.stack([q, k], dim=1)[None]  # (1, H, 2, D)
    r = apply_rotation(x, rot)[0]
    return (r[:, 0] * r[:, 1]).sum(-1)


coord = st.floats(-40, 40, allow_nan=False).map(lambda v: round(v, 2))
point = st.tuples(coord, coord)


@settings(max_examples=40, deadline=None)
@given(pq=point, pk=point, shift=point, variant=st.sampled_from(["axial", "mixed"]),
       layout=st.sampled_from(["half", "interleaved"]))
def test_score_depends_only_on_the_2d_offset(pq, pk, shift, variant, layout):
    torch.manual_seed(1)
    enc = RoPE2D(HEAD_DIM, HEADS, variant, layout=layout)
    q, k = torch.randn(HEADS, HEAD_DIM), torch.randn(HEADS, HEAD_DIM)
    moved = [(a + shift[0], b + shift[1]) for a, b in (pq, pk)]
    torch.testing.assert_close(_score(enc, q, k, *moved), _score(enc, q, k, pq, pk),
                               rtol=1e-4, atol=1e-4)


@pytest.mark.parametrize("variant", ["axial", "mixed"])
def test_score_changes_along_both_axes(variant):
    enc = RoPE2D(HEAD_DIM, HEADS, variant)
    q, k = torch.randn(HEADS, HEAD_DIM), torch.randn(HEADS, HEAD_DIM)
    base = _score(enc, q, k, (0.0, 0.0), (0.0, 0.0))
    for offset in [(3.0, 0.0), (0.0, 3.0)]:
        assert (_score(enc, q, k, (0.0, 0.0), offset) - base).abs().max() > 1e-2


def test_axial_angles_rows_first_then_cols():
    enc = RoPE2D(HEAD_DIM, HEADS, "axial")  # base 100
    assert enc.base == 100.0
    coords = torch.tensor([[3.0, 7.0], [0.5, 2.0]])
    rot = enc.rotation(coords)
    f = 100.0 ** (-4 * torch.arange(HEAD_DIM // 4, dtype=torch.float64) / HEAD_DIM)
    theta = torch.cat([coords[:, :1].double() * f, coords[:, 1:].double() * f], dim=-1)
    assert rot.cos.shape == (1, 1, 2, HEAD_DIM // 2)
    torch.testing.assert_close(rot.cos[0, 0].double(), theta.cos(), rtol=0, atol=1e-6)
    torch.testing.assert_close(rot.sin[0, 0].double(), theta.sin(), rtol=0, atol=1e-6)


def test_axial_unit_coords_equal_dinov3_rope():
    head_dim, rows, cols = 32, 3, 5
    enc = RoPE2D(head_dim, 2, "axial", base=100.0, normalize="unit", layout="half")
    x = torch.randn(1, 2, rows * cols, head_dim)
    got = apply_rotation(x, enc.rotation(patch_coords((rows, cols), "unit")))
    expected = rotate_pairs_half(x.double(), dinov3_angles(rows, cols, head_dim))
    torch.testing.assert_close(got.double(), expected, rtol=0, atol=1e-5)


def test_mixed_init_equals_the_papers_initialisation():
    torch.manual_seed(123)
    paper = ropevit_mixed_init(HEAD_DIM, HEADS, theta=10.0)  # (fx, fy)
    torch.manual_seed(123)
    enc = RoPE2D(HEAD_DIM, HEADS, "mixed")
    assert enc.base == 10.0 and enc.freqs.dtype == torch.float32
    assert enc.freqs.shape == (2, HEADS, HEAD_DIM // 2)
    torch.testing.assert_close(enc.freqs.detach(), paper.flip(0), rtol=0, atol=1e-6)


def test_mixed_init_equals_timm_init_random_2d_freqs():
    torch.manual_seed(7)
    ours = init_mixed_freqs(HEAD_DIM, HEADS, 10.0)
    torch.manual_seed(7)
    timm_freqs = init_random_2d_freqs(HEAD_DIM, 1, HEADS, temperature=10.0)[:, 0]  # (fx, fy)
    torch.testing.assert_close(ours, timm_freqs.flip(0), rtol=0, atol=1e-6)


def test_mixed_init_structure_per_head():
    freqs = init_mixed_freqs(HEAD_DIM, HEADS).double()
    quarter = HEAD_DIM // 4
    mag = 10.0 ** (-4 * torch.arange(quarter, dtype=torch.float64) / HEAD_DIM)
    for h in range(HEADS):
        row, col = freqs[0, h], freqs[1, h]
        # First half of the pairs: direction phi; second half: phi + pi/2, magnitudes mag.
        torch.testing.assert_close(torch.hypot(row, col), mag.repeat(2), rtol=1e-6, atol=1e-7)
        phi = torch.atan2(row[:quarter], col[:quarter])
        phi2 = torch.atan2(row[quarter:], col[quarter:])
        torch.testing.assert_close(phi, phi[:1].expand(quarter), rtol=0, atol=1e-5)
        torch.testing.assert_close(torch.remainder(phi2 - phi, 2 * torch.pi),
                                   torch.full_like(phi, torch.pi / 2), rtol=0, atol=1e-5)


def test_mixed_rotation_is_ropevit_compute_mixed_cis():
    enc = RoPE2D(HEAD_DIM, HEADS, "mixed", layout="interleaved")
    coords = patch_coords((3, 4))
    x = torch.randn(2, HEADS, 12, HEAD_DIM)
    fy, fx = enc.freqs.detach().double()
    t_y, t_x = coords[:, 0].double(), coords[:, 1].double()
    theta = (t_x[None, :, None] * fx[:, None, :] + t_y[None, :, None] * fy[:, None, :])
    expected = rotate_pairs_interleaved(x, theta[None])
    got = apply_rotation(x, enc.rotation(coords))
    torch.testing.assert_close(got.double(), expected, rtol=0, atol=1e-5)


@pytest.mark.parametrize("variant", ["axial", "mixed"])
def test_prefix_tokens_are_not_rotated(variant):
    enc = RoPE2D(HEAD_DIM, HEADS, variant)
    coords = patch_coords((2, 3)) + 5
    x = torch.randn(2, HEADS, 4 + 6, HEAD_DIM)
    out = apply_rotation(x, enc.rotation(GridPositions(coords, (2, 3), num_prefix_tokens=4)))
    torch.testing.assert_close(out[:, :, :4], x[:, :, :4], rtol=0, atol=0)
    torch.testing.assert_close(out[:, :, 4:], apply_rotation(x[:, :, 4:], enc.rotation(coords)))


def test_batched_coordinates_rotate_each_sample():
    enc = RoPE2D(HEAD_DIM, HEADS, "mixed")
    coords = torch.stack([patch_coords((2, 2)), patch_coords((2, 2)).flip(0) * 2])
    x = torch.randn(2, HEADS, 4, HEAD_DIM)
    out = apply_rotation(x, enc.rotation(coords))
    for b in range(2):
        torch.testing.assert_close(out[b:b + 1], apply_rotation(x[b:b + 1],
                                                                enc.rotation(coords[b])))


def test_frequencies_stay_float32_and_float64_under_bf16_cast():
    mixed = RoPE2D(HEAD_DIM, HEADS, "mixed").to(torch.bfloat16)
    axial = RoPE2D(HEAD_DIM, HEADS, "axial").to(torch.bfloat16)
    assert mixed.freqs.dtype == torch.float32 and isinstance(mixed.freqs, torch.nn.Parameter)
    assert axial.inv_freq64.dtype == torch.float64
    assert set(mixed.state_dict()) == {"freqs"} and not axial.state_dict()


def test_mixed_frequencies_are_learned_through_attention():
    enc = RoPE2D(HEAD_DIM, HEADS, "mixed")
    attn = MultiheadAttention(HEAD_DIM * HEADS, HEADS, rotary=enc)
    coords = patch_coords((3, 3))
    attn(torch.randn(2, 9, HEAD_DIM * HEADS), query_positions=coords).square().sum().backward()
    assert enc.freqs.grad is not None and enc.freqs.grad.abs().sum() > 0


def test_bad_arguments():
    with pytest.raises(ValueError, match="divisible by 4"):
        RoPE2D(6, 2)
    with pytest.raises(ValueError, match="variant"):
        RoPE2D(8, 2, "diagonal")
    with pytest.raises(ValueError, match="base"):
        RoPE2D(8, 2, base=1.0)
    with pytest.raises(ValueError, match="normalize"):
        RoPE2D(8, 2, normalize="pixels")
    with pytest.raises(ValueError, match="head_dim"):
        MultiheadAttention(64, 4, rotary=RoPE2D(8, 4))
    with pytest.raises(ValueError, match=r"\(N, 2\)"):
        RoPE2D(8, 2).rotation(torch.zeros(5))


def test_init_mixed_freqs_rejects_bad_rotate_and_generator():
    with pytest.raises(TypeError, match=r"rotate must be a bool \(True or False\), got str"):
        init_mixed_freqs(8, 2, rotate="no")
    with pytest.raises(TypeError, match="generator must be a torch.Generator or None, got str"):
        init_mixed_freqs(8, 2, generator="seed")


@pytest.mark.parametrize("variant", ["axial", "mixed"])
@pytest.mark.parametrize("layout", ["half", "interleaved"])
def test_rotate_and_forward_apply_the_rotation_as_rotary_encoding_does(variant, layout):
    torch.manual_seed(0)
    enc = RoPE2D(HEAD_DIM, HEADS, variant, layout=layout)
    coords = patch_coords((2, 3))
    positions = GridPositions(coords, (2, 3), num_prefix_tokens=1)
    x = torch.randn(2, HEADS, 7, HEAD_DIM, dtype=torch.bfloat16)
    out = enc(x, positions)
    assert out.dtype == torch.bfloat16
    assert torch.equal(out, apply_rotation(x, enc.rotation(positions)))
    assert torch.equal(out, enc.rotate(x, positions))
    assert torch.equal(out[:, :, 0], x[:, :, 0])  # the prefix token is not rotated
    # Batched coordinates, one row per batch element, give each element its own rotation.
    batched = enc(x[:, :, 1:], torch.stack((coords, coords.flip(0))))
    torch.testing.assert_close(batched[1], enc(x[1:, :, 1:], coords.flip(0))[0])


def test_rotate_names_what_does_not_fit():
    axial, mixed = RoPE2D(HEAD_DIM, HEADS), RoPE2D(HEAD_DIM, HEADS, "mixed")
    coords = patch_coords(2)
    with pytest.raises(ValueError, match=r"x must have shape \(B, H, N, head_dim=16\), got "
                                         r"\(4, 16\)"):
        axial(torch.zeros(4, HEAD_DIM), coords)
    with pytest.raises(ValueError, match=r"x must have shape \(B, H=3, N, head_dim=16\)"):
        mixed(torch.zeros(1, 2, 4, HEAD_DIM), coords)
    with pytest.raises(ValueError, match=r"with 1 prefix tokens do not match x of shape "
                                         r"\(1, 3, 4, 16\).*prefix \+ N = 4, B = 1"):
        axial(torch.zeros(1, HEADS, 4, HEAD_DIM), GridPositions(coords, num_prefix_tokens=1))
    with pytest.raises(ValueError, match=r"positions of shape \(3, 4, 2\)"):
        axial(torch.zeros(2, HEADS, 4, HEAD_DIM), coords.expand(3, 4, 2))


def test_mixed_freqs_move_in_place_keep_float32_and_rebuild_after_meta_init():
    enc = RoPE2D(HEAD_DIM, HEADS, "mixed")
    freqs = enc.freqs
    enc.to(torch.float16).to("cpu")
    assert enc.freqs is freqs and freqs.dtype == torch.float32  # an optimizer still holds it
    with torch.device("meta"):
        meta = RoPE2D(HEAD_DIM, HEADS, "mixed")
    assert meta.freqs.is_meta
    meta.to_empty(device="cpu")
    assert not meta.freqs.is_meta and meta.freqs.dtype == torch.float32
    torch.manual_seed(0)
    meta.reset_parameters()
    torch.manual_seed(0)
    torch.testing.assert_close(meta.freqs.detach(), init_mixed_freqs(HEAD_DIM, HEADS))
    assert set(meta.state_dict()) == {"freqs"}


def test_rotate_refuses_a_non_tensor_x():
    with pytest.raises(TypeError, match="^x must be a torch.Tensor, got list"):
        RoPE2D(HEAD_DIM, HEADS)([1.0], patch_coords(2))
