"""KERPLE biases (Chi et al. 2022): hand-computed values of both kernels, the paper's
constraints, the relative property, time gaps, gradients, dtypes and the FlexAttention form.

No reference is installable (the official code is a gpt-neox fork that needs CUDA and
Megatron); the expected values are the paper's formulas evaluated with ``math`` per pair.
"""

from __future__ import annotations

import math

import pandas as pd
import pytest
import torch
from core_refs import core_settings
from hypothesis import given
from hypothesis import strategies as st
from posenc.core import ALiBi, KVCache, MultiheadAttention
from posenc.core.bias import Kerple, alibi_slopes, kerple_bias
from posenc.core.encoding import no_weight_decay_names
from posenc.temporal import time_positions

Q, K = [0, 3, 7], [1, 5, 2, 9, 7]


def _hand(kernel: str, r1: float, r2: float, q: list[float], k: list[float],
          causal: bool) -> list[list[float]]:
    def value(qi, kj):
        if causal and kj > qi:
            return -math.inf
        d = abs(qi - kj)
        return -r1 * math.log(1 + r2 * d) if kernel == "log" else -r1 * d ** r2

    return [[value(qi, kj) for kj in k] for qi in q]


@pytest.mark.parametrize("causal", [False, True])
@pytest.mark.parametrize(("kernel", "r1", "r2"), [("log", 0.5, 2.0), ("power", 0.25, 1.5)])
def test_bias_equals_the_papers_formula(kernel, r1, r2, causal):
    bias = Kerple(3, kernel, causal, r1=r1, r2=r2)(torch.tensor(Q), torch.tensor(K))
    assert bias.shape == (1, 3, 3, 5) and bias.dtype == torch.float32
    expected = torch.tensor(_hand(kernel, r1, r2, Q, K, causal))
    for h in range(3):
        torch.testing.assert_close(bias[0, h], expected, rtol=1e-6, atol=0)
    # two values worked by hand: |7 - 1| = 6 -> -0.5 log 13; |3 - 7| = 4 -> -0.25 * 8
    if kernel == "log":
        assert bias[0, 0, 2, 0].item() == pytest.approx(-0.5 * math.log(13), rel=1e-6)
    else:
        assert bias[0, 0, 1, 4].item() == (-math.inf if causal else pytest.approx(-2.0))


@pytest.mark.parametrize("kernel", ["log", "power"])
def test_each_head_has_its_own_parameters(kernel):
    kerple = Kerple(4, kernel, causal=False)
    r1, r2 = kerple.r1.tolist(), kerple.r2.tolist()
    assert len(set(r1)) == 4 and len(set(r2)) == 4  # random per head
    bias = kerple(torch.tensor(Q), torch.tensor(K))
    for h in range(4):
        expected = torch.tensor(_hand(kernel, r1[h], r2[h], Q, K, False))
        torch.testing.assert_close(bias[0, h], expected, rtol=1e-5, atol=1e-6)


def test_power_kernel_with_exponent_1_is_alibi_with_learnable_slopes():
    kerple = Kerple(8, "power", causal=True, r2=1.0)
    with torch.no_grad():
        slopes = alibi_slopes(8).double()
        kerple.raw_r1.copy_(slopes + torch.log(-torch.expm1(-slopes)))  # softplus^-1
    assert kerple.r2.tolist() == [1.0] * 8  # 2 * sigmoid(logit(1/2)) is exact
    pos = torch.arange(0, 60, 7)
    torch.testing.assert_close(kerple(pos, pos), ALiBi(8)(pos, pos), rtol=1e-5, atol=0)


def test_initial_values_are_the_official_draws():
    log, power = Kerple(4000, "log"), Kerple(4000, "power")
    for values, top in ((log.r1, 2), (log.r2, 1), (power.r1, 1), (power.r2, 2)):
        assert values.min() >= 0.01 - 1e-6 and values.max() <= top
        # uniform on [0, top] (clamped at 0.01): mean top / 2 within 3 standard errors
        assert abs(values.mean().item() - top / 2) < 3 * top / math.sqrt(12 * 4000)


@pytest.mark.parametrize("kernel", ["log", "power"])
def test_constraints_hold_for_any_raw_parameter(kernel):
    kerple = Kerple(6, kernel, causal=False)
    with torch.no_grad():
        raw = torch.tensor([-80.0, -20.0, -1.0, 0.0, 20.0, 80.0])
        kerple.raw_r1.copy_(raw)
        kerple.raw_r2.copy_(raw)
    assert (kerple.r1 > 0).all() and (kerple.r2 > 0).all()
    if kernel == "power":
        assert (kerple.r2 <= 2).all()
    pos = torch.tensor([0.0, 0.5, 10.0, 1000.0])
    bias = kerple(pos, pos)
    assert torch.isfinite(bias).all() and (bias <= 0).all()


def test_constructor_refuses_values_outside_the_papers_constraints():
    with pytest.raises(ValueError, match=r"kernel must be one of \['log', 'power'\]"):
        Kerple(2, "exp")
    with pytest.raises(ValueError, match=r"r2 must be a finite number > 0 and < 2, got 2"):
        Kerple(2, "power", r2=2)
    with pytest.raises(ValueError, match="r1 must be a positive number"):
        Kerple(2, r1=0.0)
    with pytest.raises(ValueError, match="r2 must be a positive number"):
        Kerple(2, "log", r2=-1.0)
    with pytest.raises(TypeError, match="causal must be a bool"):
        Kerple(2, causal=1)
    with pytest.raises(ValueError, match="num_heads must be >= 1"):
        Kerple(0)
    assert Kerple(2, "log", r2=5.0).r2.tolist() == pytest.approx([5.0, 5.0])  # no bound for log


@pytest.mark.parametrize("kernel", ["log", "power"])
@pytest.mark.parametrize("causal", [False, True])
@core_settings
@given(shift=st.integers(-10**6, 10**6),
       q=st.lists(st.integers(0, 500), min_size=1, max_size=8),
       k=st.lists(st.integers(0, 500), min_size=1, max_size=8))
def test_bias_depends_only_on_the_offset(kernel, causal, shift, q, k):
    torch.manual_seed(0)
    kerple = Kerple(3, kernel, causal)
    q, k = torch.tensor(q), torch.tensor(k)
    assert torch.equal(kerple(q + shift, k + shift), kerple(q, k))


def test_causal_masks_by_position_not_token_order():
    bias = Kerple(1)(torch.tensor([2]), torch.tensor([4, 0, 2, 3, 1]))[0, 0, 0]
    assert torch.isneginf(bias).tolist() == [True, False, False, True, False]


def test_batched_positions_equal_per_row_bias():
    kerple = Kerple(2, "power", causal=False)
    pos = torch.tensor([[0, 1, 2, 3], [7, 8, 9, 40]])
    out = kerple(pos, pos)
    assert out.shape == (2, 2, 4, 4)
    for b in range(2):
        assert torch.equal(out[b], kerple(pos[b], pos[b])[0])


@pytest.mark.parametrize("kernel", ["log", "power"])
def test_time_gaps_in_hours_enter_the_kernel(kernel):
    times = pd.to_datetime(["2024-03-30 22:00", "2024-03-31 01:30", "2024-03-31 02:00",
                            "2024-04-02 12:00"]).tz_localize("UTC")
    hours = time_positions(times, origin=times[0], unit="h")  # float64 [0, 3.5, 4, 62]
    kerple = Kerple(2, kernel, causal=True, r1=0.5, r2=0.75)
    bias = kerple(hours, hours)
    expected = torch.tensor(_hand(kernel, 0.5, 0.75, hours.tolist(), hours.tolist(), True))
    torch.testing.assert_close(bias[0, 1], expected, rtol=1e-6, atol=0)
    assert bias[0, 0, 3, 1].item() == pytest.approx(
        -0.5 * (math.log(1 + 0.75 * 58.5) if kernel == "log" else 58.5 ** 0.75), rel=1e-6)


@pytest.mark.parametrize("kernel", ["log", "power"])
def test_gradients_reach_both_parameters_and_are_finite_at_distance_0(kernel):
    kerple = Kerple(3, kernel, causal=True)
    pos = torch.arange(6.0)  # the diagonal has distance 0: 0 ** r2 has no NaN gradient
    bias = kerple(pos, pos)
    bias.masked_fill(torch.isinf(bias), 0).sum().backward()
    for p in (kerple.raw_r1, kerple.raw_r2):
        assert torch.isfinite(p.grad).all() and (p.grad != 0).all()


@pytest.mark.parametrize("kernel", ["log", "power"])
def test_attention_trains_the_kernel_through_sdpa(kernel):
    attn = MultiheadAttention(16, 2, bias=Kerple(2, kernel, causal=False))
    hours = torch.tensor([[0.0, 0.5, 2.0, 7.25, 30.0]])
    attn(torch.randn(1, 5, 16), query_positions=hours).square().sum().backward()
    assert (attn.bias.raw_r1.grad != 0).all() and (attn.bias.raw_r2.grad != 0).all()


def test_parameters_stay_float32_and_the_bias_follows_the_logits_dtype():
    attn = MultiheadAttention(16, 2, bias=Kerple(2, "power"))
    x, pos = torch.randn(2, 6, 16), torch.arange(6)
    expected = attn.bias(pos, pos)
    for dtype in (torch.bfloat16, torch.float64):
        attn.to(dtype)
        assert attn.bias.raw_r1.dtype == torch.float32 == attn.bias.raw_r2.dtype
        assert torch.equal(attn.bias(pos, pos), expected)  # the same float32 bias
        assert attn(x.to(dtype), is_causal=True).dtype == dtype
        score = torch.zeros((), dtype=dtype)
        index = torch.tensor(3), torch.tensor(1), torch.tensor(4), torch.tensor(2)
        mod = attn.bias.score_mod(pos, pos)
        assert mod(score, *index).dtype == dtype
        assert mod(score, *index).item() == pytest.approx(expected[0, 1, 4, 2].item(), rel=1e-2)


def test_positions_are_validated():
    kerple = Kerple(2)
    good = torch.arange(4)
    for call in (kerple, kerple.score_mod):
        with pytest.raises(TypeError, match="query_positions must be an integer, float32"):
            call(good.bfloat16(), good)
        with pytest.raises(TypeError, match="key_positions must be an integer or floating"):
            call(good, good.bool())
        with pytest.raises(ValueError, match=r"key_positions must have shape \(N\) or \(B, N\)"):
            call(good, good[None, None])
        with pytest.raises(ValueError, match="query_positions must be finite"):
            call(torch.tensor([0.0, math.nan]), good)
        with pytest.raises(TypeError, match="query_positions must be a torch.Tensor"):
            call([0, 1], good)
        with pytest.raises(ValueError, match="batches 2 and 3"):
            call(torch.zeros(2, 4), torch.zeros(3, 4))


def test_no_weight_decay_names_both_parameters():
    assert Kerple(2).no_weight_decay() == {"raw_r1", "raw_r2"}
    attn = MultiheadAttention(16, 2, bias=Kerple(2))
    assert no_weight_decay_names(attn) == {"bias.raw_r1", "bias.raw_r2"}


POSITIONS = {
    "self": lambda: (torch.arange(9), torch.arange(9)),
    "batched": lambda: (torch.randint(0, 40, (3, 7)), torch.randint(0, 40, (3, 7))),
    "cross_broadcast": lambda: (torch.randint(0, 40, (5,)), torch.randint(0, 40, (3, 11))),
    "hours": lambda: (torch.rand(2, 6).double() * 50, torch.rand(2, 8).double() * 50),
}


@pytest.mark.parametrize("positions", list(POSITIONS))
@pytest.mark.parametrize("causal", [False, True])
@pytest.mark.parametrize("kernel", ["log", "power"])
def test_score_mod_on_index_grid_equals_materialised_bias(kernel, causal, positions):
    kerple = Kerple(2, kernel, causal)
    qp, kp = POSITIONS[positions]()
    expected = kerple(qp, kp)
    mod = kerple.score_mod(qp, kp)
    assert (mod.batch, mod.num_queries, mod.num_keys) == (expected.shape[0], *expected.shape[2:])
    torch.testing.assert_close(mod.dense(2), expected, rtol=1e-6, atol=1e-6)


def test_kv_cache_decoding_equals_full_causal_attention():
    attn = MultiheadAttention(16, 2, bias=Kerple(2, "log")).eval()
    x = torch.randn(1, 7, 16)
    full = attn(x, is_causal=True)
    cache = KVCache()
    steps = [attn(chunk, is_causal=True, kv_cache=cache)
             for chunk in (x[:, :4], x[:, 4:6], x[:, 6:])]
    torch.testing.assert_close(torch.cat(steps, dim=1), full, rtol=0, atol=1e-6)


def test_meta_build_then_to_empty_and_reset_equals_a_normal_build():
    reference = Kerple(3, "power")
    with torch.device("meta"):
        model = Kerple(3, "power")
    model.to_empty(device="cpu")
    model.reset_parameters()
    assert (model.r2 > 0).all() and (model.r2 < 2).all()
    model.load_state_dict(reference.state_dict())
    pos = torch.arange(5)
    assert torch.equal(model(pos, pos), reference(pos, pos))
    # the draws of a seeded reset are those of a seeded normal build
    torch.manual_seed(1)
    model.reset_parameters()
    torch.manual_seed(1)
    assert torch.equal(model(pos, pos), Kerple(3, "power")(pos, pos))


def test_kerple_bias_function_matches_both_formulas():
    d = torch.tensor([0.0, 1.0, 4.0])
    torch.testing.assert_close(kerple_bias(d, torch.tensor(2.0), torch.tensor(0.5), "log"),
                               torch.tensor([0.0, -2 * math.log(1.5), -2 * math.log(3.0)]))
    torch.testing.assert_close(kerple_bias(d, torch.tensor(2.0), torch.tensor(0.5), "power"),
                               torch.tensor([0.0, -2.0, -4.0]))


@pytest.mark.slow  # eager FlexAttention traces on first use (several seconds per process)
@pytest.mark.parametrize("kernel", ["log", "power"])
def test_flex_path_equals_sdpa_path(kernel):
    sdpa = MultiheadAttention(16, 2, bias=Kerple(2, kernel), backend="sdpa").eval()
    flex = MultiheadAttention(16, 2, bias=Kerple(2, kernel), backend="flex").eval()
    flex.load_state_dict(sdpa.state_dict())
    x, hours = torch.randn(2, 10, 16), torch.rand(2, 10).cumsum(-1) * 3
    with torch.no_grad():
        for kwargs in ({}, {"query_positions": hours}, {"is_causal": True}):
            torch.testing.assert_close(flex(x, **kwargs), sdpa(x, **kwargs), rtol=0, atol=1e-5)
