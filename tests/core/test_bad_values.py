"""Constructor values that used to be accepted (inf base, inf factor, string flags, T5 settings
with negative bucket ids, ...) now raise naming the argument (issue 10)."""

from __future__ import annotations

import itertools
import math

import posenc.core as core
import pytest
import torch
from posenc.core.additive import sinusoidal_encoding, sinusoidal_inv_freq
from posenc.core.bias import t5_relative_bucket
from posenc.core.encoding import angles
from posenc.core.positions import relative_positions
from posenc.core.rope import rope_inv_freq, rotary_layout_permutation

NAN, INF = math.nan, math.inf

BASE_USERS = {
    "RotaryEncoding": lambda base: core.RotaryEncoding(8, base=base),
    "SinusoidalEncoding": lambda base: core.SinusoidalEncoding(8, base=base),
    "sinusoidal_inv_freq": lambda base: sinusoidal_inv_freq(8, base),
    "rope_inv_freq": lambda base: rope_inv_freq(8, base),
}


@pytest.mark.parametrize("base", [INF, -INF, NAN, 0, -10000.0, 1, 0.5, 10**400])
@pytest.mark.parametrize("name", list(BASE_USERS))
def test_bad_base_values_raise(name, base):
    with pytest.raises(ValueError, match=r"^base must be a finite number > 1, got "):
        BASE_USERS[name](base)


@pytest.mark.parametrize("base, type_name", [(True, "bool"), ("1e4", "str"), (None, "NoneType")])
@pytest.mark.parametrize("name", list(BASE_USERS))
def test_base_of_the_wrong_type_raises_type_error(name, base, type_name):
    with pytest.raises(TypeError, match=rf"^base must be a number, got {type_name}"):
        BASE_USERS[name](base)


SCALINGS = {
    "LinearScaling": lambda f: core.LinearScaling(f),
    "NTKScaling": lambda f: core.NTKScaling(f),
    "DynamicNTKScaling": lambda f: core.DynamicNTKScaling(f, 2048),
    "YarnScaling": lambda f: core.YarnScaling(f, 2048),
    "Llama3Scaling": lambda f: core.Llama3Scaling(f, 8192),
    "LongRopeScaling": lambda f: core.LongRopeScaling([1.0], [2.0], 64, factor=f),
    "ProportionalScaling": lambda f: core.ProportionalScaling(0.25, f),
}


@pytest.mark.parametrize("factor", [INF, NAN, 0.5, 0, -2.0])
@pytest.mark.parametrize("name", list(SCALINGS))
def test_every_scaling_refuses_infinite_or_shrinking_factors(name, factor):
    with pytest.raises(ValueError, match=rf"^factor must be a finite number >= 1, got "
                                         rf"{factor!r}"):
        SCALINGS[name](factor)


@pytest.mark.parametrize("name", list(SCALINGS))
def test_every_scaling_refuses_a_bool_factor(name):
    with pytest.raises(TypeError, match=r"^factor must be a number, got bool"):
        SCALINGS[name](True)


@pytest.mark.parametrize("field", ["mscale", "mscale_all_dim", "beta_fast", "beta_slow"])
@pytest.mark.parametrize("value", [NAN, INF, 0.0, -1.0])
def test_yarn_refuses_non_positive_or_non_finite_parameters(field, value):
    kwargs = {"mscale": 1.0, "mscale_all_dim": 1.0, field: value}
    with pytest.raises(ValueError, match=rf"^{field} must be a finite number > 0, got "):
        core.YarnScaling(4.0, 2048, **kwargs)


def test_yarn_refuses_equal_betas_and_a_string_mscale():
    with pytest.raises(ValueError, match=r"beta_fast > beta_slow.*beta_fast=8.*beta_slow=8"):
        core.YarnScaling(4.0, 2048, beta_fast=8, beta_slow=8)
    with pytest.raises(TypeError, match=r"^mscale must be a number, got str"):
        core.YarnScaling(4.0, 2048, mscale="1", mscale_all_dim=1.0)


@pytest.mark.parametrize("field", ["low_freq_factor", "high_freq_factor"])
@pytest.mark.parametrize("value", [NAN, INF, 0.0, -1.0])
def test_llama3_refuses_non_positive_or_non_finite_freq_factors(field, value):
    with pytest.raises(ValueError, match=rf"^{field} must be a finite number > 0, got "):
        core.Llama3Scaling(8.0, 8192, **{field: value})


@pytest.mark.parametrize("scaling", [core.NTKScaling(2.0), core.DynamicNTKScaling(2.0, 16)])
def test_ntk_with_one_rotary_pair_is_a_clear_error(scaling):
    with pytest.raises(ValueError, match=r"^rotary_dim must be >= 4 for NTK scaling.*got 2"):
        core.RotaryEncoding(2, scaling=scaling)
    with pytest.raises(ValueError, match=r"^rotary_dim must be >= 4 for NTK scaling"):
        core.RotaryEncoding(8, rotary_dim=2, scaling=scaling)


def test_dynamic_ntk_with_no_positions_gives_an_empty_rotation():
    rope = core.RotaryEncoding(8, scaling=core.DynamicNTKScaling(2.0, 16))
    assert rope.rotation(torch.arange(0)).cos.shape == (1, 1, 0, 4)


# ---- T5 buckets ------------------------------------------------------------------------------

OFFSETS = torch.cat((torch.arange(-300, 301), torch.tensor([-10**12, 10**12, 2**62])))


@pytest.mark.parametrize("bidirectional", [True, False])
def test_t5_bucket_ids_stay_in_range_for_every_valid_setting(bidirectional):
    """Every (num_buckets, max_distance) either raises or maps every offset into
    [0, num_buckets); the valid ones are exactly those with max_exact >= 1 and
    max_distance > max_exact."""
    for num_buckets, max_distance in itertools.product(range(1, 41), range(1, 60)):
        per_direction = num_buckets // 2 if bidirectional else num_buckets
        max_exact = per_direction // 2
        valid = max_exact >= 1 and max_distance > max_exact
        if not valid:
            with pytest.raises(ValueError, match=r"^(num_buckets|max_distance) must be"):
                t5_relative_bucket(OFFSETS, bidirectional, num_buckets, max_distance)
            continue
        buckets = t5_relative_bucket(OFFSETS, bidirectional, num_buckets, max_distance)
        assert 0 <= int(buckets.min()) and int(buckets.max()) < num_buckets


@pytest.mark.parametrize("num_buckets", [1, 2, 3])
def test_t5_bidirectional_needs_four_buckets(num_buckets):
    with pytest.raises(ValueError, match=rf"^num_buckets must be >= 4 with bidirectional=True.*"
                                         rf"got {num_buckets}"):
        core.T5RelativeBias(2, num_buckets=num_buckets)


def test_t5_decoder_needs_two_buckets():
    with pytest.raises(ValueError, match=r"^num_buckets must be >= 2 with bidirectional=False"):
        core.T5RelativeBias(2, bidirectional=False, num_buckets=1)
    assert core.T5RelativeBias(2, bidirectional=False, num_buckets=2, max_distance=2)(
        torch.arange(4), torch.arange(4)).shape == (1, 2, 4, 4)


def test_t5_max_distance_must_exceed_the_exact_offsets():
    # 32 buckets, bidirectional: 16 per direction, 8 exact; max_distance 4 gave bucket -29.
    with pytest.raises(ValueError, match=r"^max_distance must be > 8 .*got 4"):
        core.T5RelativeBias(2, num_buckets=32, max_distance=4)
    with pytest.raises(ValueError, match=r"^max_distance must be > 16 .*bidirectional=False.*"
                                         r"got 16"):
        core.T5RelativeBias(2, bidirectional=False, num_buckets=32, max_distance=16)


def test_t5_bucket_refuses_bool_offsets():
    with pytest.raises(TypeError, match=r"^relative_position must be an integer tensor.*bool"):
        t5_relative_bucket(torch.ones(3, dtype=torch.bool))


# ---- bool flags ------------------------------------------------------------------------------

FLAG_USERS = {
    "causal": lambda v: core.ALiBi(2, causal=v),
    "bidirectional": lambda v: core.T5RelativeBias(2, bidirectional=v),
    "qkv_bias": lambda v: core.MultiheadAttention(8, 2, qkv_bias=v),
    "qk_norm": lambda v: core.MultiheadAttention(8, 2, qk_norm=v),
    "is_causal": lambda v: core.MultiheadAttention(8, 2)(torch.randn(1, 3, 8), is_causal=v),
}


@pytest.mark.parametrize("value", ["no", 1, 0, None])
@pytest.mark.parametrize("flag", list(FLAG_USERS))
def test_bool_flags_refuse_non_bools(flag, value):
    with pytest.raises(TypeError, match=rf"^{flag} must be a bool \(True or False\), got "
                                        rf"{type(value).__name__}"):
        FLAG_USERS[flag](value)


def test_t5_relative_bucket_refuses_a_string_direction():
    with pytest.raises(TypeError, match=r"^bidirectional must be a bool"):
        t5_relative_bucket(torch.arange(3), "no")


# ---- positions -------------------------------------------------------------------------------

def test_learned_table_takes_negative_zero_as_row_zero_and_refuses_infinities():
    table = core.LearnedEncoding(4, 2)
    assert torch.equal(table(torch.tensor([-0.0])), table.weight[:1])
    for bad in (INF, -INF):
        with pytest.raises(ValueError, match=r"^positions must be finite"):
            table(torch.tensor([bad]))
    with pytest.raises(ValueError, match=r"positions must lie in \[0, 3\]"):
        table(torch.tensor([-1e-9], dtype=torch.float64))


def test_relative_positions_refuse_mismatched_batches():
    with pytest.raises(ValueError, match=r"^query_positions of shape \(2, 3\) and key_positions "
                                         r"of shape \(3, 4\) have batches 2 and 3"):
        core.ALiBi(2)(torch.zeros(2, 3), torch.zeros(3, 4))
    with pytest.raises(ValueError, match=r"have batches 2 and 3"):
        core.T5RelativeBias(2)(torch.zeros(2, 3, dtype=torch.long),
                               torch.zeros(3, 4, dtype=torch.long))
    # A batch of 1 and unbatched positions broadcast.
    assert core.ALiBi(2)(torch.zeros(1, 3), torch.zeros(5, 4)).shape == (5, 2, 3, 4)


def test_incremental_positions_refuse_negative_and_bool_offsets():
    with pytest.raises(ValueError, match=r"^offset must be >= 0 .*got \[2, -1\]"):
        core.incremental_positions(2, torch.tensor([2, -1]))
    with pytest.raises(TypeError, match=r"^offset must be an int or a \(B,\) integer tensor, "
                                        r"got torch.bool"):
        core.incremental_positions(2, torch.tensor([True]))
    with pytest.raises(TypeError, match=r"^offset must be an int >= 0 .*got bool"):
        core.incremental_positions(2, True)


def test_layout_helpers_refuse_bad_head_counts_and_dims():
    with pytest.raises(ValueError, match=r"^num_heads must be >= 1, got 0"):
        core.convert_rotary_layout(torch.randn(8, 2), 0, "half", "interleaved")
    with pytest.raises(ValueError, match=r"^weight must be a .* got shape \(8, 2, 2\)"):
        core.convert_rotary_layout(torch.randn(8, 2, 2), 1, "half", "interleaved")
    with pytest.raises(ValueError, match=r"^rotary_dim must be <= head_dim=8, got 16"):
        rotary_layout_permutation(8, 16)


@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float16], ids=str)
def test_public_functions_refuse_half_precision_positions(dtype):
    p = torch.arange(3, dtype=dtype)
    with pytest.raises(TypeError, match=rf"^positions must be an integer, float32 or float64 "
                                        rf"tensor, got {dtype}"):
        sinusoidal_encoding(p, sinusoidal_inv_freq(4))
    with pytest.raises(TypeError, match=r"^positions must be an integer, float32 or float64"):
        angles(p, rope_inv_freq(4, 10000.0))
    with pytest.raises(TypeError, match=r"^key_positions must be an integer, float32 or float64"):
        relative_positions(torch.arange(3), p)
