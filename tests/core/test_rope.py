"""RoPE: relative-position property, layouts, partial rotary, references, gradients, numerics."""

from __future__ import annotations

import pytest
import torch
from core_refs import (
    complex_rotate,
    core_settings,
    dyadic_positions,
    dyadic_shifts,
    hf_rotate,
    int_positions,
    ref_angles,
    ref_inv_freq,
    shifts,
)
from hypothesis import given
from hypothesis import strategies as st
from posenc.core import MultiheadAttention, RotaryEncoding, apply_rotation, convert_rotary_layout
from posenc.core.rope import rotary_layout_permutation

LAYOUTS = ("half", "interleaved")
REFERENCE = {"half": hf_rotate, "interleaved": complex_rotate}


def _score(rope: RotaryEncoding, q: torch.Tensor, k: torch.Tensor, m, n, dtype) -> torch.Tensor:
    """<R(m) q, R(n) k> for single-token q, k of shape (1, 1, 1, D)."""
    rq = rope.rotate(q, torch.tensor([m], dtype=dtype))
    rk = rope.rotate(k, torch.tensor([n], dtype=dtype))
    return (rq.double() * rk.double()).sum()


# ---- the defining property -------------------------------------------------------------------

@pytest.mark.parametrize("layout", LAYOUTS)
@core_settings
@given(m=int_positions, n=int_positions, s=shifts)
def test_rope_score_depends_only_on_offset_int_positions(layout, m, n, s):
    rope = RotaryEncoding(64, layout=layout)
    gen = torch.Generator().manual_seed(m ^ n)
    q, k = torch.randn(2, 1, 1, 1, 64, generator=gen)
    base = _score(rope, q, k, m, n, torch.int64)
    shifted = _score(rope, q, k, m + s, n + s, torch.int64)
    # |q||k| ~ 64; float32 cos/sin carry ~3e-7 error each, so ~1e-5 is the noise floor. A
    # rotation that is not a function of the offset alone is off by O(|q||k|).
    torch.testing.assert_close(shifted, base, atol=1e-4, rtol=0)


@pytest.mark.parametrize("layout", LAYOUTS)
@core_settings
@given(m=dyadic_positions, n=dyadic_positions, s=dyadic_shifts)
def test_rope_score_depends_only_on_offset_float_positions(layout, m, n, s):
    rope = RotaryEncoding(32, layout=layout, rotary_dim=24)
    q, k = torch.randn(2, 1, 1, 1, 32)
    for dtype in (torch.float32, torch.float64):
        base = _score(rope, q, k, m, n, dtype)
        shifted = _score(rope, q, k, m + s, n + s, dtype)
        torch.testing.assert_close(shifted, base, atol=1e-4, rtol=0)


@pytest.mark.parametrize("layout", LAYOUTS)
def test_rope_score_matches_closed_form_of_offset(layout):
    """q.R(n-m)k written per frequency pair: sum_i |q_i||k_i| cos(phi_k - phi_q + (n-m) w_i)."""
    rope = RotaryEncoding(16, layout=layout)
    q, k = torch.randn(2, 1, 1, 1, 16)
    m, n = 37, 1234
    perm = rotary_layout_permutation(16, src=layout, dst="interleaved") if layout == "half" \
        else torch.arange(16)
    zq = torch.view_as_complex(q.flatten()[perm].double().reshape(-1, 2).contiguous())
    zk = torch.view_as_complex(k.flatten()[perm].double().reshape(-1, 2).contiguous())
    expected = (zq.conj() * zk * torch.polar(torch.ones(8, dtype=torch.float64),
                                             (n - m) * ref_inv_freq(16))).real.sum()
    torch.testing.assert_close(_score(rope, q, k, m, n, torch.int64), expected,
                               atol=1e-5, rtol=0)


# ---- agreement with independent implementations ----------------------------------------------

@pytest.mark.parametrize("layout", LAYOUTS)
@pytest.mark.parametrize("rotary_dim", [64, 32])
@pytest.mark.parametrize("batched_positions", [False, True])
def test_rotate_equals_reference_formula(layout, rotary_dim, batched_positions):
    """half: HF Llama's rotate_half formula; interleaved: Meta's complex multiply."""
    rope = RotaryEncoding(64, rotary_dim=rotary_dim, layout=layout, base=500000.0)
    x = torch.randn(2, 3, 10, 64)
    pos = torch.randint(0, 100_000, (2, 10)) if batched_positions else torch.arange(10) * 997
    theta = ref_angles(pos, ref_inv_freq(rotary_dim, 500000.0))
    expected = REFERENCE[layout](x, theta, rotary_dim)
    torch.testing.assert_close(rope.rotate(x, pos).double(), expected, atol=2e-6, rtol=0)


@pytest.mark.parametrize("layout", LAYOUTS)
def test_rotate_equals_timm_apply_rot_embed_cat(layout):
    from timm.layers import apply_rot_embed_cat

    rope = RotaryEncoding(64, layout=layout)
    x = torch.randn(2, 4, 50, 64)
    pos = torch.arange(50)
    theta = ref_angles(pos, ref_inv_freq(64))
    if layout == "half":  # timm's rotate_half layout: [f0, f1, .., f0, f1, ..]
        sin, cos = (torch.cat((f(theta),) * 2, -1) for f in (torch.sin, torch.cos))
    else:  # timm's default layout: [f0, f0, f1, f1, ..]
        sin, cos = (f(theta).repeat_interleave(2, -1) for f in (torch.sin, torch.cos))
    emb = torch.cat((sin, cos), -1).float()
    expected = apply_rot_embed_cat(x, emb, half=layout == "half")
    torch.testing.assert_close(rope.rotate(x, pos), expected, atol=2e-6, rtol=0)


def test_rope_with_hf_default_config_matches_llama_rotary_embedding():
    """End to end against transformers' LlamaRotaryEmbedding + apply_rotary_pos_emb."""
    from transformers import LlamaConfig
    from transformers.models.llama.modeling_llama import (
        LlamaRotaryEmbedding,
        apply_rotary_pos_emb,
    )

    config = LlamaConfig(hidden_size=128, num_attention_heads=2, head_dim=64,
                         max_position_embeddings=512,
                         rope_parameters={"rope_type": "default", "rope_theta": 10000.0})
    q, k = torch.randn(2, 1, 2, 300, 64)
    pos = torch.arange(300)[None]
    cos, sin = LlamaRotaryEmbedding(config)(q, pos)
    hf_q, hf_k = apply_rotary_pos_emb(q, k, cos, sin)
    rope = RotaryEncoding(64)
    # HF forms p * inv_freq in float32 (~p * 6e-8 rad error): 300 * 6e-8 * |x| stays < 1e-4.
    torch.testing.assert_close(rope.rotate(q, pos), hf_q, atol=1e-4, rtol=0)
    torch.testing.assert_close(rope.rotate(k, pos), hf_k, atol=1e-4, rtol=0)


# ---- layouts and partial rotary ---------------------------------------------------------------

@pytest.mark.parametrize("rotary_dim", [None, 8])
@pytest.mark.parametrize(("src", "dst"), [("half", "interleaved"), ("interleaved", "half")])
def test_layouts_agree_after_weight_conversion(src, dst, rotary_dim):
    dim, heads = 64, 4
    rope_src = RotaryEncoding(16, rotary_dim=rotary_dim, layout=src)
    rope_dst = RotaryEncoding(16, rotary_dim=rotary_dim, layout=dst)
    attn_src = MultiheadAttention(dim, heads, rotary=rope_src).eval()
    attn_dst = MultiheadAttention(dim, heads, rotary=rope_dst).eval()
    attn_dst.load_state_dict(attn_src.state_dict())
    with torch.no_grad():
        for name in ("weight", "bias"):
            p = getattr(attn_dst.qkv, name)
            p[:dim] = convert_rotary_layout(p[:dim], heads, src, dst, rotary_dim)
            p[dim:2 * dim] = convert_rotary_layout(p[dim:2 * dim], heads, src, dst, rotary_dim)
    x = torch.randn(2, 20, dim)
    pos = torch.arange(20) * 31
    with torch.no_grad():
        out_src = attn_src(x, query_positions=pos, is_causal=True)
        out_dst = attn_dst(x, query_positions=pos, is_causal=True)
        unconverted = MultiheadAttention(dim, heads, rotary=rope_dst).eval()
        unconverted.load_state_dict(attn_src.state_dict())
        out_unconverted = unconverted(x, query_positions=pos, is_causal=True)
    torch.testing.assert_close(out_dst, out_src, atol=1e-6, rtol=0)
    # Without the conversion the same weights give a different model.
    assert (out_unconverted - out_src).abs().max() > 1e-3


def test_layout_permutation_is_the_documented_pairing():
    # half pairs (i, i + 4); interleaved pairs (2i, 2i + 1); channels 8, 9 pass through.
    perm = rotary_layout_permutation(10, 8, "half", "interleaved")
    assert perm.tolist() == [0, 4, 1, 5, 2, 6, 3, 7, 8, 9]
    back = rotary_layout_permutation(10, 8, "interleaved", "half")
    assert perm[back].tolist() == list(range(10))
    assert rotary_layout_permutation(10, 8, "half", "half").tolist() == list(range(10))


def test_convert_rotary_layout_round_trip_is_identity():
    w = torch.randn(3 * 12, 7)
    there = convert_rotary_layout(w, 3, "half", "interleaved")
    assert not torch.equal(there, w)
    assert torch.equal(convert_rotary_layout(there, 3, "interleaved", "half"), w)


@pytest.mark.parametrize("layout", LAYOUTS)
def test_partial_rotary_leaves_tail_untouched(layout):
    rope = RotaryEncoding(64, rotary_dim=16, layout=layout)
    x = torch.randn(2, 3, 40, 64)
    out = rope.rotate(x, torch.arange(40) * 1000)
    assert torch.equal(out[..., 16:], x[..., 16:])
    # ... and the head does rotate: a norm-preserving, non-identity map on each pair.
    assert (out[..., :16] - x[..., :16]).abs().max() > 0.1
    torch.testing.assert_close(out[..., :16].norm(dim=-1), x[..., :16].norm(dim=-1))


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
def test_partial_interleaved_writes_in_place_only_without_autograd_and_agrees(dtype):
    # Without autograd the product is written straight into the output (out=, no cat);
    # under autograd the cat path runs. Both must give the same bits, in x's dtype.
    rope = RotaryEncoding(64, rotary_dim=24, layout="interleaved")
    x = torch.randn(2, 3, 9, 64).to(dtype)
    rotation = rope.rotation(torch.arange(9) * 7)
    fast = apply_rotation(x, rotation)
    tracked = apply_rotation(x.clone().requires_grad_(), rotation)
    assert tracked.requires_grad and fast.dtype == tracked.dtype == dtype
    assert torch.equal(fast, tracked.detach())
    assert torch.equal(fast[..., 24:], x[..., 24:])


def test_partial_interleaved_traces_without_a_graph_break():
    # The out= fast path is eager-only: Dynamo breaks the graph on a strided out=.
    rotation = RotaryEncoding(16, rotary_dim=8, layout="interleaved").rotation(torch.arange(5))
    explain = torch._dynamo.explain(lambda x: apply_rotation(x, rotation))(torch.randn(1, 2, 5, 16))
    assert explain.graph_break_count == 0


@pytest.mark.parametrize("layout", LAYOUTS)
def test_rotation_at_position_zero_is_identity(layout):
    x = torch.randn(1, 2, 1, 32)
    assert torch.equal(RotaryEncoding(32, layout=layout).rotate(x, torch.tensor([0])), x)


# ---- gradients ---------------------------------------------------------------------------------

@pytest.mark.parametrize("layout", LAYOUTS)
@pytest.mark.parametrize("rotary_dim", [32, 16])
def test_backward_through_apply_rotation_equals_reference_grad(layout, rotary_dim):
    rope = RotaryEncoding(32, rotary_dim=rotary_dim, layout=layout)
    pos = torch.arange(12) * 7
    x = torch.randn(2, 3, 12, 32, requires_grad=True)
    weight = torch.randn(2, 3, 12, 32)
    (apply_rotation(x, rope.rotation(pos)) * weight).sum().backward()

    x_ref = x.detach().double().requires_grad_()
    theta = ref_angles(pos, ref_inv_freq(rotary_dim))
    (REFERENCE[layout](x_ref, theta, rotary_dim) * weight.double()).sum().backward()
    torch.testing.assert_close(x.grad.double(), x_ref.grad, atol=2e-6, rtol=0)


@pytest.mark.parametrize("layout", LAYOUTS)
def test_apply_rotation_passes_gradcheck(layout):
    rope = RotaryEncoding(8, rotary_dim=6, layout=layout)
    rotation = rope.rotation(torch.tensor([0, 3, 1000]))
    x = torch.randn(1, 2, 3, 8, dtype=torch.float64, requires_grad=True)
    assert torch.autograd.gradcheck(lambda t: apply_rotation(t, rotation), (x,))


# ---- numerics ----------------------------------------------------------------------------------

PRECISION_POSITIONS = torch.cat((
    torch.tensor([0, 1, 2, 7, 1000, 4095, 65_537, 123_456, 500_000, 999_983]),
    torch.arange(999_000, 1_000_001, 37),
    torch.tensor([1_000_000]),
))


@pytest.mark.parametrize("head_dim", [64, 128])
def test_rotation_cos_sin_within_1e6_of_float64_up_to_position_1e6(head_dim):
    rope = RotaryEncoding(head_dim)
    rotation = rope.rotation(PRECISION_POSITIONS)
    assert rotation.cos.dtype == rotation.sin.dtype == torch.float32
    theta = ref_angles(PRECISION_POSITIONS, ref_inv_freq(head_dim))
    assert (rotation.cos[0, 0].double() - theta.cos()).abs().max() <= 1e-6
    assert (rotation.sin[0, 0].double() - theta.sin()).abs().max() <= 1e-6
    # The tolerance is meaningful: the naive float32 product p * inv_freq is off by ~0.03 rad.
    naive = (PRECISION_POSITIONS.float()[:, None] * rope.inv_freq).cos()
    assert (naive.double() - theta.cos()).abs().max() > 1e-3


@pytest.mark.parametrize("layout", LAYOUTS)
def test_bf16_cast_keeps_float64_frequencies_and_outputs(layout):
    rope = RotaryEncoding(64, layout=layout, base=500000.0)
    inv_freq64 = rope.inv_freq64.clone()
    x = torch.randn(2, 3, 64, 64).bfloat16()
    pos = torch.arange(64) + 900_000
    expected = rope.rotate(x, pos)

    attn = MultiheadAttention(128, 2, rotary=rope).to(torch.bfloat16)
    assert attn.rotary is rope and rope.inv_freq64.dtype == torch.float64
    assert torch.equal(rope.inv_freq64, inv_freq64)
    out = rope.rotate(x, pos)
    assert out.dtype == torch.bfloat16
    assert torch.equal(out, expected)
    # Output within bf16 rounding (2**-8 relative) of the exact float64 rotation of the input.
    ref = REFERENCE[layout](x, ref_angles(pos, ref_inv_freq(64, 500000.0)), 64)
    assert ((out.double() - ref).abs() <= 2**-8 * ref.abs() + 1e-30).all()


@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float16, torch.float32, torch.float64])
@pytest.mark.parametrize("layout", LAYOUTS)
@pytest.mark.parametrize("rotary_dim", [32, 16])
def test_rotate_output_dtype_equals_input_dtype(dtype, layout, rotary_dim):
    rope = RotaryEncoding(32, rotary_dim=rotary_dim, layout=layout)
    x = torch.randn(1, 2, 5, 32).to(dtype)
    pos = torch.arange(5)
    out = rope.rotate(x, pos)
    assert out.dtype == dtype
    ref = REFERENCE[layout](x, ref_angles(pos, ref_inv_freq(rotary_dim)), rotary_dim)
    tol = {torch.bfloat16: 2**-8, torch.float16: 2**-11}.get(dtype, 1e-6)
    assert ((out.double() - ref).abs() <= tol * ref.abs() + 1e-6).all()


def test_float64_positions_keep_fractional_precision_at_large_timestamps():
    """Continuous time: seconds since an epoch near 1.7e9 with sub-second resolution."""
    rope = RotaryEncoding(16)
    t = torch.tensor([1.7e9 + 0.25, 1.7e9 + 0.75], dtype=torch.float64)
    cos = rope.rotation(t).cos[0, 0].double()
    expected = ref_angles(t, ref_inv_freq(16)).cos()
    torch.testing.assert_close(cos, expected, atol=1e-6, rtol=0)


@core_settings
@given(st.lists(st.integers(0, 10_000), min_size=1, max_size=8))
def test_rotation_of_batched_positions_equals_per_row_rotation(rows):
    rope = RotaryEncoding(16, layout="interleaved")
    pos = torch.tensor(rows)[:, None] + torch.arange(4)
    batched = rope.rotation(pos)
    for b, row in enumerate(pos):
        single = rope.rotation(row)
        assert torch.equal(batched.cos[b], single.cos[0])
        assert torch.equal(batched.sin[b], single.sin[0])
