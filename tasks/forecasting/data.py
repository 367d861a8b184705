"""A long table of many series -> checked, sorted, scaled rows -> forecast windows.

One row per (series, timestamp): series id column(s), the timestamp, the targets, optional past
covariates (known up to the forecast origin), future covariates (known at the times to predict)
and static columns (one value per series). State flows one way:
[`Columns`][posenc.tasks.forecasting.data.Columns] (checked once) ->
[`read_panel`][posenc.tasks.forecasting.data.read_panel] (a sorted
[`Panel`][posenc.tasks.forecasting.data.Panel]) -> [`fit`][posenc.tasks.forecasting.data.fit] (the
[`Fitted`][posenc.tasks.forecasting.data.Fitted] state of the training span, kept in a
``Forecaster``'s checkpoint) -> [`scale_panel`][posenc.tasks.forecasting.data.scale_panel] ->
windows ([`TimeSeriesDataModule`][posenc.tasks.TimeSeriesDataModule]). Lengths are observation
counts (``168``) or durations with a unit (``"7D"``; a bare ``"24"`` is refused). Splits are by
time: a window belongs to the split that holds its whole horizon. Batches:
[`posenc.tasks.forecasting.windows`][posenc.tasks.forecasting.windows].
"""

from __future__ import annotations

import dataclasses
import datetime as dt
import os
import warnings
from collections.abc import Sequence
from numbers import Real
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np
import pandas as pd
import torch
from lightning.pytorch import LightningDataModule
from posenc.core.encoding import check_bool, check_choice, check_int, check_positive_int
from posenc.temporal.timestamps import (
    AMBIGUOUS,
    NONEXISTENT,
    check_tz_name,
    parse_duration,
    parse_timestamps,
    row_label,
    utc_and_local,
)
from torch import Tensor
from torch.utils.data import DataLoader

from ..config import check_split_fractions, make_hparams_plain, plain
from .metrics import natural_seasons, seasonality_for_step
from .windows import (
    WindowDataset,
    WindowIndex,
    batched,
    count_windows,
    duration_windows,
    time_origins,
)

if TYPE_CHECKING:
    from .stream import DatasetPanel, DatasetWindows

__all__ = ["CHANNELS", "COLUMN_ARGUMENTS", "MAX_ORIGINS_PER_ROW", "MAX_WINDOW_ROWS",
           "MODEL_SIZES", "PERSISTENCE", "Columns", "Fitted", "Panel", "TimeSeriesDataModule",
           "check_unique_columns", "collate_windows", "fit", "is_dataset", "numeric_column",
           "parse_length", "read_panel", "read_table", "scale_panel"]

# The scaled channel groups, in Panel.values' column order: Columns field, role in messages,
# batch key, key of its observed flags (None: never missing) and the window sides it is on.
CHANNELS = (("target_columns", "target column", "value", "observed", ("context", "target")),
            ("past_covariates", "past covariate", "past", "past_observed", ("context",)),
            ("future_covariates", "future covariate", "future", None, ("context", "target")))
# The data module argument each role of Columns comes from (for messages).
_ARGUMENTS = {"target_columns": "target_columns", "series_columns": "series_column",
              "past_covariates": "past_covariates", "future_covariates": "future_covariates",
              "static_columns": "static_columns"}
# season= value whose baseline is the last observed value (the naive forecast).
PERSISTENCE = "persistence"
# Data module properties a Forecaster takes as arguments of the same names (dm.model_sizes()).
MODEL_SIZES = ("num_targets", "num_past_covariates", "num_future_covariates",
               "static_cardinalities", "num_static_real", "naive_seasons")
# Windows of more rows are refused (they could not be attended to anyway).
MAX_WINDOW_ROWS = 100_000
# More forecast origins per observation than this (a stride below the sampling) are refused.
MAX_ORIGINS_PER_ROW = 10
# Rows of a Parquet dataset read at a time (whole series): ~50 MB for a few channels.
CHUNK_ROWS = 500_000
_RELATIVE = ("now", "today", "yesterday", "tomorrow")
_NAT = np.iinfo(np.int64).min


# -- reading arguments and files ---------------------------------------------------------------
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


def check_unique_columns(columns: list[Any], where: str) -> None:
    """``ValueError`` naming ``where`` if ``columns`` (a table's column names) repeats one."""
    seen: set[Any] = set()
    for name in columns:
        if name in seen:
            count = sum(1 for c in columns if c == name)
            raise ValueError(f"{where} has {count} columns named {name!r}; column names must be "
                             "unique")
        seen.add(name)


def numeric_column(column: pd.Series, name: str, source: str | None) -> np.ndarray:
    """A target column -> ``(N,)`` float64, NaN where missing; non-numbers raise."""
    if pd.api.types.is_bool_dtype(column):
        raise TypeError(f"target column {name!r} is boolean, expected numbers")
    if (pd.api.types.is_datetime64_any_dtype(column) or pd.api.types.is_timedelta64_dtype(column)
            or isinstance(column.dtype, pd.PeriodDtype)):
        raise TypeError(f"target column {name!r} holds {column.dtype} values, expected numbers")
    if pd.api.types.is_complex_dtype(column):
        raise TypeError(f"target column {name!r} holds complex numbers, expected real numbers")
    numeric = pd.to_numeric(column, errors="coerce")
    bad = np.flatnonzero(numeric.isna().to_numpy() & column.notna().to_numpy())
    if not len(bad) and numeric.dtype == object:
        bad = np.array([0])
    if len(bad):
        raise ValueError(f"target column {name!r}: {row_label(int(bad[0]), source)} value "
                         f"{column.iloc[int(bad[0])]!r} is not numeric")
    values = numeric.to_numpy(dtype=np.float64, na_value=np.nan)
    infinite = np.flatnonzero(np.isinf(values))
    if len(infinite):
        raise ValueError(f"target column {name!r}: {row_label(int(infinite[0]), source)} is "
                         "infinite")
    huge = np.flatnonzero(np.abs(values) > np.finfo(np.float32).max)
    if len(huge):
        raise ValueError(f"target column {name!r}: {row_label(int(huge[0]), source)} value "
                         f"{float(values[int(huge[0])])!r} does not fit float32 (batches are "
                         "float32)")
    return values


def read_table(data: str | os.PathLike) -> pd.DataFrame:
    """A ``.csv`` or ``.parquet`` file -> its DataFrame; names must be unique (a CSV's raw
    header is checked, since ``read_csv`` renames a repeated ``load`` to ``load.1``)."""
    if not isinstance(data, (str, os.PathLike)):
        raise TypeError(f"data must be a path or a pandas DataFrame, got {type(data).__name__}")
    path = Path(data)
    if not path.is_file():
        raise FileNotFoundError(f"data={str(path)!r} does not exist")
    suffix = path.suffix.lower()
    if suffix == ".csv":
        try:
            frame = pd.read_csv(path)
            header = pd.read_csv(path, header=None, nrows=1, dtype=str).iloc[0].tolist()
        except pd.errors.EmptyDataError as err:
            raise ValueError(f"data={str(path)!r} is empty (no header, no rows)") from err
        except (pd.errors.ParserError, UnicodeDecodeError) as err:
            raise ValueError(f"data={str(path)!r} cannot be read as CSV: {err}") from err
        check_unique_columns(header, f"data={str(path)!r}")
        return frame
    if suffix in (".parquet", ".pq"):
        return pd.read_parquet(path)
    raise ValueError(f"data={str(path)!r}: expected a .csv or .parquet file")


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
        """The role of each of [`channels`][posenc.tasks.forecasting.data.Columns.channels]
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
    """The state fitted on the training span ([`fit`][posenc.tasks.forecasting.data.fit]): how a
    trained model reads new data.

    ``loc``/``scale``: ``(S, C)`` per series (``series_keys``) and channel
    (``columns.channels``). ``static_categories``: each categorical static column's values
    (code ``i + 1``; 0: not seen in training); ``static_stats``: ``(mean, std)`` per numeric one.
    ``aware``: tz-aware timestamps; ``zone``: their zone read without ``tz`` (``"Europe/Berlin"``,
    ``"UTC+05:45"``; None: naive), the wall clock of future times and outputs. ``series_start``:
    each series' first observation (local ns; int64 min: no rows), the origin of its age
    ([`AgeFeature`][posenc.temporal.AgeFeature]; empty: ages count from the history). ``step_ns``:
    the median local step; ``context_length``/``horizon`` as given. Plain data
    ([`to_dict`][posenc.tasks.forecasting.data.Fitted.to_dict]).
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
        return cls(**data)

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
        [`clock_zone`][posenc.tasks.forecasting.data.Fitted.clock_zone])."""
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


@dataclasses.dataclass(frozen=True)
class Panel:
    """Sorted, checked arrays of a long-format table (``N`` rows, ``S`` series).

    Attributes:
        utc, local: ``(N,)`` int64 ns: real time, and local wall-clock time.
        values: ``(N, C + P + K)`` raw targets, past and future covariates (float64, NaN =
            missing); float32 and scaled after
            [`scale_panel`][posenc.tasks.forecasting.data.scale_panel].
        targets: ``(N, C)`` float32 targets in data units as read (NaN = missing), after
            [`scale_panel`][posenc.tasks.forecasting.data.scale_panel]: what forecasts are scored
            on, exact where the data are (an unscaled 0 can come back 1e-8 off, and sMAPE counts 0/0
            points).
        starts: ``(S + 1,)`` int64: series ``s`` is rows ``starts[s]:starts[s + 1]``.
        rows: ``(N,)`` int64: each row's position in the table (for messages).
        series_keys: the ``S`` series keys: a trained model's first, then any new ones.
        zone: the zone of aware timestamps as read (None: naive).
        static: static column -> ``(S,)`` raw values (object: categories, float64: numbers).
        static_real, static_cat: ``(S, Sr)`` float32 standardized numbers and ``(S, Sc)``
            int64 category codes, after [`scale_panel`][posenc.tasks.forecasting.data.scale_panel].
    """

    utc: np.ndarray
    local: np.ndarray
    values: np.ndarray
    starts: np.ndarray
    rows: np.ndarray
    series_keys: tuple[tuple, ...] = ((),)
    zone: str | None = None
    static: dict[str, np.ndarray] = dataclasses.field(default_factory=dict)
    targets: np.ndarray | None = None
    static_real: np.ndarray | None = None
    static_cat: np.ndarray | None = None

    @property
    def num_series(self) -> int:
        return len(self.starts) - 1

    @property
    def lengths(self) -> np.ndarray:
        return np.diff(self.starts)

    def series_of_rows(self) -> np.ndarray:
        """``(N,)`` int64 series index of every row."""
        return np.repeat(np.arange(self.num_series), self.lengths)

    def series_starts(self) -> np.ndarray:
        """``(S,)`` int64 local ns of each series' first row (int64 min without rows)."""
        out = np.full(self.num_series, _NAT, np.int64)
        held = self.lengths > 0
        out[held] = self.local[self.starts[:-1][held]]
        return out

    def keep_rows(self, keep: np.ndarray) -> Panel:
        """The panel without the rows where ``keep`` is False (series stay, maybe shorter)."""
        counts = np.bincount(self.series_of_rows()[keep], minlength=self.num_series)
        return dataclasses.replace(
            self, utc=self.utc[keep], local=self.local[keep], values=self.values[keep],
            starts=np.concatenate(([0], np.cumsum(counts))).astype(np.int64), rows=self.rows[keep])


def merge_series_starts(first: np.ndarray, known: Sequence[int]) -> np.ndarray:
    """[`Panel.series_starts`][posenc.tasks.forecasting.data.Panel.series_starts] -> the earlier of
    each and ``known`` (a trained model's ``series_start``)."""
    out = np.array(first, np.int64)
    stored = np.asarray(known, np.int64)[:len(out)]
    here = out[:len(stored)]
    out[:len(stored)] = np.where(stored == _NAT, here, np.minimum(stored, here))
    return out


# -- reading -----------------------------------------------------------------------------------
def _plain_key(value: Any) -> Any:
    return value.item() if isinstance(value, np.generic) else value


def _hashable(value: Any) -> bool:
    try:
        hash(value)
    except TypeError:
        return False
    return True


def _check_plain(column: pd.Series, name: str, role: str, source: str | None) -> None:
    """Series ids and category values go into checkpoints loaded with ``weights_only=True``:
    they must be text, integers, floats or booleans."""
    dtype = column.dtype
    if isinstance(dtype, pd.CategoricalDtype):
        values: Any = dtype.categories
    elif pd.api.types.is_object_dtype(dtype):
        try:
            values = pd.unique(column)
        except TypeError:  # unhashable values (lists, dicts)
            row = next(i for i, v in enumerate(column) if not _hashable(v))
            raise TypeError(f"{role} {name!r} holds {type(column.iloc[row]).__name__} values "
                            f"({row_label(row, source)} is {column.iloc[row]!r}); expected "
                            "text, integers, floats or booleans") from None
    elif pd.api.types.is_numeric_dtype(dtype) or pd.api.types.is_bool_dtype(dtype) or (
            pd.api.types.is_string_dtype(dtype)):
        return
    else:
        values = column.iloc[:1]
    for value in values:
        if not isinstance(_plain_key(value), (str, int, float, bool)):
            raise TypeError(f"{role} {name!r} holds {type(value).__name__} values (e.g. "
                            f"{value!r}); expected text, integers, floats or booleans (they are "
                            "stored in checkpoints as plain data): convert the column, e.g. "
                            "with .astype(str)")


def _series_codes(frame: pd.DataFrame, columns: tuple[str, ...], known: tuple[tuple, ...] | None,
                  source: str | None) -> tuple[np.ndarray, tuple[tuple, ...]]:
    """-> (``(N,)`` int64 code per row, the series keys in code order)."""
    if not columns:
        return np.zeros(len(frame), np.int64), ((),)
    for name in columns:
        missing = np.flatnonzero(frame[name].isna().to_numpy())
        if len(missing):
            raise ValueError(f"series column {name!r}: {row_label(int(missing[0]), source)} "
                             f"has no series id (missing)")
        _check_plain(frame[name], name, "series column", source)
    if known is not None:
        # A trained model's series keep their codes; new ones are numbered after them.
        lookup = {key: i for i, key in enumerate(known)}
        keys = list(zip(*(frame[c].map(_plain_key).tolist() for c in columns), strict=True))
        new: dict[tuple, int] = {}
        for key in keys:
            if key not in lookup and key not in new:
                new[key] = len(known) + len(new)
        lookup.update(new)
        return np.array([lookup[key] for key in keys], np.int64), (*known, *new)
    # Sorted keys: the same table gives the same codes whatever its row order.
    if len(columns) == 1:
        codes, uniques = pd.factorize(frame[columns[0]], sort=True)
        return codes.astype(np.int64), tuple((_plain_key(v),) for v in uniques)
    codes, uniques = pd.MultiIndex.from_frame(frame[list(columns)]).factorize(sort=True)
    return codes.astype(np.int64), tuple(tuple(_plain_key(v) for v in key) for key in uniques)


def _covariate(column: pd.Series, name: str, role: str, source: str | None) -> np.ndarray:
    if pd.api.types.is_bool_dtype(column):
        column = column.astype("float64")
    elif not (pd.api.types.is_numeric_dtype(column) or column.dtype == object):
        raise TypeError(f"{role} column {name!r} holds {column.dtype} values, expected numbers "
                        "(encode categories as 0/1 columns)")
    try:
        return numeric_column(column, name, source)
    except (ValueError, TypeError) as err:
        raise type(err)(str(err).replace("target column", f"{role} column")) from err


def _static(frame: pd.DataFrame, columns: tuple[str, ...], order: np.ndarray,
            present: np.ndarray, keys: tuple[tuple, ...], source: str | None
            ) -> dict[str, np.ndarray]:
    """Each static column's value per series (constant within it, else an error): object for
    categories, float64 for numbers; None / NaN for a series without rows."""
    held = np.flatnonzero(present)
    starts = np.concatenate(([0], np.cumsum(present[held]))).astype(np.int64)
    first_rows = order[starts[:-1]]
    out = {}
    for name in columns:
        column = frame[name]
        sorted_values = column.to_numpy()[order]
        missing = np.flatnonzero(pd.isna(sorted_values))
        if len(missing):
            raise ValueError(f"static column {name!r}: {row_label(int(order[missing[0]]), source)}"
                             f" is missing; every row of a series holds its static value")
        categorical = not (pd.api.types.is_numeric_dtype(column)
                           and not pd.api.types.is_bool_dtype(column))
        if categorical:
            _check_plain(column, name, "static column", source)
        codes_sorted, _ = pd.factorize(sorted_values)
        changed = np.flatnonzero(codes_sorted != np.repeat(codes_sorted[starts[:-1]],
                                                           np.diff(starts)))
        if len(changed):
            row = int(order[changed[0]])
            series = int(np.searchsorted(starts, changed[0], "right") - 1)
            first = int(first_rows[series])
            raise ValueError(
                f"static column {name!r} changes within series {keys[held[series]]!r}: "
                f"{row_label(row, source)} is {column.iloc[row]!r} but "
                f"{row_label(first, source)} is {column.iloc[first]!r}; a static value is one "
                f"per series (use a covariate for values that change)")
        values = column.to_numpy()[first_rows]
        if categorical:
            full = np.full(len(present), None, object)
            full[held] = [_plain_key(v) for v in values]
        else:
            numbers = values.astype(np.float64)
            bad = np.flatnonzero(~np.isfinite(numbers))
            if len(bad):
                raise ValueError(f"static column {name!r}: "
                                 f"{row_label(int(first_rows[bad[0]]), source)} is "
                                 f"{float(numbers[bad[0]])!r}; a numeric static value must be "
                                 "finite")
            full = np.full(len(present), np.nan)
            full[held] = numbers
        out[name] = full
    return out


def read_panel(frame: pd.DataFrame, columns: Columns, known: Fitted | None = None,
               source: str | None = None, queries: bool = False) -> Panel:
    """Check and sort a long-format table.

    Args:
        frame: the table; column names must be unique.
        columns: the column roles and reading options.
        known: a trained model's state: its series keep their codes (new ones follow) and its
            timestamps' form (naive or aware) is required; None: keys from ``frame``, sorted.
        source: the file the table came from (messages name its lines).
        queries: read a table of times to predict: the series and timestamp columns and the
            future covariates only (the other channels are NaN, no static columns).

    Raises ``ValueError``/``TypeError`` naming the column and the first bad row.
    """
    if not isinstance(frame, pd.DataFrame):
        raise TypeError(f"data must be a pandas DataFrame, got {type(frame).__name__}")
    needed = [columns.timestamp_column, *columns.series_columns,
              *(c for field, _, _, observed, _ in CHANNELS if observed is None or not queries
                for c in getattr(columns, field)),
              *(() if queries else columns.static_columns)]
    for name in needed:
        if name not in frame.columns:
            hint = (f"; the DataFrame's index is a {type(frame.index).__name__}: reset_index() "
                    "it into a column"
                    if isinstance(frame.index, (pd.DatetimeIndex, pd.PeriodIndex)) else "")
            raise ValueError(f"column {name!r} not found; the data has columns "
                             f"{[str(c) for c in frame.columns]}{hint}")
    if not len(frame):
        raise ValueError(f"the data has no rows (columns {[str(c) for c in frame.columns]})")
    frame = frame.reset_index(drop=True)
    stamps = frame[columns.timestamp_column]
    index = parse_timestamps(stamps, columns.timestamp_column, source, columns.timestamp_format)
    if known is not None and (index.tz is not None) != known.aware and columns.tz is None:
        kinds = ["tz-naive", "tz-aware"]
        raise ValueError(f"timestamp column {columns.timestamp_column!r} is "
                         f"{kinds[index.tz is not None]} but the model was trained on "
                         f"{kinds[known.aware]} timestamps; use one form")
    codes, keys = _series_codes(frame, columns.series_columns,
                                None if known is None else known.series_keys, source)
    channels = []
    for field, role, _, observed, _ in CHANNELS:
        for c in getattr(columns, field):
            if queries and observed is not None:  # unknown at the times to predict
                channels.append(np.full(len(frame), np.nan))
                continue
            values = (numeric_column(frame[c], c, source) if field == "target_columns"
                      else _covariate(frame[c], c, role, source))
            missing = np.flatnonzero(np.isnan(values)) if observed is None else ()
            if len(missing):
                raise ValueError(f"{role} {c!r}: {row_label(int(missing[0]), source)} "
                                 f"({stamps.iloc[int(missing[0])]!r}) is missing; a {role} "
                                 "must be known at every time, including the times to predict")
            channels.append(values)
    # Localize in wall-clock order per series: ambiguous="infer" reads the repeated hour's order.
    order = np.lexsort((index.asi8, codes))
    sorted_index, sorted_codes = index[order], codes[order]
    bounds = np.flatnonzero(np.r_[True, sorted_codes[1:] != sorted_codes[:-1], True])
    localize = (columns.tz, columns.ambiguous, columns.nonexistent, columns.timestamp_column)
    if columns.ambiguous == "infer" and len(bounds) > 2 and index.tz is None and columns.tz:
        parts = [utc_and_local(sorted_index[a:b], *localize)
                 for a, b in zip(bounds[:-1], bounds[1:], strict=True)]
        utc = np.concatenate([p[0] for p in parts])
        local = np.concatenate([p[1] for p in parts])
    else:
        utc, local = utc_and_local(sorted_index, *localize)
    del sorted_index  # (N,) int64, not needed past here: lowers the peak
    if (np.diff(utc)[np.diff(sorted_codes) == 0] < 0).any():  # shifted nonexistent times
        again = np.lexsort((utc, sorted_codes))
        order, utc, local = order[again], utc[again], local[again]
        sorted_codes = sorted_codes[again]
    repeat = np.flatnonzero((np.diff(utc) == 0) & (np.diff(sorted_codes) == 0))
    if len(repeat):
        first, second = sorted((int(order[repeat[0]]), int(order[repeat[0] + 1])))
        where = (f" in series {keys[int(sorted_codes[repeat[0]])]!r}"
                 if columns.series_columns else "")
        raise ValueError(f"timestamp column {columns.timestamp_column!r}: "
                         f"{row_label(second, source)} repeats the timestamp of "
                         f"{row_label(first, source)} ({stamps.iloc[first]!r}){where}; one row "
                         f"per series and time (merge the rows, or name the series columns)")
    # Known series absent from this table keep their code, with no rows.
    present = np.bincount(sorted_codes, minlength=len(keys))
    static = {} if queries else _static(frame, columns.static_columns, order, present, keys, source)
    # Each column straight into its sorted place: a gather of the (N, C) stack costs two more
    # (N, C) float64 copies and is several times slower than gathers of 1D columns.
    values = np.empty((len(order), len(channels)))
    for j in range(len(channels)):
        values[:, j] = channels[j][order]
        channels[j] = None  # freed once placed
    return Panel(utc=utc, local=local, values=values,
                 starts=np.concatenate(([0], np.cumsum(present))).astype(np.int64), rows=order,
                 series_keys=keys, zone=None if index.tz is None else str(index.tz), static=static)


# -- fitting and scaling -----------------------------------------------------------------------
def _fit_static(static: dict[str, np.ndarray], columns: Columns) -> tuple[dict, dict]:
    """Category vocabularies (sorted as text) and ``(mean, std)`` of numeric static columns,
    from each column's ``(S,)`` values per series (``Panel.static``)."""
    categories, stats = {}, {}
    for name in columns.static_columns:
        values = static[name]
        if values.dtype == object:
            categories[name] = tuple(sorted({v for v in values if v is not None}, key=str))
            continue
        numbers = values[~np.isnan(values)]
        with np.errstate(over="ignore", invalid="ignore"):
            mean, std = float(numbers.mean()), float(numbers.std())
        if not (np.isfinite(mean) and np.isfinite(std)):
            raise ValueError(f"static column {name!r}: values from {float(numbers.min())!r} "
                             f"to {float(numbers.max())!r} are too large to standardize")
        stats[name] = (mean, std if std > 0 else 1.0)
    return categories, stats


def series_moments(panel: Panel, train_end: int | None
                   ) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Per-series, per-channel ``(count, mean, std)``, each ``(S, C)`` float64, of the observed
    values before ``train_end`` (UTC ns; None: all rows); NaN mean/std without one. A chunk of
    the series gives the same numbers for them as the whole panel."""
    values, num_series = panel.values, panel.num_series
    channels = values.shape[1]
    series = panel.series_of_rows()
    train = np.ones(len(values), bool) if train_end is None else panel.utc < train_end
    count, mean, std = (np.zeros((num_series, channels)) for _ in range(3))
    with np.errstate(all="ignore"):
        for c in range(channels):
            used = train & ~np.isnan(values[:, c])
            x = np.where(used, values[:, c], 0.0)
            count[:, c] = np.bincount(series, used, num_series)
            mean[:, c] = np.bincount(series, x, num_series) / count[:, c]
            centred = np.where(used, x - mean[series, c], 0.0)
            std[:, c] = np.sqrt(np.bincount(series, centred**2, num_series) / count[:, c])
    return count, mean, std


def scaling_from_moments(count: np.ndarray, mean: np.ndarray, std: np.ndarray,
                         columns: Columns, train_end: int | None, known: Fitted | None
                         ) -> tuple[np.ndarray, np.ndarray]:
    """Per-series ``(loc, scale)``, ``(S, C)``, from `series_moments`: a known series
    keeps ``known``'s, a new one its own mean and spread, or, without training rows, those of
    all series' training rows pooled (in series order: the same on every process)."""
    with np.errstate(all="ignore"), warnings.catch_warnings():
        warnings.simplefilter("ignore", RuntimeWarning)  # all-NaN channels: checked below
        held = count > 0
        total = count.sum(0)
        pooled_mean = np.where(held, count * mean, 0.0).sum(0) / total
        spread = np.where(held, count * (std**2 + (mean - pooled_mean) ** 2), 0.0).sum(0)
        pooled = np.stack((pooled_mean, np.sqrt(spread / total)))
    if known is None:
        for c, (name, role) in enumerate(zip(columns.channels, columns.channel_roles, strict=True)):
            if not np.isfinite(pooled[0, c]):
                where = f" (before {pd.Timestamp(train_end)} UTC)" if train_end is not None \
                    else ""
                raise ValueError(f"{role} {name!r} has no observed value in the training "
                                 f"period{where}" if np.isnan(pooled[0, c]) else
                                 f"{role} {name!r}: values too large to average")
    no_train = count == 0
    loc, scale = np.where(no_train, pooled[0], mean), np.where(no_train, pooled[1], std)
    if known is not None and known.loc:
        loc[:len(known.loc)], scale[:len(known.loc)] = known.loc, known.scale
    # A constant channel has no spread to divide by; it is only centred.
    return (np.where(np.isfinite(loc), loc, 0.0),
            np.where(np.isfinite(scale) & (scale > 0), scale, 1.0))


def local_steps(panel: Panel) -> np.ndarray:
    """``(N - S,)`` int64 ns between consecutive local times within each series."""
    return np.diff(panel.local)[np.diff(panel.series_of_rows()) == 0]


def median_step(panel: Panel) -> int:
    """The median step of the local clock within series, ns (0 without one); local, as monthly
    data in a DST zone is 30 days 23 h apart in UTC at the median."""
    within = local_steps(panel)
    return int(np.median(within)) if len(within) else 0


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


def fit_state(columns: Columns, series_keys: tuple[tuple, ...],
              moments: tuple[np.ndarray, np.ndarray, np.ndarray], first_local: np.ndarray,
              train_end: int | None, known: Fitted | None = None, *,
              static: dict[str, np.ndarray] | None = None, step_ns: int = 0,
              aware: bool = False, zone: str | None = None,
              context_length: int | str | None = None, horizon: int | str | None = None
              ) -> Fitted:
    """The [`Fitted`][posenc.tasks.forecasting.data.Fitted] state from its per-series parts (of a
    panel, [`fit`][posenc.tasks.forecasting.data.fit], or of a Parquet dataset's chunks,
    [`stream`][posenc.tasks.forecasting.stream]).

    Args:
        series_keys: the ``S`` keys (``known``'s first, then new ones).
        moments: `series_moments` of the ``S`` series.
        first_local: ``(S,)`` int64 local ns of each series' first row (int64 min: none).
        step_ns: the data's median local step (ns; 0: none).
        known: a trained model's state, kept (``step_ns`` must be its step,
            `check_step`); None: a new state of ``static`` (``Panel.static``),
            ``step_ns``, ``aware``, ``zone`` and the windows' lengths.
    """
    loc, scale = scaling_from_moments(*moments, columns, train_end, known)
    if known is not None:
        check_step(known, step_ns)
    else:
        categories, stats = _fit_static(static or {}, columns)
        known = Fitted(columns, aware=aware, zone=zone, static_categories=categories,
                       static_stats=stats, step_ns=step_ns, context_length=context_length,
                       horizon=horizon)
    return dataclasses.replace(
        known, columns=columns, series_keys=series_keys,
        loc=tuple(map(tuple, loc.tolist())), scale=tuple(map(tuple, scale.tolist())),
        series_start=tuple(merge_series_starts(first_local, known.series_start).tolist()))


def fit(panel: Panel, columns: Columns, train_end: int | None, known: Fitted | None = None,
        *, step_ns: int | None = None, context_length: int | str | None = None,
        horizon: int | str | None = None) -> Fitted:
    """The state fitted on the rows before ``train_end`` (UTC ns; None: every row).

    With a trained model's ``known`` state (never changed), its scaling, vocabularies, step,
    zone and windows stay; series new to it are scaled on their own rows before ``train_end``,
    and each series starts at the earlier of ``known``'s start and its first row here. The
    data's sampling step is ``step_ns`` (None: the panel's `median_step`); with
    ``known`` it must be ``known``'s (`check_step`).
    """
    return fit_state(columns, panel.series_keys, series_moments(panel, train_end),
                     panel.series_starts(), train_end, known, static=panel.static,
                     step_ns=median_step(panel) if step_ns is None else step_ns,
                     aware=panel.zone is not None, zone=panel.zone,
                     context_length=context_length, horizon=horizon)


def _encode_static(panel: Panel, fitted: Fitted, source: str | None
                   ) -> tuple[np.ndarray, np.ndarray]:
    """``(S, Sr)`` float32 standardized numbers and ``(S, Sc)`` int64 codes; zero for a series
    without rows or a table without static columns (a request's queries)."""
    num = panel.num_series
    real, cat = [], []
    if not panel.static:
        return (np.zeros((num, len(fitted.static_real_columns)), np.float32),
                np.zeros((num, len(fitted.static_cat_columns)), np.int64))
    for name in fitted.columns.static_columns:
        values = panel.static[name]
        held = ~pd.isna(values)  # a series without rows in the table read
        if name in fitted.static_categories:
            lookup = {v: i + 1 for i, v in enumerate(fitted.static_categories[name])}
            codes = [lookup.get(v, 0) if h else 0 for v, h in zip(values, held, strict=True)]
            cat.append(np.array(codes, np.int64))
            continue
        if values.dtype == object:
            raise TypeError(f"static column {name!r} was numeric in training, got categories "
                            f"(e.g. {values[held][0]!r})")
        mean, std = fitted.static_stats[name]
        with np.errstate(over="ignore", invalid="ignore"):
            z = np.where(held, (values - mean) / std, 0.0).astype(np.float32)
        bad = np.flatnonzero(~np.isfinite(z))
        if len(bad):
            row = panel.rows[panel.starts[bad[0]]]
            raise ValueError(f"static column {name!r}: {row_label(int(row), source)} value "
                             f"{float(values[bad[0]])!r} does not fit float32 once "
                             f"standardized by mean={mean:.3g}, std={std:.3g}")
        real.append(z)
    return (np.stack(real, 1) if real else np.zeros((num, 0), np.float32),
            np.stack(cat, 1) if cat else np.zeros((num, 0), np.int64))


def scale_panel(panel: Panel, fitted: Fitted, source: str | None = None) -> Panel:
    """The panel scaled by ``fitted`` (values ``(x - loc) / scale`` per series and channel, as
    float32, the targets kept in data units as ``targets``; static columns standardized and
    coded); ``ValueError`` for a value that does not fit float32 once scaled."""
    values = panel.values
    series = panel.series_of_rows()
    loc, scale = np.asarray(fitted.loc), np.asarray(fitted.scale)
    with np.errstate(over="ignore", invalid="ignore"):
        # A channel at a time: loc[series] as an (N, C) gather costs two (N, C) float64 copies.
        scaled = np.empty(values.shape, np.float32)
        for c in range(values.shape[1]):
            scaled[:, c] = (values[:, c] - loc[series, c]) / scale[series, c]
    overflow = np.argwhere(np.isinf(scaled) | (np.isnan(scaled) & ~np.isnan(values)))
    if len(overflow):
        row, c = (int(v) for v in overflow[0])
        s = int(series[row])
        columns = fitted.columns
        raise ValueError(f"{columns.channel_roles[c]} {columns.channels[c]!r}: "
                         f"{row_label(int(panel.rows[row]), source)} value "
                         f"{float(values[row, c])!r} does not fit float32 once scaled by "
                         f"loc={loc[s, c]:.3g}, scale={scale[s, c]:.3g} (the training spread "
                         "is too small for it)")
    static_real, static_cat = _encode_static(panel, fitted, source)
    targets = values[:, :len(fitted.columns.target_columns)].astype(np.float32)
    return dataclasses.replace(panel, values=scaled, targets=targets, static_real=static_real,
                               static_cat=static_cat)


def batch_of_series(utc: np.ndarray, local: np.ndarray, values: np.ndarray,
                    context_rows: np.ndarray, target_rows: np.ndarray, fitted: Fitted,
                    static_real: np.ndarray, static_cat: np.ndarray, *, targets: np.ndarray
                    ) -> dict[str, Tensor]:
    """Scaled rows of ``B`` windows, one after another (``context_rows[b]`` then
    ``target_rows[b]`` rows) -> their batch, by
    [`WindowDataset`][posenc.tasks.forecasting.windows.WindowDataset] as every batch; ``fitted``
    gives the channel layout, ``(B, C)`` scaling and ``(B,)`` starts; ``targets``: the rows'
    ``(N, C)`` targets in data units (``Panel.targets``)."""
    ends = np.cumsum(context_rows + target_rows)
    starts = np.concatenate(([0], ends)).astype(np.int64)
    panel = Panel(utc=utc, local=local, values=values, starts=starts, rows=np.arange(len(utc)),
                  targets=targets, static_real=static_real, static_cat=static_cat)
    rows = np.stack((starts[:-1], starts[:-1] + context_rows, starts[1:]), 1)
    windows = WindowIndex(offsets=np.arange(len(rows) + 1, dtype=np.int64), rows=rows)
    return WindowDataset(panel, fitted, windows).__getitems__(np.arange(len(rows)))


def collate_windows(items: Sequence[dict[str, Tensor]]) -> dict[str, Tensor]:
    """Stack window dicts ([`WindowDataset`][posenc.tasks.forecasting.windows.WindowDataset] items),
    right-padding each side to the longest in the batch as `batch_of_series` pads (``*_valid`` marks
    real tokens). Every item needs a non-empty context and horizon and the same channels ``C``.
    """
    if not len(items):
        raise ValueError("collate_windows needs at least one window, got none")
    channels = int(items[0]["loc"].shape[-1])
    for i, item in enumerate(items):
        if int(item["loc"].shape[-1]) != channels:
            raise ValueError(f"items[{i}] has {int(item['loc'].shape[-1])} target channels but "
                             f"items[0] has {channels}")
        for prefix, what in (("context", "context"), ("target", "horizon")):
            if not item[f"{prefix}_time"].shape[0]:
                raise ValueError(f"items[{i}] has an empty {what}: a window needs at least one "
                                 "row on each side")
        if set(item) != set(items[0]):
            raise ValueError(f"items[{i}] has keys {sorted(item)} but items[0] has "
                             f"{sorted(items[0])}")
    # The items' channels back as columns (NaN where unobserved), in the layout of CHANNELS.
    first = items[0]
    columns = Columns("time", **{field: [f"{key}_{j}" for j in range(
        first[f"context_{key}"].shape[-1])] for field, _, key, *_ in CHANNELS})

    def side(item: dict[str, Tensor], prefix: str) -> list[Tensor]:
        parts = []
        for key, observed, sides, a, b in columns.groups():
            if prefix not in sides:
                parts.append(item["loc"].new_full((len(item[f"{prefix}_time"]), b - a), np.nan))
                continue
            value = item[f"{prefix}_{key}"]
            parts.append(value if observed is None else
                         value.masked_fill(~item[f"{prefix}_{observed}"], np.nan))
        raw = item[f"{prefix}_raw"].masked_fill(~item[f"{prefix}_observed"], np.nan)
        return [item[f"{prefix}_time"], item[f"{prefix}_local"], torch.cat(parts, -1), raw]

    def stack(key: str) -> np.ndarray:
        return torch.stack([item[key] for item in items]).numpy(force=True)

    rows = [side(item, prefix) for item in items for prefix in ("context", "target")]
    utc, local, values, raw = (torch.cat(parts).numpy(force=True)
                               for parts in zip(*rows, strict=True))
    count = [np.array([len(item[f"{p}_time"]) for item in items]) for p in ("context", "target")]
    # The items' values are scaled already: the covariates' scaling is not read again.
    covariates = np.zeros((len(items), len(columns.channels) - channels))
    fitted = Fitted(columns, series_start=tuple(stack("series_start_local").tolist()),
                    **{name: tuple(map(tuple, np.hstack((stack(name), covariates)).tolist()))
                       for name in ("loc", "scale")})
    batch = batch_of_series(utc, local, values, *count, fitted, stack("static_real"),
                            stack("static_cat"), targets=raw)
    batch["series"] = torch.from_numpy(stack("series"))
    batch["seasonal_error"] = torch.from_numpy(stack("seasonal_error"))  # of whole histories
    return batch


# -- the data module ---------------------------------------------------------------------------
def process_group_up() -> bool:
    """Whether torch.distributed's process group is up (ranks to gather over)."""
    return torch.distributed.is_available() and torch.distributed.is_initialized()


def distributed_rank() -> tuple[int, int]:
    """``(rank, world size)`` of this process: torch.distributed's once initialized."""
    if process_group_up():
        return torch.distributed.get_rank(), torch.distributed.get_world_size()
    return 0, 1


#: Characters that make a ``data`` path a glob of Parquet files.
GLOB_CHARACTERS = "*?["


def is_dataset(data: Any) -> bool:
    """Whether ``data`` names a Parquet dataset read lazily: a directory, a glob or a URL
    (``scheme://``); a single ``.csv``/``.parquet`` path is read in memory."""
    if not isinstance(data, (str, os.PathLike)):
        return False
    text = os.fspath(data)
    return "://" in text or any(c in text for c in GLOB_CHARACTERS) or Path(text).is_dir()


def _stream() -> Any:
    """[`stream`][posenc.tasks.forecasting.stream] (the Parquet dataset path), imported where used:
    it builds on this module."""
    from . import stream

    return stream


class TimeSeriesDataModule(LightningDataModule):
    """Sliding-window forecasting data from a CSV/Parquet file or a DataFrame.

    Args:
        data: path (stored as text) to a ``.csv`` / ``.parquet`` file, or a ``DataFrame``,
            read in memory; or a Parquet dataset read lazily, each DDP rank and loader worker
            its own chunks ([`stream`][posenc.tasks.forecasting.stream]): a directory, a glob
            (``"panel/*.parquet"``) or an fsspec URL (``"s3://bucket/panel/"``).
        timestamp_column: the timestamps (text or datetime; naive or with a UTC offset, one
            form for the column). The same instant twice within a series is an error.
        target_columns: numeric column(s) to forecast, one channel each; NaN = missing. A
            channel constant over the training period gets ``scale`` 1.
        series_column: column(s) naming the series of a long-format panel; None: one series.
            Windows never cross series; series may start and end apart, have gaps and be
            irregular.
        past_covariates: numeric (or bool) columns known up to the forecast origin (a measured
            temperature), seen in the context; NaN = missing.
        future_covariates: numeric (or bool) columns known at the times to predict too (a
            workday flag, a temperature forecast); a missing value is an error.
        static_columns: one value per series: text, categorical or bool columns are categories
            (embedded), numbers are standardized across series.
        tz: IANA time zone. Naive timestamps are local times there (localized with
            ``ambiguous``/``nonexistent``, in wall-clock order); aware ones are converted to
            it. Calendar features use local time; elapsed time is always real (UTC) time.
        ambiguous: repeated local hour at a DST fall-back: ``raise``, ``earliest`` (the DST
            reading), ``latest`` (standard time) or ``infer`` (from the order).
        nonexistent: skipped local hour at a DST spring-forward: ``raise``,
            ``shift_forward`` or ``shift_backward``.
        context_length: context per window: observations (int) or a duration with a unit
            (``"7D"``, a ``timedelta``); a bare number such as ``"168"`` or ``168.0`` is refused.
        horizon: predicted span per window: observations (int) or a duration (``"24h"``).
        stride: distance between forecast origins of the validation and test backtests, same
            kind as the lengths (default: ``horizon``). Durations may place at most
            ``MAX_ORIGINS_PER_ROW`` origins per observation; a window holds at most
            ``MAX_WINDOW_ROWS`` rows.
        train_stride: distance between training origins, same kind as the lengths. None:
            dense, one per observation (counts) or per median sampling step (durations);
            bound an epoch with the trainer's ``limit_train_batches`` where that is too many.
        val_fraction: the last fraction of the time span held out for validation (ignored
            where ``val_start`` is given).
        test_fraction: the last fraction for test (ignored where ``test_start`` is given).
        val_start: an explicit split time (text or ``datetime``) in the form of the
            timestamps: naive for naive data (read in ``tz`` where given), with a UTC offset
            for aware data (naive ones are accepted there only with ``tz``).
        test_start: the same for the test split.
        train_on_val: train on the validation span too: the fitted state and the training
            windows reach ``test_start``, and there are no validation windows (run the
            trainer with ``limit_val_batches=0``); ``posenc fit --refit_epochs N`` sets it.
        season: the seasons of the seasonal-naive baselines, one or a list: a fixed duration
            (``"7D"``; calendar months such as ``"12MS"`` are refused: give 12 for monthly
            data), a count of median sampling steps or ``"persistence"`` (the last observed
            value); None: every natural season of the step that fits in the context
            ([`natural_seasons`][posenc.tasks.forecasting.metrics.natural_seasons]). Each is logged
            as its own baseline (``test/mae_naive_7d``).
        mase_season: the seasonal period ``m`` (observations) of MASE's and RMSSE's
            denominators; None: GluonTS's for the step
            ([`seasonality_for_step`][posenc.tasks.forecasting.metrics.seasonality_for_step]: 24 for
            hourly).
        irregular: keep a random fraction of observations (seeded); None keeps all.
        seed: seed of ``irregular``.
        batch_size: training windows per batch.
        eval_batch_size: windows per validation, test and predict batch.
        num_workers: loader worker processes (with a Parquet dataset they also read the
            chunks of the set-up's fitting pass).
        timestamp_format: ``pd.to_datetime`` format of text timestamps (``"%d/%m/%Y %H:%M"``,
            ``"ISO8601"``, ``"mixed"``). None: the format of the first row, which every row
            must match.
        predict_split: what ``predict`` forecasts: ``future`` (default): the times after each
            series' end, the whole table as history; ``test`` or ``val``: that split's
            rolling windows (backtests).
        future_data: with ``predict_split="future"``, the times to predict: a CSV/Parquet path
            or DataFrame of the series and timestamp columns and the future covariates; None:
            the trained horizon after each series' last observation.
        chunk_rows: with a Parquet dataset, the rows read at once (whole series): a process
            holds about two such chunks, or the longest series twice.

    The table is read with its own state (fitted on its training period) until a trained
    model hands over its own ([`read_with`][posenc.tasks.TimeSeriesDataModule.read_with]).
    """

    def __init__(
        self, data: str | os.PathLike | Any = None, timestamp_column: str = "timestamp",
        target_columns: str | list[str] = "value", series_column: str | list[str] | None = None,
        past_covariates: list[str] | None = None, future_covariates: list[str] | None = None,
        static_columns: list[str] | None = None, tz: str | None = None,
        ambiguous: str = "raise", nonexistent: str = "raise",
        context_length: int | str = 168, horizon: int | str = 24,
        stride: int | str | None = None, train_stride: int | str | None = None,
        val_fraction: float = 0.15, test_fraction: float = 0.15,
        val_start: str | None = None, test_start: str | None = None, train_on_val: bool = False,
        season: int | str | list[int | str] | None = None, mase_season: int | None = None,
        irregular: float | None = None, seed: int = 0, batch_size: int = 64,
        eval_batch_size: int | None = None, num_workers: int = 0,
        timestamp_format: str | None = None, predict_split: str = "future",
        future_data: str | os.PathLike | Any = None, chunk_rows: int = CHUNK_ROWS,
    ) -> None:
        super().__init__()
        # A DataFrame is data, not a hyperparameter: keep it out of the checkpoint.
        frames = [name for name, value in (("data", data), ("future_data", future_data))
                  if not isinstance(value, (str, os.PathLike, type(None)))]
        self.save_hyperparameters(ignore=frames)
        # Builtins only: a checkpoint must load with torch.load(weights_only=True).
        make_hparams_plain(self.hparams)
        self.data = data
        self.columns = Columns(timestamp_column, target_columns, series_column, past_covariates,
                               future_covariates, static_columns, tz, ambiguous, nonexistent,
                               timestamp_format)
        self.context_length = parse_length(context_length, "context_length")
        self.horizon = parse_length(horizon, "horizon")
        self.stride = self.horizon if stride is None else parse_length(stride, "stride")
        self.train_stride = None if train_stride is None else parse_length(train_stride,
                                                                           "train_stride")
        kinds = {type(v) for v in (self.context_length, self.horizon, self.stride,
                                   self.train_stride) if v is not None}
        if len(kinds) != 1:
            raise ValueError(
                f"context_length={context_length!r}, horizon={horizon!r}, stride={stride!r} "
                f"and train_stride={train_stride!r} must all be observation counts (int) or "
                "all durations (str)")
        self.by_time = kinds == {pd.Timedelta}
        if not self.by_time and self.context_length + self.horizon > MAX_WINDOW_ROWS:
            raise ValueError(
                f"context_length + horizon = {self.context_length + self.horizon} rows per "
                f"window, above the limit of MAX_WINDOW_ROWS={MAX_WINDOW_ROWS}")
        self.val_fraction, self.test_fraction = check_split_fractions(val_fraction, test_fraction)
        self.val_start = self._split_argument(val_start, "val_start")
        self.test_start = self._split_argument(test_start, "test_start")
        self.train_on_val = check_bool(train_on_val, "train_on_val")
        if irregular is not None and (isinstance(irregular, (bool, np.bool_)) or not (
                isinstance(irregular, Real) and 0 < irregular <= 1)):  # NaN fails this too
            raise ValueError(f"irregular is the fraction of observations kept, in (0, 1], got "
                             f"{irregular!r}")
        self.irregular = irregular
        many = isinstance(season, (list, tuple))
        if many and not season:
            raise ValueError("season must be a season, a list of seasons or None, got []")
        parsed = [s if s in (None, PERSISTENCE) else parse_length(s, "season")
                  for s in (season if many else [season])]
        self.season = parsed if many else parsed[0]
        self._mase_season = None if mase_season is None else check_positive_int(
            plain(mase_season), "mase_season")
        self.seed = check_int(plain(seed), "seed")
        self.batch_size = check_positive_int(plain(batch_size), "batch_size")
        self.eval_batch_size = (self.batch_size if eval_batch_size is None
                                else check_positive_int(plain(eval_batch_size), "eval_batch_size"))
        self.num_workers = check_int(plain(num_workers), "num_workers", ge=0)
        self.predict_split = check_choice(predict_split, "predict_split", ("future", "test", "val"))
        if self.train_on_val and self.predict_split == "val":
            raise ValueError("predict_split='val' needs validation windows, but train_on_val=True "
                             "trains on them")
        if future_data is not None and not isinstance(future_data, (str, os.PathLike,
                                                                    pd.DataFrame)):
            raise TypeError(f"future_data must be a path or a pandas DataFrame, got "
                            f"{type(future_data).__name__}")
        self.future_data = future_data
        self.chunk_rows = check_positive_int(plain(chunk_rows), "chunk_rows")
        if self.irregular is not None and self.irregular < 1 and is_dataset(data):
            raise ValueError("irregular thins a table read in memory; a Parquet dataset is "
                             "read lazily: leave irregular=None (thin the files instead)")
        self.datasets: dict[str, WindowDataset | DatasetWindows] = {}
        self._set_up = False  # setup() was called (by a trainer: the loaders build)
        self._datasets_panel: Panel | None = None  # the panel self.datasets window
        self._datasets_rank: tuple[int, int] | None = None  # (rank, world) they were dealt to
        self._known: Fitted | None = None  # a trained model's state (read_with)
        self._read: tuple[Fitted | None, Panel, Fitted] | None = None  # (known, panel, state)

    @staticmethod
    def _split_argument(value: Any, name: str) -> pd.Timestamp | None:
        """``val_start``/``test_start`` -> a Timestamp (zone applied later)."""
        if value is None:
            return None
        if isinstance(value, (dt.datetime, np.datetime64)):
            stamp = pd.Timestamp(value)
        elif isinstance(value, str):
            if value.strip().lower() in _RELATIVE:
                raise ValueError(f"{name}={value!r} is relative to the day it runs; give a "
                                 "fixed time such as '2021-06-01'")
            try:
                stamp = pd.Timestamp(value)
            except (ValueError, TypeError, OverflowError) as err:
                raise ValueError(f"{name}={value!r} cannot be parsed as a timestamp (expected "
                                 "e.g. '2021-06-01 00:00')") from err
        else:
            raise TypeError(f"{name} must be a timestamp string or datetime, got "
                            f"{type(value).__name__} ({value!r})")
        if pd.isna(stamp):
            raise ValueError(f"{name}={value!r} cannot be parsed as a timestamp (it is NaT)")
        return stamp

    def _given(self, name: str) -> Any:
        """An argument as the user wrote it (for messages), else as parsed."""
        return self.hparams.get(name, getattr(self, name, None))

    @property
    def streaming(self) -> bool:
        """Whether ``data`` is a Parquet dataset read lazily (a directory, glob or URL)."""
        return is_dataset(self.data)

    def load_frame(self) -> pd.DataFrame:
        """The raw table (a preset overrides it)."""
        if self.streaming:
            raise ValueError(f"{self._describe_data()} is a Parquet dataset, read lazily in "
                             "chunks: it is never one table in memory")
        if isinstance(self.data, pd.DataFrame):
            return self.data
        if self.data is None:
            raise ValueError(f"{type(self).__name__} needs data: a .csv/.parquet path or a "
                             "pandas DataFrame")
        return read_table(self.data)

    def _source(self) -> str | None:
        return os.fspath(self.data) if isinstance(self.data, (str, os.PathLike)) else None

    def _describe_data(self) -> str:
        if (source := self._source()) is not None:
            return f"data={source!r}"
        return "data (a DataFrame)" if isinstance(self.data, pd.DataFrame) else type(self).__name__

    # -- the fitted state ------------------------------------------------------------------
    def read_with(self, fitted: Fitted | None) -> Fitted:
        """Read the table with a trained model's state from now on (None: with this data's
        own); -> the state the table is read with: ``fitted`` (never changed) extended by the
        series new to it. ``ValueError`` for a state of other channels or static columns."""
        if fitted is not None:
            if not isinstance(fitted, Fitted):
                raise TypeError(f"fitted must be a Fitted or None, got {type(fitted).__name__}")
            self.columns.check_fitted(fitted)
        self._known = fitted
        return self.fitted

    def _reading(self) -> tuple[Panel, Fitted]:
        """The scaled panel and its state, read once per state handed in (the table's own
        state handed back reads nothing again)."""
        read = self._read
        if read is None or (self._known is not read[0] and self._known is not read[2]):
            self._read = read = (self._known, *self._read_table(self._known))
        return read[1], read[2]

    def _read_dataset(self, known: Fitted | None) -> tuple[DatasetPanel, Fitted]:
        """`_read_table` of a Parquet dataset: a scan of the series and time columns,
        then one pass over the chunks for the state (DDP ranks share both)."""
        rank, world = self._rank()
        dataset = _stream().DatasetPanel.scan(self.data, self.columns, known, self.chunk_rows,
                                              rank, world)
        if known is not None and dataset.aware != known.aware and self.columns.tz is None:
            kinds = ["tz-naive", "tz-aware"]
            raise ValueError(f"timestamp column {self.columns.timestamp_column!r} is "
                             f"{kinds[dataset.aware]} but the model was trained on "
                             f"{kinds[known.aware]} timestamps; use one form")
        t_val, t_test = self._split_times(np.array(dataset.span),
                                          dataset.aware if known is None else known.aware)
        fitted = dataset.fit(t_test if self.train_on_val else t_val, (t_val, t_test), known,
                             context_length=self._given("context_length"),
                             horizon=self._given("horizon"), workers=self.num_workers,
                             rank=rank, world_size=world)
        self.split_times = {"val": t_val, "test": t_test}
        return dataset, fitted

    def _read_table(self, known: Fitted | None) -> tuple[Panel, Fitted]:
        if self.streaming:
            return self._read_dataset(known)
        frame = self.load_frame()
        check_unique_columns(list(frame.columns), self._describe_data())
        if not len(frame):
            raise ValueError(f"{self._describe_data()} has no rows (columns "
                             f"{[str(c) for c in frame.columns]})")
        panel = read_panel(frame, self.columns, known, self._source())
        if self.irregular is not None and self.irregular < 1:
            panel = panel.keep_rows(np.random.default_rng(self.seed).random(len(panel.utc))
                                    < self.irregular)
        if len(panel.utc) < 2:
            raise ValueError(f"the series in {self._describe_data()} has {len(panel.utc)} "
                             "observation(s); forecasting needs many more")
        t_val, t_test = self._split_times(panel.utc, panel.zone is not None if known is None
                                          else known.aware)
        # The state of the training span: through the validation span with train_on_val.
        fitted = fit(panel, self.columns, t_test if self.train_on_val else t_val, known,
                     context_length=self._given("context_length"), horizon=self._given("horizon"))
        self.split_times = {"val": t_val, "test": t_test}
        return scale_panel(panel, fitted, self._source()), fitted

    def panel(self) -> Panel:
        """The checked, sorted and scaled table, read when first asked for (the model sizes
        need it before ``setup``), with [`fitted`][posenc.tasks.TimeSeriesDataModule.fitted];
        ``TypeError`` for a Parquet dataset."""
        if self.streaming:
            raise TypeError(f"{self._describe_data()} is a Parquet dataset read lazily: there "
                            "is no in-memory panel; its batches come from "
                            "dm.datasets[split] after setup()")
        return self._reading()[0]

    @property
    def fitted(self) -> Fitted:
        """The state the table is read with: its own (fitted on its training period), or a
        trained model's extended by the series new to it
        ([`read_with`][posenc.tasks.TimeSeriesDataModule.read_with])."""
        return self._reading()[1]

    @property
    def series_keys(self) -> list[tuple]:
        """One key per series (its values of ``series_column``; ``[()]`` for one series)."""
        return list(self.fitted.series_keys)

    def model_sizes(self) -> dict[str, Any]:
        """The `MODEL_SIZES` of this data, as ``Forecaster`` arguments:
        ``Forecaster(**dm.model_sizes(), dim=64, ...)``."""
        return {name: getattr(self, name) for name in MODEL_SIZES}

    @property
    def num_targets(self) -> int:
        return len(self.columns.target_columns)

    @property
    def num_series(self) -> int:
        return len(self.series_keys)

    @property
    def num_past_covariates(self) -> int:
        return len(self.columns.past_covariates)

    @property
    def num_future_covariates(self) -> int:
        return len(self.columns.future_covariates)

    @property
    def static_cardinalities(self) -> list[int]:
        """Codes per categorical static column (its training values + 1 for unknown)."""
        fitted = self.fitted
        return [len(fitted.static_categories[c]) + 1 for c in fitted.static_cat_columns]

    @property
    def num_static_real(self) -> int:
        return len(self.fitted.static_real_columns)

    @property
    def loc(self) -> np.ndarray:
        """``(S, C)`` per-series target means of the training span (``(C,)`` for one series)."""
        loc = self.fitted.target_scaling()[0]
        return loc[0] if not self.columns.series_columns else loc

    @property
    def scale(self) -> np.ndarray:
        """``(S, C)`` per-series target standard deviations (``(C,)`` for one series)."""
        scale = self.fitted.target_scaling()[1]
        return scale[0] if not self.columns.series_columns else scale

    @property
    def naive_seasons(self) -> list[str]:
        """The seasonal-naive baselines' seasons, durations: ``season`` (a count is in median
        sampling steps; ``"persistence"``: 1 ns, making the baseline the last observed value),
        else [`natural_seasons`][posenc.tasks.forecasting.metrics.natural_seasons] of the step."""
        step = pd.Timedelta(self.fitted.step_ns)
        if self.season is None:
            context = self.context_length if self.by_time else step * self.context_length
            return [str(s) for s in natural_seasons(step, context)]
        return [str(pd.Timedelta(1, "ns") if s == PERSISTENCE else
                    s if isinstance(s, pd.Timedelta) else step * s)
                for s in (self.season if isinstance(self.season, list) else [self.season])]

    @property
    def mase_season(self) -> int:
        """MASE's seasonal period in observations: ``mase_season`` if given, else GluonTS's
        for the median step."""
        if self._mase_season is not None:
            return self._mase_season
        return seasonality_for_step(pd.Timedelta(max(self.fitted.step_ns, 1)))

    # -- splits and windows ----------------------------------------------------------------
    def _split_times(self, utc: np.ndarray, aware: bool) -> tuple[int, int]:
        """One ``(val_start, test_start)`` in UTC ns for every series: the split is by time."""
        start, end = int(utc.min()), int(utc.max())

        def explicit(stamp: pd.Timestamp, name: str) -> int:
            given = self._given(name)
            tz = self.columns.tz
            if stamp.tzinfo is None:
                if aware and tz is None:
                    raise ValueError(f"{name}={given!r} has no UTC offset but the timestamps "
                                     "are tz-aware: add an offset, or set tz to read it in")
                if tz is not None:  # as the timestamps (one time cannot be "infer"red)
                    ambiguous = self.columns.ambiguous
                    try:
                        utc, _ = utc_and_local(pd.DatetimeIndex([stamp]), tz,
                                               "raise" if ambiguous == "infer" else ambiguous,
                                               self.columns.nonexistent, name)
                    except ValueError as err:
                        raise ValueError(f"{name}={given!r} is not a single local time in "
                                         f"tz={tz!r}: {err}") from err
                    return int(utc[0])
            elif not aware and tz is None:
                raise ValueError(f"{name}={given!r} has a UTC offset but the timestamps are "
                                 "tz-naive (their own clock): drop the offset, or set tz")
            try:
                return int(stamp.as_unit("ns").value)
            except (ValueError, OverflowError) as err:
                raise ValueError(f"{name}={given!r} is outside the nanosecond range") from err

        span = end - start
        t_val = (explicit(self.val_start, "val_start") if self.val_start is not None
                 else start + int(span * (1 - self.val_fraction - self.test_fraction)))
        t_test = (explicit(self.test_start, "test_start") if self.test_start is not None
                  else start + int(span * (1 - self.test_fraction)))
        if not start < t_val < t_test <= end:
            raise ValueError(f"split times must satisfy first timestamp < val_start < "
                             f"test_start <= last timestamp, got val_start="
                             f"{pd.Timestamp(t_val)}, test_start={pd.Timestamp(t_test)} for "
                             f"data from {pd.Timestamp(start)} to {pd.Timestamp(end)} (UTC)")
        return t_val, t_test

    def _window_lengths(self, split: str) -> tuple[int, int, int]:
        """``(context, horizon, stride)`` of a split's windows: rows in count mode, ns in time
        mode. Training strides by ``train_stride``, by default one row (counts) or the median
        sampling step (durations; ``stride`` for data without one)."""
        stride = self.stride
        if split == "train" and self.train_stride is not None:
            stride = self.train_stride
        elif split == "train" and not self.by_time:
            stride = 1
        elif split == "train" and self.fitted.step_ns > 0:
            stride = pd.Timedelta(self.fitted.step_ns)
        lengths = (self.context_length, self.horizon, stride)
        return tuple(int(v.value) for v in lengths) if self.by_time else lengths

    def split_bounds(self) -> dict[str, tuple[int, int]]:
        """Each split's ``[lo, hi)`` in UTC ns (with ``train_on_val``, no ``val`` split)."""
        first, last = (self._reading()[0].span if self.streaming else
                       (int(self.panel().utc.min()), int(self.panel().utc.max())))
        t_val, t_test = self.split_times["val"], self.split_times["test"]
        test = (t_test, last + 1)
        if self.train_on_val:
            return {"train": (first, t_test), "test": test}
        return {"train": (first, t_val), "val": (t_val, t_test), "test": test}

    def windows(self, split: str) -> WindowIndex:
        """The lazy index of one split's windows (``train``, ``val`` or ``test``); ``ValueError``
        beyond `MAX_ORIGINS_PER_ROW` or `MAX_WINDOW_ROWS`."""
        check_choice(split, "split", ("train", "val", "test"))
        if self.streaming:
            raise TypeError(f"{self._describe_data()} is a Parquet dataset: its windows are "
                            "made chunk by chunk (dm.datasets[split] after setup())")
        panel = self.panel()
        bounds = self.split_bounds()
        if split not in bounds:
            raise ValueError(f"split={split!r}: train_on_val=True trains on the validation "
                             "span, there are no validation windows")
        lo, hi = bounds[split]
        lengths = self._window_lengths(split)
        if not self.by_time:
            return count_windows(panel.starts, panel.utc, lo, hi, *lengths)
        # Here, not in setup: every caller of windows() must be refused before the work.
        origins = {s: int(time_origins(panel.starts, panel.utc, a, b,
                                       *self._window_lengths(s))[1].sum())
                   for s, (a, b) in bounds.items()}
        total = sum(origins.values())
        if total > MAX_ORIGINS_PER_ROW * len(panel.utc):
            most = max(origins, key=origins.get)  # the split whose stride to name
            name = "train_stride" if most == "train" else "stride"
            given = self._given(name) if most == "train" else (self._given("stride")
                                                                or self._given("horizon"))
            raise ValueError(
                f"{name}={given!r} places about {total:.2g} forecast origins in data of "
                f"{len(panel.utc)} observations, {origins[most]:.2g} of them in the {most} "
                f"split (more than MAX_ORIGINS_PER_ROW={MAX_ORIGINS_PER_ROW} per "
                f"observation): windows would repeat the same rows; use a {name} of at least "
                f"the sampling interval (median {pd.Timedelta(self.fitted.step_ns)} here)")
        windows = duration_windows(panel.starts, panel.utc, lo, hi, *lengths)
        if len(windows):
            rows = int((windows.rows[:, 2] - windows.rows[:, 0]).max())
            if rows > MAX_WINDOW_ROWS:
                raise ValueError(
                    f"context_length={self._given('context_length')!r} and horizon="
                    f"{self._given('horizon')!r} make windows of up to {rows} rows in the "
                    f"{split} split, above the limit of MAX_WINDOW_ROWS={MAX_WINDOW_ROWS}")
        return windows

    def setup(self, stage: str | None = None) -> None:
        """Each split's [`WindowDataset`][posenc.tasks.forecasting.windows.WindowDataset] over
        [`panel`][posenc.tasks.TimeSeriesDataModule.panel] (kept while it is the same panel). A
        running trainer's call only marks the data set up: the model hands over its state next, and
        the loaders, which call this again, read the table with it."""
        self._set_up = True
        trainer = getattr(self, "trainer", None)
        if stage is not None and trainer is not None and trainer.state.status == "running":
            return
        panel, fitted = self._reading()
        # A Parquet dataset's windows are dealt to ranks: rebuilt once DDP has started.
        rank = self._rank() if self.streaming else None
        if self.datasets and self._datasets_panel is panel and self._datasets_rank == rank:
            return
        if self.streaming:
            self.datasets = self._dataset_windows(panel, fitted)
            self._datasets_panel, self._datasets_rank = panel, rank
            return
        datasets = {}
        for split, (lo, hi) in self.split_bounds().items():
            windows = self.windows(split)
            if not len(windows):
                raise ValueError(self._no_window(split, panel, lo, hi))
            datasets[split] = WindowDataset(panel, fitted, windows, self.mase_season)
        self.datasets, self._datasets_panel = datasets, panel

    def _rank(self) -> tuple[int, int]:
        """``(rank, world size)``: the trainer's, else torch.distributed's, else one."""
        trainer = getattr(self, "trainer", None)
        if trainer is not None:
            return int(trainer.global_rank), int(trainer.world_size)
        return distributed_rank()

    def _dataset_windows(self, dataset: DatasetPanel, fitted: Fitted
                         ) -> dict[str, DatasetWindows]:
        """Each split's [`DatasetWindows`][posenc.tasks.forecasting.stream.DatasetWindows] (planned
        from per-series counts)."""
        rank, world = self._rank()
        out = {}
        for split, (lo, hi) in self.split_bounds().items():
            windows = _stream().DatasetWindows(
                dataset, fitted, (lo, hi), self._window_lengths(split), self.by_time,
                self.batch_size if split == "train" else self.eval_batch_size,
                shuffle=split == "train", seed=self.seed, seasonality=self.mase_season,
                rank=rank, world_size=world)
            if not windows.num_windows:
                raise ValueError(self._no_window(split, dataset, lo, hi))
            rows = int(dataset.lengths.sum())
            if self.by_time and windows.num_windows > MAX_ORIGINS_PER_ROW * rows:
                name = "train_stride" if split == "train" else "stride"
                raise ValueError(f"{name}={self._given(name)!r} places {windows.num_windows} "
                                 f"forecast origins in the {split} split of {rows} observations "
                                 f"(more than MAX_ORIGINS_PER_ROW={MAX_ORIGINS_PER_ROW} per "
                                 "observation)")
            out[split] = windows
        return out

    def _no_window(self, split: str, panel: Panel | DatasetPanel, lo: int, hi: int) -> str:
        if isinstance(panel, Panel):
            count = int(((panel.utc >= lo) & (panel.utc < hi)).sum())
            num_series = panel.num_series
        else:
            count, num_series = panel.rows_in(lo, hi), len(panel.series_keys)
        what = "series" if num_series == 1 else f"{num_series} series"
        message = (f"the {split} split ({pd.Timestamp(lo)} to {pd.Timestamp(hi)} UTC, {count} "
                   f"observations in {what}) fits no window of context_length="
                   f"{self._given('context_length')!r} and horizon={self._given('horizon')!r}")
        spacing = pd.Timedelta(self.fitted.step_ns)
        if self.by_time and min(self.context_length, self.horizon) < spacing:
            return (message + ": a window needs an observation in its context and in its "
                    "horizon, and these durations are shorter than the median sampling "
                    f"interval {spacing}; lengthen them")
        return message + (": the series is too short for these windows; shorten them or move "
                          "the split")

    def _loader(self, dataset: Any, shuffle: bool = False) -> DataLoader:
        if self.streaming and isinstance(dataset, _stream().DatasetWindows):  # whole batches
            return DataLoader(dataset, batch_size=None, num_workers=self.num_workers,
                              persistent_workers=self.num_workers > 0)
        return DataLoader(dataset, batch_size=self.batch_size if shuffle else self.eval_batch_size,
                          shuffle=shuffle, collate_fn=batched, num_workers=self.num_workers,
                          persistent_workers=self.num_workers > 0)

    def _split_loader(self, split: str) -> DataLoader:
        if split == "val" and self.train_on_val:
            raise RuntimeError("train_on_val=True trains on the validation span: there are no "
                               "validation windows; run the trainer with limit_val_batches=0")
        if not self._set_up:
            raise RuntimeError(f"{type(self).__name__}.setup() must run before asking for "
                               "data loaders")
        self.setup()
        return self._loader(self.datasets[split], shuffle=split == "train")

    def train_dataloader(self) -> DataLoader:
        return self._split_loader("train")

    def val_dataloader(self) -> DataLoader:
        return self._split_loader("val")

    def test_dataloader(self) -> DataLoader:
        return self._split_loader("test")

    def predict_dataloader(self) -> DataLoader:
        if self.predict_split != "future":
            return self._split_loader(self.predict_split)
        from .output import request_dataset

        future = self.future_data
        if isinstance(future, (str, os.PathLike)):
            future = read_table(future)
        if self.streaming:  # one window per series after its end, chunk by chunk
            dataset, fitted = self._reading()
            rank, world = self._rank()
            return self._loader(_stream().DatasetWindows(
                dataset, fitted, None, self._window_lengths("test"), self.by_time,
                self.eval_batch_size, rank=rank, world_size=world, future=future))
        # A trained model's state (its scaling and series) reads the whole table as history.
        return self._loader(request_dataset(
            self.fitted if self._known is None else self._known, self.load_frame(), future,
            future_name="--data.future_data", future_form="a CSV/Parquet file or DataFrame"))
