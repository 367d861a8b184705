"""MRoPE against its reference implementations: transformers 5.24's Qwen2-VL / Qwen2.5-VL
(chunked sections) and Qwen3-VL (strided sections) text rotary embeddings with their
``apply_rotary_pos_emb``, and timm 1.0.31's ``RotaryEmbeddingMRope``. Tiny configs, nothing
downloaded; q and k are compared after rotation."""

from __future__ import annotations

import pytest
import torch
import torch.nn.functional as F
from posenc.core import MultiheadAttention, RotaryEncoding
from posenc.spatial.coords import video_coords
from posenc.spatial.rope import MRoPE, default_sections, mrope_axes
from timm.layers.pos_embed_sincos import RotaryEmbeddingMRope, apply_rot_embed_cat
from transformers.models.qwen2_5_vl import modeling_qwen2_5_vl as qwen25
from transformers.models.qwen2_5_vl.configuration_qwen2_5_vl import Qwen2_5_VLTextConfig
from transformers.models.qwen2_vl import modeling_qwen2_vl as qwen2
from transformers.models.qwen2_vl.configuration_qwen2_vl import Qwen2VLTextConfig
from transformers.models.qwen3_vl import modeling_qwen3_vl as qwen3
from transformers.models.qwen3_vl.configuration_qwen3_vl import Qwen3VLTextConfig

HEADS = 2
# HF forms position * inv_freq in float32; posenc in float64. At positions < 100 the two agree
# to ~2e-6; a wrong pair-to-axis assignment or frequency is off by O(1).
TOL = dict(rtol=0, atol=1e-5)


def _rope_parameters(theta: float, sections: list[int] | None) -> dict:
    params = {"rope_type": "default", "rope_theta": theta}
    if sections is not None:
        params["mrope_section"] = sections
    return params


def _qwen_position_ids(batch: int) -> torch.Tensor:
    """Qwen2-VL's get_rope_index layout for [3 text, a 2-frame 2x3 video, 2 text] tokens:
    text at (p, p, p), the video at (3 + t, 3 + row, 3 + col), text resumes after the largest
    video position. (3, B, N), as Hugging Face's position_ids; the second clip is shifted."""
    text = torch.arange(3.0)[:, None].expand(3, 3)
    video = video_coords((2, 3), 2) + 3
    after = video.max() + 1 + torch.arange(2.0)[:, None].expand(2, 3)
    one = torch.cat([text, video, after]).long()  # (N, 3)
    return torch.stack([one + 5 * b for b in range(batch)]).permute(2, 0, 1)


def _hf_rotate(module, config, q, k, position_ids):
    rope = module.__dict__[_ROTARY[module]](config)
    cos, sin = rope(q, position_ids)
    return module.apply_rotary_pos_emb(q, k, cos, sin)


_ROTARY = {qwen2: "Qwen2VLRotaryEmbedding", qwen25: "Qwen2_5_VLRotaryEmbedding",
           qwen3: "Qwen3VLTextRotaryEmbedding"}
_CONFIGS = {qwen2: Qwen2VLTextConfig, qwen25: Qwen2_5_VLTextConfig, qwen3: Qwen3VLTextConfig}


@pytest.mark.parametrize("module", [qwen2, qwen25], ids=["qwen2_vl", "qwen2_5_vl"])
@pytest.mark.parametrize(("head_dim", "sections", "theta"), [
    (32, [4, 6, 6], 10000.0),
    (32, [8, 4, 4], 1e6),  # Qwen2-VL-7B's rope_theta
    (16, [2, 3, 3], 10000.0),
])
def test_chunked_mrope_equals_qwen2_vl(module, head_dim, sections, theta):
    config = _CONFIGS[module](hidden_size=head_dim * HEADS, num_attention_heads=HEADS,
                              num_key_value_heads=HEADS,
                              rope_parameters=_rope_parameters(theta, sections))
    position_ids = _qwen_position_ids(batch=2)
    n = position_ids.shape[-1]
    q, k = torch.randn(2, HEADS, n, head_dim), torch.randn(2, HEADS, n, head_dim)
    q_ref, k_ref = _hf_rotate(module, config, q, k, position_ids)
    enc = MRoPE(head_dim, tuple(sections), base=theta)
    positions = position_ids.permute(1, 2, 0)  # (B, N, 3)
    torch.testing.assert_close(enc.rotate(q, positions), q_ref, **TOL)
    torch.testing.assert_close(enc.rotate(k, positions), k_ref, **TOL)


def test_default_sections_are_qwen2_vl_default_mrope_section():
    # Qwen2-VL's rotary falls back to mrope_section [16, 24, 24] (head_dim 128) when the config
    # names none; posenc's default sections give the same split.
    assert default_sections(64) == (16, 24, 24)
    config = Qwen2VLTextConfig(hidden_size=128 * HEADS, num_attention_heads=HEADS,
                               num_key_value_heads=HEADS,
                               rope_parameters=_rope_parameters(10000.0, None))
    position_ids = _qwen_position_ids(batch=1)
    q = torch.randn(1, HEADS, position_ids.shape[-1], 128)
    q_ref, _ = _hf_rotate(qwen2, config, q, q, position_ids)
    torch.testing.assert_close(MRoPE(128).rotate(q, position_ids.permute(1, 2, 0)), q_ref, **TOL)


@pytest.mark.parametrize(("head_dim", "sections"), [(32, [6, 5, 5]), (128, [24, 20, 20])])
def test_strided_mrope_equals_qwen3_vl(head_dim, sections):
    config = Qwen3VLTextConfig(hidden_size=head_dim * HEADS, num_attention_heads=HEADS,
                               num_key_value_heads=HEADS, head_dim=head_dim,
                               rope_parameters=_rope_parameters(5e5, sections))
    position_ids = _qwen_position_ids(batch=2)
    n = position_ids.shape[-1]
    q, k = torch.randn(2, HEADS, n, head_dim), torch.randn(2, HEADS, n, head_dim)
    q_ref, k_ref = _hf_rotate(qwen3, config, q, k, position_ids)
    enc = MRoPE(head_dim, tuple(sections), base=5e5, axis_layout="strided")
    positions = position_ids.permute(1, 2, 0)
    torch.testing.assert_close(enc.rotate(q, positions), q_ref, **TOL)
    torch.testing.assert_close(enc.rotate(k, positions), k_ref, **TOL)


def test_strided_mrope_equals_timm_rotary_embedding_mrope():
    # timm's vision MRoPE: Qwen3-VL's strided axes, t = 0 for an image. (12, 12, 12) over 36
    # pairs is a config whose strided counts equal its sections.
    dim, grid = 72, (3, 4)
    emb = RotaryEmbeddingMRope(dim, mrope_section=(12, 12, 12)).get_embed(list(grid))
    coords = torch.cat([torch.zeros(12, 1), video_coords(grid, 1)[:, 1:]], dim=-1)
    x = torch.randn(2, HEADS, 12, dim)
    enc = MRoPE(dim, (12, 12, 12), axis_layout="strided")
    torch.testing.assert_close(enc.rotate(x, coords), apply_rot_embed_cat(x, emb, half=True),
                               **TOL)


def test_mrope_axes_layouts_by_hand():
    assert mrope_axes((2, 1, 1)).tolist() == [0, 0, 1, 2]
    assert mrope_axes((4, 2, 2), "strided").tolist() == [0, 1, 2, 0, 1, 2, 0, 0]
    # 17 pairs: rows at 1, 4, .., 16 (6), columns at 2, 5, .., 14 (5), t the other 6.
    with pytest.raises(ValueError, match=r"strided .* \(t, row, col would get \(6, 6, 5\)\)"):
        mrope_axes((3, 7, 7), "strided")


def test_text_tokens_get_exactly_the_1d_rope():
    # A text token at (p, p, p): every pair reads p at the 1D spectrum, so mRoPE is 1D RoPE.
    p = torch.tensor([0, 1, 7, 1000, 123456])
    x = torch.randn(1, HEADS, 5, 32)
    for axis_layout in ("chunked", "strided"):
        got = MRoPE(32, (6, 5, 5), axis_layout=axis_layout).rotate(x, p[:, None].expand(5, 3))
        torch.testing.assert_close(got, RotaryEncoding(32).rotate(x, p), rtol=0, atol=1e-6)


def test_mrope_in_multihead_attention_equals_hf_rotated_attention():
    head_dim, sections = 16, [2, 3, 3]
    attn = MultiheadAttention(head_dim * HEADS, HEADS, rotary=MRoPE(head_dim, tuple(sections)))
    position_ids = _qwen_position_ids(batch=2)
    n = position_ids.shape[-1]
    x = torch.randn(2, n, head_dim * HEADS)
    got = attn(x, query_positions=position_ids.permute(1, 2, 0))

    q, k, v = attn.qkv(x).unflatten(-1, (3, HEADS, head_dim)).permute(2, 0, 3, 1, 4)
    config = Qwen2VLTextConfig(hidden_size=head_dim * HEADS, num_attention_heads=HEADS,
                               num_key_value_heads=HEADS,
                               rope_parameters=_rope_parameters(10000.0, sections))
    q, k = _hf_rotate(qwen2, config, q, k, position_ids)
    out = F.scaled_dot_product_attention(q, k, v).transpose(1, 2).reshape(2, n, -1)
    torch.testing.assert_close(got, attn.proj(out), rtol=1e-5, atol=1e-5)


def test_mrope_bad_arguments():
    with pytest.raises(ValueError, match=r"sections must be three positive ints .* summing to "
                                         r"head_dim // 2=16, got \(4, 6, 5\)"):
        MRoPE(32, (4, 6, 5))
    with pytest.raises(TypeError, match="sections must be three ints"):
        MRoPE(32, (8, 8))
    with pytest.raises(TypeError, match="sections must hold ints, got float"):
        MRoPE(32, (4.0, 6, 6))
    with pytest.raises(ValueError, match="cannot be laid out strided"):
        MRoPE(32, (2, 7, 7), axis_layout="strided")
    with pytest.raises(ValueError, match="axis_layout must be one of"):
        MRoPE(32, axis_layout="interleaved")
    with pytest.raises(ValueError, match="head_dim // 2=2 pairs are too few"):
        MRoPE(4)
    with pytest.raises(ValueError, match="head_dim must be even"):
        MRoPE(33)
    with pytest.raises(ValueError, match="base"):
        MRoPE(32, base=1.0)


def test_mrope_frequencies_stay_float64_and_out_of_the_state_dict():
    enc = MRoPE(32).to(torch.bfloat16)
    assert enc.freqs64.dtype == torch.float64 and not enc.state_dict()
    x = torch.randn(1, HEADS, 12, 32, dtype=torch.bfloat16)
    assert enc.rotate(x, video_coords((2, 3), 2)).dtype == torch.bfloat16
