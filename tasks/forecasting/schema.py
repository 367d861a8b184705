"""What a long table's columns are, and the state fitted on its training span.

[`Columns`][posenc.tasks.forecasting.schema.Columns] (the roles of a table's columns and how its
timestamps are read, checked once) and [`Fitted`][posenc.tasks.Fitted] (the state
[`fit`][posenc.tasks.forecasting.panel.fit] makes of the training span: series keys, scaling,
vocabularies, step, zone; a trained ``Forecaster``'s, kept in its checkpoint as plain data), with
the argument checks they share. Lengths are observation counts (``168``) or durations with a unit
(``"7D"``; a bare ``"24"`` is refused).
"""

from __future__ import annotations

import dataclasses
import datetime as dt
import os
from collections.abc import Sequence
from typing import Any

import numpy as np
import pandas as pd
from posenc.core._checks import check_choice, check_int, check_positive_int
from posenc.temporal.timestamps import AMBIGUOUS, NONEXISTENT, check_tz_name, parse_duration

from ..config import read_checkpoint

__all__ = ["CHANNELS", "CHECKPOINT_KEY", "COLUMN_ARGUMENTS", "MAX_WINDOW_ROWS", "STEP_TOLERANCE",
           "Columns", "Fitted", "check_step", "check_unique_columns", "check_window_rows",
           "parse_length"]

# The scaled channel groups, in Panel.values' column order: Columns field, role in messages,
# batch key, key of its observed flags (None: never missing) and the window sides it is on.
CHANNELS = (("target_columns", "target column", "value", "observed", ("context", "target")),
            ("past_covariates", "past covariate", "past", "past_observed", ("context",)),
            ("future_covariates", "future covariate", "future", None, ("context", "target")))
# The entry of a Forecaster's checkpoint that holds its Fitted state (Fitted.to_dict()).
CHECKPOINT_KEY = "fitted"
# The data module argument each role of Columns comes from (for messages).
_ARGUMENTS = {"target_columns": "target_columns", "series_columns": "series_column",
              "past_covariates": "past_covariates", "future_covariates": "future_covariates",
              "static_columns": "static_columns"}


def parse_length(value: Any, name: str) -> int | pd.Timedelta:
    """An observation count (int) or a fixed duration with a unit (str or timedelta, read by
    [`parse_duration`][posenc.temporal.timestamps.parse_duration]: calendar months are refused)."""
    count = "an int (a count of observations)"
    expected = f"{name} must be {count} or a duration with a unit such as '7D' or '36h'"
    if isinstance(value, (bool, np.bool_)):
        raise TypeError(f"{expected}, got {value!r}")
    # np.timedelta64 is a numpy integer subclass: test it first.
    if isinstance(value, (int, np.integer)) and not isinstance(value, np.timedelta64):
        return check_positive_int(int(value), name)
    if not isinstance(value, (str, dt.timedelta, np.timedelta64)):
        raise TypeError(f"{expected}, got {type(value).__name__} ({value!r})")
    return pd.Timedelta(parse_duration(value, name, alternative=count))


# Windows of more rows are refused (they could not be attended to anyway).
MAX_WINDOW_ROWS = 100_000


def check_window_rows(context_length: int | pd.Timedelta, horizon: int | pd.Timedelta,
                      step_ns: int = 0) -> None:
    """``ValueError`` for windows of more than `MAX_WINDOW_ROWS` rows: observation counts
    by their sum; a duration ``horizon`` by its steps of ``step_ns`` (> 0: the future steps a
    forecast makes of it; durations of data not yet read are checked on its windows)."""
    if isinstance(context_length, int) and isinstance(horizon, int):
        rows, what = context_length + horizon, "context_length + horizon"
    elif isinstance(horizon, pd.Timedelta) and step_ns > 0:
        rows = horizon.value // step_ns
        what = f"horizon={horizon} in steps of {pd.Timedelta(step_ns)}"
    else:
        return
    if rows > MAX_WINDOW_ROWS:
        raise ValueError(f"{what} = {rows} rows per window, above the limit of "
                         f"MAX_WINDOW_ROWS={MAX_WINDOW_ROWS}")


def check_unique_columns(columns: list[Any], where: str) -> None:
    """``ValueError`` naming ``where`` if ``columns`` (a table's column names) repeats one."""
    seen: set[Any] = set()
    for name in columns:
        if name in seen:
            count = sum(1 for c in columns if c == name)
            raise ValueError(f"{where} has {count} columns named {name!r}; column names must be "
                             "unique")
        seen.add(name)



def _names(value: Any, name: str, required: bool = False) -> tuple[str, ...]:
    """A column name or a list of names -> a tuple of unique names."""
    if value is None and required:
        raise TypeError(f"{name} must be a column name or a list of names, got None")
    if value is None:
        value = ()
    if isinstance(value, str):
        value = [value]
    if not isinstance(value, (Sequence, pd.Index, np.ndarray)):
        raise TypeError(f"{name} must be a column name or a list of names, got "
                        f"{type(value).__name__} ({value!r})")
    names = list(value)
    for i, item in enumerate(names):
        if not isinstance(item, str):
            raise TypeError(f"{name}[{i}] must be a column name (str), got "
                            f"{type(item).__name__} ({item!r})")
        if item in names[:i]:
            raise ValueError(f"{name} repeats {item!r}: {names}")
    if required and not names:
        raise ValueError(f"{name} must name at least one column")
    return tuple(names)


# -- the description and the fitted state ------------------------------------------------------
@dataclasses.dataclass(frozen=True)
class Columns:
    """What a table's columns are and how its timestamps are read, checked when built (the
    [`TimeSeriesDataModule`][posenc.tasks.TimeSeriesDataModule] arguments of the same names); a
    column has one role."""

    timestamp_column: str
    target_columns: tuple[str, ...]
    series_columns: tuple[str, ...] = ()
    past_covariates: tuple[str, ...] = ()
    future_covariates: tuple[str, ...] = ()
    static_columns: tuple[str, ...] = ()
    tz: str | None = None
    ambiguous: str = "raise"
    nonexistent: str = "raise"
    timestamp_format: str | None = None

    def __post_init__(self) -> None:
        if self.timestamp_column is None:
            raise TypeError("timestamp_column must name a column, got None")
        seen = {self.timestamp_column: "timestamp_column"}
        for field, argument in _ARGUMENTS.items():
            names = _names(getattr(self, field), argument, field == "target_columns")
            object.__setattr__(self, field, names)
            for name in names:
                if name in seen:
                    raise ValueError(f"column {name!r} is in both {seen[name]} and {argument}; "
                                     "a column has one role")
                seen[name] = argument
        if self.timestamp_format is not None and not isinstance(self.timestamp_format, str):
            raise TypeError(f"timestamp_format must be a str or None, got "
                            f"{type(self.timestamp_format).__name__} ({self.timestamp_format!r})")
        object.__setattr__(self, "tz", check_tz_name(self.tz))
        check_choice(self.ambiguous, "ambiguous", AMBIGUOUS)
        check_choice(self.nonexistent, "nonexistent", NONEXISTENT)

    @property
    def channels(self) -> list[str]:
        """Every scaled column, in the order of `CHANNELS`."""
        return [name for field, *_ in CHANNELS for name in getattr(self, field)]

    @property
    def channel_roles(self) -> list[str]:
        """The role of each of [`channels`][posenc.tasks.forecasting.schema.Columns.channels]
        (``"target column"``, ...), for messages."""
        return [role for field, role, *_ in CHANNELS for _ in getattr(self, field)]

    def groups(self) -> list[tuple[str, str | None, tuple[str, ...], int, int]]:
        """The batch layout of ``Panel.values``' columns: per row of `CHANNELS`, its
        ``(key, observed_key, sides, first column, end column)``."""
        out, start = [], 0
        for field, _, key, observed, sides in CHANNELS:
            width = len(getattr(self, field))
            out.append((key, observed, sides, start, start + width))
            start += width
        return out

    def check_fitted(self, fitted: Fitted) -> None:
        """``ValueError`` when ``fitted`` (a trained model's state) has other columns in a role
        than these, by name or order: channels are scaled and read by position, series keys
        are tuples in the order of ``series_columns``."""
        for field in ("target_columns", "past_covariates", "future_covariates",
                      "static_columns", "series_columns"):
            ours, theirs = getattr(self, field), getattr(fitted.columns, field)
            if ours != theirs:
                raise ValueError(f"the model was trained on {len(theirs)} {field} "
                                 f"{list(theirs)}; this data has {len(ours)}: {list(ours)} "
                                 "(the same names in the same order are needed)")


# The data module arguments that build its Columns, in their order.
COLUMN_ARGUMENTS = tuple(_ARGUMENTS.get(f.name, f.name) for f in dataclasses.fields(Columns))


@dataclasses.dataclass(frozen=True)
class Fitted:
    """The state fitted on the training span ([`fit`][posenc.tasks.forecasting.panel.fit]): how a
    trained model reads new data.

    ``loc``/``scale``: ``(S, C)`` per series (``series_keys``) and channel
    (``columns.channels``). ``static_categories``: each categorical static column's values
    (code ``i + 1``; 0: not seen in training); ``static_stats``: ``(mean, std)`` per numeric one.
    ``aware``: tz-aware timestamps; ``zone``: their zone read without ``tz`` (``"Europe/Berlin"``,
    ``"UTC+05:45"``; None: naive), the wall clock of future times and outputs. ``series_start``:
    each series' first observation (local ns; int64 min: no rows), the origin of its age
    ([`AgeFeature`][posenc.temporal.AgeFeature]; empty: ages count from the history). ``step_ns``:
    the median local step; ``context_length``/``horizon`` as given. Plain data
    ([`to_dict`][posenc.tasks.Fitted.to_dict]).
    """

    columns: Columns
    aware: bool = False
    zone: str | None = None
    series_keys: tuple[tuple, ...] = ((),)
    loc: tuple[tuple[float, ...], ...] = ()
    scale: tuple[tuple[float, ...], ...] = ()
    static_categories: dict[str, tuple] = dataclasses.field(default_factory=dict)
    static_stats: dict[str, tuple[float, float]] = dataclasses.field(default_factory=dict)
    series_start: tuple[int, ...] = ()
    step_ns: int = 0
    context_length: int | str = 168
    horizon: int | str = 24

    def to_dict(self) -> dict[str, Any]:
        """Builtins only (tuples, lists, dicts, numbers, text): loads with
        ``torch.load(weights_only=True)``."""
        return dataclasses.asdict(self)

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> Fitted:
        if not isinstance(data, dict):
            raise TypeError(f"a fitted state must be a dict, got {type(data).__name__}")
        unknown = sorted(set(data) - {f.name for f in dataclasses.fields(cls)})
        if unknown:
            raise ValueError(f"a fitted state has unknown keys {unknown}")
        if not isinstance(data.get("columns"), dict):
            raise ValueError("a fitted state needs its columns (a dict of Columns' fields)")
        data = dict(data)
        data["columns"] = Columns(**data["columns"])
        data["series_keys"] = tuple(tuple(key) for key in data.get("series_keys", [()]))
        for name in ("loc", "scale"):
            data[name] = tuple(tuple(float(v) for v in row) for row in data.get(name, ()))
        data["static_categories"] = {k: tuple(v)
                                     for k, v in data.get("static_categories", {}).items()}
        data["static_stats"] = {k: tuple(v) for k, v in data.get("static_stats", {}).items()}
        data["series_start"] = tuple(int(v) for v in data.get("series_start", ()))
        # A checkpoint's lengths size the windows and forecasts made with it.
        defaults = {f.name: f.default for f in dataclasses.fields(cls)}
        check_window_rows(*(parse_length(data.get(name, defaults[name]), name)
                            for name in ("context_length", "horizon")),
                          step_ns=check_int(data.get("step_ns", 0), "step_ns", ge=0))
        return cls(**data)

    @classmethod
    def from_checkpoint(cls, path: str | os.PathLike, argument: str = "fitted") -> Fitted:
        """The state a trained ``Forecaster``'s checkpoint file holds (its
        `CHECKPOINT_KEY` entry), read with ``weights_only=True``; ``ValueError`` naming
        ``argument`` and the path for a file without one."""
        where = f"{argument}={os.fspath(path)!r}"
        checkpoint = read_checkpoint(path, argument)
        if CHECKPOINT_KEY not in checkpoint:
            raise ValueError(f"{where} holds no fitted state (the checkpoint of a Forecaster "
                             "trained on a TimeSeriesDataModule has one)")
        try:
            return cls.from_dict(checkpoint[CHECKPOINT_KEY])
        except (TypeError, ValueError) as err:
            raise ValueError(f"{where}: {err}") from err

    def check_data(self, data: Fitted) -> None:
        """``ValueError`` unless ``data``, the state a table is read with, is this trained
        state (extended by series new to it): the same columns by name and order
        ([`Columns.check_fitted`][posenc.tasks.forecasting.schema.Columns.check_fitted]), sampling
        step ([`check_step`][posenc.tasks.forecasting.schema.check_step]), and for each of this
        state's series its scaling, with its vocabularies, zone and windows. A table read with a
        state of its own is refused: a trained model reads every table with its own."""
        data.columns.check_fitted(self)
        check_step(self, data.step_ns)
        count = len(self.series_keys)
        # Series starts may differ: a table that begins earlier moves a series' age origin.
        ours = dataclasses.replace(data, series_keys=data.series_keys[:count],
                                   loc=data.loc[:count], scale=data.scale[:count],
                                   series_start=self.series_start)
        if ours != self:
            raise ValueError(
                "the data is read with a fitted state of its own (the scaling, series and "
                "vocabularies of its training span), not the model's: give the data module the "
                "model's, TimeSeriesDataModule(..., fitted=model.fitted) or fitted='path/to.ckpt' "
                "(posenc validate/test/predict --ckpt_path does)")

    @property
    def static_real_columns(self) -> list[str]:
        return [c for c in self.columns.static_columns if c not in self.static_categories]

    @property
    def static_cat_columns(self) -> list[str]:
        return [c for c in self.columns.static_columns if c in self.static_categories]

    def target_scaling(self) -> tuple[np.ndarray, np.ndarray]:
        """``(loc, scale)``, each ``(S, C)`` float32, of the target channels."""
        c = len(self.columns.target_columns)
        shape = (len(self.loc), len(self.columns.channels))
        return (np.asarray(self.loc, np.float32).reshape(shape)[:, :c],
                np.asarray(self.scale, np.float32).reshape(shape)[:, :c])

    @property
    def clock_zone(self) -> str | None:
        """The zone of the local wall clock: ``tz``, else the aware data's own zone; None for
        naive data without ``tz``."""
        if self.columns.tz is not None:
            return self.columns.tz
        return (self.zone or "UTC") if self.aware else None

    def local_times(self, utc_ns: np.ndarray) -> pd.DatetimeIndex:
        """``(N,)`` int64 UTC ns -> timestamps as the data had them (in
        [`clock_zone`][posenc.tasks.Fitted.clock_zone])."""
        index = pd.DatetimeIndex(np.asarray(utc_ns, np.int64).view("M8[ns]"))
        zone = self.clock_zone
        return index if zone is None else index.tz_localize("UTC").tz_convert(zone)

    def series_frame(self, series: np.ndarray) -> pd.DataFrame:
        """``(N,)`` series indexes -> the ``(N, len(series_columns))`` id columns."""
        series = np.asarray(series, np.int64)
        columns = {}
        for j, name in enumerate(self.columns.series_columns):
            values = np.array([key[j] for key in self.series_keys], dtype=object)
            columns[name] = values[series]
        return pd.DataFrame(columns, index=pd.RangeIndex(len(series)))



# Median steps this close (relative) are one sampling: a calendar month is 28 to 31 days, so
# a short monthly span's median can be 30 days where the training's was 31.
STEP_TOLERANCE = 0.1


def check_step(fitted: Fitted, step_ns: int) -> None:
    """``ValueError`` naming both steps when data of median step ``step_ns`` (ns) is not
    sampled as ``fitted``'s (beyond `STEP_TOLERANCE`); nothing to compare where either
    is 0 (one observation per series)."""
    known = fitted.step_ns
    if known > 0 and step_ns > 0 and abs(step_ns - known) > STEP_TOLERANCE * max(step_ns, known):
        raise ValueError(f"the model was trained on data sampled every {pd.Timedelta(known)} "
                         f"(median step); this data's median step is {pd.Timedelta(step_ns)}: "
                         "its windows, seasons and times to predict would be counted in the "
                         "wrong step (resample the data, or train on this sampling)")

