"""FIRE (Li et al. 2023): hand-computed values, the paper's listing on the causal pairs, the
relative property below the threshold and progressive interpolation above it, time gaps,
gradients, dtypes and the FlexAttention form.

No reference is installable (the paper's code is a listing in its appendix; neither
x-transformers nor rotary-embedding-torch has FIRE): the listing is transcribed in
:func:`_listing` below and the rest is checked against per-pair ``math``.
"""

from __future__ import annotations

import math

import pandas as pd
import pytest
import torch
from core_refs import core_settings
from hypothesis import given, settings
from hypothesis import strategies as st
from posenc.core import KVCache, MultiheadAttention
from posenc.core.attention import flex_attend
from posenc.core.bias import FIRE
from posenc.core.encoding import no_weight_decay_names
from posenc.temporal import time_positions
from torch import nn

Q, K = [0, 3, 7], [1, 5, 2, 9, 7]
W1, B1, W2, B2 = [1.0, -2.0], [0.0, 0.5], [[1.0, 2.0], [0.5, -1.0]], [0.1, -0.2]


def _small_fire(causal: bool, init_threshold: float = 4.0) -> FIRE:
    """FIRE with two heads, two hidden units and hand-set weights, c = 0.5."""
    fire = FIRE(2, mlp_width=2, causal=causal, init_c=0.5, init_threshold=init_threshold)
    with torch.no_grad():
        fire.mlp[0].weight.copy_(torch.tensor(W1)[:, None])
        fire.mlp[0].bias.copy_(torch.tensor(B1))
        fire.mlp[2].weight.copy_(torch.tensor(W2))
        fire.mlp[2].bias.copy_(torch.tensor(B2))
    return fire


def _hand(q: list[float], k: list[float], causal: bool, c: float = 0.5,
          threshold: float = 4.0, eps: float = 1e-6) -> list[list[list[float]]]:
    """``[h][i][j]`` of :func:`_small_fire`'s bias, per pair with ``math``."""
    def value(h, i, j):
        if causal and j > i:
            return -math.inf
        d = i - j
        x = math.copysign(math.log(1 + c * abs(d)), d) / (
            math.log(1 + c * max(threshold, i, j)) + eps)
        hidden = [max(0.0, W1[u] * x + B1[u]) for u in range(2)]
        return B2[h] + sum(W2[h][u] * hidden[u] for u in range(2))

    return [[[value(h, i, j) for j in k] for i in q] for h in range(2)]


@pytest.mark.parametrize("causal", [True, False])
def test_bias_equals_hand_computed_values(causal):
    bias = _small_fire(causal)(torch.tensor(Q), torch.tensor(K))
    assert bias.shape == (1, 2, 3, 5) and bias.dtype == torch.float32
    torch.testing.assert_close(bias[0], torch.tensor(_hand(Q, K, causal)), rtol=1e-6, atol=1e-7)
    # query 7, key 1: x = log(1 + 0.5 * 6) / log(1 + 0.5 * max(4, 7)) = log 4 / log 4.5
    x = math.log(4) / (math.log(4.5) + 1e-6)
    assert bias[0, 0, 2, 0].item() == pytest.approx(0.1 + x, rel=1e-6)
    assert bias[0, 1, 2, 0].item() == pytest.approx(-0.2 + 0.5 * x, rel=1e-6)


def _listing(fire: FIRE, seq_len: int) -> torch.Tensor:
    """The paper's listing (appendix), for self-attention over positions 0..N-1:
    ``(1, H, N, N)`` before its causal mask."""
    positions = torch.arange(seq_len, dtype=torch.float)
    rel_distance = positions[:, None] - positions[None, :]
    threshold = torch.abs(fire.threshold_multiplier * fire.init_threshold)
    pos_normalizer = torch.max(positions, threshold)[:, None]
    rel_distance = torch.log(torch.abs(fire.c * rel_distance) + 1)
    pos_normalizer = torch.log(torch.abs(fire.c * pos_normalizer) + 1) + fire.eps
    return fire.mlp((rel_distance / pos_normalizer).unsqueeze(-1)).unsqueeze(0).permute(0, 3, 1, 2)


@pytest.mark.parametrize(("c", "multiplier"), [(0.1, 1.0), (-0.3, -0.5), (2.0, 3.0)])
def test_causal_bias_equals_the_papers_listing(c, multiplier):
    fire = FIRE(4, init_threshold=6.0)  # positions 0..11 cover both sides of L
    with torch.no_grad():
        fire.c.fill_(c)  # the listing takes |c| and |multiplier * L|: negative values are legal
        fire.threshold_multiplier.fill_(multiplier)
    pos = torch.arange(12)
    bias, expected = fire(pos, pos), _listing(fire, 12)
    future = torch.ones(12, 12, dtype=torch.bool).triu(1)
    assert torch.isneginf(bias[0, :, future]).all()
    torch.testing.assert_close(bias[0, :, ~future], expected[0, :, ~future], rtol=1e-5,
                               atol=1e-6)


@pytest.mark.parametrize("causal", [True, False])
@settings(core_settings, max_examples=20)
@given(shift=st.integers(-10**6, 300),
       q=st.lists(st.integers(0, 200), min_size=1, max_size=8),
       k=st.lists(st.integers(0, 200), min_size=1, max_size=8))
def test_bias_depends_only_on_the_offset_below_the_threshold(causal, shift, q, k):
    torch.manual_seed(0)
    fire = FIRE(3, mlp_width=8, causal=causal)  # L = 512 >= every position
    q, k = torch.tensor(q), torch.tensor(k)
    assert torch.equal(fire(q + shift, k + shift), fire(q, k))


def test_beyond_the_threshold_the_offset_is_relative_to_the_context_length():
    fire = FIRE(3, mlp_width=8, init_threshold=16.0)
    keys = torch.tensor([0])
    # the first token, seen from ever longer contexts, is always at psi(i) / psi(i) ~ 1
    first = torch.cat([fire(torch.tensor([i]), keys)[0, :, 0, 0][None]
                       for i in (100, 5000, 10**6)])
    torch.testing.assert_close(first, first[:1].expand(3, -1), rtol=0, atol=1e-5)
    # ... so the same offset gets another bias at another context length
    near, far = fire(torch.tensor([20]), torch.tensor([10])), fire(torch.tensor([2000]),
                                                                   torch.tensor([1990]))
    assert not torch.allclose(near, far)


@core_settings
@given(q=st.lists(st.floats(0, 1e5), min_size=1, max_size=6),
       k=st.lists(st.floats(0, 1e5), min_size=1, max_size=6),
       threshold=st.floats(1e-3, 1e4))
def test_mlp_input_is_in_unit_interval_for_positions_from_0(q, k, threshold):
    fire = FIRE(2, init_threshold=threshold, causal=False)
    q, k = torch.tensor(q, dtype=torch.float64), torch.tensor(k, dtype=torch.float64)
    offset = (q[:, None] - k[None, :]).float()
    x = fire.interpolated(offset, q.float()[:, None], k.float()[None, :])
    assert (x.abs() <= 1 + 1e-6).all()
    # antisymmetric: a key ahead and one as far behind get opposite inputs
    torch.testing.assert_close(fire.interpolated(-offset, q.float()[:, None],
                                                 k.float()[None, :]), -x)


def test_non_causal_bias_tells_keys_ahead_from_keys_behind():
    bias = _small_fire(causal=False)(torch.tensor([5]), torch.tensor([2, 8]))
    assert bias[0, 0, 0, 0] != bias[0, 0, 0, 1]  # offsets +3 and -3 (the listing: equal)
    assert torch.isfinite(bias).all()


def test_time_gaps_in_hours_enter_the_interpolation():
    times = pd.to_datetime(["2024-03-30 22:00", "2024-03-31 01:30", "2024-03-31 02:00",
                            "2024-04-02 12:00"]).tz_localize("UTC")
    hours = time_positions(times, origin=times[0], unit="h")  # float64 [0, 3.5, 4, 62]
    bias = _small_fire(causal=True, init_threshold=24.0)(hours, hours)
    expected = _hand(hours.tolist(), hours.tolist(), True, threshold=24.0)
    torch.testing.assert_close(bias[0], torch.tensor(expected), rtol=1e-6, atol=1e-7)
    # query at 62 h, key at 3.5 h: the normaliser is the query's 62 h, not L = 24 h
    x = math.log(1 + 0.5 * 58.5) / (math.log(1 + 0.5 * 62) + 1e-6)
    assert bias[0, 0, 3, 1].item() == pytest.approx(0.1 + x, rel=1e-6)


@pytest.mark.parametrize("causal", [True, False])
def test_attention_trains_every_fire_parameter(causal):
    attn = MultiheadAttention(16, 2, bias=FIRE(2, causal=causal, init_threshold=24.0))
    hours = torch.tensor([[0.0, 0.5, 2.0, 7.25, 30.0]])
    attn(torch.randn(1, 5, 16), query_positions=hours).square().sum().backward()
    for name, p in attn.bias.named_parameters():
        assert torch.isfinite(p.grad).all() and p.grad.abs().sum() > 0, name


def test_fixed_parameters_stay_float32_and_the_bias_follows_the_logits_dtype():
    attn = MultiheadAttention(16, 2, bias=FIRE(2, mlp_width=8))
    x, pos = torch.randn(2, 6, 16), torch.arange(6)
    attn.to(torch.bfloat16)
    fire = attn.bias
    assert fire.c.dtype == torch.float32 == fire.threshold_multiplier.dtype
    assert fire.mlp[0].weight.dtype == torch.bfloat16
    reference = FIRE(2, mlp_width=8)  # float32 with the bf16 weights: the MLP runs in float32
    reference.load_state_dict({k: v.float() for k, v in fire.state_dict().items()})
    assert torch.equal(fire(pos, pos), reference(pos, pos))
    assert attn(x.bfloat16(), is_causal=True).dtype == torch.bfloat16
    mod = fire.score_mod(pos, pos)
    index = torch.tensor(1), torch.tensor(1), torch.tensor(4), torch.tensor(2)
    assert mod(torch.zeros((), dtype=torch.bfloat16), *index).dtype == torch.bfloat16
    attn.to(torch.float64)
    assert attn(x.double()).dtype == torch.float64


def test_positions_are_validated():
    fire = FIRE(2)
    good = torch.arange(4)
    for call in (fire, fire.score_mod):
        with pytest.raises(TypeError, match="query_positions must be an integer, float32"):
            call(good.half(), good)
        with pytest.raises(TypeError, match="key_positions must be an integer or floating"):
            call(good, good.bool())
        with pytest.raises(ValueError, match=r"query_positions must have shape \(N\)"):
            call(good[None, None], good)
        with pytest.raises(ValueError, match="key_positions must be finite"):
            call(good, torch.tensor([0.0, math.inf]))
        with pytest.raises(ValueError, match="batches 2 and 3"):
            call(torch.zeros(2, 4), torch.zeros(3, 4))


def test_constructor_arguments_are_checked():
    with pytest.raises(ValueError, match="mlp_width must be >= 1"):
        FIRE(2, mlp_width=0)
    with pytest.raises(ValueError, match="init_c must be a positive number"):
        FIRE(2, init_c=-0.1)
    with pytest.raises(ValueError, match="init_threshold must be a positive number"):
        FIRE(2, init_threshold=0)
    with pytest.raises(ValueError, match="eps must be a finite number > 0"):
        FIRE(2, eps=0.0)
    with pytest.raises(TypeError, match="causal must be a bool"):
        FIRE(2, causal="yes")
    with pytest.raises(ValueError, match="bias.num_heads=2 does not match num_heads=4"):
        MultiheadAttention(16, 4, bias=FIRE(2))


def test_no_weight_decay_names_every_parameter():
    expected = {"c", "threshold_multiplier", "mlp.0.weight", "mlp.0.bias", "mlp.2.weight",
                "mlp.2.bias"}
    assert FIRE(2).no_weight_decay() == expected
    attn = MultiheadAttention(16, 2, bias=FIRE(2))
    assert no_weight_decay_names(attn) == {f"bias.{name}" for name in expected}


POSITIONS = {
    "self": lambda: (torch.arange(9), torch.arange(9)),
    "batched": lambda: (torch.randint(0, 40, (3, 7)), torch.randint(0, 40, (3, 7))),
    "cross_broadcast": lambda: (torch.randint(0, 40, (5,)), torch.randint(0, 40, (3, 11))),
    "hours": lambda: (torch.rand(2, 6).double() * 50, torch.rand(2, 8).double() * 50),
}


@pytest.mark.parametrize("positions", list(POSITIONS))
@pytest.mark.parametrize("causal", [False, True])
def test_score_mod_on_index_grid_equals_materialised_bias(causal, positions):
    fire = FIRE(2, mlp_width=8, causal=causal, init_threshold=10.0)  # L inside the positions
    qp, kp = POSITIONS[positions]()
    expected = fire(qp, kp)
    mod = fire.score_mod(qp, kp)
    assert (mod.batch, mod.num_queries, mod.num_keys) == (expected.shape[0], *expected.shape[2:])
    torch.testing.assert_close(mod.dense(2), expected.expand(mod.batch, -1, -1, -1), rtol=1e-5,
                               atol=1e-6)


def test_kv_cache_decoding_equals_full_causal_attention():
    attn = MultiheadAttention(16, 2, bias=FIRE(2, mlp_width=8, init_threshold=3.0)).eval()
    x = torch.randn(1, 7, 16)
    full = attn(x, is_causal=True)
    cache = KVCache()
    steps = [attn(chunk, is_causal=True, kv_cache=cache)
             for chunk in (x[:, :4], x[:, 4:6], x[:, 6:])]
    torch.testing.assert_close(torch.cat(steps, dim=1), full, rtol=0, atol=1e-6)


def test_meta_build_then_to_empty_and_reset_equals_a_normal_build():
    torch.manual_seed(1)
    reference = FIRE(2, mlp_width=8)
    with torch.device("meta"):
        model = FIRE(2, mlp_width=8)
    model.to_empty(device="cpu")
    torch.manual_seed(1)
    model.reset_parameters()
    pos = torch.arange(5)
    assert torch.equal(model(pos, pos), reference(pos, pos))


@pytest.mark.slow  # eager FlexAttention traces on first use (several seconds per process)
@pytest.mark.parametrize("causal", [True, False])
def test_flex_path_equals_sdpa_path(causal):
    fire = {"mlp_width": 8, "causal": causal, "init_threshold": 8.0}
    sdpa = MultiheadAttention(16, 2, bias=FIRE(2, **fire), backend="sdpa").eval()
    flex = MultiheadAttention(16, 2, bias=FIRE(2, **fire), backend="flex").eval()
    flex.load_state_dict(sdpa.state_dict())
    x, hours = torch.randn(2, 10, 16), torch.rand(2, 10).cumsum(-1) * 3
    with torch.no_grad():
        for kwargs in ({}, {"query_positions": hours}, {"is_causal": True}):
            torch.testing.assert_close(flex(x, **kwargs), sdpa(x, **kwargs), rtol=0, atol=1e-5)


@pytest.mark.slow  # torch.compile of FlexAttention on CPU: about 15 s
def test_compiled_flex_kernel_lowers_the_unrolled_mlp():
    q, k, v = (torch.randn(2, 2, 5, 8) for _ in range(3))
    positions = torch.randint(0, 20, (2, 5))
    fire = FIRE(2, mlp_width=8, init_threshold=8.0)
    compiled = torch.compile(flex_attend, fullgraph=True)
    with torch.no_grad():
        expected = nn.functional.scaled_dot_product_attention(
            q, k, v, attn_mask=fire(positions, positions))
        got = compiled(q, k, v, fire.score_mod(positions, positions))
    torch.testing.assert_close(got, expected, rtol=0, atol=1e-5)
