"""Relative-time attention: core's RoPE and ALiBi driven by timestamps."""

from __future__ import annotations

import numpy as np
import pandas as pd
import torch
from posenc.core import ALiBi, MultiheadAttention, RotaryEncoding
from posenc.core.bias import alibi_slopes
from posenc.temporal import time_positions

# Irregular observation times: gaps of 1 h, 3.5 h, 26 h, ...
OFFSETS_H = np.array([0, 1, 2, 5.5, 6, 32, 33, 33.25, 40, 41])
TIMES = pd.Timestamp("2150-06-01 08:00", tz="Europe/London") + pd.to_timedelta(
    OFFSETS_H, unit="h")


# core's rotations are float32 (angles are formed in float64 first), so scores agree to ~1e-7
# relative; a position error of one gap would move them by O(1).


def rope_scores(positions: torch.Tensor, q: torch.Tensor, k: torch.Tensor) -> torch.Tensor:
    rope = RotaryEncoding(16, base=100.0)
    return rope.rotate(q, positions) @ rope.rotate(k, positions).transpose(-1, -2)


def test_rope_score_depends_only_on_the_time_difference():
    torch.manual_seed(0)
    n = len(TIMES)
    # The same query vector at every position and the same key vector at every position,
    # so any change in score comes from the positions alone.
    q = torch.randn(1, 2, 1, 16, dtype=torch.float64).expand(1, 2, n, 16)
    k = torch.randn(1, 2, 1, 16, dtype=torch.float64).expand(1, 2, n, 16)
    hours = time_positions(TIMES, unit="h")  # ~1.6e6 h since 1970, float64
    scores = rope_scores(hours, q, k)
    dt = OFFSETS_H[:, None] - OFFSETS_H[None, :]
    # Equal differences give equal scores, wherever the pair sits in time ...
    for value in np.unique(dt):
        pairs = scores[..., torch.from_numpy(dt == value)]
        torch.testing.assert_close(pairs, pairs[..., :1].expand_as(pairs), rtol=0, atol=1e-5)
    # ... and shifting every timestamp (any origin) changes nothing.
    shifted = time_positions(TIMES + pd.Timedelta("1234.5h"), unit="h")
    torch.testing.assert_close(rope_scores(shifted, q, k), scores, rtol=0, atol=1e-5)
    # Token indices would not see the gaps: their scores differ from the time-based ones.
    by_index = rope_scores(torch.arange(n, dtype=torch.float64), q, k)
    assert not torch.allclose(by_index, scores, atol=1e-3)


def test_alibi_bias_is_minus_slope_times_time_gap_in_the_chosen_unit():
    alibi = ALiBi(4, causal=False)
    for unit, per_hour in (("h", 1.0), ("min", 60.0)):
        positions = time_positions(TIMES, TIMES[0], unit=unit)
        bias = alibi(positions, positions)
        gaps = torch.from_numpy(np.abs(OFFSETS_H[:, None] - OFFSETS_H[None, :]) * per_hour)
        expected = -alibi_slopes(4)[:, None, None].double() * gaps
        torch.testing.assert_close(bias[0].double(), expected, rtol=1e-6, atol=1e-4)


def test_attention_with_time_positions_ignores_the_origin():
    torch.manual_seed(0)
    attn = MultiheadAttention(32, 2, rotary=RotaryEncoding(16), bias=ALiBi(2))
    x = torch.randn(1, len(TIMES), 32)
    out = attn(x, query_positions=time_positions(TIMES, unit="h"))
    later = attn(x, query_positions=time_positions(TIMES + pd.Timedelta("9000h"), unit="h"))
    torch.testing.assert_close(out, later, rtol=0, atol=1e-5)
    by_index = attn(x)
    assert not torch.allclose(out, by_index, atol=1e-3)
