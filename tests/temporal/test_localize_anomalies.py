"""localize() on zone anomalies pandas gets wrong: whole-day gaps (Pacific/Kiritimati skipped
1994-12-31, Pacific/Apia 2011-12-30), a 30-minute gap (Australia/Lord_Howe), a 23-hour repeat
(Pacific/Kwajalein 1969), and ambiguous="infer" on unsorted input."""

from __future__ import annotations

import numpy as np
import pandas as pd
import pytest
from posenc.temporal import localize


def at(wall: str, tz: str) -> pd.Timestamp:
    """An existing wall time of ``tz`` as an instant (pandas localizes those correctly)."""
    return pd.Timestamp(wall).tz_localize(tz)


# zone, wall times inside the gap, last existing wall time before it, first one after it
GAPS = [
    ("Pacific/Kiritimati", ["1994-12-31 00:00", "1994-12-31 12:00", "1994-12-31 23:59:59"],
     "1994-12-30 23:59:59", "1995-01-01 00:00"),
    ("Pacific/Apia", ["2011-12-30 00:00", "2011-12-30 12:00", "2011-12-30 23:00"],
     "2011-12-29 23:59:59", "2011-12-31 00:00"),
    ("Australia/Lord_Howe", ["2021-10-03 02:00", "2021-10-03 02:15", "2021-10-03 02:29"],
     "2021-10-03 01:59:59", "2021-10-03 02:30"),
    ("America/New_York", ["2021-03-14 02:00", "2021-03-14 02:30", "2021-03-14 02:59:59"],
     "2021-03-14 01:59:59", "2021-03-14 03:00"),
]


@pytest.mark.parametrize("tz, inside, before, after", GAPS)
@pytest.mark.parametrize("unit", ["s", "us", "ns"])
def test_shift_forward_goes_to_the_instant_the_gap_ends(tz, inside, before, after, unit):
    walls = pd.DatetimeIndex([before, *inside, after]).as_unit(unit)
    got = localize(walls, tz, nonexistent="shift_forward")
    expected = [at(before, tz)] + [at(after, tz)] * len(inside) + [at(after, tz)]
    assert list(got) == expected
    assert got.unit == unit and str(got.tz) == tz


@pytest.mark.parametrize("tz, inside, before, after", GAPS)
@pytest.mark.parametrize("unit", ["s", "us", "ns"])
def test_shift_backward_goes_one_tick_before_the_gap(tz, inside, before, after, unit):
    walls = pd.DatetimeIndex([before, *inside, after]).as_unit(unit)
    got = localize(walls, tz, nonexistent="shift_backward")
    last = at(after, tz) - pd.Timedelta(1, unit)  # pandas: the last existing tick before
    assert list(got) == [at(before, tz)] + [last] * len(inside) + [at(after, tz)]
    assert got[1].tz_localize(None) < pd.Timestamp(inside[0])


def test_one_hour_dst_gap_matches_pandas_exactly():
    walls = pd.DatetimeIndex(["2021-03-14 01:59:59.999999999", "2021-03-14 02:00",
                              "2021-03-14 02:30", "2021-03-14 03:00", "2021-07-01"])
    for option in ("shift_forward", "shift_backward", pd.Timedelta("1h"), pd.Timedelta("-1h"),
                   "NaT"):
        expected = walls.tz_localize("America/New_York", nonexistent=option)
        got = localize(walls, "America/New_York", nonexistent=option)
        assert got.equals(expected), option


@pytest.mark.parametrize("tz, wall, delta, expected", [
    ("Pacific/Kiritimati", "1994-12-31 12:00", "1D", "1995-01-01 12:00"),
    ("Pacific/Kiritimati", "1994-12-31 12:00", "-1D", "1994-12-30 12:00"),
    ("Pacific/Apia", "2011-12-30 12:00", "-13h", "2011-12-29 23:00"),  # pandas: a day early
    ("Australia/Lord_Howe", "2021-10-03 02:15", "30min", "2021-10-03 02:45"),  # pandas raises
])
def test_timedelta_shifts_the_wall_time_by_exactly_that(tz, wall, delta, expected):
    got = localize(pd.DatetimeIndex([wall]), tz, nonexistent=pd.Timedelta(delta))
    assert got[0] == at(expected, tz)


def test_timedelta_landing_in_the_gap_again_raises():
    with pytest.raises(ValueError, match="nonexistent=.*still falls in a gap.*1994-12-31 07:00"):
        localize(pd.DatetimeIndex(["1994-12-31 01:00"]), "Pacific/Kiritimati",
                 nonexistent=pd.Timedelta("6h"))


def test_nat_marks_exactly_the_whole_day_gap():
    walls = pd.DatetimeIndex(["1994-12-30 23:59:59", "1994-12-31 12:00", "1995-01-01 00:00"])
    got = localize(walls, "Pacific/Kiritimati", nonexistent="NaT")
    assert list(got.isna()) == [False, True, False]


@pytest.mark.parametrize("bad", ["forward", 5, None, np.timedelta64("NaT")])
def test_bad_nonexistent_option_raises_naming_it(bad):
    with pytest.raises((TypeError, ValueError), match="nonexistent"):
        localize(pd.DatetimeIndex(["2021-03-14 02:30"]), "America/New_York", nonexistent=bad)


def test_23_hour_repeat_and_30_minute_repeat_follow_the_choice():
    # Kwajalein went from +11 to -12 at 1969-10-01 00:00: 23 hours of wall time repeat.
    wall = pd.DatetimeIndex(["1969-09-30 12:00"])
    with pytest.raises(ValueError, match="ambiguous"):
        localize(wall, "Pacific/Kwajalein")
    first = localize(wall, "Pacific/Kwajalein", ambiguous=True)[0]
    second = localize(wall, "Pacific/Kwajalein", ambiguous=np.array([False]))[0]
    assert first == pd.Timestamp("1969-09-30 01:00", tz="UTC")
    assert second == pd.Timestamp("1969-10-01 00:00", tz="UTC")
    # Lord Howe falls back 30 minutes: 01:30-02:00 repeats.
    wall = pd.DatetimeIndex(["2021-04-04 01:45"])
    assert (localize(wall, "Australia/Lord_Howe", ambiguous=False)[0]
            - localize(wall, "Australia/Lord_Howe", ambiguous=True)[0]) == pd.Timedelta("30min")


def test_infer_reads_a_sorted_repeat_in_order():
    utc = pd.date_range("2021-11-07 05:00", periods=6, freq="20min", tz="UTC")
    walls = utc.tz_convert("America/New_York").tz_localize(None)  # 01:00..01:40, 01:00..01:40
    assert localize(walls, "America/New_York", ambiguous="infer").equals(
        utc.tz_convert("America/New_York"))
    kwaj = pd.date_range("1969-09-30", periods=5, freq="6h", tz="UTC").tz_convert(
        "Pacific/Kwajalein")
    assert localize(kwaj.tz_localize(None), "Pacific/Kwajalein", ambiguous="infer").equals(kwaj)


def test_infer_refuses_unsorted_input():
    # Newest first: pandas' inference reads 01:40 as EDT and 01:10, 01:30 as EST, silently
    # (a sorted reading is impossible: 02:30 EST comes first).
    walls = pd.DatetimeIndex(["2021-11-07 02:30", "2021-11-07 01:40", "2021-11-07 01:10",
                              "2021-11-07 01:30"])
    with pytest.raises(ValueError, match=r"ambiguous='infer' .*sorted.*position 0"):
        localize(walls, "America/New_York", ambiguous="infer")
    # Shuffled inside the repeat: pandas raises about "2 dst switches"; posenc says why.
    shuffled = pd.DatetimeIndex(["2021-11-07 01:15", "2021-11-07 01:00", "2021-11-07 01:45",
                                 "2021-11-07 01:30"])
    with pytest.raises(ValueError, match=r"ambiguous='infer'.*sorted"):
        localize(shuffled, "America/New_York", ambiguous="infer")
    # Unsorted with nothing ambiguous: refused too, since the order is what infer reads.
    with pytest.raises(ValueError, match=r"ambiguous='infer'.*sorted.*position 0"):
        localize(pd.DatetimeIndex(["2021-06-01", "2021-01-01"]), "America/New_York",
                 ambiguous="infer")


@pytest.mark.parametrize("bad, error", [
    ("earliest", ValueError), (None, TypeError), (np.array([1]), TypeError),
    (np.array([True, False]), ValueError), (np.array([[True]]), ValueError),
])
def test_bad_ambiguous_option_raises_naming_it(bad, error):
    # "earliest" or an int array were silently taken by pandas where nothing is repeated.
    with pytest.raises(error, match="ambiguous"):
        localize(pd.DatetimeIndex(["2021-07-01 12:00"]), "America/New_York", ambiguous=bad)


def test_tz_none_raises():
    with pytest.raises(TypeError, match="tz must be a time zone"):
        localize(pd.DatetimeIndex(["2021-07-01 12:00"]), None)
