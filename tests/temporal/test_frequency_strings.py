"""Compound and decimal frequency strings mean what pandas 3's ``to_offset`` reads (GluonTS
dispatches its feature sets on that), and ambiguous ones are refused naming the argument."""

from __future__ import annotations

import warnings

import numpy as np
import pandas as pd
import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st
from pandas.tseries.frequencies import to_offset
from posenc.temporal import (
    CalendarFeatures,
    FourierSeasonality,
    calendar_fields,
    localize,
    to_nanoseconds,
    to_seconds,
)
from posenc.temporal._compat import EXACT_MULTIPLES
from posenc.temporal.timestamps import (
    Frequency,
    datetime_index,
    frequency_fields,
    frequency_nanoseconds,
    parse_frequency,
)
from temporal_refs import GLUONTS_FEATURES, gluonts_fields

# pandas' Tick classes and their pandas 3 aliases.
TICK_ALIAS = {"Day": "D", "Hour": "h", "Minute": "min", "Second": "s", "Milli": "ms",
              "Micro": "us", "Nano": "ns"}


def pandas_reading(freq: str) -> Frequency:
    offset = to_offset(freq)
    name = type(offset).__name__
    return Frequency(offset.n, TICK_ALIAS[name]) if name in TICK_ALIAS else None


@pytest.mark.parametrize("freq, n, alias", [
    ("1h30min", 90, "min"), ("1.5h", 90, "min"), ("2D12h", 60, "h"), ("1D24h", 2, "D"),
    ("1h60min", 2, "h"), ("30min30min", 60, "min"), ("1.5h30min", 120, "min"),
    ("1h1.5min", 3690, "s"), ("1.5D", 36, "h"), ("0.5s", 500, "ms"), ("1.1h", 66, "min"),
    ("0.01D", 864, "s"), ("1 h 30 min", 90, "min"), (".5h", 30, "min"), ("1.D", 1, "D"),
    ("+2D", 2, "D"), ("24h", 24, "h"), ("90s", 90, "s"), ("1s1ns", 1_000_000_001, "ns"),
    # Whole multiples are not floats in pandas 3; pandas 2 rounds them beyond 2**53.
    ("9007199254740993ns", 9007199254740993 if EXACT_MULTIPLES else 9007199254740992, "ns"),
    ("1.00000000001h", 1, "h"),  # pandas' np.isclose(n % 1, 0) tolerance
])
def test_fixed_frequencies_read_as_pandas_to_offset(freq, n, alias):
    assert parse_frequency(freq) == (n, alias, None)
    assert parse_frequency(freq) == pandas_reading(freq)
    assert frequency_nanoseconds(freq) == to_offset(freq).nanos


_UNITS = ("D", "h", "min", "s", "ms", "us", "ns")
_MULTIPLE = st.one_of(
    st.just(""), st.integers(0, 400).map(str),
    st.tuples(st.integers(0, 99), st.integers(0, 999)).map(lambda p: f"{p[0]}.{p[1]}"))
_FREQ = st.lists(st.tuples(_MULTIPLE, st.sampled_from(_UNITS), st.sampled_from(["", " "])),
                 min_size=1, max_size=3).map(
    lambda parts: "".join(f"{m}{space}{u}" for m, u, space in parts))


@settings(max_examples=150, deadline=None)
@given(_FREQ)
def test_random_compound_frequencies_agree_with_pandas(freq):
    try:
        expected = pandas_reading(freq)
    except ValueError:
        expected = None
    if expected is None or expected.n <= 0:
        with pytest.raises(ValueError, match="freq"):
            parse_frequency(freq)
    else:
        assert parse_frequency(freq) == expected


@pytest.mark.parametrize("freq", [
    "1h30min", "1.5h", "2D12h", "1D24h", "1.5D", "0.5min", "2.5min", "36h", "15min", "W",
    "2W-MON", "ME", "3MS", "QE-NOV", "QS", "YE-JUN", "YS", "B", "2C", "D", "1D1h"])
def test_gluonts_fields_of_compound_frequencies_follow_pandas_unit(freq):
    assert frequency_fields(freq) == gluonts_fields(freq)


def test_calendar_offsets_keep_multiple_and_anchor_as_pandas():
    for freq in ("2W-MON", "QE-NOV", "3MS", "YE-JUN", "2C"):
        offset = to_offset(freq)
        parsed = parse_frequency(freq)
        assert (parsed.n, parsed.fixed) == (offset.n, False)
    assert parse_frequency("2W-MON") == (2, "W", "MON")


def test_from_frequency_takes_compound_strings():
    assert CalendarFeatures.from_frequency("1h30min").fields == (
        "minute", "hour", "day_of_week", "day_of_month", "day_of_year")
    assert CalendarFeatures.from_frequency("2D12h").fields[0] == "hour"


@pytest.mark.parametrize("freq", ["M", "1M", "15M", "1h30M", "M-JAN"])
def test_m_is_refused_as_ambiguous_naming_the_argument(freq):
    with pytest.raises(ValueError, match=rf"^step={freq!r} is ambiguous: 'M' is month end .*"
                                         r"'ME' \(month end\).*'min' \(minutes\)"):
        parse_frequency(freq, "step")
    with pytest.raises(ValueError, match=rf"^freq={freq!r} is ambiguous"):
        frequency_fields(freq)


def test_lowercase_m_is_refused_pointing_to_min():
    with pytest.raises(ValueError, match=r"'m' is minutes to pd.Timedelta.*'min'"):
        frequency_fields("1h30m")


@pytest.mark.parametrize("freq, match", [
    ("0h", "must be a positive step, got 0 ns"),
    ("-1h", "must be a positive step"),
    ("0W", "must be a positive step, got 0 steps"),
    ("1.5W", "takes whole multiples only"),
    ("1.5ME", "takes whole multiples only"),
    ("1W1D", "combines the calendar offset 'W'"),
    ("W-FOO", r"anchor 'FOO'; 'W' takes one of \['MON'"),
    ("D-MON", "takes no anchor"),
    ("ME-JAN", "takes no anchor"),
    ("1.2345678901s", "not a whole number of nanoseconds"),
    ("1h30", "got '1h30'"),
    ("1D,12h", "got '1D,12h'"),
    ("1hour", r"unknown unit 'hour'"),
    (".h", "multiple without digits"),
    ("99999999999999999999ns", r"is out of range \(a multiple beyond int64\)"),
    ("99999999999999999999W", r"is out of range \(a multiple beyond int64\)"),
])
def test_malformed_frequencies_are_refused(freq, match):
    with pytest.raises(ValueError, match=match):
        parse_frequency(freq)


def test_pandas_agrees_those_strings_are_not_frequencies_it_can_build():
    # The refusals above that pandas also refuses (the others are zero/negative steps or
    # anchors pandas reads differently): no silent disagreement.
    for freq in ("1.5W", "1.5ME", "1W1D", "W-FOO", "D-MON", "1.2345678901s", "1h30", "1D,12h",
                 "1hour"):
        with warnings.catch_warnings(), pytest.raises(ValueError):
            warnings.simplefilter("ignore")
            to_offset(freq)


def test_fixed_length_only_for_tick_units():
    assert frequency_nanoseconds("2D12h") == 60 * 3600 * 10**9
    with pytest.raises(ValueError, match=r"^interval='W' has no fixed length .*'7D'"):
        frequency_nanoseconds("W", "interval")


def test_old_aliases_keep_their_pandas_2_meaning_in_compounds():
    assert parse_frequency("1H30T") == parse_frequency("1h30min") == (90, "min", None)
    assert frequency_fields("4H") == gluonts_fields("4h")


@pytest.mark.parametrize("freq, type_name", [(None, "NoneType"), (1.5, "float")])
def test_non_strings_are_type_errors_naming_the_argument(freq, type_name):
    with pytest.raises(TypeError, match=rf"^step must be a pandas frequency string .*got "
                                        rf"{type_name}"):
        parse_frequency(freq, "step")


def test_monthly_period_freqstr_is_refused_but_its_offset_alias_works():
    periods = pd.period_range("2020-01", periods=3, freq="M")
    with pytest.raises(ValueError, match=r"PeriodIndex spells months 'M': pass its "
                                         r"\.freq\.freqstr \('ME'\)"):
        frequency_fields(periods.freqstr)
    assert frequency_fields(periods.freq.freqstr) == gluonts_fields("ME")


# PeriodIndex input (GluonTS's index type): each period is the instant it starts.


@pytest.mark.parametrize("freq", ["M", "W-WED", "Q-NOV", "Y", "D", "h", "2h", "90min", "s",
                                  "ns"])
def test_a_period_index_is_its_start_times(freq):
    periods = pd.period_range("2019-12-30 01:00", periods=5, freq=freq)
    for value in (periods, pd.Series(periods), periods.array):
        index, shape = datetime_index(value)
        pd.testing.assert_index_equal(index, periods.start_time)
        assert shape == (5,)
    np.testing.assert_array_equal(to_nanoseconds(periods),
                                  periods.start_time.as_unit("ns").asi8)


def test_everything_reading_timestamps_reads_periods_as_their_starts():
    periods = pd.period_range("2021-03-27", periods=48, freq="h")
    starts = periods.start_time
    np.testing.assert_array_equal(to_seconds(periods, "2021-03-27", unit="h"), np.arange(48.0))
    fields = calendar_fields(periods)
    for name, values in calendar_fields(starts).items():
        np.testing.assert_array_equal(fields[name], values)
    enc = FourierSeasonality()
    torch.testing.assert_close(enc(periods), enc(starts), rtol=0, atol=0)
    # Naive wall-clock times, localized like any: Berlin's 02:00 of 2021-03-28 is missing.
    with pytest.raises(ValueError, match="nonexistent"):
        localize(periods, "Europe/Berlin")


def test_hourly_periods_give_gluonts_features_of_the_period_index():
    periods = pd.period_range("2021-03-01", periods=50, freq="7h")
    enc = CalendarFeatures.from_frequency(periods.freq.freqstr)
    out = enc(calendar_fields(periods, fields=enc.required_fields), dtype=torch.float64)
    expected = np.stack([GLUONTS_FEATURES[n](periods) for n in enc.fields], axis=-1)
    np.testing.assert_array_equal(out.numpy(), expected)


def test_long_periods_start_on_their_first_day_and_the_documented_recipe_gives_pandas_fields():
    # pandas' (so GluonTS's) fields of a month are those of its last day; posenc encodes
    # the instant a period starts, and asfreq("D", "end") gives the last days when wanted.
    periods = pd.period_range("2020-01", periods=14, freq="M")
    fields = calendar_fields(periods)
    np.testing.assert_array_equal(fields["day_of_month"], np.ones(14))
    np.testing.assert_array_equal(fields["month"], periods.month)
    last_days = calendar_fields(periods.asfreq("D", "end").to_timestamp())
    np.testing.assert_array_equal(last_days["day_of_month"], periods.day)
    np.testing.assert_array_equal(last_days["day_of_week"], periods.day_of_week)
    np.testing.assert_array_equal(last_days["day_of_year"], periods.day_of_year)
    assert periods.day[1] == 29 and last_days["day_of_month"][1] == 29  # leap February


def test_periods_with_nat_are_refused_naming_the_position():
    periods = pd.PeriodIndex(["2020-01", None, "2020-03"], freq="M")
    with pytest.raises(ValueError, match=r"timestamps contains NaT \(first at flat position 1\)"):
        to_seconds(periods)
