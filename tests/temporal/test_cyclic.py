"""CalendarFeatures: true-period sin/cos pairs, GluonTS ramps and field sets, lookups."""

from __future__ import annotations

import math

import numpy as np
import pandas as pd
import pytest
import torch
from hypothesis import given, settings
from posenc.temporal import CalendarFeatures, calendar_fields
from posenc.temporal.calendar import (
    _BLOCK,
    CYCLE_PERIODS,
    FIELDS,
    _groups,
    _lookup,
    calendar_features,
)
from posenc.temporal.timestamps import frequency_fields
from temporal_refs import GLUONTS_FEATURES, gluonts_fields, nanoseconds

ALL = tuple(CYCLE_PERIODS)


def turn(fraction: float) -> list[float]:
    return [math.sin(2 * math.pi * fraction), math.cos(2 * math.pi * fraction)]


def expected_cyclic(fields: dict[str, np.ndarray], names) -> np.ndarray:
    """The formula, evaluated directly per timestamp in float64."""
    columns = []
    for name in names:
        period = CYCLE_PERIODS[name]
        period = fields[period] if isinstance(period, str) else period
        theta = 2 * np.pi * (fields[name] - FIELDS[name][0]) / period
        columns += [np.sin(theta), np.cos(theta)]
    return np.stack(columns, axis=-1)


@settings(max_examples=20, deadline=None)
@given(nanoseconds())
def test_cyclic_pairs_follow_the_formula_on_true_periods(ns):
    enc = CalendarFeatures(ALL)  # every field: several joint tables
    fields = calendar_fields(ns)
    out = enc(fields, dtype=torch.float64).numpy()
    assert out.shape == (len(ns), 2 * len(ALL))
    np.testing.assert_allclose(out, expected_cyclic(fields, ALL), rtol=0, atol=1e-15)
    np.testing.assert_allclose(out[:, 0::2] ** 2 + out[:, 1::2] ** 2, 1.0, atol=1e-15)
    out32 = enc(fields).numpy()
    assert out32.dtype == np.float32
    np.testing.assert_array_equal(out32, out.astype(np.float32))  # rounded once


def test_known_values_by_hand():
    enc = CalendarFeatures(["hour", "day_of_month", "day_of_year", "week_of_year"])
    # 06:00 is a quarter day; Feb 15 of 2024 is day 14 (0-based) of 29; Dec 31 2024 is day
    # 365 (0-based) of 366; 2020-12-31 is in ISO week 53 of a 53-week year.
    f = calendar_fields(["2024-02-15 06:00", "2024-12-31", "2020-12-31"],
                        fields=enc.required_fields)
    out = enc(f, dtype=torch.float64).numpy()
    np.testing.assert_allclose(out[0, 0:2], [1.0, 0.0], atol=1e-15)
    np.testing.assert_allclose(out[0, 2:4], turn(14 / 29), atol=1e-15)
    np.testing.assert_allclose(out[1, 4:6], turn(365 / 366), atol=1e-15)
    np.testing.assert_allclose(out[2, 6:8], turn(52 / 53), atol=1e-15)


def test_true_period_makes_month_and_year_ends_neighbours():
    enc = CalendarFeatures(["day_of_month", "day_of_year"])
    ts = ["2023-02-28", "2023-03-01", "2023-03-31", "2023-12-31", "2024-01-01"]
    out = enc(calendar_fields(ts, fields=enc.required_fields), dtype=torch.float64).numpy()
    # Feb 28 -> Mar 1 and Dec 31 -> Jan 1 are one step of the circle: a chord of 1/28 and
    # 1/365 of a turn, like any other pair of consecutive days.
    assert np.linalg.norm(out[0, 0:2] - out[1, 0:2]) == pytest.approx(2 * math.sin(math.pi / 28))
    assert np.linalg.norm(out[3, 2:4] - out[4, 2:4]) == pytest.approx(2 * math.sin(math.pi / 365))
    np.testing.assert_allclose(out[1, 0:2], out[4, 0:2])      # the 1st of any month
    assert out[2, 0] == pytest.approx(math.sin(2 * math.pi * 30 / 31))


def test_gluonts_ramps_equal_gluonts_formulas():
    index = pd.DatetimeIndex(["1900-01-01 00:00:00", "2020-02-29 23:59:59",
                              "2021-01-03 12:30:15", "2199-12-31 06:07:08"])
    enc = CalendarFeatures(ALL, cyclic=False)
    out = enc(calendar_fields(index), dtype=torch.float64).numpy()
    expected = np.stack([GLUONTS_FEATURES[name](index) for name in ALL], axis=-1)
    np.testing.assert_array_equal(out, expected)
    assert out.min() >= -0.5 and out.max() <= 0.5
    # Hand-worked: hour 23 -> 0.5, Feb 29 -> (60 - 1) / 365 - 0.5, ISO week 53 -> 0.5.
    assert out[1, ALL.index("hour")] == 0.5
    assert out[1, ALL.index("day_of_year")] == 59 / 365 - 0.5
    assert out[2, ALL.index("week_of_year")] == 0.5


NEW_TO_OLD = {"YE": "A", "YS": "AS", "QE": "Q", "QS": "QS", "ME": "ME", "MS": "MS",
              "W": "W", "W-MON": "W-MON", "D": "D", "B": "B", "h": "H", "4h": "4H",
              "min": "T", "15min": "15T", "s": "S", "30s": "30S", "QE-NOV": "Q-NOV"}


@pytest.mark.parametrize("new, old", NEW_TO_OLD.items())
def test_frequency_fields_match_gluonts_for_old_and_new_aliases(new, old):
    expected = gluonts_fields(new)  # pandas 3 parses only the new alias
    assert frequency_fields(new) == expected
    assert frequency_fields(old) == expected


def test_from_frequency_reproduces_gluonts_time_features():
    index = pd.date_range("2021-03-01", periods=50, freq="7h")
    enc = CalendarFeatures.from_frequency("H")
    expected = np.stack([GLUONTS_FEATURES[n](index) for n in gluonts_fields("h")], axis=-1)
    out = enc(calendar_fields(index, fields=enc.required_fields), dtype=torch.float64)
    np.testing.assert_array_equal(out.numpy(), expected)
    assert enc.feature_names == ["hour", "day_of_week", "day_of_month", "day_of_year"]


@pytest.mark.parametrize("freq, match", [("YE", "no calendar fields"), ("ms", "GluonTS"),
                                         ("BME", "GluonTS"), ("fortnightly", "GluonTS")])
def test_unsupported_frequencies_raise(freq, match):
    with pytest.raises(ValueError, match=match):
        CalendarFeatures.from_frequency(freq)


def test_tensor_fields_and_other_dtypes_give_the_same_rows():
    enc = CalendarFeatures()
    fields = calendar_fields(pd.date_range("2020-01-01", periods=500, freq="5h"),
                             fields=enc.required_fields)
    reference = enc(fields, dtype=torch.float64)
    as_tensors = {k: torch.from_numpy(v).long().reshape(5, 100) for k, v in fields.items()}
    np.testing.assert_array_equal(enc(as_tensors, dtype=torch.float64).reshape(500, -1),
                                  reference)
    # The torch gather (what fields on a GPU take) equals the numpy one.
    (group,) = _groups(enc.fields, True, torch.float64, torch.device("cpu"))
    np.testing.assert_array_equal(_lookup(group, as_tensors).reshape(500, -1), reference)
    bf16 = enc(fields, dtype=torch.bfloat16)
    assert bf16.dtype == torch.bfloat16
    np.testing.assert_array_equal(bf16.float(), reference.to(torch.bfloat16).float())


def test_required_fields_dim_and_names():
    enc = CalendarFeatures(["day_of_year", "hour"])
    assert enc.required_fields == ("day_of_year", "hour", "days_in_year")
    assert enc.dim == 4 and enc.feature_names[:2] == ["day_of_year_sin", "day_of_year_cos"]
    ramps = CalendarFeatures(["day_of_year", "hour"], cyclic=False)
    assert ramps.required_fields == ("day_of_year", "hour") and ramps.dim == 2


@pytest.mark.parametrize("fields", [[], ["hour", "hour"], ["days_in_month"], ["fortnight"]])
def test_bad_field_lists_raise(fields):
    with pytest.raises(ValueError, match="fields must be distinct names"):
        CalendarFeatures(fields)


def test_bad_field_values_raise():
    enc = CalendarFeatures(["day_of_month"])
    with pytest.raises(ValueError, match="no 'days_in_month'"):
        enc({"day_of_month": np.array([1])})
    with pytest.raises(ValueError, match=r"days_in_month'\] must lie in \[28, 31\]"):
        enc({"day_of_month": np.array([1]), "days_in_month": np.array([32])})


def test_numpy_blocks_equal_the_torch_gather_across_block_boundaries():
    rng = np.random.default_rng(0)
    n = 2 * _BLOCK + 123
    fields = {name: rng.integers(FIELDS[name][0], FIELDS[name][1] + 1, n, dtype=np.int32)
              for name in ("hour", "day_of_week", "month")}
    fields["days_in_month"] = rng.integers(28, 32, n).astype(np.int16)  # any int dtype
    fields["day_of_month"] = rng.integers(1, fields["days_in_month"] + 1).astype(np.int32)
    enc = CalendarFeatures()
    (group,) = _groups(enc.fields, True, torch.float32, torch.device("cpu"))
    expected = _lookup(group, {k: torch.from_numpy(v).long() for k, v in fields.items()})
    assert torch.equal(enc(fields), expected)
    fields["hour"][-1] = 24  # out of range in the last block only
    with pytest.raises(ValueError, match=r"fields\['hour'\] must lie in \[0, 23\]"):
        enc(fields)
    with pytest.raises(ValueError, match=r"fields\['hour'\] must lie in \[0, 23\]"):
        _lookup(group, {k: torch.from_numpy(v).long() for k, v in fields.items()})


def test_an_error_reports_the_first_bad_block_and_field():
    rng = np.random.default_rng(1)
    n = 9 * _BLOCK + 7
    fields = {name: rng.integers(FIELDS[name][0], FIELDS[name][1] + 1, n, dtype=np.int32)
              for name in ("hour", "day_of_week", "month", "days_in_month")}
    fields["day_of_month"] = rng.integers(1, fields["days_in_month"] + 1).astype(np.int32)
    fields["hour"][7 * _BLOCK + 3] = 24
    fields["month"][2 * _BLOCK:3 * _BLOCK] = 5
    fields["month"][2 * _BLOCK + 1] = 0
    fields["hour"][2 * _BLOCK + 2] = -1  # same block: month is checked before hour
    with pytest.raises(ValueError, match=r"fields\['month'\] must lie in \[1, 12\], got values "
                                         r"in \[0, 5\]"):
        CalendarFeatures()(fields)


@pytest.mark.parametrize("dtype, value", [(np.int64, 2**32), (np.int64, -(2**32) + 5),
                                          (np.uint32, 2**32 - 1), (np.uint64, 2**32 + 3),
                                          (np.int16, -32768), (np.uint8, 255)])
def test_out_of_range_values_of_any_int_dtype_raise_instead_of_wrapping(dtype, value):
    # 2**32 + 3 would read as hour 3 if it were narrowed to int32 before the check.
    hour = np.array([1, 2, value, 3], dtype=dtype)
    with pytest.raises(ValueError, match=rf"fields\['hour'\] must lie in \[0, 23\], got "
                                         rf"values in \[{min(1, value)}, {max(3, value)}\]"):
        CalendarFeatures(["hour"])({"hour": hour})
    assert torch.equal(CalendarFeatures(["hour"])({"hour": np.array([1, 23], dtype)}),
                       CalendarFeatures(["hour"])({"hour": np.array([1, 23])}))


@pytest.mark.parametrize("shape", [(0,), (2, 0)])
def test_empty_fields_give_empty_features(shape):
    fields = {name: np.ones(shape, np.int32) for name in FIELDS}
    enc = CalendarFeatures(ALL)
    assert enc(fields).shape == (*shape, enc.dim)
    tensors = {k: torch.from_numpy(v) for k, v in fields.items()}
    assert CalendarFeatures(ALL, cyclic=False)(tensors).shape == (*shape, len(ALL))


def test_fields_of_different_shapes_raise():
    with pytest.raises(ValueError, match="one shape"):
        CalendarFeatures(["hour", "month"])({"hour": np.zeros(3, int), "month": np.ones(4, int)})


def test_non_float_output_dtype_raises():
    fields = calendar_fields(pd.DatetimeIndex(["2021-01-01"]), fields=["hour"])
    with pytest.raises(TypeError, match="dtype must be a floating torch.dtype"):
        CalendarFeatures(["hour"])(fields, dtype=torch.int64)


@pytest.mark.parametrize("name, value, period", [
    ("day_of_month", 31, 30), ("day_of_year", 366, 365), ("week_of_year", 53, 52)])
def test_field_past_its_own_period_raises(name, value, period):
    # Day 31 of a 30-day month would be encoded as day 1 of the next, silently.
    fields = {name: np.array([1, value]), CYCLE_PERIODS[name]: np.array([period, period])}
    with pytest.raises(ValueError, match=rf"fields\['{name}'\] .*{CYCLE_PERIODS[name]}"):
        CalendarFeatures([name])(fields)
    with pytest.raises(ValueError, match=rf"fields\['{name}'\]"):
        CalendarFeatures([name])({k: torch.from_numpy(v) for k, v in fields.items()})
    fine = {name: np.array([1, period]), CYCLE_PERIODS[name]: np.array([period, period])}
    assert CalendarFeatures([name])(fine).shape == (2, 2)


def test_field_past_its_period_in_a_later_block_raises_on_both_paths():
    # The check runs per block, with the range checks: a bad value in the last block counts.
    rng = np.random.default_rng(2)
    n = 2 * _BLOCK + 5
    fields = {"days_in_month": rng.integers(28, 32, n, dtype=np.int32)}
    fields["day_of_month"] = rng.integers(1, fields["days_in_month"] + 1).astype(np.int32)
    enc = CalendarFeatures(["day_of_month"])
    assert enc(fields).shape == (n, 2)
    fields["day_of_month"][-1], fields["days_in_month"][-1] = 31, 30
    match = r"fields\['day_of_month'\] must not exceed fields\['days_in_month'\]"
    with pytest.raises(ValueError, match=match):
        enc(fields)
    (group,) = _groups(enc.fields, True, torch.float32, torch.device("cpu"))
    with pytest.raises(ValueError, match=match):
        _lookup(group, {k: torch.from_numpy(v).long() for k, v in fields.items()})


def test_calendar_features_has_its_own_module():
    assert CalendarFeatures.__module__ == "posenc.temporal.calendar"
    from posenc.temporal.calendar import CalendarFeatures as from_module
    assert from_module is CalendarFeatures


@pytest.mark.parametrize("flag", ["no", 0, None])
def test_cyclic_must_be_a_bool(flag):
    # bool("no") is True: a config typo would silently pick sin/cos features.
    with pytest.raises(TypeError, match="cyclic must be a bool"):
        CalendarFeatures(["hour"], cyclic=flag)
    with pytest.raises(TypeError, match="cyclic must be a bool"):
        calendar_features({"hour": np.array([1])}, ["hour"], cyclic=flag)
