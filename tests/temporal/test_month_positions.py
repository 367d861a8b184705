"""Calendar months as a time unit: ``month_positions`` against pandas, and
``parse_time_unit``."""

from __future__ import annotations

import numpy as np
import pandas as pd
import pytest
import torch
from posenc.temporal.calendar import month_positions
from posenc.temporal.timestamps import TimeUnit, parse_time_unit


def _pandas_months(stamps: pd.DatetimeIndex) -> np.ndarray:
    """Months since 1970-01 + the fraction of the month elapsed, from pandas' fields."""
    start = stamps.to_period("M").start_time.as_unit("ns")
    elapsed = (stamps - start) / (stamps.days_in_month.to_numpy() * pd.Timedelta("1D"))
    return (stamps.year.to_numpy() - 1970) * 12 + stamps.month.to_numpy() - 1 + elapsed


def _positions(stamps: pd.DatetimeIndex) -> np.ndarray:
    months, fraction = month_positions(torch.from_numpy(stamps.as_unit("ns").asi8.copy()))
    return months.numpy() + fraction.numpy()


def test_month_starts_are_integers_before_and_after_1970_and_across_leap_days():
    stamps = pd.date_range("1899-11-01", "2101-03-01", freq="MS")
    months, fraction = month_positions(torch.from_numpy(stamps.as_unit("ns").asi8.copy()))
    expected = (stamps.year - 1970) * 12 + stamps.month - 1
    assert months.tolist() == expected.tolist()
    assert fraction.dtype == torch.float64 and not fraction.any()


def test_any_instant_matches_pandas_fields_to_float64_precision():
    rng = np.random.default_rng(0)
    ns = rng.integers(pd.Timestamp("1850-01-01").value, pd.Timestamp("2150-01-01").value,
                      20000)
    stamps = pd.DatetimeIndex(np.sort(ns).view("M8[ns]"))
    np.testing.assert_allclose(_positions(stamps), _pandas_months(stamps), rtol=0, atol=1e-9)


@pytest.mark.parametrize(("stamp", "expected"), [
    ("2024-02-15 12:00", 649 + 14.5 / 29),   # leap February: 29 days
    ("2023-02-15 12:00", 637 + 14.5 / 28),
    ("2000-02-29 00:00", 361 + 28 / 29),      # 2000 is a leap year (divisible by 400)
    ("1900-03-01 00:00", -838.0),             # 1900 is not: Feb 28 -> Mar 1
    ("1970-01-16 12:00", 15.5 / 31),
    ("1969-12-31 18:00", -1 + 30.75 / 31),
])
def test_hand_computed_mid_month_values_are_the_day_fraction(stamp, expected):
    assert _positions(pd.DatetimeIndex([stamp]))[0] == pytest.approx(expected, abs=1e-12)


def test_dst_aware_input_counts_wall_clock_time():
    # Berlin, March 2021: the wall clock skips 02:00-03:00 on the 28th. On the wall clock
    # noon of the 16th is 15.5 days into the 31-day month; in real time it is not.
    aware = pd.DatetimeIndex(["2021-03-16 12:00", "2021-03-31 23:00"]).tz_localize(
        "Europe/Berlin")
    local = aware.tz_localize(None)
    np.testing.assert_allclose(_positions(local), [614 + 15.5 / 31, 614 + (30 + 23 / 24) / 31],
                               rtol=0, atol=1e-12)
    np.testing.assert_allclose(_positions(local), _pandas_months(local), atol=1e-12)


def test_non_int64_input_is_refused():
    with pytest.raises(TypeError, match="local must be an int64 tensor"):
        month_positions(torch.zeros(3))
    with pytest.raises(TypeError, match="local must be an int64 tensor"):
        month_positions(np.zeros(3, np.int64))


@pytest.mark.parametrize(("value", "months"), [
    ("MS", 1), ("1MS", 1), ("12MS", 12), ("ME", 1), ("3ME", 3), ("QS", 3), ("QE", 3),
    ("Q", 3), ("QS-NOV", 3), ("2QS", 6), ("YS", 12), ("YE", 12), ("A", 12), ("Y", 12),
    ("month", 1), ("2 months", 2), ("Quarter", 3), ("year", 12), ("3 years", 36),
])
def test_calendar_time_units_are_months(value, months):
    assert parse_time_unit(value) == TimeUnit(nanoseconds=0, months=months)


@pytest.mark.parametrize(("value", "ns"), [("1h", 3600 * 10**9), ("7D", 7 * 86400 * 10**9),
                                           ("1W", 7 * 86400 * 10**9)])
def test_fixed_time_units_are_nanoseconds(value, ns):
    assert parse_time_unit(value) == TimeUnit(nanoseconds=ns, months=0)


@pytest.mark.parametrize(("value", "match"), [
    ("M", "'M' is ambiguous"), ("0MS", "positive step"), ("0 months", "positive number"),
    ("1.5MS", "whole multiples"), ("B", "business day"), ("3600", "has no unit"),
    ("MS-JAN", "takes no anchor"), ("fortnight", "must be"),
])
def test_bad_time_units_name_the_argument(value, match):
    with pytest.raises(ValueError, match=rf"time_unit.*{match}"):
        parse_time_unit(value, "time_unit")
