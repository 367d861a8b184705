"""LongRoPE (Phi-3 "su"), YaRN's truncate/attention_factor options and "proportional" RoPE,
value by value against Hugging Face transformers 5.24.

References: ``ROPE_INIT_FUNCTIONS["longrope"|"yarn"|"proportional"]`` of
``transformers.modeling_rope_utils`` (inv_freq, attention factor), and the models' rotary
modules for what the frequencies become in a forward: ``Phi3RotaryEmbedding`` (LongRoPE's
length switch), ``GptOssRotaryEmbedding`` (YaRN, truncate=False), ``Gemma4TextRotaryEmbedding``
(proportional). Configs are built here, tiny; nothing is downloaded.

transformers computes in float32, posenc in float64: inv_freq agree to rtol=1e-6 (float32
carries ~6e-8). cos/sin agree to ~L * 1e-6 at position L (HF forms p * inv_freq in float32).
"""

from __future__ import annotations

import math

import numpy as np
import pytest
import torch
from core_refs import ref_inv_freq
from posenc.core import RotaryEncoding, YarnScaling, apply_rotation
from posenc.core.rope import DynamicNTKScaling, LongRopeScaling, ProportionalScaling
from torch.utils._python_dispatch import TorchDispatchMode
from torch.utils._pytree import tree_flatten

RTOL = 1e-6
NAN, INF = float("nan"), float("inf")


def short_factors(pairs: int) -> list[float]:
    return [1.0 + 0.02 * i for i in range(pairs)]


def long_factors(pairs: int) -> list[float]:
    return [1.0 + 2.0 * i for i in range(pairs)]


# ---- LongRoPE ---------------------------------------------------------------------------------

def phi3_config(*, head_dim: int = 16, partial: float = 1.0, original: int = 64,
                max_positions: int = 1024, base: float = 10000.0, **rope_extra):
    """A one-layer Phi3Config with LongRoPE factors for its rotary pairs."""
    from transformers import Phi3Config

    pairs = int(head_dim * partial) // 2
    rope_parameters = {"rope_type": "longrope", "rope_theta": base,
                       "partial_rotary_factor": partial, "short_factor": short_factors(pairs),
                       "long_factor": long_factors(pairs), **rope_extra}
    return Phi3Config(hidden_size=2 * head_dim, num_attention_heads=2, num_key_value_heads=2,
                      num_hidden_layers=1, intermediate_size=8, vocab_size=16,
                      max_position_embeddings=max_positions,
                      original_max_position_embeddings=original,
                      rope_parameters=rope_parameters)


def longrope(*, head_dim: int = 16, partial: float = 1.0, original: int = 64,
             base: float = 10000.0, **kwargs) -> RotaryEncoding:
    rotary_dim = int(head_dim * partial)
    scaling = LongRopeScaling(short_factors(rotary_dim // 2), long_factors(rotary_dim // 2),
                              original, **kwargs)
    return RotaryEncoding(head_dim, base=base, rotary_dim=rotary_dim, scaling=scaling)


# (posenc keyword arguments, the same in Hugging Face's config: max_position_embeddings and the
# optional rope_parameters keys)
ATTENTION_CASES = {
    "ratio of max_positions": ({"max_positions": 1024}, {"max_positions": 1024}),
    "factor": ({"factor": 8.0}, {"max_positions": 64, "factor": 8.0}),
    "explicit attention_factor": ({"attention_factor": 1.3, "max_positions": 1024},
                                  {"max_positions": 1024, "attention_factor": 1.3}),
    "no extension": ({"max_positions": 64}, {"max_positions": 64}),
}


@pytest.mark.parametrize("base", [10000.0, 500000.0])
@pytest.mark.parametrize(("head_dim", "partial"), [(16, 1.0), (32, 0.75)])  # Phi-3, Phi-4-mini
@pytest.mark.parametrize("case", list(ATTENTION_CASES))
def test_longrope_inv_freq_and_attention_match_transformers(case, head_dim, partial, base):
    from transformers.modeling_rope_utils import ROPE_INIT_FUNCTIONS

    ours, theirs = ATTENTION_CASES[case]
    theirs = dict(theirs)
    config = phi3_config(head_dim=head_dim, partial=partial, base=base,
                         max_positions=theirs.pop("max_positions"), **theirs)
    rope = longrope(head_dim=head_dim, partial=partial, base=base, **ours)
    scaling = rope.scaling
    for seq_len, expected_set in [(None, "short"), (1, "short"), (64, "short"), (65, "long"),
                                  (5000, "long")]:
        inv_freq, attention = ROPE_INIT_FUNCTIONS["longrope"](config, "cpu", seq_len=seq_len)
        inv_freq = inv_freq.double()
        if seq_len is None:
            mine = rope.inv_freq64
        else:
            mine = scaling.dynamic_inv_freq(rope.rotary_dim, base, torch.tensor(seq_len))
        torch.testing.assert_close(mine, inv_freq, rtol=RTOL, atol=0)
        assert scaling.attention_scaling == pytest.approx(attention, rel=1e-12)
        # The factor sets really differ, so the comparison tells which one HF picked.
        assert (expected_set == "long") == bool(
            (inv_freq - rope.inv_freq64).abs().max() > 1e-3 * inv_freq.max())


def test_longrope_attention_factor_hand_values():
    # sqrt(1 + ln(factor) / ln(original)); Phi-3-mini-128k: 131072 / 4096 = 32.
    scaling = LongRopeScaling([1.0], [2.0], 4096, max_positions=131072)
    # ln 32 / ln 4096 = 5 / 12 exactly.
    assert scaling.attention_scaling == pytest.approx(math.sqrt(17 / 12), rel=1e-12)
    assert LongRopeScaling([1.0], [2.0], 4096, factor=1.0).attention_scaling == 1.0
    assert LongRopeScaling([1.0], [2.0], 4096, attention_factor=0.9).attention_scaling == 0.9


@pytest.mark.parametrize(("head_dim", "partial"), [(16, 1.0), (32, 0.75)])
@pytest.mark.parametrize("length", [1, 63, 64, 65, 320])
def test_longrope_switches_at_the_length_phi3_switches(length, head_dim, partial):
    """Phi3RotaryEmbedding: seq_len = max(position_ids) + 1; long factors iff > original."""
    from transformers.models.phi3.modeling_phi3 import Phi3RotaryEmbedding

    hf = Phi3RotaryEmbedding(phi3_config(head_dim=head_dim, partial=partial))
    rope = longrope(head_dim=head_dim, partial=partial, max_positions=1024)
    pos = torch.arange(length)
    cos, sin = hf(torch.zeros(1), pos[None])
    half = rope.rotary_dim // 2
    rotation = rope.rotation(pos)
    atol = 2e-6 * length + 1e-6
    torch.testing.assert_close(rotation.cos[0, 0], cos[0, :, :half], atol=atol, rtol=0)
    torch.testing.assert_close(rotation.sin[0, 0], sin[0, :, :half], atol=atol, rtol=0)
    # The set HF switched to (its inv_freq buffer after the forward) is the one posenc used.
    chosen = rope.long_inv_freq64 if length > 64 else rope.inv_freq64
    torch.testing.assert_close(hf.inv_freq.double(), chosen, rtol=RTOL, atol=0)
    if length > 8:  # long enough for the two sets' angles to part
        other = rope.inv_freq64 if length > 64 else rope.long_inv_freq64
        theta = pos.double()[:, None] * other
        assert (rotation.cos[0, 0].double() - rope.attention_scaling * theta.cos()).abs().max() \
            > 0.1


def test_longrope_batch_switches_on_its_longest_row_as_phi3():
    """One row past the original context sends the whole batch to the long factors."""
    from transformers.models.phi3.modeling_phi3 import Phi3RotaryEmbedding

    hf = Phi3RotaryEmbedding(phi3_config())
    rope = longrope(max_positions=1024)
    pos = torch.stack((torch.arange(8), torch.arange(8) + 57))  # max 64: seq_len 65 > 64
    cos, sin = hf(torch.zeros(1), pos)
    rotation = rope.rotation(pos)
    torch.testing.assert_close(rotation.cos[:, 0], cos[..., :8], atol=2e-4, rtol=0)
    torch.testing.assert_close(rotation.sin[:, 0], sin[..., :8], atol=2e-4, rtol=0)
    short = longrope(max_positions=1024).rotation(torch.arange(8))
    assert (rotation.cos[0] - short.cos[0]).abs().max() > 0.1


@pytest.mark.parametrize("partial", [1.0, 0.75])
def test_longrope_rotate_matches_phi3_apply_rotary_pos_emb(partial):
    from transformers.models.phi3.modeling_phi3 import Phi3RotaryEmbedding, apply_rotary_pos_emb

    hf = Phi3RotaryEmbedding(phi3_config(head_dim=32, partial=partial))
    rope = longrope(head_dim=32, partial=partial, max_positions=1024)
    q = torch.randn(2, 3, 100, 32, generator=torch.Generator().manual_seed(0))
    pos = torch.arange(100)
    cos, sin = hf(q, pos[None])
    expected, _ = apply_rotary_pos_emb(q, q, cos, sin)
    torch.testing.assert_close(rope.rotate(q, pos), expected, atol=1e-3, rtol=0)


def test_longrope_module_and_standalone_switch_agree():
    """RotaryEncoding keeps both sets as buffers; scaling.dynamic_inv_freq builds them."""
    rope = longrope(max_positions=1024)
    for length in (10, 64, 65, 1000):
        pos = torch.arange(length)
        inv_freq = rope.scaling.dynamic_inv_freq(16, 10000.0, torch.tensor(length))
        theta = torch.remainder(pos.double()[:, None] * inv_freq, 2 * math.pi)
        torch.testing.assert_close(rope.rotation(pos).cos[0, 0],
                                   (rope.attention_scaling * theta.cos()).float(), atol=1e-6,
                                   rtol=0)


def test_longrope_buffers_stay_float64_and_survive_meta_init():
    rope = longrope(max_positions=1024).to(torch.bfloat16)
    assert rope.inv_freq64.dtype == rope.long_inv_freq64.dtype == torch.float64
    assert "long_inv_freq64" not in rope.state_dict()  # derived from the arguments
    with torch.device("meta"):
        meta = longrope(max_positions=1024)
    assert meta.long_inv_freq64.is_meta
    meta.to_empty(device="cpu")
    pos = torch.arange(200)
    torch.testing.assert_close(meta.rotation(pos).cos, longrope(max_positions=1024)
                               .rotation(pos).cos, rtol=0, atol=0)


class _DevicesMade(TorchDispatchMode):
    """Records the device of every tensor an op makes."""

    def __init__(self) -> None:
        super().__init__()
        self.devices: set[str] = set()

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        out = func(*args, **(kwargs or {}))
        self.devices |= {t.device.type for t in tree_flatten(out)[0] if isinstance(t, torch.Tensor)}
        return out


def test_dynamic_rotations_make_no_cpu_tensor_on_another_device():
    """A CPU tensor copied to a GPU in each forward waits for the GPU (a host sync); the meta
    device stands in for the GPU here. LongRoPE picks a buffer; dynamic NTK builds its
    frequencies on the length's device (its arange was made on the CPU)."""
    with torch.device("meta"):
        rope = longrope(max_positions=1024)
        pos = torch.arange(100)
    with _DevicesMade() as made:
        rope.rotation(pos)
        DynamicNTKScaling(4.0, 64).dynamic_inv_freq(16, 1e4, torch.tensor(500, device="meta"))
    assert made.devices == {"meta"}


def test_longrope_factor_sequences_are_copied_into_tuples():
    short = [1.0, 1.5]
    scaling = LongRopeScaling(short, torch.tensor([2.0, 3.0]), 64, factor=4.0)
    short[0] = 100.0  # the caller's list is not the scaling's
    assert scaling.short_factor == (1.0, 1.5) and scaling.long_factor == (2.0, 3.0)
    assert LongRopeScaling(np.array([1.0, 1.5]), (2, 3), 64, factor=4.0) == scaling
    hash(scaling)


LONGROPE_BAD = {
    "short nan": (dict(short_factor=[1.0, NAN]), ValueError,
                  r"^short_factor\[1\] must be a finite number > 0, got nan"),
    "long zero": (dict(long_factor=[0.0, 1.0]), ValueError,
                  r"^long_factor\[0\] must be a finite number > 0, got 0.0"),
    "long negative": (dict(long_factor=[1.0, -2.0]), ValueError,
                      r"^long_factor\[1\] must be a finite number > 0, got -2.0"),
    "short inf": (dict(short_factor=[INF, 1.0]), ValueError, r"^short_factor\[0\] .*got inf"),
    "short string item": (dict(short_factor=[1.0, "2"]), TypeError,
                          r"^short_factor\[1\] must be a number, got str"),
    "short a string": (dict(short_factor="1.0"), TypeError,
                       r"^short_factor must be a sequence of numbers .*got str"),
    "long a number": (dict(long_factor=2.0), TypeError,
                      r"^long_factor must be a sequence of numbers .*got float"),
    "short empty": (dict(short_factor=[]), ValueError, r"^short_factor must hold one factor"),
    "long 2-D": (dict(long_factor=torch.ones(2, 1)), ValueError,
                 r"^long_factor must be 1-D .*got shape \(2, 1\)"),
    "lengths differ": (dict(long_factor=[1.0, 2.0, 3.0]), ValueError,
                       r"same length .*got 2 and 3"),
    "no factor": (dict(factor=None), ValueError, r"needs factor or max_positions"),
    "factor < 1": (dict(factor=0.5), ValueError, r"^factor must be a finite number >= 1"),
    "factor nan": (dict(factor=NAN), ValueError, r"^factor must be a finite number >= 1, got nan"),
    "max below original": (dict(factor=None, max_positions=32), ValueError,
                           r"^max_positions must be >= original_max_positions=64.*got 32"),
    "factor disagrees": (dict(factor=4.0, max_positions=1024), ValueError,
                         r"factor=4.0 disagrees with max_positions / original_max_positions"),
    "attention 0": (dict(attention_factor=0.0), ValueError,
                    r"^attention_factor must be a finite number > 0, got 0.0"),
    "attention nan": (dict(attention_factor=NAN), ValueError, r"^attention_factor .*got nan"),
    "original 0": (dict(original_max_positions=0), ValueError,
                   r"^original_max_positions must be >= 1, got 0"),
    "original 1": (dict(original_max_positions=1), ValueError,
                   r"original_max_positions must be >= 2 for the default attention factor"),
}


@pytest.mark.parametrize("case", list(LONGROPE_BAD))
def test_longrope_bad_arguments_raise_naming_them(case):
    kwargs, error, message = LONGROPE_BAD[case]
    arguments = dict(short_factor=[1.0, 1.1], long_factor=[2.0, 4.0], original_max_positions=64,
                     factor=8.0)
    arguments.update(kwargs)
    with pytest.raises(error, match=message):
        LongRopeScaling(**arguments)


def test_longrope_factor_lists_must_fit_the_rotary_pairs():
    scaling = LongRopeScaling(short_factors(8), long_factors(8), 64, factor=16.0)
    with pytest.raises(ValueError, match=r"rotary_dim // 2 = 16 values \(one per rotary pair\), "
                                         r"got 8: the factors were made for rotary_dim=16"):
        RotaryEncoding(32, scaling=scaling)
    RotaryEncoding(32, rotary_dim=16, scaling=scaling)  # the partial rotary they fit


# ---- YaRN: truncate and attention_factor ------------------------------------------------------

def hf_yarn(*, base: float, head_dim: int = 64, rotary_dim: int | None = None, **params):
    """(inv_freq float64, attention_factor) of transformers' ``_compute_yarn_parameters``."""
    from transformers import LlamaConfig
    from transformers.modeling_rope_utils import _compute_yarn_parameters

    rope_parameters = {"rope_type": "yarn", "rope_theta": base, **params}
    if rotary_dim is not None:
        rope_parameters["partial_rotary_factor"] = rotary_dim / head_dim
    config = LlamaConfig(hidden_size=2 * head_dim, num_attention_heads=2, head_dim=head_dim,
                         max_position_embeddings=int(params["factor"]
                                                     * params["original_max_position_embeddings"]),
                         rope_parameters=rope_parameters)
    inv_freq, attention_factor = _compute_yarn_parameters(config, "cpu")
    return inv_freq.double(), attention_factor


YARN_UNTRUNCATED = [
    # factor, original, base, beta_fast, beta_slow
    (32.0, 4096, 150000.0, 32.0, 1.0),  # gpt-oss
    (4.0, 2048, 10000.0, 32.0, 1.0),
    (16.0, 8192, 1000000.0, 16.0, 2.0),
    (2.0, 256, 10000.0, 8.0, 0.5),
]


@pytest.mark.parametrize("rotary_dim", [None, 32])
@pytest.mark.parametrize(("factor", "original", "base", "beta_fast", "beta_slow"),
                         YARN_UNTRUNCATED)
def test_yarn_without_truncation_matches_transformers(factor, original, base, beta_fast,
                                                      beta_slow, rotary_dim):
    params = dict(factor=factor, original_max_position_embeddings=original,
                  beta_fast=beta_fast, beta_slow=beta_slow)
    inv_freq, attention = hf_yarn(base=base, rotary_dim=rotary_dim, truncate=False, **params)
    scaling = YarnScaling(factor, original, beta_fast=beta_fast, beta_slow=beta_slow,
                          truncate=False)
    rope = RotaryEncoding(64, base=base, rotary_dim=rotary_dim, scaling=scaling)
    torch.testing.assert_close(rope.inv_freq64, inv_freq, rtol=RTOL, atol=0)
    assert rope.attention_scaling == pytest.approx(attention, rel=1e-12)
    # truncate=True moves the ramp's ends to whole pairs: a different, also HF-exact, result.
    truncated, _ = hf_yarn(base=base, rotary_dim=rotary_dim, **params)
    assert (truncated - inv_freq).abs().max() > 1e-3 * inv_freq[-1]
    torch.testing.assert_close(
        RotaryEncoding(64, base=base, rotary_dim=rotary_dim,
                       scaling=YarnScaling(factor, original, beta_fast=beta_fast,
                                           beta_slow=beta_slow)).inv_freq64,
        truncated, rtol=RTOL, atol=0)


def test_yarn_matches_gpt_oss_rotary_embedding():
    """gpt-oss's own config (YaRN 32x over 4096, truncate=False, theta 150000, head_dim 64)."""
    from transformers.models.gpt_oss.configuration_gpt_oss import GptOssConfig
    from transformers.models.gpt_oss.modeling_gpt_oss import GptOssRotaryEmbedding

    config = GptOssConfig(num_hidden_layers=2)
    hf = GptOssRotaryEmbedding(config)
    params = config.rope_parameters
    assert params["truncate"] is False
    rope = RotaryEncoding(config.head_dim, base=params["rope_theta"],
                          scaling=YarnScaling(params["factor"],
                                              params["original_max_position_embeddings"],
                                              beta_fast=params["beta_fast"],
                                              beta_slow=params["beta_slow"], truncate=False))
    torch.testing.assert_close(rope.inv_freq64, hf.inv_freq.double(), rtol=RTOL, atol=0)
    assert rope.attention_scaling == pytest.approx(hf.attention_scaling, rel=1e-12)
    pos = torch.arange(0, 3000, 7)
    cos, sin = hf(torch.zeros(1), pos[None])
    rotation = rope.rotation(pos)
    torch.testing.assert_close(rotation.cos[0, 0], cos[0], atol=1e-3, rtol=0)
    torch.testing.assert_close(rotation.sin[0, 0], sin[0], atol=1e-3, rtol=0)


@pytest.mark.parametrize(("mscale", "mscale_all_dim"), [(None, None), (1.0, 0.707)])
@pytest.mark.parametrize("attention_factor", [0.5, 1.0, 1.7])
def test_yarn_explicit_attention_factor_matches_transformers(attention_factor, mscale,
                                                             mscale_all_dim):
    params = dict(factor=8.0, original_max_position_embeddings=2048,
                  attention_factor=attention_factor)
    params.update({k: v for k, v in (("mscale", mscale), ("mscale_all_dim", mscale_all_dim))
                   if v is not None})
    inv_freq, attention = hf_yarn(base=10000.0, **params)
    scaling = YarnScaling(8.0, 2048, mscale=mscale, mscale_all_dim=mscale_all_dim,
                          attention_factor=attention_factor)
    rope = RotaryEncoding(64, scaling=scaling)
    assert attention == attention_factor and rope.attention_scaling == attention_factor
    torch.testing.assert_close(rope.inv_freq64, inv_freq, rtol=RTOL, atol=0)
    pos = torch.arange(50)
    theta = torch.remainder(pos.double()[:, None] * rope.inv_freq64, 2 * math.pi)
    torch.testing.assert_close(rope.rotation(pos).cos[0, 0],
                               (attention_factor * theta.cos()).float(), atol=1e-6, rtol=0)


@pytest.mark.parametrize(("kwargs", "error", "message"), [
    (dict(truncate="no"), TypeError, r"^truncate must be a bool \(True or False\), got str"),
    (dict(truncate=0), TypeError, r"^truncate must be a bool"),
    (dict(attention_factor=0.0), ValueError, r"^attention_factor must be a finite number > 0"),
    (dict(attention_factor=-1.0), ValueError, r"^attention_factor .*got -1.0"),
    (dict(attention_factor=NAN), ValueError, r"^attention_factor .*got nan"),
    (dict(attention_factor="1"), TypeError, r"^attention_factor must be a number, got str"),
])
def test_yarn_bad_new_options_raise_naming_them(kwargs, error, message):
    with pytest.raises(error, match=message):
        YarnScaling(4.0, 2048, **kwargs)


# ---- proportional RoPE ------------------------------------------------------------------------

def hf_proportional(*, head_dim: int, base: float, partial: float, factor: float = 1.0):
    from transformers import LlamaConfig
    from transformers.modeling_rope_utils import ROPE_INIT_FUNCTIONS

    config = LlamaConfig(hidden_size=2 * head_dim, num_attention_heads=2, head_dim=head_dim,
                         rope_parameters={"rope_type": "proportional", "rope_theta": base,
                                          "partial_rotary_factor": partial, "factor": factor})
    inv_freq, attention = ROPE_INIT_FUNCTIONS["proportional"](config, "cpu")
    return inv_freq.double(), attention


@pytest.mark.parametrize("factor", [1.0, 4.0])
@pytest.mark.parametrize("partial", [0.0, 0.25, 0.3, 0.5, 1.0])
@pytest.mark.parametrize(("head_dim", "base"), [(64, 10000.0), (512, 1000000.0)])
def test_proportional_inv_freq_matches_transformers(head_dim, base, partial, factor):
    inv_freq, attention = hf_proportional(head_dim=head_dim, base=base, partial=partial,
                                          factor=factor)
    rope = RotaryEncoding(head_dim, base=base, scaling=ProportionalScaling(partial, factor))
    torch.testing.assert_close(rope.inv_freq64, inv_freq, rtol=RTOL, atol=0)
    assert rope.attention_scaling == attention == 1.0
    turning = int(partial * head_dim // 2)
    assert int((rope.inv_freq64 > 0).sum()) == turning


def test_proportional_rotation_matches_gemma4_global_layers():
    """Gemma 4's full-attention layers: proportional, partial_rotary_factor 0.25, theta 1e6."""
    from transformers.models.gemma4.configuration_gemma4 import Gemma4TextConfig
    from transformers.models.gemma4.modeling_gemma4 import (
        Gemma4TextRotaryEmbedding,
        apply_rotary_pos_emb,
    )

    config = Gemma4TextConfig(hidden_size=64, num_attention_heads=2, num_key_value_heads=1,
                              head_dim=32, global_head_dim=64, num_hidden_layers=2,
                              layer_types=["sliding_attention", "full_attention"],
                              intermediate_size=64, vocab_size=100)
    params = config.rope_parameters["full_attention"]
    hf = Gemma4TextRotaryEmbedding(config)
    rope = RotaryEncoding(64, base=params["rope_theta"],
                          scaling=ProportionalScaling(params["partial_rotary_factor"]))
    q = torch.randn(1, 2, 300, 64, generator=torch.Generator().manual_seed(1))
    pos = torch.arange(300)
    cos, sin = hf(q, pos[None], layer_type="full_attention")
    torch.testing.assert_close(rope.rotate(q, pos), apply_rotary_pos_emb(q, cos, sin),
                               atol=1e-4, rtol=0)
    # Pairs past the first 8 pass through; the first 8 turn.
    rotated = rope.rotate(q, pos)
    assert torch.equal(rotated[..., 8:32], q[..., 8:32])
    assert torch.equal(rotated[..., 40:], q[..., 40:])
    assert (rotated[..., 1:, :8] - q[..., 1:, :8]).abs().max() > 0.1


def test_proportional_equals_partial_rotary_only_after_permuting_channels():
    """What posenc could do before: rotary_dim = 2k with base ** (2k / head_dim) turns the same
    frequencies, but on channels [0, 2k) instead of [0, k) and [d/2, d/2 + k): the same
    scores need q and k channels permuted (a checkpoint's q/k weights). The same rotary_dim
    with the model's base turns other frequencies."""
    head_dim, base, partial = 64, 1e6, 0.25
    k = int(partial * head_dim // 2)
    proportional = RotaryEncoding(head_dim, base=base, scaling=ProportionalScaling(partial))
    partial_rope = RotaryEncoding(head_dim, base=base ** (2 * k / head_dim), rotary_dim=2 * k)
    torch.testing.assert_close(partial_rope.inv_freq64, proportional.inv_freq64[:k], rtol=1e-12,
                               atol=0)
    half = head_dim // 2
    turning = torch.cat((torch.arange(k), half + torch.arange(k)))
    rest = torch.tensor([c for c in range(head_dim) if c not in set(turning.tolist())])
    perm = torch.cat((turning, rest))
    g = torch.Generator().manual_seed(2)
    q, key = torch.randn(2, 1, 2, 40, head_dim, generator=g, dtype=torch.float64)
    pos = torch.arange(40) * 37

    def scores(rope, perm=None):
        qq, kk = (q, key) if perm is None else (q[..., perm], key[..., perm])
        return rope.rotate(qq, pos) @ rope.rotate(kk, pos).transpose(-1, -2)

    torch.testing.assert_close(scores(partial_rope, perm), scores(proportional), rtol=1e-5,
                               atol=1e-5)
    assert (scores(partial_rope) - scores(proportional)).abs().max() > 0.1
    plain_partial = RotaryEncoding(head_dim, base=base, rotary_dim=2 * k)
    assert not torch.allclose(plain_partial.inv_freq64, proportional.inv_freq64[:k])
    torch.testing.assert_close(proportional.inv_freq64[:k], ref_inv_freq(head_dim, base)[:k],
                               rtol=1e-12, atol=0)


def test_proportional_in_the_interleaved_layout_turns_the_first_pairs():
    rope = RotaryEncoding(16, layout="interleaved", scaling=ProportionalScaling(0.5))
    x = torch.randn(1, 1, 5, 16, generator=torch.Generator().manual_seed(3))
    out = apply_rotation(x, rope.rotation(torch.arange(5) + 3))
    assert torch.equal(out[..., 8:], x[..., 8:])
    assert (out[..., :8] - x[..., :8]).abs().max() > 0.1


@pytest.mark.parametrize(("kwargs", "error", "message"), [
    (dict(partial_rotary_factor=-0.1), ValueError, r"^partial_rotary_factor must be a finite "
                                                   r"number >= 0, got -0.1"),
    (dict(partial_rotary_factor=1.5), ValueError, r"^partial_rotary_factor must be a finite "
                                                  r"number >= 0 and <= 1 .*got 1.5"),
    (dict(partial_rotary_factor=NAN), ValueError, r"^partial_rotary_factor .*got nan"),
    (dict(partial_rotary_factor="0.25"), TypeError, r"^partial_rotary_factor must be a number"),
    (dict(partial_rotary_factor=0.25, factor=0.5), ValueError, r"^factor must be a finite "
                                                                r"number >= 1, got 0.5"),
])
def test_proportional_bad_arguments_raise_naming_them(kwargs, error, message):
    with pytest.raises(error, match=message):
        ProportionalScaling(**kwargs)
