"""Every encoding is a pure function of (timestamp, configuration): encoding a subset or a
permutation of timestamps gives bitwise the same rows.

(TimeDelta is a feature of the sequence, not of one timestamp; its causal/batch properties
are tested in test_time_delta.py.)
"""

from __future__ import annotations

import numpy as np
import pandas as pd
import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st
from posenc.temporal import (
    CalendarEmbedding,
    CalendarFeatures,
    ContinuousSinusoidal,
    FourierSeasonality,
    Time2Vec,
    calendar_fields,
    time_positions,
)
from posenc.temporal.calendar import CYCLE_PERIODS
from temporal_refs import ZONES, nanoseconds

ALL = tuple(CYCLE_PERIODS)
ORIGIN = pd.Timestamp("2000-01-01", tz="UTC")
torch.manual_seed(0)
EMBEDDING, FIXED, T2V = CalendarEmbedding(8, ALL), CalendarEmbedding(8, ALL, "fixed"), Time2Vec(8)
PIPELINES = {
    "calendar_fields": lambda ts: torch.from_numpy(
        np.stack(list(calendar_fields(ts).values()), axis=-1)),
    "calendar_cyclic": lambda ts: CalendarFeatures(ALL)(calendar_fields(ts)),
    "calendar_ramps": lambda ts: CalendarFeatures(ALL, cyclic=False)(calendar_fields(ts)),
    "calendar_embedding": lambda ts: EMBEDDING(calendar_fields(ts)),
    "calendar_fixed": lambda ts: FIXED(calendar_fields(ts)),
    "fourier": lambda ts: FourierSeasonality(harmonics=5)(ts),
    "continuous": lambda ts: ContinuousSinusoidal(16, 60.0, 1e9)(time_positions(ts)),
    "time2vec": lambda ts: T2V(time_positions(ts, ORIGIN, unit="D")),
}


@pytest.mark.parametrize("name", PIPELINES)
@settings(max_examples=8, deadline=None)
@given(ns=nanoseconds(min_size=2), zone=st.sampled_from(ZONES), seed=st.integers(0, 2**16))
def test_subset_and_permutation_give_bitwise_the_same_rows(name, ns, zone, seed):
    encode = PIPELINES[name]
    ts = pd.DatetimeIndex(ns.view("M8[ns]")).tz_localize("UTC").tz_convert(zone)
    full = encode(ts)
    rng = np.random.default_rng(seed)
    perm = rng.permutation(len(ts))
    subset = np.sort(rng.choice(len(ts), size=max(1, len(ts) // 3), replace=False))
    assert torch.equal(encode(ts[perm]), full[torch.from_numpy(perm)])
    assert torch.equal(encode(ts[subset]), full[torch.from_numpy(subset)])
