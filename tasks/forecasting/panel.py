"""A long-format table of many series -> one checked, sorted, scaled :class:`Panel`.

One row per (series, timestamp): the series id in one or several columns, the timestamp, the
targets, and optionally past covariates (known up to the forecast origin), future covariates
(known at the times to predict) and static columns (one value per series). Rows are sorted by
series, then by real (UTC) time; every series is one contiguous block of rows.

Timestamps go through :func:`posenc.temporal.parse_timestamps` and
:func:`posenc.temporal.timestamps.utc_and_local`, the path every table reader in posenc takes.
Scaling is per series and per channel, fitted on the training span only (times before
``val_start``); a series with no observation there takes the training statistics pooled over
all series.
Before any of that, :func:`read_table` reads a ``.csv`` / ``.parquet`` file,
:func:`check_unique_columns` and :func:`numeric_column` check its columns, and
:func:`parse_length` reads a window length (a count or a duration with a unit).

:class:`SeriesSchema` is what a trained model needs to read new data the same way: column
roles, the zone, the series and their scaling, the category vocabularies. It is plain data
(lists, numbers, strings), stored in the ``Forecaster``'s checkpoint.
"""

from __future__ import annotations

import copy
import dataclasses
import datetime as dt
import os
import warnings
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd
from posenc.core.encoding import check_positive_int
from posenc.temporal.frequencies import parse_duration
from posenc.temporal.timestamps import parse_timestamps, row_label, utc_and_local

__all__ = ["FITTED", "Panel", "SeriesSchema", "read_panel", "scale_panel", "check_unique_columns",
           "numeric_column", "parse_length", "read_table"]


def parse_length(value: Any, name: str) -> int | pd.Timedelta:
    """An observation count (int) or a fixed duration with a unit (str or timedelta, read by
    :func:`~posenc.temporal.frequencies.parse_duration`: calendar months are refused)."""
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
            raise ValueError(f"{where} has {count} columns named {name!r}; column names must "
                             "be unique")
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
        raise TypeError(f"data must be a path or a pandas DataFrame, got "
                        f"{type(data).__name__}")
    path = Path(data)
    if not path.is_file():
        raise FileNotFoundError(f"data={str(path)!r} does not exist")
    suffix = path.suffix.lower()
    if suffix == ".csv":
        try:
            frame = pd.read_csv(path)
            # read_csv renames a repeated "load" to "load.1": read the raw header too.
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

# The fields of a SeriesSchema fitted on the training span (read_panel with fit, the data
# module's step and starts, scale_panel); the others describe the columns and how to read them.
FITTED = ("aware", "zone", "series_keys", "loc", "scale", "static_categories", "static_stats",
          "series_start", "step_ns")


@dataclasses.dataclass
class SeriesSchema:
    """How a table's columns are read; plain data (:meth:`to_dict` / :meth:`from_dict`).

    ``loc``/``scale`` are per series (rows of ``series_keys``) and per channel, in the
    order targets, past covariates, future covariates. ``static_categories`` maps each
    categorical static column to its values (code ``i + 1``; code 0 is a value not seen in
    training); ``static_stats`` maps each numeric static column to ``(mean, std)``.
    ``aware`` says whether the timestamps were tz-aware, and ``zone`` is the zone they were
    in when read without ``tz`` (a name such as ``"Europe/Berlin"``, or a fixed offset such as
    ``"UTC+05:45"``; None for naive data): the wall clock of their calendar, in which future
    times continue and outputs are given. ``series_start`` holds each series' first
    observation in the data the model was trained on (local wall-clock ns; int64 min for a
    series without rows): the origin of the series' age
    (:class:`~posenc.temporal.AgeFeature`), also in forecasts from a shorter history. A schema
    without it (a checkpoint from before it existed) counts ages from the history.
    """

    timestamp_column: str
    target_columns: list[str]
    series_columns: list[str] = dataclasses.field(default_factory=list)
    past_covariates: list[str] = dataclasses.field(default_factory=list)
    future_covariates: list[str] = dataclasses.field(default_factory=list)
    static_columns: list[str] = dataclasses.field(default_factory=list)
    tz: str | None = None
    ambiguous: str = "raise"
    nonexistent: str = "raise"
    timestamp_format: str | None = None
    aware: bool = False
    zone: str | None = None
    series_keys: list[tuple] = dataclasses.field(default_factory=lambda: [()])
    loc: list[list[float]] = dataclasses.field(default_factory=list)
    scale: list[list[float]] = dataclasses.field(default_factory=list)
    static_categories: dict[str, list] = dataclasses.field(default_factory=dict)
    static_stats: dict[str, tuple[float, float]] = dataclasses.field(default_factory=dict)
    series_start: list[int] = dataclasses.field(default_factory=list)
    step_ns: int = 0
    context_length: int | str = 168
    horizon: int | str = 24

    @property
    def channels(self) -> list[str]:
        """Every scaled column: targets, past covariates, future covariates."""
        return [*self.target_columns, *self.past_covariates, *self.future_covariates]

    @property
    def channel_roles(self) -> list[str]:
        """``"target column"``, ``"past covariate"`` or ``"future covariate"`` per channel."""
        return (["target column"] * len(self.target_columns)
                + ["past covariate"] * len(self.past_covariates)
                + ["future covariate"] * len(self.future_covariates))

    @property
    def static_real_columns(self) -> list[str]:
        return [c for c in self.static_columns if c not in self.static_categories]

    @property
    def static_cat_columns(self) -> list[str]:
        return [c for c in self.static_columns if c in self.static_categories]

    def to_dict(self) -> dict[str, Any]:
        out = dataclasses.asdict(self)
        out["series_keys"] = [list(key) for key in self.series_keys]
        out["static_stats"] = {k: list(v) for k, v in self.static_stats.items()}
        return out

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> SeriesSchema:
        if not isinstance(data, dict):
            raise TypeError(f"a series schema must be a dict, got {type(data).__name__}")
        fields = {f.name for f in dataclasses.fields(cls)}
        unknown = sorted(set(data) - fields)
        if unknown:
            raise ValueError(f"series schema has unknown keys {unknown}")
        data = dict(data)
        data["series_keys"] = [tuple(key) for key in data.get("series_keys", [()])]
        data["static_stats"] = {k: tuple(v) for k, v in data.get("static_stats", {}).items()}
        return cls(**data)

    def with_fitted(self, fitted: SeriesSchema) -> SeriesSchema:
        """This description of columns with ``fitted``'s :data:`FITTED` state (copied): how
        other data is read for a trained model whose schema is ``fitted``.

        Raises ``ValueError`` when the fitted state cannot apply: other numbers of target,
        past- or future-covariate columns (the scaling is per channel), or other static
        columns (the vocabularies and statistics are per column name)."""
        for role in ("target_columns", "past_covariates", "future_covariates"):
            ours, theirs = getattr(self, role), getattr(fitted, role)
            if len(ours) != len(theirs):
                raise ValueError(f"the model was trained on {len(theirs)} {role} {theirs}; "
                                 f"this data has {len(ours)}: {ours}")
        if list(self.static_columns) != list(fitted.static_columns):
            raise ValueError(f"the model was trained on static_columns {fitted.static_columns}"
                             f"; this data has {self.static_columns}")
        state = copy.deepcopy({name: getattr(fitted, name) for name in FITTED})
        return dataclasses.replace(self, **state)

    def series_index(self) -> dict[tuple, int]:
        """Series key -> its row in ``series_keys``."""
        return {key: i for i, key in enumerate(self.series_keys)}

    def local_times(self, utc_ns: np.ndarray) -> pd.DatetimeIndex:
        """``(N,)`` int64 UTC ns -> timestamps as the data had them: in ``tz``, else in the
        aware data's own :attr:`zone`, naive for naive data without a zone."""
        index = pd.DatetimeIndex(np.asarray(utc_ns, np.int64).view("M8[ns]"))
        zone = self.clock_zone
        return index if zone is None else index.tz_localize("UTC").tz_convert(zone)

    @property
    def clock_zone(self) -> str | None:
        """The zone of the local wall clock: ``tz``, else the aware data's own zone (UTC for a
        schema from before ``zone`` was stored); None for naive data without ``tz``."""
        if self.tz is not None:
            return self.tz
        return (self.zone or "UTC") if self.aware else None

    def series_frame(self, series: np.ndarray) -> pd.DataFrame:
        """``(N,)`` series indexes -> the ``(N, len(series_columns))`` id columns."""
        series = np.asarray(series, np.int64)
        columns = {}
        for j, name in enumerate(self.series_columns):
            values = np.array([key[j] for key in self.series_keys], dtype=object)
            columns[name] = values[series]
        return pd.DataFrame(columns, index=pd.RangeIndex(len(series)))


@dataclasses.dataclass
class Panel:
    """Sorted, checked arrays of a long-format table (``N`` rows, ``S`` series).

    Attributes:
        utc, local: ``(N,)`` int64 ns: real time, and local wall-clock time.
        values: ``(N, C + P + K)`` float64 raw targets, past and future covariates (NaN =
            missing; future covariates are never missing); float32 and scaled after
            :func:`scale_panel`.
        starts: ``(S + 1,)`` int64: series ``s`` is rows ``starts[s]:starts[s + 1]``.
        rows: ``(N,)`` int64: each row's position in the table (for messages).
        static_real: ``(S, Sr)`` float32 standardized numeric static columns.
        static_cat: ``(S, Sc)`` int64 category codes (0 = not seen in training).
        schema: the columns' roles and (after scaling) the per-series scaling.
    """

    utc: np.ndarray
    local: np.ndarray
    values: np.ndarray
    starts: np.ndarray
    rows: np.ndarray
    static_real: np.ndarray
    static_cat: np.ndarray
    schema: SeriesSchema

    @property
    def num_series(self) -> int:
        return len(self.starts) - 1

    @property
    def lengths(self) -> np.ndarray:
        return np.diff(self.starts)

    def series_of_rows(self) -> np.ndarray:
        """``(N,)`` int64 series index of every row."""
        return np.repeat(np.arange(self.num_series), self.lengths)

    def series_starts(self, known: list[int] | None = None) -> np.ndarray:
        """``(S,)`` int64 local wall-clock ns of each series' first row (rows are sorted by
        time within a series); int64 min (NaT) for a series without rows.

        With ``known`` (a trained model's ``series_start``, per known series), the earlier of
        it and this panel's first row; a series new to the model (or a ``known`` start of
        int64 min) begins at its first row here."""
        out = np.full(self.num_series, np.iinfo(np.int64).min, np.int64)
        held = self.lengths > 0
        out[held] = self.local[self.starts[:-1][held]]
        if known is not None:
            stored = np.asarray(known, np.int64)[:len(out)]
            here = out[:len(stored)]
            out[:len(stored)] = np.where(stored == np.iinfo(np.int64).min, here,
                                         np.minimum(stored, here))
        return out


def _series_codes(frame: pd.DataFrame, columns: list[str], known: list[tuple] | None,
                  source: str | None) -> tuple[np.ndarray, list[tuple]]:
    """-> (``(N,)`` int64 code per row, the series keys in code order)."""
    if not columns:
        return np.zeros(len(frame), np.int64), [()]
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
        return np.array([lookup[key] for key in keys], np.int64), known + list(new)
    # Sorted keys: the same table gives the same codes whatever its row order.
    if len(columns) == 1:
        codes, uniques = pd.factorize(frame[columns[0]], sort=True)
        return codes.astype(np.int64), [(_plain_key(v),) for v in uniques]
    index = pd.MultiIndex.from_frame(frame[columns])
    codes, uniques = index.factorize(sort=True)
    return codes.astype(np.int64), [tuple(_plain_key(v) for v in key) for key in uniques]


def _plain_key(value: Any) -> Any:
    return value.item() if isinstance(value, np.generic) else value


def _check_plain(column: pd.Series, name: str, role: str, source: str | None) -> None:
    """Series ids and category values are stored in the schema, hence in checkpoints that
    load with ``weights_only=True``: they must be text, integers, floats or booleans."""
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


def _hashable(value: Any) -> bool:
    try:
        hash(value)
    except TypeError:
        return False
    return True


def _covariate(column: pd.Series, name: str, role: str, source: str | None) -> np.ndarray:
    if pd.api.types.is_bool_dtype(column):
        column = column.astype("float64")
    elif not (pd.api.types.is_numeric_dtype(column) or column.dtype == object):
        raise TypeError(f"{role} column {name!r} holds {column.dtype} values, expected numbers "
                        f"(encode categories as 0/1 columns)")
    try:
        return numeric_column(column, name, source)
    except (ValueError, TypeError) as err:
        raise type(err)(str(err).replace("target column", f"{role} column")) from err


def _static(frame: pd.DataFrame, columns: list[str], codes: np.ndarray, starts: np.ndarray,
            order: np.ndarray, schema: SeriesSchema, fit: bool, source: str | None
            ) -> tuple[np.ndarray, np.ndarray]:
    """Per-series static attributes: constant within each series, else an error."""
    first_rows = order[starts[:-1]]
    real, cat = [], []
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
        codes_sorted, uniques = pd.factorize(sorted_values)
        segment_first = codes_sorted[starts[:-1]]
        changed = np.flatnonzero(codes_sorted != np.repeat(segment_first, np.diff(starts)))
        if len(changed):
            row = int(order[changed[0]])
            series = int(np.searchsorted(starts, changed[0], "right") - 1)
            raise ValueError(
                f"static column {name!r} changes within series {schema.series_keys[series]!r}: "
                f"{row_label(row, source)} is {column.iloc[row]!r} but "
                f"{row_label(int(first_rows[series]), source)} is "
                f"{column.iloc[int(first_rows[series])]!r}; a static value is one per series "
                f"(use a covariate for values that change)")
        values = column.to_numpy()[first_rows]
        if not categorical:
            numbers = values.astype(np.float64)
            bad = np.flatnonzero(~np.isfinite(numbers))
            if len(bad):
                raise ValueError(f"static column {name!r}: "
                                 f"{row_label(int(first_rows[bad[0]]), source)} is "
                                 f"{float(numbers[bad[0]])!r}; a numeric static value must be "
                                 "finite")
        if fit:
            if categorical:
                schema.static_categories[name] = sorted({_plain_key(v) for v in values}, key=str)
            else:
                with np.errstate(over="ignore", invalid="ignore"):
                    mean, std = float(numbers.mean()), float(numbers.std())
                if not (np.isfinite(mean) and np.isfinite(std)):
                    raise ValueError(f"static column {name!r}: values from "
                                     f"{float(numbers.min())!r} to {float(numbers.max())!r} "
                                     "are too large to standardize")
                schema.static_stats[name] = (mean, std if std > 0 else 1.0)
        if name in schema.static_categories:
            lookup = {v: i + 1 for i, v in enumerate(schema.static_categories[name])}
            cat.append(np.array([lookup.get(_plain_key(v), 0) for v in values], np.int64))
        else:
            if categorical:
                raise TypeError(f"static column {name!r} was numeric in training, got "
                                f"{column.dtype} values")
            mean, std = schema.static_stats[name]
            with np.errstate(over="ignore"):
                z = ((numbers - mean) / std).astype(np.float32)
            bad = np.flatnonzero(~np.isfinite(z))
            if len(bad):
                raise ValueError(f"static column {name!r}: "
                                 f"{row_label(int(first_rows[bad[0]]), source)} value "
                                 f"{float(numbers[bad[0]])!r} does not fit float32 once "
                                 f"standardized by mean={mean:.3g}, std={std:.3g}")
            real.append(z)
    s = len(starts) - 1
    return (np.stack(real, 1) if real else np.zeros((s, 0), np.float32),
            np.stack(cat, 1) if cat else np.zeros((s, 0), np.int64))


def read_panel(frame: pd.DataFrame, schema: SeriesSchema, source: str | None = None,
               fit: bool = True, queries: bool = False) -> Panel:
    """Check and sort a long-format table.

    Args:
        frame: the table; column names must be unique.
        schema: the column roles and reading options. With ``fit`` the series keys and static
            vocabularies are taken from ``frame`` (written into ``schema``); without it they
            are the schema's (new series get codes after the known ones, new categories code
            0), as when a trained model reads new data.
        source: the file the table came from (messages name its lines).
        queries: read a table of times to predict: the series and timestamp columns and the
            future covariates only (targets and past covariates are NaN, static columns
            come from the history).

    Raises ``ValueError``/``TypeError`` naming the column and the first bad row: missing
    columns, unparseable or missing timestamps, a timestamp repeated within a series,
    non-numeric values, a missing future covariate, a static value that changes within a
    series.
    """
    if not isinstance(frame, pd.DataFrame):
        raise TypeError(f"data must be a pandas DataFrame, got {type(frame).__name__}")
    needed = [schema.timestamp_column, *schema.series_columns, *schema.future_covariates]
    if not queries:
        needed += [*schema.target_columns, *schema.past_covariates, *schema.static_columns]
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
    stamps = frame[schema.timestamp_column]
    index = parse_timestamps(stamps, schema.timestamp_column, source, schema.timestamp_format)
    if fit:
        schema.aware = index.tz is not None
        schema.zone = None if index.tz is None else str(index.tz)
    elif (index.tz is not None) != schema.aware and schema.tz is None:
        kinds = ["tz-naive", "tz-aware"]
        raise ValueError(f"timestamp column {schema.timestamp_column!r} is "
                         f"{kinds[index.tz is not None]} but the model was trained on "
                         f"{kinds[schema.aware]} timestamps; use one form")
    codes, keys = _series_codes(frame, schema.series_columns,
                                None if fit else schema.series_keys, source)
    schema.series_keys = keys  # without fit: the known series, then any new ones
    # Query rows have no targets and past covariates: NaN columns (one array, shared).
    unknown = [np.full(len(frame), np.nan)] * (len(schema.target_columns)
                                               + len(schema.past_covariates)) if queries else []
    channels = unknown if queries else (
        [numeric_column(frame[c], c, source) for c in schema.target_columns]
        + [_covariate(frame[c], c, "past covariate", source) for c in schema.past_covariates])
    for c in schema.future_covariates:
        values = _covariate(frame[c], c, "future covariate", source)
        missing = np.flatnonzero(np.isnan(values))
        if len(missing):
            raise ValueError(f"future covariate {c!r}: {row_label(int(missing[0]), source)} "
                             f"({stamps.iloc[int(missing[0])]!r}) is missing; a future "
                             f"covariate must be known at every time, including the times to "
                             f"predict")
        channels.append(values)
    # Localize in wall-clock order per series: ambiguous="infer" reads the repeated hour's
    # order, and the order of a series' rows in the table is not trusted.
    order = np.lexsort((index.asi8, codes))
    sorted_index, sorted_codes = index[order], codes[order]
    starts = np.flatnonzero(np.r_[True, sorted_codes[1:] != sorted_codes[:-1], True])
    if schema.ambiguous == "infer" and len(starts) > 2 and index.tz is None and schema.tz:
        parts = [utc_and_local(sorted_index[a:b], schema.tz, "infer", schema.nonexistent,
                               schema.timestamp_column) for a, b in zip(starts[:-1], starts[1:],
                                                                        strict=True)]
        utc = np.concatenate([p[0] for p in parts])
        local = np.concatenate([p[1] for p in parts])
    else:
        utc, local = utc_and_local(sorted_index, schema.tz, schema.ambiguous,
                                   schema.nonexistent, schema.timestamp_column)
    del index, sorted_index  # (N,) int64 each, not needed past here: lowers the peak
    if (np.diff(utc)[np.diff(sorted_codes) == 0] < 0).any():  # shifted nonexistent times
        again = np.lexsort((utc, sorted_codes))
        order, utc, local = order[again], utc[again], local[again]
        sorted_codes = sorted_codes[again]
    repeat = np.flatnonzero((np.diff(utc) == 0) & (np.diff(sorted_codes) == 0))
    if len(repeat):
        first, second = sorted((int(order[repeat[0]]), int(order[repeat[0] + 1])))
        where = (f" in series {keys[int(sorted_codes[repeat[0]])]!r}"
                 if schema.series_columns else "")
        raise ValueError(f"timestamp column {schema.timestamp_column!r}: "
                         f"{row_label(second, source)} repeats the timestamp of "
                         f"{row_label(first, source)} ({stamps.iloc[first]!r}){where}; one row "
                         f"per series and time (merge the rows, or name the series columns)")
    # Known series absent from this table keep their code, with no rows.
    present = np.bincount(sorted_codes, minlength=len(keys))
    starts = np.concatenate(([0], np.cumsum(present))).astype(np.int64)
    if queries:
        static_real = np.zeros((len(keys), len(schema.static_real_columns)), np.float32)
        static_cat = np.zeros((len(keys), len(schema.static_cat_columns)), np.int64)
    elif (present > 0).all():
        static_real, static_cat = _static(frame, schema.static_columns, codes, starts, order,
                                          schema, fit, source)
    else:
        static_real, static_cat = _static_sparse(frame, schema, codes, order, present, fit,
                                                 source)
    # Each column straight into its sorted place: stacking the columns and then gathering the
    # (N, C) stack by rows costs two more (N, C) float64 copies, and a row gather of a narrow
    # 2D array is several times slower than gathers of 1D columns.
    values = np.empty((len(order), len(channels)))
    for j in range(len(channels)):
        values[:, j] = channels[j][order]
        channels[j] = None  # freed once placed
    return Panel(utc=utc, local=local, values=values, starts=starts, rows=order,
                 static_real=static_real, static_cat=static_cat, schema=schema)


def _static_sparse(frame: pd.DataFrame, schema: SeriesSchema, codes: np.ndarray,
                   order: np.ndarray, present: np.ndarray, fit: bool, source: str | None
                   ) -> tuple[np.ndarray, np.ndarray]:
    """Static attributes when some known series have no rows here (their rows stay zero)."""
    if not schema.static_columns:
        s = len(present)
        return np.zeros((s, 0), np.float32), np.zeros((s, 0), np.int64)
    held = np.flatnonzero(present)
    starts = np.concatenate(([0], np.cumsum(present[held]))).astype(np.int64)
    real, cat = _static(frame, schema.static_columns, codes, starts, order, schema, fit,
                        source)
    full_real = np.zeros((len(present), real.shape[1]), np.float32)
    full_cat = np.zeros((len(present), cat.shape[1]), np.int64)
    full_real[held], full_cat[held] = real, cat
    return full_real, full_cat


def scale_panel(panel: Panel, train_end: int | None, source: str | None = None) -> None:
    """Fit per-series, per-channel ``loc``/``scale`` on rows before ``train_end`` (UTC ns;
    None: all rows) into ``panel.schema`` and scale ``panel.values`` to float32, in place.
    A schema that already holds scaling for a series (a trained model's) keeps it."""
    schema = panel.schema
    values = panel.values
    num_series, channels = panel.num_series, values.shape[1]
    series = panel.series_of_rows()
    train = np.ones(len(values), bool) if train_end is None else panel.utc < train_end
    known = len(schema.loc)
    loc = np.full((num_series, channels), np.nan)
    scale = np.full((num_series, channels), np.nan)
    if known:
        loc[:known], scale[:known] = np.asarray(schema.loc), np.asarray(schema.scale)
    count = np.zeros((num_series, channels))
    mean = np.zeros((num_series, channels))
    std = np.zeros((num_series, channels))
    pooled = np.zeros((2, channels))
    with np.errstate(all="ignore"), warnings.catch_warnings():
        warnings.simplefilter("ignore", RuntimeWarning)  # all-NaN channels: checked below
        for c in range(channels):
            used = train & ~np.isnan(values[:, c])
            x = np.where(used, values[:, c], 0.0)
            count[:, c] = np.bincount(series, used, num_series)
            mean[:, c] = np.bincount(series, x, num_series) / count[:, c]
            centred = np.where(used, x - mean[series, c], 0.0)
            std[:, c] = np.sqrt(np.bincount(series, centred**2, num_series) / count[:, c])
            pooled[0, c] = x.sum() / used.sum()
            pooled[1, c] = np.sqrt((np.where(used, x - pooled[0, c], 0.0) ** 2).sum()
                                   / used.sum())
    pooled_mean, pooled_std = pooled
    for c, (name, role) in enumerate(zip(schema.channels, schema.channel_roles, strict=True)):
        if not np.isfinite(pooled_mean[c]) and not known:
            where = f" (before {pd.Timestamp(train_end)} UTC)" if train_end is not None else ""
            raise ValueError(f"{role} {name!r} has no observed value in the training period"
                             f"{where}" if np.isnan(pooled_mean[c]) else
                             f"{role} {name!r}: values too large to average")
    new = np.arange(num_series) >= known
    no_train = new[:, None] & (count == 0)
    mean = np.where(no_train, pooled_mean, mean)
    std = np.where(no_train, pooled_std, std)
    loc[new], scale[new] = mean[new], std[new]
    # A constant channel has no spread to divide by; it is only centred.
    scale = np.where(np.isfinite(scale) & (scale > 0), scale, 1.0)
    loc = np.where(np.isfinite(loc), loc, 0.0)
    with np.errstate(over="ignore", invalid="ignore"):
        # A channel at a time: loc[series] and scale[series] as (N, C) gathers cost two (N, C)
        # float64 copies; same float64 arithmetic, then the cast to float32.
        scaled = np.empty(values.shape, np.float32)
        for c in range(channels):
            scaled[:, c] = (values[:, c] - loc[series, c]) / scale[series, c]
    overflow = np.argwhere(np.isinf(scaled) | (np.isnan(scaled) & ~np.isnan(values)))
    if len(overflow):
        row, c = (int(v) for v in overflow[0])
        s = int(series[row])
        raise ValueError(f"{schema.channel_roles[c]} {schema.channels[c]!r}: "
                         f"{row_label(int(panel.rows[row]), source)} value "
                         f"{float(values[row, c])!r} does not fit float32 once scaled by "
                         f"loc={loc[s, c]:.3g}, scale={scale[s, c]:.3g} (the training spread "
                         "is too small for it)")
    schema.loc, schema.scale = loc.tolist(), scale.tolist()
    panel.values = scaled
