"""Frequency strings have one home, posenc.temporal.timestamps (with the durations and
timestamps they are read beside)."""

from __future__ import annotations

import re

import numpy as np
import pandas as pd
import pytest
from posenc.temporal import timestamps


def test_frequency_fields_lives_in_timestamps():
    assert timestamps.frequency_fields.__module__ == "posenc.temporal.timestamps"
    assert timestamps.frequency_fields("15min") == (
        "minute", "hour", "day_of_week", "day_of_month", "day_of_year")


@pytest.mark.parametrize("freq", ["15", "fortnight", "", "15 min x"])
def test_unknown_frequencies_are_refused_naming_freq(freq):
    with pytest.raises(ValueError, match=rf"freq must be a pandas frequency string .*got "
                                         rf"{freq!r}"):
        timestamps.frequency_fields(freq)


@pytest.mark.parametrize("freq, type_name", [(None, "NoneType"), (15, "int"), (["h"], "list")])
def test_a_frequency_that_is_not_a_string_is_a_type_error(freq, type_name):
    with pytest.raises(TypeError, match=rf"^freq must be a pandas frequency string .*got "
                                        rf"{type_name} "):
        timestamps.frequency_fields(freq)


# -- durations: one vocabulary with the frequencies ------------------------------------------
_H = 3600 * 10**9


@pytest.mark.parametrize("value, ns", [
    ("1h", _H), ("30min", _H // 2), ("7D", 7 * 24 * _H), ("1W", 7 * 24 * _H),
    ("2W", 14 * 24 * _H), ("1.5h", 3 * _H // 2), ("1h30min", 3 * _H // 2), ("12ms", 12 * 10**6),
    ("1T", 60 * 10**9), ("7 days", 7 * 24 * _H), ("1 hour 30 minutes", 3 * _H // 2),
    ("0 days 01:00:00", _H), ("01:00:00", _H), ("PT1M", 60 * 10**9), ("P1DT2H", 26 * _H),
    ("1µs", 1000), (pd.offsets.Hour(2), 2 * _H), (pd.offsets.Minute(90), 3 * _H // 2),
])
def test_fixed_durations_read_as_their_nanoseconds(value, ns):
    assert timestamps.parse_duration(value, "x") == ns


@pytest.mark.parametrize("value, what", [
    ("12MS", "12 calendar month"), ("1MS", "1 calendar month"), ("ME", "1 calendar month"),
    (" 12 MS ", "12 calendar month"), ("1YS", "1 calendar year"), ("2QE", "2 calendar quarter"),
    ("5B", "5 calendar business day"), ("1m", "ambiguous"), ("1M", "ambiguous"),
    ("2h30m", "ambiguous"), ("P1M", "ISO 8601 duration in calendar months"),
    (np.timedelta64(1, "M"), "in calendar months"), (np.timedelta64(2, "Y"), "in calendar months"),
    (pd.offsets.MonthBegin(), "a calendar offset"),
    (pd.offsets.BusinessDay(2), "a calendar offset"),
])
def test_calendar_and_ambiguous_units_are_refused_as_durations(value, what):
    # pd.Timedelta reads "12MS" as 12 ms, "1m" and ISO "P1M" as a minute.
    with pytest.raises(ValueError, match=rf"^season={re.escape(repr(value))} is .*{what}.*"
                                         r"takes a fixed duration"):
        timestamps.parse_duration(value, "season")


def test_a_calendar_duration_suggests_a_fixed_one_of_about_its_length():
    with pytest.raises(ValueError, match=r"e\.g\. '365D' for about as long, or 12 steps"):
        timestamps.parse_duration("12MS", "season", alternative="12 steps")
    with pytest.raises(ValueError, match=r"e\.g\. '91D' for about as long"):
        timestamps.parse_duration("QS", "season")


def test_a_duration_past_int64_is_out_of_range_naming_the_argument():
    for value in ("300000D", "99999999999999999999ns"):  # past int64 ns; past int64 itself
        with pytest.raises(ValueError, match=rf"^x={value!r} is out of range"):
            timestamps.parse_duration(value, "x")
