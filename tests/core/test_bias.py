"""Attention-bias encodings: ALiBi, T5 buckets, Shaw-style clipped relative bias."""

from __future__ import annotations

import math

import pytest
import torch
from core_refs import core_settings, official_alibi_slopes
from hypothesis import given
from hypothesis import strategies as st
from posenc.core import ALiBi, ClippedRelativeBias, T5RelativeBias
from posenc.core.bias import alibi_slopes, t5_relative_bucket

# ---- ALiBi -------------------------------------------------------------------------------------

def test_alibi_slopes_8_heads_are_the_papers_values():
    # Press et al. 2022, section 3: 1/2, 1/4, ..., 1/256 for 8 heads.
    expected = [1 / 2, 1 / 4, 1 / 8, 1 / 16, 1 / 32, 1 / 64, 1 / 128, 1 / 256]
    assert alibi_slopes(8).tolist() == expected


def test_alibi_slopes_16_heads_are_the_papers_values():
    # 2**(-0.5 k) for k = 1..16: 1/sqrt(2), 1/2, ..., 1/256.
    expected = torch.tensor([2 ** (-0.5 * k) for k in range(1, 17)], dtype=torch.float32)
    assert torch.equal(alibi_slopes(16), expected)


def test_alibi_slopes_12_heads_follow_the_official_recipe():
    # The 8-head slopes, then every other 16-head slope, first 4: 2**-0.5, 2**-1.5, ...
    expected = [2.0 ** -k for k in range(1, 9)] + [2 ** -0.5, 2 ** -1.5, 2 ** -2.5, 2 ** -3.5]
    torch.testing.assert_close(alibi_slopes(12), torch.tensor(expected), atol=0, rtol=1e-7)


@pytest.mark.parametrize("heads", [1, 2, 3, 5, 6, 8, 12, 16, 20, 24, 32, 40, 64, 96])
def test_alibi_slopes_equal_official_get_slopes(heads):
    expected = torch.tensor(official_alibi_slopes(heads), dtype=torch.float32)
    assert torch.equal(alibi_slopes(heads), expected)


def test_alibi_bias_is_minus_slope_times_distance():
    alibi = ALiBi(4, causal=False)
    q, k = torch.tensor([0, 3, 7]), torch.tensor([1, 5, 2, 9])
    bias = alibi(q, k)
    assert bias.shape == (1, 4, 3, 4)
    slopes = official_alibi_slopes(4)
    for h in range(4):
        for i, qi in enumerate(q.tolist()):
            for j, kj in enumerate(k.tolist()):
                assert bias[0, h, i, j].item() == pytest.approx(-slopes[h] * abs(qi - kj))
    # Symmetric in the bidirectional form.
    assert torch.equal(alibi(k, q), bias.transpose(-1, -2))


def test_alibi_causal_masks_future_positions():
    bias = ALiBi(2, causal=True)(torch.arange(5), torch.arange(5))
    future = torch.ones(5, 5, dtype=torch.bool).triu(1)
    assert torch.isneginf(bias[0, :, future]).all()
    assert torch.isfinite(bias[0, :, ~future]).all()
    torch.testing.assert_close(bias[0, :, ~future],
                               ALiBi(2, causal=False)(torch.arange(5), torch.arange(5))[
                                   0, :, ~future])


def test_alibi_causal_uses_positions_not_token_order():
    # Key tokens in shuffled order: masking follows their positions.
    q, k = torch.tensor([2]), torch.tensor([4, 0, 2, 3, 1])
    bias = ALiBi(1)(q, k)[0, 0, 0]
    assert torch.isneginf(bias).tolist() == [True, False, False, True, False]


def test_alibi_bf16_cast_keeps_the_bias():
    """A bf16 slope is off by up to 0.4%: 1.4 logits at distance 1000 for 2**-0.5."""
    alibi = ALiBi(12, causal=False)
    pos = torch.arange(0, 2000, 50)
    expected = alibi(pos, pos)
    alibi.to(torch.bfloat16)
    assert torch.equal(alibi(pos, pos), expected)


# ---- T5 buckets --------------------------------------------------------------------------------

def hf_bucket(rel, bidirectional, num_buckets, max_distance):
    from transformers.models.t5.modeling_t5 import T5Attention

    return T5Attention._relative_position_bucket(rel, bidirectional=bidirectional,
                                                 num_buckets=num_buckets,
                                                 max_distance=max_distance)


@pytest.mark.parametrize("bidirectional", [True, False])
@pytest.mark.parametrize(("num_buckets", "max_distance"), [(32, 128), (16, 64), (64, 256)])
def test_t5_buckets_match_transformers(bidirectional, num_buckets, max_distance):
    rel = torch.arange(-3 * max_distance, 3 * max_distance + 1)
    ours = t5_relative_bucket(rel, bidirectional, num_buckets, max_distance)
    assert torch.equal(ours, hf_bucket(rel, bidirectional, num_buckets, max_distance))
    assert ours.min() >= 0 and ours.max() < num_buckets


def test_t5_buckets_hand_worked_values_bidirectional():
    # 32 buckets, max_distance 128: 16 per direction, offsets < 8 exact, then
    # 8 + floor(log(d / 8) / log(16) * 8), capped at 15; key after query adds 16.
    cases = {0: 0, -1: 1, -7: 7, -8: 8, -12: 9, -16: 10, -32: 12, -64: 14, -127: 15,
             -128: 15, -129: 15, -10_000: 15, 1: 17, 7: 23, 8: 24, 127: 31, 128: 31, 5000: 31}
    rel = torch.tensor(list(cases))
    assert t5_relative_bucket(rel).tolist() == list(cases.values())


def test_t5_buckets_hand_worked_values_unidirectional():
    # 32 buckets, all for the past: offsets < 16 exact, then 16 + floor(log(d/16)/log(8)*16);
    # keys after the query share bucket 0.
    cases = {5: 0, 1: 0, 0: 0, -1: 1, -15: 15, -16: 16, -32: 21, -64: 26, -127: 31, -128: 31,
             -129: 31, -100_000: 31}
    rel = torch.tensor(list(cases))
    assert t5_relative_bucket(rel, bidirectional=False).tolist() == list(cases.values())


def test_t5_bias_reads_the_table_at_each_bucket():
    t5 = T5RelativeBias(3, bidirectional=True, num_buckets=8, max_distance=20)
    q, k = torch.tensor([[0, 5, 30]]), torch.tensor([[1, 2, 40, 0]])
    bias = t5(q, k)
    assert bias.shape == (1, 3, 3, 4)
    for i in range(3):
        for j in range(4):
            bucket = hf_bucket(k[0, j] - q[0, i], True, 8, 20)
            assert torch.equal(bias[0, :, i, j], t5.table[bucket])


# ---- Clipped relative ----------------------------------------------------------------------

def test_clipped_bias_reads_the_table_at_the_clipped_offset():
    clipped = ClippedRelativeBias(2, max_distance=3)
    q, k = torch.tensor([0, 10]), torch.tensor([0, 1, 2, 3, 4, 10, 20])
    bias = clipped(q, k)
    assert bias.shape == (1, 2, 2, 7)
    for i, qi in enumerate(q.tolist()):
        for j, kj in enumerate(k.tolist()):
            offset = max(-3, min(3, kj - qi))
            assert torch.equal(bias[0, :, i, j], clipped.table[offset + 3])


# ---- shift invariance ------------------------------------------------------------------------

BIASES = {
    "alibi": lambda: ALiBi(4, causal=True),
    "alibi_bidirectional": lambda: ALiBi(4, causal=False),
    "t5": lambda: T5RelativeBias(4),
    "t5_decoder": lambda: T5RelativeBias(4, bidirectional=False),
    "clipped": lambda: ClippedRelativeBias(4, max_distance=16),
}


@pytest.mark.parametrize("name", list(BIASES))
@core_settings
@given(shift=st.integers(-10**6, 10**6),
       q=st.lists(st.integers(0, 500), min_size=1, max_size=12),
       k=st.lists(st.integers(0, 500), min_size=1, max_size=12))
def test_bias_is_shift_invariant(name, shift, q, k):
    torch.manual_seed(0)
    bias = BIASES[name]()
    q, k = torch.tensor(q), torch.tensor(k)
    assert torch.equal(bias(q + shift, k + shift), bias(q, k))


@pytest.mark.parametrize("name", list(BIASES))
def test_bias_with_batched_positions_equals_per_row_bias(name):
    bias = BIASES[name]()
    q = torch.tensor([[0, 1, 2, 3], [7, 8, 9, 40]])
    out = bias(q, q)
    assert out.shape == (2, 4, 4, 4)
    for b in range(2):
        assert torch.equal(out[b], bias(q[b], q[b])[0])
    # Non-trivial: the rows' different gaps give different biases (-inf - -inf is NaN).
    assert (out[0] - out[1]).nan_to_num(0.0).abs().max() > 0


@pytest.mark.parametrize("name", ["t5", "clipped"])
def test_learned_bias_tables_receive_gradients(name):
    bias = BIASES[name]()
    pos = torch.arange(6)
    bias(pos, pos).sum().backward()
    assert bias.table.grad is not None and bias.table.grad.abs().sum() > 0


def test_alibi_slopes_are_not_trainable_and_float32():
    alibi = ALiBi(8)
    assert not list(alibi.parameters())
    assert alibi(torch.arange(3), torch.arange(3)).dtype == torch.float32
    assert math.isclose(alibi.slopes[0].item(), 0.5)
