"""Compound and decimal frequency strings mean what pandas 3's ``to_offset`` reads (GluonTS
dispatches its feature sets on that), and ambiguous ones are refused naming the argument."""

from __future__ import annotations

import warnings

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from pandas.tseries.frequencies import to_offset
from posenc.temporal import CalendarFeatures
from posenc.temporal.frequencies import (
    Frequency,
    frequency_fields,
    frequency_nanoseconds,
    parse_frequency,
)
from temporal_refs import gluonts_fields

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
    ("9007199254740993ns", 9007199254740993, "ns"),  # whole multiples are not floats
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
