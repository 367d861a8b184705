"""The one timestamp conversion: accepted inputs, elapsed time, localization, errors."""

from __future__ import annotations

import datetime as dt

import numpy as np
import pandas as pd
import pytest
import torch
from hypothesis import given, settings
from posenc.temporal import localize, parse_timestamps, time_positions, to_nanoseconds, to_seconds
from posenc.temporal._compat import TEXT_UNIT
from posenc.temporal.timestamps import UNITS, datetime_index
from temporal_refs import nanoseconds


def test_every_input_kind_gives_the_same_nanoseconds():
    ns = np.array([0, 1_600_000_000_123_456_789, -2_000_000_000_000_000_000], dtype=np.int64)
    index = pd.DatetimeIndex(ns.view("M8[ns]"))
    kinds = [ns, torch.from_numpy(ns), ns.view("M8[ns]"), index, pd.Series(index),
             list(index), [str(t) for t in index]]
    for kind in kinds:
        np.testing.assert_array_equal(to_nanoseconds(kind), ns)


def test_resolution_does_not_change_values():
    # pandas parses strings to TEXT_UNIT (microseconds in pandas 3), numpy dates to seconds.
    stamps = ["1901-02-03 04:05:06", "2199-12-31 23:59:59"]
    parsed = pd.DatetimeIndex(stamps)
    assert parsed.unit == TEXT_UNIT
    expected = np.array([pd.Timestamp(s).value for s in stamps])
    for unit in ("s", "ms", "us", "ns"):
        np.testing.assert_array_equal(to_nanoseconds(parsed.as_unit(unit)), expected)
    np.testing.assert_array_equal(to_nanoseconds(np.array(stamps, dtype="M8[s]")), expected)


def test_aware_input_is_utc_instants_and_shape_is_kept():
    local = pd.DatetimeIndex(["2021-07-01 12:00"]).tz_localize("America/New_York")
    assert to_nanoseconds(local)[0] == pd.Timestamp("2021-07-01 16:00").value
    grid = np.arange(6, dtype=np.int64).reshape(2, 3) * 10**9
    assert to_seconds(grid).shape == (2, 3)
    np.testing.assert_array_equal(to_seconds(grid), grid / 1e9)


@settings(max_examples=30, deadline=None)
@given(nanoseconds())
def test_to_seconds_matches_exact_integer_arithmetic(ns):
    origin = pd.Timestamp("1970-01-01") + pd.Timedelta(int(ns[0]) // 7, "ns")
    for unit, length in UNITS.items():
        expected = (ns - origin.value) / length  # float64 of an exact int64 difference
        got = to_seconds(ns, origin, unit=unit)
        np.testing.assert_allclose(got, expected, rtol=1e-15, atol=0)


def test_to_seconds_is_exact_to_the_tick_near_the_origin():
    ts = pd.DatetimeIndex(["2150-06-01 00:00:00.000000001", "2150-06-01 00:00:01"])
    np.testing.assert_array_equal(to_seconds(ts, origin="2150-06-01", unit="ns"), [1.0, 1e9])
    np.testing.assert_array_equal(to_seconds(ts.as_unit("s"), "2150-05-31", unit="D"),
                                  [1.0, 1 + 1 / 86400])


def test_to_seconds_counts_real_time_across_dst():
    # 01:00 -> 03:00 on the clock is one real hour on a spring-forward night.
    ts = pd.DatetimeIndex(["2021-03-14 01:00", "2021-03-14 03:00"]).tz_localize(
        "America/New_York")
    assert np.diff(to_seconds(ts, unit="h"))[0] == 1.0
    assert np.diff(to_seconds(ts.tz_localize(None), unit="h"))[0] == 2.0


def test_time_positions_is_a_float64_tensor_of_to_seconds():
    ts = pd.date_range("2020-01-01", periods=5, freq="37min")
    positions = time_positions(ts, ts[0], unit="h")
    assert positions.dtype == torch.float64
    np.testing.assert_array_equal(positions.numpy(), np.arange(5) * 37 / 60)


def test_localize_raises_on_dst_gap_and_repeat_unless_told():
    gap = pd.DatetimeIndex(["2021-03-14 02:30"])
    with pytest.raises(ValueError, match="nonexistent"):
        localize(gap, "America/New_York")
    shifted = localize(gap, "America/New_York", nonexistent="shift_forward")
    assert shifted[0] == pd.Timestamp("2021-03-14 03:00", tz="America/New_York")
    repeat = pd.DatetimeIndex(["2021-11-07 01:30"])
    with pytest.raises(ValueError, match="ambiguous"):
        localize(repeat, "America/New_York")
    first = localize(repeat, "America/New_York", ambiguous=True)
    second = localize(repeat, "America/New_York", ambiguous=False)
    assert (second[0] - first[0]) == pd.Timedelta(hours=1)


def test_localize_rejects_aware_input_and_bad_zone():
    with pytest.raises(TypeError, match="already tz-aware"):
        localize(pd.DatetimeIndex(["2021-01-01"], tz="UTC"), "Europe/London")
    with pytest.raises(ValueError, match="Not/AZone"):
        localize(pd.DatetimeIndex(["2021-01-01"]), "Not/AZone")


@pytest.mark.parametrize("bad, error, match", [
    (pd.DatetimeIndex(["2021-01-01", None]), ValueError, "NaT .*position 1"),
    (np.array(["2021-01-01", "NaT"], dtype="M8[s]"), ValueError, "NaT"),
    (np.array([0, np.iinfo(np.int64).min]), ValueError, "NaT"),
    (np.array([1.5, 2.5]), TypeError, "float64"),
    (torch.tensor([1.0]), TypeError, "int64 nanoseconds"),
    ([dt.datetime(2021, 1, 1), dt.datetime(2021, 1, 1, tzinfo=dt.UTC)], TypeError,
     "mixes tz-naive and tz-aware"),
    (["2021-01-01T00:00+01:00", "2021-01-01T00:00+02:00"], ValueError, "time zones"),
    (["not a date"], ValueError, "could not be read"),
])
def test_bad_timestamps_raise_naming_the_argument(bad, error, match):
    with pytest.raises(error, match=match):
        datetime_index(bad)
    with pytest.raises(error, match="timestamps"):
        to_seconds(bad)


def test_origin_must_match_awareness_and_unit_must_be_known():
    naive = pd.DatetimeIndex(["2021-01-01"])
    with pytest.raises(TypeError, match="origin is tz-aware"):
        to_seconds(naive, origin=pd.Timestamp("2020-01-01", tz="UTC"))
    with pytest.raises(TypeError, match="origin is tz-naive"):
        to_seconds(naive.tz_localize("UTC"), origin="2020-01-01")
    with pytest.raises(ValueError, match="origin .*NaT"):
        to_seconds(naive, origin=pd.NaT)
    with pytest.raises(ValueError, match="unit must be one of"):
        to_seconds(naive, unit="hours")


def test_out_of_nanosecond_range_raises():
    with pytest.raises(ValueError, match="nanosecond range"):
        to_nanoseconds(np.array(["2500-01-01"], dtype="M8[s]"))


def epoch_seconds(values: list[str], unit: str) -> np.ndarray:
    """numpy's own count of whole ``unit`` ticks since 1970, as float64 seconds."""
    ticks = np.array(values, dtype=f"M8[{unit}]").astype(np.int64).astype(np.float64)
    length = UNITS[unit]
    return ticks * (length // 10**9) if length >= 10**9 else ticks / (10**9 // length)


@pytest.mark.parametrize("unit, values", [
    ("s", ["2500-01-01", "1500-06-30 12:00:01"]),
    ("ms", ["3000-01-01", "1000-01-01"]),
    ("us", ["9999-12-31 23:59:59.999999", "0001-01-01"]),
    ("D", ["1200-02-29", "2400-12-31"]),
])
def test_to_seconds_outside_the_nanosecond_range_is_exact(unit, values):
    got = to_seconds(np.array(values, dtype=f"M8[{unit}]"))
    np.testing.assert_array_equal(got, epoch_seconds(values, unit))
    # Python datetimes and strings arrive as microseconds in pandas 3: the same numbers; pandas
    # 2 reads them in nanoseconds only, and the error names the range.
    stamps = [pd.Timestamp(v).to_pydatetime() for v in values]
    for stamps_or_text in (stamps, values):
        if TEXT_UNIT == "us":
            np.testing.assert_array_equal(to_seconds(stamps_or_text), epoch_seconds(values, "us"))
        else:
            with pytest.raises(ValueError, match="could not be read .* dates out of range"):
                to_seconds(stamps_or_text)
    origin = pd.Timestamp("2000-01-01")  # a coarse origin keeps the timestamps' resolution
    np.testing.assert_array_equal(to_seconds(np.array(values, dtype=f"M8[{unit}]"), origin),
                                  epoch_seconds(values, unit) - 946684800)


def test_to_seconds_of_aware_python_datetimes_counts_from_the_utc_epoch():
    stamps = [pd.Timestamp("2600-07-01 12:00", tz="Europe/Paris").to_pydatetime()]
    if TEXT_UNIT == "us":
        np.testing.assert_array_equal(to_seconds(stamps),
                                      epoch_seconds(["2600-07-01 10:00"], "s"))
    else:  # pandas 2 reads datetimes in nanoseconds only
        with pytest.raises(ValueError, match="could not be read .* dates out of range"):
            to_seconds(stamps)


def test_to_seconds_that_overflow_int64_ticks_raise_naming_the_arguments():
    far = np.array([2**62], dtype="M8[s]")
    with pytest.raises(ValueError, match="timestamps minus origin .*int64"):
        to_seconds(far, origin=pd.Timestamp(np.datetime64(-(2**62), "s")))
    # An origin finer than the timestamps forces their unit: ns cannot reach 2500.
    with pytest.raises(ValueError, match="timestamps minus origin .*int64"):
        to_seconds(np.array(["2500-01-01"], dtype="M8[s]"),
                   origin=pd.Timestamp("2000-01-01 00:00:00.000000001"))


@pytest.mark.parametrize("bad, error, match", [
    (np.array([10**15], dtype="M8[D]"), ValueError, "timestamps .*out of range"),
    (np.array([10], dtype="M8[ps]"), TypeError, r"timestamps .*datetime64\[ps\]"),
    (np.array(["NaT"], dtype="M8"), TypeError, "timestamps .*unit"),
    ([1_600_000_000, 1_600_000_060], TypeError, "timestamps .*unit"),
    (np.array([1_600_000_000], dtype=np.int32), TypeError, "timestamps .*int32"),
    (pd.Series([1_600_000_000]), TypeError, "timestamps .*unit"),
    ([dt.datetime(2021, 1, 1), 5], TypeError, "timestamps .*position 1.*int"),
    # A PeriodIndex is read (tests/temporal/test_frequency_strings.py); loose Periods are not.
    ([pd.Period("2021-01", "M")] * 2, TypeError, r"timestamps .*Period.*pd.PeriodIndex"),
    (np.array([1], dtype="m8[s]"), TypeError, "timestamps .*timedelta64"),
])
def test_ambiguous_or_lossy_timestamps_raise_naming_them(bad, error, match):
    with pytest.raises(error, match=match):
        to_seconds(bad)


def test_empty_input_gives_empty_output():
    for empty in ([], (), np.array([], dtype="M8[s]"), np.array([], dtype=np.int64),
                  pd.DatetimeIndex([])):
        out = to_seconds(empty)
        assert out.shape == (0,) and out.dtype == np.float64
        assert to_nanoseconds(empty).shape == (0,)


@pytest.mark.parametrize("origin, error", [(5, TypeError), (1.5, TypeError),
                                           ("not a date", ValueError)])
def test_bad_origin_raises_naming_it(origin, error):
    with pytest.raises(error, match="origin"):
        to_seconds(pd.DatetimeIndex(["2021-01-01"]), origin=origin)


@pytest.mark.parametrize("words", [["2021-01-01", "now"], np.array(["today"]),
                                   np.array(["2021-01-01", "now"], dtype=object)])
def test_relative_words_raise_instead_of_reading_the_clock(words):
    # pandas parses "now" and "today" as the time of the call: not reproducible data.
    with pytest.raises(ValueError, match="timestamps .*'now'/'today'"):
        to_seconds(words)
    with pytest.raises(ValueError, match="origin .*'now'/'today'"):
        to_seconds(pd.DatetimeIndex(["2021-01-01"]), origin=str(np.asarray(words)[-1]))


PERIOD_STARTS = [("W-SUN", "2019-12-30"), ("Q-DEC", "2020-01-01"), ("Y-DEC", "2020-01-01"),
                 ("D", "2020-01-01"), ("M", "2020-01-01"), ("h", "2020-01-01")]


@pytest.mark.parametrize("freq, first", PERIOD_STARTS)
def test_period_timestamps_are_their_start_times_in_every_reader(freq, first):
    periods = pd.period_range("2020-01-01", periods=6, freq=freq)
    # Each Period's own start_time, and the first by hand (a W-SUN week starts on Monday).
    starts = pd.DatetimeIndex([p.start_time for p in periods])
    assert starts[0] == pd.Timestamp(first)
    column = pd.DataFrame({"when": periods})["when"]
    assert isinstance(column.dtype, pd.PeriodDtype)
    for value in (periods, column):
        index, _ = datetime_index(value)
        np.testing.assert_array_equal(index.as_unit("ns").asi8, starts.as_unit("ns").asi8)
    parsed = parse_timestamps(column, "when")
    assert parsed.tz is None
    np.testing.assert_array_equal(parsed.as_unit("ns").asi8, starts.as_unit("ns").asi8)


def test_periods_with_nat_in_a_column_name_the_row():
    column = pd.Series(pd.PeriodIndex(["2020Q1", None, "2020Q3"], freq="Q-DEC"))
    with pytest.raises(ValueError, match=r"timestamp column 'when': row 1 is missing \(NaT\)"):
        parse_timestamps(column, "when")


def test_period_objects_are_read_when_they_share_a_frequency_and_refused_otherwise():
    same = pd.Series([pd.Period("2020Q1", "Q-DEC"), pd.Period("2020Q3", "Q-DEC")], dtype=object)
    np.testing.assert_array_equal(parse_timestamps(same, "when"),
                                  pd.DatetimeIndex(["2020-01-01", "2020-07-01"]))
    mixed = pd.Series([pd.Period("2020Q1", "Q-DEC"), pd.Period("2020-05", "M")])
    with pytest.raises(TypeError, match=r"timestamp column 'when' holds Period values that "
                                        r"form no single PeriodIndex .*freq"):
        parse_timestamps(mixed, "when")
