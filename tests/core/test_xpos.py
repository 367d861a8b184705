"""xPos (posenc.core.xpos.XPos): values against rotary-embedding-torch and x-transformers
(stored in xpos_refs.py), the decay property, use in MultiheadAttention (keys get 1/scale, KV
cache), and the float16 range."""

from __future__ import annotations

import math

import pytest
import torch
import torch.nn.functional as F
import xpos_refs as refs
from posenc.core import KVCache, MultiheadAttention, RotaryEncoding, apply_rotation, encoding_kind
from posenc.core.rope import rotary_layout_permutation
from posenc.core.xpos import XPos, xpos_zeta
from xpos_refs import inputs, ref

# The references keep frequencies and zeta in float32 (~1e-7); a wrong centre, zeta, layout or
# a swapped q/k scale is off by > 1e-2 on these inputs (scale_base=8).
REF_TOL = dict(rtol=0, atol=5e-7)


def paper_zeta(rotary_dim: int) -> torch.Tensor:
    """Sun et al. 2022: ``zeta_i = (i / (R/2) + gamma) / (1 + gamma)``, ``gamma = 0.4``."""
    half = rotary_dim // 2
    return torch.tensor([(i / half + 0.4) / 1.4 for i in range(half)], dtype=torch.float64)


@pytest.mark.parametrize("name, rotary_dim", [("RET_FULL", 8), ("RET_PARTIAL", 4)])
def test_xpos_matches_rotary_embedding_torch(name, rotary_dim):
    # RotaryEmbedding(dim=rotary_dim, use_xpos=True, xpos_scale_base=8).rotate_queries_and_keys
    # on (1, 2, 6, 8): centre len(seq) // 2 = 3, channels past rotary_dim pass through.
    xpos = XPos(8, scale_base=refs.RET_SCALE_BASE, rotary_dim=rotary_dim,
                layout="interleaved", center=refs.RET_SEQ_LEN // 2)
    q, k = inputs((1, 2, refs.RET_SEQ_LEN, 8))
    positions = torch.arange(refs.RET_SEQ_LEN)
    q_rot, k_rot = xpos(q, k, positions)
    assert q_rot.dtype == k_rot.dtype == torch.float64
    torch.testing.assert_close(q_rot, ref(getattr(refs, f"{name}_Q")), **REF_TOL)
    torch.testing.assert_close(k_rot, ref(getattr(refs, f"{name}_K")), **REF_TOL)
    torch.testing.assert_close(xpos.scale(positions), ref(getattr(refs, f"{name}_SCALE")),
                               **REF_TOL)
    torch.testing.assert_close(q_rot[..., rotary_dim:], q[..., rotary_dim:], rtol=0, atol=0)


def test_xpos_matches_x_transformers_with_batched_positions():
    # x_transformers RotaryEmbedding(8, use_xpos=True, scale_base=8) on (B, N) positions:
    # centre (max + 1) // 2 = 4 for the whole batch; apply_rotary_pos_emb(k, freqs, 1/scale).
    positions = torch.tensor(refs.XT_POSITIONS)
    xpos = XPos(8, scale_base=refs.XT_SCALE_BASE, layout="interleaved",
                center=(int(positions.max()) + 1) // 2)
    q, k = inputs((2, 2, 5, 8))
    q_rot, k_rot = xpos(q, k, positions)
    torch.testing.assert_close(q_rot, ref(refs.XT_Q), **REF_TOL)
    torch.testing.assert_close(k_rot, ref(refs.XT_K), **REF_TOL)


def test_xpos_zeta_is_the_papers():
    torch.testing.assert_close(xpos_zeta(64), paper_zeta(64), rtol=1e-15, atol=0)
    torch.testing.assert_close(XPos(16, rotary_dim=8).zeta, paper_zeta(8), rtol=1e-15, atol=0)


def test_xpos_scale_is_float64_and_exact_at_fractional_positions():
    xpos = XPos(8, scale_base=100.0, center=2.5)
    positions = torch.tensor([[0.0, 1.25, 1000.5]], dtype=torch.float64)
    expected = torch.tensor([[[z ** ((p - 2.5) / 100.0) for z in paper_zeta(8).tolist()]
                              for p in positions[0].tolist()]], dtype=torch.float64)
    scale = xpos.scale(positions)
    assert scale.dtype == torch.float64 and scale.shape == (1, 3, 4)
    torch.testing.assert_close(scale, expected, rtol=1e-13, atol=0)


def test_xpos_half_layout_is_the_interleaved_one_with_channels_permuted():
    perm = rotary_layout_permutation(8, src="half", dst="interleaved")
    q, k = inputs((1, 2, 6, 8))
    positions = torch.arange(6)
    half = XPos(8, scale_base=8, layout="half", center=3)
    inter = XPos(8, scale_base=8, layout="interleaved", center=3)
    q_half, k_half = half(q, k, positions)
    q_inter, k_inter = inter(q[..., perm], k[..., perm], positions)
    torch.testing.assert_close(q_half[..., perm], q_inter, rtol=0, atol=1e-12)
    torch.testing.assert_close(k_half[..., perm], k_inter, rtol=0, atol=1e-12)


def logits(xpos: XPos, q: torch.Tensor, k: torch.Tensor, q_pos, k_pos) -> torch.Tensor:
    q_rot = apply_rotation(q, xpos.rotation(torch.as_tensor(q_pos)))
    k_rot = apply_rotation(k, xpos.key_rotation(torch.as_tensor(k_pos)))
    return q_rot @ k_rot.transpose(-1, -2)


def test_xpos_logit_is_rope_logit_damped_per_pair_by_zeta_to_the_offset():
    # Per rotary pair i the logit is RoPE's contribution times zeta_i ** ((m - n) / gamma),
    # built here from RotaryEncoding channel products and the paper's zeta.
    head_dim, gamma = 8, 16.0
    q, k = torch.randn(1, 1, 5, head_dim, dtype=torch.float64), torch.randn(
        1, 1, 7, head_dim, dtype=torch.float64)
    q_pos, k_pos = torch.tensor([3, 9, 20, 21, 40]), torch.tensor([0, 2, 9, 15, 20, 30, 40])
    rope = RotaryEncoding(head_dim, layout="interleaved")
    q_r, k_r = rope(q, q_pos), rope(k, k_pos)
    products = q_r[..., :, None, :] * k_r[..., None, :, :]  # (1, 1, Nq, Nk, head_dim)
    offset = (q_pos[:, None] - k_pos[None, :]).double()
    damp = paper_zeta(head_dim)[None, None, :] ** (offset[..., None] / gamma)
    expected = (products * damp.repeat_interleave(2, dim=-1)).sum(-1)
    for center in (0.0, 20.0, -7.5):
        got = logits(XPos(head_dim, scale_base=gamma, layout="interleaved", center=center),
                     q, k, q_pos, k_pos)
        torch.testing.assert_close(got, expected, rtol=1e-5, atol=1e-6)


def test_xpos_logits_depend_only_on_offset():
    xpos = XPos(16, scale_base=32.0)
    q, k = torch.randn(1, 2, 4, 16), torch.randn(1, 2, 4, 16)
    base = logits(xpos, q, k, [0, 5, 6, 30], [1, 2, 3, 4])
    shifted = logits(xpos, q, k, [100, 105, 106, 130], [101, 102, 103, 104])
    torch.testing.assert_close(shifted, base, rtol=1e-4, atol=1e-5)


def test_xpos_is_a_rotary_encoding_with_float64_buffers():
    xpos = XPos(8)
    assert encoding_kind(xpos) == "rotary"
    xpos.to(torch.float16)
    assert xpos.inv_freq64.dtype == xpos.log_zeta64.dtype == torch.float64
    assert xpos.state_dict() == {} and xpos.no_weight_decay() == set()
    rotation = xpos.rotation(torch.arange(3))
    assert rotation.cos.shape == (1, 1, 3, 4) and rotation.cos.dtype == torch.float32
    assert xpos.key_rotation(torch.zeros(2, 3)).cos.shape == (2, 1, 3, 4)


def test_xpos_meta_init_then_reset_matches_a_fresh_one():
    with torch.device("meta"):
        xpos = XPos(8, scale_base=64.0, center=10.0)
    xpos.to_empty(device="cpu")
    xpos.reset_parameters()
    fresh = XPos(8, scale_base=64.0, center=10.0)
    positions = torch.arange(5)
    torch.testing.assert_close(xpos.rotation(positions).cos, fresh.rotation(positions).cos,
                               rtol=0, atol=0)


def test_xpos_keeps_the_dtype_of_q_and_k():
    xpos = XPos(8)
    q = torch.randn(1, 1, 4, 8, dtype=torch.bfloat16)
    q_rot, k_rot = xpos(q, q.half(), torch.arange(4))
    assert q_rot.dtype == torch.bfloat16 and k_rot.dtype == torch.float16


# ---- in MultiheadAttention -------------------------------------------------------------------

def test_attention_turns_queries_with_scale_and_keys_with_its_inverse():
    torch.manual_seed(1)
    xpos = XPos(8, scale_base=16.0, center=4.0)
    attn = MultiheadAttention(16, 2, rotary=xpos).eval()
    x = torch.randn(2, 9, 16)
    q_raw, k_raw, v = attn.qkv(x).unflatten(-1, (3, 2, 8)).permute(2, 0, 3, 1, 4)
    q, k = xpos(q_raw, k_raw, torch.arange(9))
    expected = attn.proj(F.scaled_dot_product_attention(q, k, v, is_causal=True)
                         .transpose(1, 2).reshape(2, 9, 16))
    got = attn(x, is_causal=True)
    torch.testing.assert_close(got, expected, rtol=1e-5, atol=1e-6)
    # Keys scaled like queries (the query rotation for both) would give another result.
    same = xpos.rotation(torch.arange(9))
    wrong = F.scaled_dot_product_attention(apply_rotation(q_raw, same), apply_rotation(k_raw, same),
                                           v, is_causal=True)
    assert (attn.proj(wrong.transpose(1, 2).reshape(2, 9, 16)) - got).abs().max() > 1e-2


def test_attention_with_xpos_decodes_with_a_kv_cache_as_in_one_pass():
    torch.manual_seed(2)
    attn = MultiheadAttention(16, 2, rotary=XPos(8, scale_base=8.0, center=3.0)).eval()
    x = torch.randn(1, 7, 16)
    full = attn(x, is_causal=True)
    cache = KVCache()
    steps = [attn(x[:, :3], is_causal=True, kv_cache=cache)]
    steps += [attn(x[:, i:i + 1], is_causal=True, kv_cache=cache) for i in range(3, 7)]
    torch.testing.assert_close(torch.cat(steps, dim=1), full, rtol=1e-5, atol=1e-6)


def test_attention_with_xpos_cross_attends_with_separate_positions():
    torch.manual_seed(3)
    xpos = XPos(8, scale_base=8.0)
    attn = MultiheadAttention(16, 2, rotary=xpos).eval()
    x, context = torch.randn(1, 3, 16), torch.randn(1, 5, 16)
    q_pos, k_pos = torch.tensor([10, 11, 12]), torch.tensor([0, 2, 4, 6, 8])
    w_q, w_k, w_v = attn.qkv.weight.split(16)
    b_q, b_k, b_v = attn.qkv.bias.split(16)
    q = F.linear(x, w_q, b_q).unflatten(-1, (2, 8)).transpose(1, 2)
    k = F.linear(context, w_k, b_k).unflatten(-1, (2, 8)).transpose(1, 2)
    v = F.linear(context, w_v, b_v).unflatten(-1, (2, 8)).transpose(1, 2)
    q, k = xpos(q, k, q_pos, k_pos)
    expected = attn.proj(F.scaled_dot_product_attention(q, k, v).transpose(1, 2).reshape(1, 3, 16))
    got = attn(x, context, query_positions=q_pos, key_positions=k_pos)
    torch.testing.assert_close(got, expected, rtol=1e-5, atol=1e-6)


# ---- range -----------------------------------------------------------------------------------

def test_xpos_max_offset_is_half_the_exponent_range_of_the_dtype():
    xpos = XPos(64)  # scale_base 512
    for dtype in (torch.float16, torch.bfloat16, torch.float32, torch.float64):
        largest = min(torch.finfo(dtype).max, torch.finfo(torch.float32).max)
        expected = 0.5 * math.log(largest) * 512 / math.log(3.5)
        assert xpos.max_offset(dtype) == pytest.approx(expected, rel=1e-12)
    assert xpos.max_offset(torch.float16) == pytest.approx(2266.2, abs=0.1)
    # At the bound the largest scale (pair 0, zeta = 2/7) is sqrt(float16 max) exactly.
    scale = xpos.scale(torch.tensor([-xpos.max_offset()], dtype=torch.float64))
    assert float(scale.max()) == pytest.approx(65504.0 ** 0.5, rel=1e-9)
    with pytest.raises(TypeError, match="dtype"):
        xpos.max_offset(torch.int64)


def test_attention_in_float16_within_max_offset_is_finite_and_accurate():
    torch.manual_seed(4)
    xpos = XPos(16, center=3000.0)
    attn = MultiheadAttention(32, 2, rotary=xpos).eval()
    x = torch.randn(1, 24, 32)
    positions = torch.cat((torch.arange(800, 812), torch.arange(5200, 5212)))  # ~2200 off
    assert float((positions - 3000).abs().max()) < xpos.max_offset(torch.float16)
    exact = attn.double()(x.double(), query_positions=positions, is_causal=True)
    half = attn.half()(x.half(), query_positions=positions, is_causal=True)
    assert torch.isfinite(half).all()
    torch.testing.assert_close(half.double(), exact, rtol=0, atol=5e-3)


def test_attention_in_float16_beyond_max_offset_raises_naming_the_centre():
    attn = MultiheadAttention(32, 2, rotary=XPos(16)).half()
    x = torch.randn(1, 3, 32, dtype=torch.float16)
    with pytest.raises(ValueError, match=r"query_positions lie up to 3000 .*center=0.*"
                                         r"max_offset=2266\.2 for torch\.float16"):
        attn(x, query_positions=torch.tensor([0, 1500, 3000]))
    # float32 attention takes the same positions, and so does float16 around a centre.
    attn.float()(x.float(), query_positions=torch.tensor([0, 1500, 3000]))
    centred = MultiheadAttention(32, 2, rotary=XPos(16, center=1500.0)).half()
    assert torch.isfinite(centred(x, query_positions=torch.tensor([0, 1500, 3000]))).all()


def test_attention_under_float16_autocast_checks_the_autocast_dtype():
    attn = MultiheadAttention(32, 2, rotary=XPos(16))
    x = torch.randn(1, 2, 32)
    with torch.autocast("cpu", dtype=torch.float16), pytest.raises(ValueError,
                                                                   match="torch.float16"):
        attn(x, query_positions=torch.tensor([0, 3000]))
    with torch.autocast("cpu", dtype=torch.bfloat16):
        attn(x, query_positions=torch.tensor([0, 3000]))


def test_xpos_key_positions_are_checked_on_their_own():
    attn = MultiheadAttention(32, 2, rotary=XPos(16)).half()
    x = torch.randn(1, 2, 32, dtype=torch.float16)
    with pytest.raises(ValueError, match="key_positions lie up to 2500"):
        attn(x, x, query_positions=torch.tensor([0, 1]), key_positions=torch.tensor([0, 2500]))


def test_xpos_rotation_refuses_offsets_beyond_float32_range():
    xpos = XPos(8)
    assert xpos.max_offset(torch.float32) == pytest.approx(18130.4, abs=0.1)
    with pytest.raises(ValueError, match="positions lie up to 20000 .*torch.float32"):
        xpos.rotation(torch.tensor([0, 20000]))
    with pytest.raises(ValueError, match="positions lie up to 20000"):
        xpos.key_rotation(torch.tensor([20000.0]))
    assert torch.isfinite(xpos.rotation(torch.tensor([18000])).cos).all()


def test_xpos_forward_checks_the_range_of_the_dtype_of_q_and_k():
    xpos = XPos(8)
    q = torch.randn(1, 1, 2, 8, dtype=torch.float16)
    with pytest.raises(ValueError, match="key_positions lie up to 2500 .*torch.float16"):
        xpos(q, q, torch.tensor([0, 1]), torch.tensor([0, 2500]))
    xpos(q.float(), q.float(), torch.tensor([0, 1]), torch.tensor([0, 2500]))


# ---- bad arguments ---------------------------------------------------------------------------

@pytest.mark.parametrize("kwargs, error, match", [
    (dict(head_dim=7), ValueError, "head_dim must be even"),
    (dict(head_dim=8, rotary_dim=10), ValueError, "rotary_dim must be <= head_dim=8"),
    (dict(head_dim=8, scale_base=0), ValueError, "scale_base must be a positive number"),
    (dict(head_dim=8, scale_base=math.inf), ValueError, "scale_base must be a positive"),
    (dict(head_dim=8, scale_base=True), TypeError, "scale_base must be a number"),
    (dict(head_dim=8, center=math.nan), ValueError, "center must be a finite number"),
    (dict(head_dim=8, center="mid"), TypeError, "center must be a number"),
    (dict(head_dim=8, layout="neox"), ValueError, "layout must be one of"),
    (dict(head_dim=8, base=1.0), ValueError, "base must be a finite number > 1"),
])
def test_xpos_refuses_bad_arguments(kwargs, error, match):
    with pytest.raises(error, match=match):
        XPos(**kwargs)


def test_xpos_forward_refuses_mismatched_shapes_and_bad_positions():
    xpos = XPos(8)
    q = torch.randn(1, 2, 4, 8)
    with pytest.raises(ValueError, match=r"q must have shape \(B, H, N, head_dim=8\)"):
        xpos(q[..., :6], q, torch.arange(4))
    with pytest.raises(ValueError, match=r"key_positions of shape \(3,\) do not match"):
        xpos(q, q, torch.arange(4), torch.arange(3))
    with pytest.raises(ValueError, match="query_positions must be finite"):
        xpos(q, q, torch.tensor([0.0, 1.0, math.nan, 3.0]))
    with pytest.raises(TypeError, match="positions must be an integer, float32 or float64"):
        xpos.rotation(torch.arange(4).half())
