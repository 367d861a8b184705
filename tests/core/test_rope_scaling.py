"""RoPE context extension: inv_freq and attention_scaling against Hugging Face transformers.

transformers' ``ROPE_INIT_FUNCTIONS`` compute in float32, posenc in float64, so the comparisons
use rtol=1e-6 (float32 carries ~6e-8); every method changes some frequency by a factor >= 1.1
against its neighbours in parameter space, far beyond that.
"""

from __future__ import annotations

import math

import pytest
import torch
from core_refs import ref_angles, ref_inv_freq
from posenc.core import (
    DynamicNTKScaling,
    LinearScaling,
    Llama3Scaling,
    NTKScaling,
    RotaryEncoding,
    YarnScaling,
)

HEAD_DIM = 64
RTOL = 1e-6


def hf_rope(rope_type: str, *, base: float, head_dim: int = HEAD_DIM, rotary_dim: int | None = None,
            max_position_embeddings: int = 4096, seq_len: int | None = None, **params):
    """(inv_freq float64, attention_factor) from transformers 5's ROPE_INIT_FUNCTIONS."""
    from transformers import LlamaConfig
    from transformers.modeling_rope_utils import ROPE_INIT_FUNCTIONS

    rope_parameters = {"rope_type": rope_type, "rope_theta": base, **params}
    if rotary_dim is not None:
        rope_parameters["partial_rotary_factor"] = rotary_dim / head_dim
    config = LlamaConfig(hidden_size=2 * head_dim, num_attention_heads=2, head_dim=head_dim,
                         max_position_embeddings=max_position_embeddings,
                         rope_parameters=rope_parameters)
    inv_freq, attention_factor = ROPE_INIT_FUNCTIONS[rope_type](config, "cpu", seq_len=seq_len)
    return inv_freq.double(), attention_factor


def _rope(scaling, *, base: float, rotary_dim: int | None = None) -> RotaryEncoding:
    return RotaryEncoding(HEAD_DIM, base=base, rotary_dim=rotary_dim, scaling=scaling)


ROTARY_DIMS = [None, 32]


@pytest.mark.parametrize("rotary_dim", ROTARY_DIMS)
@pytest.mark.parametrize("factor", [1.0, 2.0, 8.0, 32.0])
def test_linear_scaling_matches_transformers(factor, rotary_dim):
    rope = _rope(LinearScaling(factor), base=10000.0, rotary_dim=rotary_dim)
    inv_freq, attention = hf_rope("linear", base=10000.0, rotary_dim=rotary_dim, factor=factor)
    torch.testing.assert_close(rope.inv_freq.double(), inv_freq, rtol=RTOL, atol=0)
    torch.testing.assert_close(rope.inv_freq64, inv_freq, rtol=RTOL, atol=0)
    assert rope.attention_scaling == attention == 1.0


@pytest.mark.parametrize("rotary_dim", ROTARY_DIMS)
@pytest.mark.parametrize("factor", [2.0, 4.0])
@pytest.mark.parametrize("seq_len", [1, 1000, 2048, 2049, 3000, 8192, 100_000])
def test_dynamic_ntk_matches_transformers_at_each_length(factor, seq_len, rotary_dim):
    original = 2048
    scaling = DynamicNTKScaling(factor, original)
    rope = _rope(scaling, base=10000.0, rotary_dim=rotary_dim)
    # transformers' dynamic NTK uses max_position_embeddings as the original length.
    inv_freq, attention = hf_rope("dynamic", base=10000.0, rotary_dim=rotary_dim,
                                  max_position_embeddings=original, seq_len=seq_len,
                                  factor=factor)
    ours = scaling.dynamic_inv_freq(rope.rotary_dim, 10000.0, torch.tensor(seq_len))
    torch.testing.assert_close(ours, inv_freq, rtol=RTOL, atol=0)
    assert rope.attention_scaling == attention == 1.0
    # At init (no length yet) both give the unscaled frequencies.
    unscaled, _ = hf_rope("dynamic", base=10000.0, rotary_dim=rotary_dim,
                          max_position_embeddings=original, factor=factor)
    torch.testing.assert_close(rope.inv_freq64, unscaled, rtol=RTOL, atol=0)


@pytest.mark.parametrize("seq_len", [512, 2048, 6000])
def test_dynamic_ntk_rotation_uses_the_current_length(seq_len):
    """rotation(arange(L)) uses seq_len = max(position) + 1, as transformers' forward does."""
    scaling = DynamicNTKScaling(4.0, 2048)
    rope = _rope(scaling, base=10000.0)
    pos = torch.arange(seq_len)
    inv_freq, _ = hf_rope("dynamic", base=10000.0, max_position_embeddings=2048,
                          seq_len=seq_len, factor=4.0)
    theta = ref_angles(pos, inv_freq)
    rotation = rope.rotation(pos)
    # inv_freq agrees to 1e-6 relative, so angles agree to ~seq_len * 1e-6 rad at worst.
    torch.testing.assert_close(rotation.cos[0, 0].double(), theta.cos(), atol=seq_len * 2e-6,
                               rtol=0)
    if seq_len > 2048:  # past the original context the frequencies really change
        plain = ref_angles(pos, ref_inv_freq(HEAD_DIM)).cos()
        assert (rotation.cos[0, 0].double() - plain).abs().max() > 0.1


YARN_CASES = [
    # factor, original, base, beta_fast, beta_slow, mscale, mscale_all_dim
    (2.0, 4096, 10000.0, 32, 1, None, None),
    (4.0, 2048, 10000.0, 32, 1, None, None),
    (16.0, 4096, 500000.0, 32, 1, None, None),
    (40.0, 4096, 10000.0, 32, 1, 1.0, 1.0),      # DeepSeek-V3
    (40.0, 4096, 10000.0, 32, 1, 0.707, 0.707),  # DeepSeek-V2
    (40.0, 4096, 10000.0, 32, 1, 1.0, 0.707),    # a ratio != 1
    (8.0, 4096, 10000.0, 32, 1, 0.707, None),    # mscale alone is ignored (as in HF)
    (4.0, 8192, 1000000.0, 16, 2, None, None),
]


@pytest.mark.parametrize("rotary_dim", ROTARY_DIMS)
@pytest.mark.parametrize(
    ("factor", "original", "base", "beta_fast", "beta_slow", "mscale", "mscale_all_dim"),
    YARN_CASES)
def test_yarn_matches_transformers(factor, original, base, beta_fast, beta_slow, mscale,
                                   mscale_all_dim, rotary_dim):
    scaling = YarnScaling(factor, original, beta_fast=beta_fast, beta_slow=beta_slow,
                          mscale=mscale, mscale_all_dim=mscale_all_dim)
    rope = _rope(scaling, base=base, rotary_dim=rotary_dim)
    params = {"factor": factor, "original_max_position_embeddings": original,
              "beta_fast": beta_fast, "beta_slow": beta_slow}
    params.update({k: v for k, v in (("mscale", mscale), ("mscale_all_dim", mscale_all_dim))
                   if v is not None})
    inv_freq, attention = hf_rope("yarn", base=base, rotary_dim=rotary_dim,
                                  max_position_embeddings=int(factor * original), **params)
    torch.testing.assert_close(rope.inv_freq64, inv_freq, rtol=RTOL, atol=0)
    assert rope.attention_scaling == pytest.approx(attention, rel=1e-12)


def test_yarn_attention_scaling_hand_values():
    # 0.1 ln(s) + 1, and the DeepSeek ratio (0.1 m ln s + 1) / (0.1 m_all ln s + 1).
    assert YarnScaling(4.0, 2048).attention_scaling == pytest.approx(0.1 * math.log(4) + 1)
    assert YarnScaling(40.0, 4096, mscale=1.0, mscale_all_dim=1.0).attention_scaling == 1.0
    ratio = (0.1 * math.log(40) + 1) / (0.1 * 0.707 * math.log(40) + 1)
    assert YarnScaling(40.0, 4096, mscale=1.0, mscale_all_dim=0.707).attention_scaling \
        == pytest.approx(ratio)
    assert YarnScaling(1.0, 2048).attention_scaling == 1.0


def test_yarn_attention_scaling_is_folded_into_cos_and_sin():
    """As transformers' LlamaRotaryEmbedding: cos, sin multiplied by attention_factor."""
    from transformers import LlamaConfig
    from transformers.models.llama.modeling_llama import LlamaRotaryEmbedding

    config = LlamaConfig(hidden_size=128, num_attention_heads=2, head_dim=64,
                         max_position_embeddings=8192,
                         rope_parameters={"rope_type": "yarn", "rope_theta": 10000.0,
                                          "factor": 4.0,
                                          "original_max_position_embeddings": 2048})
    pos = torch.arange(0, 4000, 7)
    cos, sin = LlamaRotaryEmbedding(config)(torch.zeros(1, dtype=torch.float32), pos[None])
    rotation = _rope(YarnScaling(4.0, 2048), base=10000.0).rotation(pos)
    # HF forms p * inv_freq in float32: ~4000 * 6e-8 rad; scaled cos/sin agree to ~3e-4.
    torch.testing.assert_close(rotation.cos[0, 0], cos[0, :, :32], atol=1e-3, rtol=0)
    torch.testing.assert_close(rotation.sin[0, 0], sin[0, :, :32], atol=1e-3, rtol=0)
    assert rotation.cos.abs().max() > 1.1  # 0.1 ln 4 + 1 = 1.139


LLAMA3_CASES = [
    # factor, original, base, low, high
    (8.0, 8192, 500000.0, 1.0, 4.0),   # Llama 3.1
    (32.0, 8192, 500000.0, 1.0, 4.0),  # Llama 3.2
    (4.0, 2048, 10000.0, 2.0, 8.0),
]


@pytest.mark.parametrize("rotary_dim", ROTARY_DIMS)
@pytest.mark.parametrize(("factor", "original", "base", "low", "high"), LLAMA3_CASES)
def test_llama3_matches_transformers(factor, original, base, low, high, rotary_dim):
    rope = _rope(Llama3Scaling(factor, original, low_freq_factor=low, high_freq_factor=high),
                 base=base, rotary_dim=rotary_dim)
    inv_freq, attention = hf_rope("llama3", base=base, rotary_dim=rotary_dim,
                                  max_position_embeddings=int(factor * original),
                                  factor=factor, original_max_position_embeddings=original,
                                  low_freq_factor=low, high_freq_factor=high)
    torch.testing.assert_close(rope.inv_freq64, inv_freq, rtol=RTOL, atol=0)
    assert rope.attention_scaling == attention == 1.0
    # The three bands all occur for these parameters, so each branch is exercised.
    plain = ref_inv_freq(rope.rotary_dim, base)
    ratio = plain / rope.inv_freq64
    assert (ratio - 1).abs().min() < 1e-9 and (ratio - factor).abs().min() < 1e-6
    assert ((ratio > 1 + 1e-6) & (ratio < factor - 1e-6)).any()


@pytest.mark.parametrize("rotary_dim", [64, 32, 16])
@pytest.mark.parametrize("factor", [2.0, 8.0])
def test_ntk_scaling_equals_its_formula(factor, rotary_dim):
    base = 10000.0
    rope = _rope(NTKScaling(factor), base=base, rotary_dim=rotary_dim)
    d = rotary_dim
    expected = ref_inv_freq(d, base * factor ** (d / (d - 2)))
    torch.testing.assert_close(rope.inv_freq64, expected, rtol=1e-12, atol=0)
    # NTK-aware property: the highest frequency is kept, the lowest one divided by factor.
    plain = ref_inv_freq(d, base)
    assert rope.inv_freq64[0] == pytest.approx(plain[0].item(), rel=1e-12)
    assert rope.inv_freq64[-1] == pytest.approx(plain[-1].item() / factor, rel=1e-12)


def test_inv_freq_is_float32_view_of_float64_buffer():
    rope = _rope(YarnScaling(4.0, 2048), base=10000.0)
    assert rope.inv_freq.dtype == torch.float32 and rope.inv_freq64.dtype == torch.float64
    assert torch.equal(rope.inv_freq, rope.inv_freq64.float())
