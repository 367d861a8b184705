"""calendar_fields equals pandas' accessors, in local time, DST-correct, any resolution."""

from __future__ import annotations

import datetime as dt

import numpy as np
import pandas as pd
import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st
from posenc.temporal import calendar_fields, localize, to_nanoseconds, to_seconds
from posenc.temporal._compat import TEXT_UNIT
from posenc.temporal.calendar import FIELDS, check_field_range, field_column
from temporal_refs import (
    ZONES,
    dst_transition_days,
    iso_weeks_in_year,
    nanoseconds,
    pandas_fields,
)


def assert_fields_equal(ours: dict[str, np.ndarray], index: pd.DatetimeIndex) -> None:
    expected = pandas_fields(index)
    for name, values in expected.items():
        np.testing.assert_array_equal(ours[name], values, err_msg=name)


@settings(max_examples=25, deadline=None)
@given(nanoseconds(), st.sampled_from([None, "UTC", *ZONES]),
       st.sampled_from(["s", "ms", "us", "ns"]))
def test_fields_equal_pandas(ns, zone, unit):
    index = pd.DatetimeIndex(ns.view("M8[ns]")).as_unit(unit)
    if zone is not None:
        index = index.tz_localize("UTC").tz_convert(zone)
    fields = calendar_fields(index)
    assert list(fields) == list(FIELDS)
    assert all(v.dtype == np.int32 and v.shape == ns.shape for v in fields.values())
    assert_fields_equal(fields, index)


@pytest.mark.parametrize("zone", ZONES)
def test_fields_equal_pandas_across_both_dst_transitions(zone):
    days = dst_transition_days(zone, 2021)
    assert len(days) == (0 if zone == "Asia/Kolkata" else 2)
    for day in days or [pd.Timestamp("2021-06-01", tz="UTC")]:
        # Every 5 minutes from a day before to a day after the change, as instants.
        index = pd.date_range(day - pd.Timedelta("1D"), day + pd.Timedelta("2D"), freq="5min")
        assert_fields_equal(calendar_fields(index, tz=zone), index.tz_convert(zone))


def test_tz_argument_converts_aware_input():
    index = pd.date_range("2021-03-27 20:00", periods=12, freq="h", tz="UTC")
    assert_fields_equal(calendar_fields(index, tz="Europe/London"),
                        index.tz_convert("Europe/London"))
    assert_fields_equal(calendar_fields(index.tz_convert("Asia/Kolkata")),
                        index.tz_convert("Asia/Kolkata"))


def test_known_values_by_hand():
    # 2021-01-03 is a Sunday in ISO week 53 of 2020; 2024-12-30 a Monday in week 1 of 2025.
    f = calendar_fields(["2021-01-03 23:59:58", "2024-12-30 00:00:00", "2000-02-29 12:34:56"])
    assert f["day_of_week"].tolist() == [6, 0, 1]
    assert f["week_of_year"].tolist() == [53, 1, 9]
    assert f["weeks_in_year"].tolist() == [53, 52, 52]
    assert f["day_of_year"].tolist() == [3, 365, 60]
    assert f["days_in_month"].tolist() == [31, 31, 29]
    assert f["days_in_year"].tolist() == [365, 366, 366]
    assert (f["hour"].tolist(), f["minute"].tolist(), f["second"].tolist()) == (
        [23, 0, 12], [59, 0, 34], [58, 0, 56])


@settings(max_examples=15, deadline=None)
@given(nanoseconds())
def test_weeks_in_year_is_the_iso_year_length(ns):
    index = pd.DatetimeIndex(ns.view("M8[ns]"))
    iso_year = index.isocalendar().year.to_numpy(dtype=np.int64)
    np.testing.assert_array_equal(calendar_fields(index)["weeks_in_year"],
                                  iso_weeks_in_year(iso_year))


def test_per_day_table_and_direct_paths_agree():
    # Dense timestamps (few distinct days) use the per-day table; sparse ones the direct path.
    dense = to_nanoseconds(pd.date_range("1999-12-25", "2000-01-05", freq="7min"))
    sparse = dense[::1000] + np.arange(len(dense[::1000])) * 40 * 365 * 86400 * 10**9
    both = np.concatenate([dense, sparse])
    together = calendar_fields(both)
    for part, values in ((slice(0, len(dense)), dense), (slice(len(dense), None), sparse)):
        alone = calendar_fields(values)
        for name in FIELDS:
            np.testing.assert_array_equal(alone[name], together[name][part])


def test_subset_shape_and_empty_input():
    grid = to_nanoseconds(pd.date_range("2021-01-01", periods=6, freq="17h")).reshape(2, 3)
    f = calendar_fields(grid, fields=["month", "hour"])
    assert list(f) == ["hour", "month"] and f["hour"].shape == (2, 3)
    empty = calendar_fields(np.array([], dtype="M8[ns]"))
    assert all(v.shape == (0,) for v in empty.values())


def test_seattle_2010_localizes_and_encodes(seattle):
    naive = pd.DatetimeIndex(seattle["date"])
    assert naive.unit == TEXT_UNIT and len(naive) == 8759  # read from text by pandas
    # The data has a reading at the nonexistent 02:00 of March 14 and one at the repeated
    # 01:00 of November 7: both must be refused unless we say what they mean.
    with pytest.raises(ValueError, match="nonexistent"):
        localize(naive, "America/Los_Angeles")
    with pytest.raises(ValueError, match="ambiguous"):
        localize(naive, "America/Los_Angeles", nonexistent="shift_forward")
    local = localize(naive, "America/Los_Angeles", nonexistent="shift_forward",
                     ambiguous=True)
    hours = np.diff(to_seconds(local, unit="h"))
    # Real elapsed time: hourly everywhere except the one reading that is missing at the
    # fall-back (01:00 PDT is kept, 01:00 PST never recorded).
    fall_back = int(np.flatnonzero(naive == pd.Timestamp("2010-11-07 01:00"))[0])
    assert hours[fall_back] == 2.0
    assert np.all(np.delete(hours, fall_back) == 1.0)
    # Wall-clock differences say the opposite at both changes: that is the naive artifact.
    naive_hours = np.diff(to_seconds(naive, unit="h"))
    spring = int(np.flatnonzero(naive == pd.Timestamp("2010-03-14 02:00"))[0])
    assert naive_hours[spring] == 2.0 and naive_hours[fall_back] == 1.0
    fields = calendar_fields(local)
    assert_fields_equal(fields, local)
    assert fields["hour"][spring] == 3  # the 02:00 reading, shifted to the real 03:00 PDT
    utc_fields = calendar_fields(local, tz="UTC")
    assert utc_fields["hour"][0] == 8 and utc_fields["hour"][spring] == 10


def test_naive_input_with_tz_raises():
    with pytest.raises(TypeError, match="tz-naive.*localize"):
        calendar_fields(pd.DatetimeIndex(["2021-01-01"]), tz="Europe/London")
    with pytest.raises(ValueError, match="tz must be a time zone"):
        calendar_fields(pd.DatetimeIndex(["2021-01-01"], tz="UTC"), tz="Mars/Olympus")


def test_bad_field_names_raise():
    with pytest.raises(ValueError, match="fields must be"):
        calendar_fields(["2021-01-01"], fields=["hour", "fortnight"])


def test_field_column_checks_presence_dtype_and_range():
    good = {"hour": np.array([0, 23]), "month": torch.tensor([1, 12])}
    assert check_field_range(field_column(good, "month"), "month").dtype == torch.int64
    with pytest.raises(ValueError, match="no 'minute'"):
        field_column(good, "minute")
    with pytest.raises(TypeError, match=r"fields\['hour'\] must hold integers"):
        field_column({"hour": np.array([1.0])}, "hour")
    with pytest.raises(ValueError, match=r"\[0, 23\], got values in \[0, 24\]"):
        check_field_range(np.array([0, 24]), "hour")
    with pytest.raises(ValueError, match=r"\[1, 12\], got values in \[0, 12\]"):
        check_field_range(torch.tensor([0, 12]), "month")


def test_wall_clock_past_the_range_raises_instead_of_wrapping():
    # UTC 2262-04-11 23:47 is past int64 ns in any zone east of UTC: a fixed offset used to
    # wrap to 1677 silently, a zone raised pandas' error without naming the argument.
    last = pd.DatetimeIndex([pd.Timestamp.max]).tz_localize("UTC")
    for tz in (dt.timezone(dt.timedelta(hours=5)), "Pacific/Kiritimati"):
        with pytest.raises(ValueError, match="timestamps .*wall-clock time .*out of range"):
            calendar_fields(last, tz=tz, fields=["hour"])
    first = pd.DatetimeIndex([pd.Timestamp.min]).tz_localize("UTC")
    with pytest.raises(ValueError, match="timestamps .*wall-clock time .*out of range"):
        calendar_fields(first, tz="America/New_York", fields=["hour"])
    # At a coarser resolution the same instants have room: exact fields.
    out = calendar_fields(last.as_unit("s"), tz=dt.timezone(dt.timedelta(hours=5)),
                          fields=["hour", "day_of_month"])
    assert (out["hour"][0], out["day_of_month"][0]) == (4, 12)


@pytest.mark.parametrize("tz", [5, 1.5, True])
def test_numeric_time_zone_raises(tz):
    # pandas would read 5 as a fixed offset of 5 seconds.
    aware = pd.DatetimeIndex(["2021-01-01"], tz="UTC")
    with pytest.raises(TypeError, match="tz must be a time zone name or tzinfo"):
        calendar_fields(aware, tz=tz)
    with pytest.raises(TypeError, match="tz must be a time zone name or tzinfo"):
        localize(aware.tz_localize(None), tz)
