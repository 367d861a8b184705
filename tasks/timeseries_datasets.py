"""Built-in forecasting data modules over data that ships offline inside pip packages (the
``data`` extra): each wires the columns of one of :mod:`posenc.tasks.series_sources`' tables
(a panel of 51 states, covariates, 3 airports with gaps, irregular sampling) and picks
sensible windows. The other arguments (lengths, splits, ``season``, loader settings,
``predict_split``) are :class:`~posenc.tasks.TimeSeriesDataModule`'s.
"""

from __future__ import annotations

import numpy as np
import pandas as pd
from posenc.core import check_choice

from .series_sources import (
    BIRTHDAY_STATES,
    BIRTHDAY_YEARS,
    NYC_AIRPORTS,
    birthdays_frame,
    elecdemand_frame,
    glucose_frame,
    nycweather_frame,
)
from .timeseries_data import TimeSeriesDataModule

__all__ = [
    "BirthdaysDataModule",
    "ElecDemandDataModule",
    "GlucoseDataModule",
    "NYCWeatherDataModule",
    "SeattleTempsDataModule",
    "TaylorDataModule",
]


class SeattleTempsDataModule(TimeSeriesDataModule):
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
    """

    def __init__(
        self,
        context_length: int | str = 168,
        horizon: int | str = 24,
        stride: int | str | None = None,
        val_fraction: float = 0.15,
        test_fraction: float = 0.15,
        irregular: float | None = None,
        seed: int = 0,
        batch_size: int = 64,
        eval_batch_size: int | None = None,
        num_workers: int = 0,
        predict_split: str = "future",
    ) -> None:
        super().__init__(
            data=None, timestamp_column="date", target_columns="temp",
            tz="America/Los_Angeles", ambiguous="earliest", nonexistent="shift_forward",
            context_length=context_length, horizon=horizon, stride=stride,
            val_fraction=val_fraction, test_fraction=test_fraction, irregular=irregular,
            seed=seed, batch_size=batch_size, eval_batch_size=eval_batch_size,
            num_workers=num_workers,
            predict_split=predict_split)

    def load_frame(self) -> pd.DataFrame:
        try:
            from vega_datasets import data
        except ImportError as err:  # pragma: no cover - depends on the environment
            raise ImportError("SeattleTempsDataModule needs vega_datasets: "
                              "pip install 'posenc[data]'") from err
        return data.seattle_temps()


class TaylorDataModule(TimeSeriesDataModule):
    """Half-hourly electricity demand of England and Wales, June-August 2000 (``pmdarima``'s
    ``load_taylor``, 4032 rows, daily and weekly seasonality).

    The data has no timestamps; they are rebuilt as 2000-06-05 00:00 + 30 min steps (naive).
    Columns: ``timestamp``, ``demand`` (MW).
    """

    def __init__(
        self,
        context_length: int | str = 336,
        horizon: int | str = 48,
        stride: int | str | None = None,
        val_fraction: float = 0.15,
        test_fraction: float = 0.15,
        irregular: float | None = None,
        seed: int = 0,
        batch_size: int = 64,
        eval_batch_size: int | None = None,
        num_workers: int = 0,
        predict_split: str = "future",
    ) -> None:
        super().__init__(
            data=None, timestamp_column="timestamp", target_columns="demand", tz=None,
            context_length=context_length, horizon=horizon, stride=stride,
            val_fraction=val_fraction, test_fraction=test_fraction, irregular=irregular,
            seed=seed, batch_size=batch_size, eval_batch_size=eval_batch_size,
            num_workers=num_workers,
            predict_split=predict_split)

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


class BirthdaysDataModule(TimeSeriesDataModule):
    """Daily births in each US state, 1969-1988 (:func:`birthdays_frame`): a panel of 51
    series with weekly, yearly and holiday structure.

    Series ``state``, timestamp ``date`` (naive calendar days, no zone: ``tz=None``), target
    ``births``; no covariates. The full panel is 372555 rows; ``states`` and
    ``start``/``end`` select a part of it (for small studies).

    Args:
        states: state codes to keep (from :data:`BIRTHDAY_STATES`), None for all 51.
        start: first year kept (inclusive, 1969 to 1988), None for the data's.
        end: last year kept (inclusive), None for the data's.
        season: the seasonal-naive baseline's season (default one week, the strongest
            short-term structure here).

    The other arguments are :class:`~posenc.tasks.TimeSeriesDataModule`'s (lengths are
    days: the default context is 16 weeks, the horizon 4 weeks).
    """

    def __init__(
        self,
        states: list[str] | None = None,
        start: int | None = None,
        end: int | None = None,
        context_length: int | str = 112,
        horizon: int | str = 28,
        stride: int | str | None = 7,
        val_fraction: float = 0.1,
        test_fraction: float = 0.1,
        val_start: str | None = None,
        test_start: str | None = None,
        season: int | str | None = "7D",
        irregular: float | None = None,
        seed: int = 0,
        batch_size: int = 64,
        eval_batch_size: int | None = None,
        num_workers: int = 0,
        predict_split: str = "future",
    ) -> None:
        chosen = _subset(states, "states", BIRTHDAY_STATES)
        first, last = _year(start, "start"), _year(end, "end")
        if first is not None and last is not None and first > last:
            raise ValueError(f"start={first} is after end={last}")
        super().__init__(
            data=None, timestamp_column="date", target_columns="births", series_column="state",
            tz=None, context_length=context_length, horizon=horizon, stride=stride,
            val_fraction=val_fraction, test_fraction=test_fraction, val_start=val_start,
            test_start=test_start, season=season, irregular=irregular, seed=seed,
            batch_size=batch_size, eval_batch_size=eval_batch_size, num_workers=num_workers,
            predict_split=predict_split)
        self.states, self.start, self.end = chosen, first, last

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


class ElecDemandDataModule(TimeSeriesDataModule):
    """Half-hourly electricity demand of Victoria in 2014 with covariates
    (:func:`elecdemand_frame`; 17520 rows, one series).

    Target ``Demand`` (GW); ``WorkDay`` is a future covariate (known ahead: the calendar of
    holidays); ``Temperature`` a past covariate (measured up to the forecast origin), or with
    ``temperature="future"`` a future one: then the measured values stand for a perfect
    temperature forecast, an upper bound on what a real forecast would give. Timestamps are
    real instants (tz-aware, Australia/Melbourne), so there is no DST guess: calendar
    features follow the local clock, elapsed time is real time.

    Args:
        temperature: ``"past"`` or ``"future"``, the role of ``Temperature``.
        season: the seasonal-naive season (default one week: with work days it beats the
            daily season, 0.320 vs 0.329 GW mean absolute error over the last 15 %).

    The other arguments are :class:`~posenc.tasks.TimeSeriesDataModule`'s (lengths are
    half-hours: the default context is one week, the horizon one day).
    """

    def __init__(
        self,
        temperature: str = "past",
        context_length: int | str = 336,
        horizon: int | str = 48,
        stride: int | str | None = 48,
        val_fraction: float = 0.15,
        test_fraction: float = 0.15,
        val_start: str | None = None,
        test_start: str | None = None,
        season: int | str | None = "7D",
        irregular: float | None = None,
        seed: int = 0,
        batch_size: int = 64,
        eval_batch_size: int | None = None,
        num_workers: int = 0,
        predict_split: str = "future",
    ) -> None:
        role = check_choice(temperature, "temperature", TEMPERATURE_ROLES)
        super().__init__(
            data=None, timestamp_column="timestamp", target_columns="Demand",
            past_covariates=["Temperature"] if role == "past" else [],
            future_covariates=["WorkDay"] + (["Temperature"] if role == "future" else []),
            tz="Australia/Melbourne", context_length=context_length, horizon=horizon,
            stride=stride, val_fraction=val_fraction, test_fraction=test_fraction,
            val_start=val_start, test_start=test_start, season=season, irregular=irregular,
            seed=seed, batch_size=batch_size, eval_batch_size=eval_batch_size,
            num_workers=num_workers,
            predict_split=predict_split)
        self.temperature = role

    def load_frame(self) -> pd.DataFrame:
        return elecdemand_frame()


NYC_PAST_COVARIATES = ("dewp", "humid", "wind_speed", "pressure")


class NYCWeatherDataModule(TimeSeriesDataModule):
    """Hourly temperature at New York's three airports in 2013 (:func:`nycweather_frame`;
    26115 rows): a small panel with gaps and missing values.

    Series ``origin``, timestamp ``time_hour`` (tz-aware, America/New_York), target ``temp``
    (degrees F); past covariates ``dewp``, ``humid``, ``wind_speed``, ``pressure`` (measured,
    known up to the forecast origin; ``pressure`` is missing in 2729 rows, which the model
    sees as unobserved). Missing hours stay missing: windows of ``context_length`` hourly
    observations then span a little more time, which the time encodings see.

    Args:
        airports: airports to keep (from :data:`NYC_AIRPORTS`), None for all three.
        season: the seasonal-naive season (default one day).

    The other arguments are :class:`~posenc.tasks.TimeSeriesDataModule`'s (lengths are
    observations, about hours: the default context is one week, the horizon one day).
    """

    def __init__(
        self,
        airports: list[str] | None = None,
        context_length: int | str = 168,
        horizon: int | str = 24,
        stride: int | str | None = 24,
        val_fraction: float = 0.15,
        test_fraction: float = 0.15,
        val_start: str | None = None,
        test_start: str | None = None,
        season: int | str | None = "1D",
        irregular: float | None = None,
        seed: int = 0,
        batch_size: int = 64,
        eval_batch_size: int | None = None,
        num_workers: int = 0,
        predict_split: str = "future",
    ) -> None:
        chosen = _subset(airports, "airports", NYC_AIRPORTS)
        super().__init__(
            data=None, timestamp_column="time_hour", target_columns="temp",
            series_column="origin", past_covariates=list(NYC_PAST_COVARIATES),
            tz="America/New_York", context_length=context_length, horizon=horizon,
            stride=stride, val_fraction=val_fraction, test_fraction=test_fraction,
            val_start=val_start, test_start=test_start, season=season, irregular=irregular,
            seed=seed, batch_size=batch_size, eval_batch_size=eval_batch_size,
            num_workers=num_workers,
            predict_split=predict_split)
        self.airports = chosen

    def load_frame(self) -> pd.DataFrame:
        frame = nycweather_frame()
        if self.airports is None:
            return frame
        return frame[frame["origin"].isin(self.airports)].reset_index(drop=True)


class GlucoseDataModule(TimeSeriesDataModule):
    """A continuous glucose monitor, March-October 2010 (:func:`glucose_frame`; 52278
    readings): real irregular sampling, about every 5 min with jitter and gaps up to 28 h.

    Target ``glucose`` (mg/dL); past covariate ``isig`` (the sensor's raw current, missing
    in 1061 rows). Timestamps are naive and their own clock (``tz=None``): the zone of the
    device is unknown and no clock change shows in the data, so none is guessed.

    Args:
        season: the baseline's season (default ``"persistence"``, the last observed value:
            for horizons of an hour it beats the daily season by far, 19 vs 53 mg/dL on the
            study's test windows; give ``"1D"`` for meals and sleep).

    The other arguments are :class:`~posenc.tasks.TimeSeriesDataModule`'s. The lengths
    are durations, since counts of irregular readings span unequal times: by default
    12 h of context, a 1 h horizon, a new forecast origin every hour.
    """

    def __init__(
        self,
        context_length: int | str = "12h",
        horizon: int | str = "1h",
        stride: int | str | None = "1h",
        val_fraction: float = 0.15,
        test_fraction: float = 0.15,
        val_start: str | None = None,
        test_start: str | None = None,
        season: int | str | None = "persistence",
        irregular: float | None = None,
        seed: int = 0,
        batch_size: int = 64,
        eval_batch_size: int | None = None,
        num_workers: int = 0,
        predict_split: str = "future",
    ) -> None:
        super().__init__(
            data=None, timestamp_column="timestamp", target_columns="glucose",
            past_covariates=["isig"], tz=None, context_length=context_length, horizon=horizon,
            stride=stride, val_fraction=val_fraction, test_fraction=test_fraction,
            val_start=val_start, test_start=test_start, season=season, irregular=irregular,
            seed=seed, batch_size=batch_size, eval_batch_size=eval_batch_size,
            num_workers=num_workers,
            predict_split=predict_split)

    def load_frame(self) -> pd.DataFrame:
        return glucose_frame()
