"""Age features: GluonTS's AddAgeFeature values (stored in gluonts_refs.py) for the index,
and real elapsed time for irregular and DST-crossing series."""

from __future__ import annotations

import numpy as np
import pandas as pd
import pytest
import torch
from gluonts_refs import AGE_LINEAR, AGE_LOG_SCALE
from posenc.temporal.age import TRANSFORMS, AgeFeature, age_feature, series_age


def test_index_age_equals_gluonts_add_age_feature():
    index = np.arange(8)
    # GluonTS computes log10 in float32; float64 rounded once is within one float32 ulp.
    np.testing.assert_allclose(age_feature(index).astype(np.float32), AGE_LOG_SCALE,
                               rtol=1.2e-7, atol=0)
    np.testing.assert_array_equal(age_feature(index, "linear"), AGE_LINEAR)
    assert age_feature(index).dtype == np.float64


def test_regular_series_in_its_step_is_the_gluonts_index_age():
    stamps = pd.date_range("2021-01-01", periods=8, freq="h")
    np.testing.assert_array_equal(series_age(stamps, unit="h"), np.arange(8.0))
    np.testing.assert_allclose(age_feature(series_age(stamps, unit="h")).astype(np.float32),
                               AGE_LOG_SCALE, rtol=1.2e-7, atol=0)


def test_irregular_series_age_by_elapsed_time_not_index():
    stamps = pd.DatetimeIndex(["2021-01-01", "2021-01-02", "2021-01-12", "2021-01-12 12:00"])
    np.testing.assert_array_equal(series_age(stamps), [0.0, 1.0, 11.0, 11.5])
    np.testing.assert_allclose(age_feature(series_age(stamps), "log1p"),
                               np.log1p([0, 1, 11, 11.5]), rtol=1e-15)
    # Unsorted: the start is the earliest, not the first given.
    np.testing.assert_array_equal(series_age(stamps[::-1]), [11.5, 11.0, 1.0, 0.0])


def test_aware_timestamps_age_in_real_time_across_dst():
    # Berlin's clocks went forward at 02:00 on 2021-03-28: 00:00 -> 04:00 local is 3 hours.
    local = pd.DatetimeIndex(["2021-03-28 00:00", "2021-03-28 04:00"])
    aware = local.tz_localize("Europe/Berlin")
    np.testing.assert_array_equal(series_age(aware, unit="h"), [0.0, 3.0])
    np.testing.assert_array_equal(series_age(local, unit="h"), [0.0, 4.0])  # wall clock


def test_rows_are_series_and_start_can_be_given():
    ns = np.array([[0, 3600, 7200], [86400, 90000, 86400 * 2]]) * 10**9
    np.testing.assert_array_equal(series_age(ns, unit="h"), [[0, 1, 2], [0, 1, 24]])
    np.testing.assert_array_equal(series_age(ns, "1970-01-01", unit="h"),
                                  [[0, 1, 2], [24, 25, 48]])


def test_module_reads_int64_nanoseconds_on_device_and_matches_the_functions():
    enc = AgeFeature(start="2014-01-01", unit="D", transform="gluonts")
    assert (enc.kind, enc.reads, enc.dim, enc.feature_names) == (
        "additive", "series_start", 1, ["age"])
    stamps = pd.date_range("2014-01-01", periods=48 * 30, freq="30min")
    local = torch.from_numpy(stamps.as_unit("ns").asi8).reshape(30, 48)
    out = enc(local, dtype=torch.float64)
    assert out.shape == (30, 48, 1)
    expected = np.log10(2 + np.arange(48 * 30) / 48).reshape(30, 48, 1)
    np.testing.assert_allclose(out.numpy(), expected, rtol=1e-15, atol=0)
    torch.testing.assert_close(enc(stamps), out.reshape(-1, 1).float(), rtol=0, atol=0)
    # start=None: each row (series) from its own first time.
    rows = AgeFeature(unit="h", transform="linear")(local, dtype=torch.float64)
    np.testing.assert_array_equal(rows[..., 0].numpy(), np.tile(np.arange(48) / 2, (30, 1)))
    assert enc(local, dtype=torch.bfloat16).dtype == torch.bfloat16


def test_ages_before_start_are_refused():
    stamps = pd.DatetimeIndex(["2020-01-02", "2019-12-31"])
    with pytest.raises(ValueError, match="must not precede start .*flat position 1"):
        series_age(stamps, "2020-01-01")
    enc = AgeFeature(start="2020-01-01")
    with pytest.raises(ValueError, match="must not precede start .*flat position 1"):
        enc(torch.from_numpy(stamps.as_unit("ns").asi8))
    with pytest.raises(ValueError, match="age must be >= 0 and not NaN .*-1.0 at flat position 2"):
        age_feature(np.array([0.0, 1.0, -1.0]))
    with pytest.raises(ValueError, match="age must be >= 0 and not NaN"):
        age_feature(torch.tensor([float("nan")]))


@pytest.mark.parametrize("kwargs, error, match", [
    ({"start": 5}, TypeError, "start must be a timestamp .*no unit"),
    ({"start": "now"}, ValueError, "start must be dates, not 'now'"),
    ({"start": "soon"}, ValueError, "start must be a timestamp, got 'soon'"),
    ({"unit": "month"}, ValueError, r"unit must be one of \['ns'"),
    ({"transform": "log"}, ValueError, r"transform must be one of \['gluonts', 'log1p'"),
])
def test_bad_arguments_are_refused_naming_them(kwargs, error, match):
    with pytest.raises(error, match=match):
        AgeFeature(**kwargs)


def test_start_of_the_other_naive_aware_kind_is_refused():
    aware = pd.date_range("2020-01-01", periods=3, freq="D", tz="UTC")
    with pytest.raises(TypeError, match="start is tz-naive .*timestamps are tz-aware"):
        series_age(aware, "2020-01-01")


def test_nat_and_odd_inputs():
    enc = AgeFeature()
    with pytest.raises(ValueError, match="NaT"):
        enc(torch.tensor([0, torch.iinfo(torch.int64).min]))
    with pytest.raises(ValueError, match="at least one dim"):
        enc(torch.tensor(5))
    with pytest.raises(TypeError, match="age must hold int or float ages"):
        age_feature(np.array([True]))
    assert series_age([]).shape == (0,)
    assert enc(torch.zeros(2, 0, dtype=torch.int64)).shape == (2, 0, 1)
    assert TRANSFORMS == ("gluonts", "log1p", "linear")


def _ns(*stamps: str) -> torch.Tensor:
    return torch.from_numpy(pd.DatetimeIndex(stamps).as_unit("ns").asi8)


def test_series_start_is_the_origin_unless_start_is_given():
    """What a Forecaster window needs: the age since its series' first observation, which
    the window's own tokens do not hold."""
    windows = torch.stack([_ns("2020-01-03", "2020-01-04"), _ns("2020-01-10", "2020-01-12")])
    series_start = _ns("2020-01-01", "2020-01-05")[:, None]
    enc = AgeFeature(unit="D", transform="linear")
    np.testing.assert_array_equal(enc(windows, series_start, dtype=torch.float64)[..., 0],
                                  [[2.0, 3.0], [5.0, 7.0]])
    np.testing.assert_array_equal(enc(windows, dtype=torch.float64)[..., 0],
                                  [[0.0, 1.0], [0.0, 2.0]])  # without it: each row's own
    fixed = AgeFeature(start="2019-12-31", unit="D", transform="linear")
    np.testing.assert_array_equal(fixed(windows, series_start, dtype=torch.float64)[..., 0],
                                  [[3.0, 4.0], [10.0, 12.0]])  # an explicit start wins
    np.testing.assert_allclose(AgeFeature()(windows, series_start, dtype=torch.float64)[..., 0],
                               np.log10(2 + np.array([[2.0, 3.0], [5.0, 7.0]])), rtol=1e-15)


def test_a_start_after_a_series_first_observation_is_refused():
    windows = _ns("2020-01-03", "2020-01-04")[None]
    with pytest.raises(ValueError, match=r"^start=2020-01-02 00:00:00 is after the first "
                                         r"observation of a series \(2020-01-01 00:00:00\)"):
        AgeFeature(start="2020-01-02")(windows, _ns("2020-01-01")[:, None])


@pytest.mark.parametrize("series_start, error, match", [
    (_ns("2020-01-01", "2020-01-01"), TypeError, r"series_start must be an int64 tensor of "
                                                 r"shape \(1, 1\) .*got torch.int64 of shape "
                                                 r"\(2,\)"),
    (_ns("2020-01-01")[:, None].double(), TypeError, "got torch.float64"),
    (torch.tensor([[torch.iinfo(torch.int64).min]]), ValueError, "series_start contains NaT"),
    (_ns("2020-01-04")[:, None], ValueError, r"timestamps must not precede series_start .*"
                                             r"flat position 0 does; each series' start must "
                                             r"be its first observation"),
])
def test_bad_series_starts_are_refused_naming_them(series_start, error, match):
    with pytest.raises(error, match=match):
        AgeFeature()(_ns("2020-01-03", "2020-01-04")[None], series_start)


def test_series_start_needs_nanosecond_tensors():
    with pytest.raises(TypeError, match=r"series_start goes with int64 nanosecond timestamps"):
        AgeFeature()(pd.DatetimeIndex(["2020-01-03"]), _ns("2020-01-01")[:, None])
