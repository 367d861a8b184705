"""A long table of many series -> checked, sorted rows (a
[`Panel`][posenc.tasks.forecasting.panel.Panel]) -> their fitted state -> scaled rows.

One row per (series, timestamp): series id column(s), the timestamp, the targets, optional past
covariates (known up to the forecast origin), future covariates (known at the times to predict)
and static columns (one value per series). State flows one way:
[`read_panel`][posenc.tasks.forecasting.panel.read_panel] (a sorted
[`Panel`][posenc.tasks.forecasting.panel.Panel], by the table's
[`Columns`][posenc.tasks.forecasting.schema.Columns]) -> [`fit`][posenc.tasks.forecasting.panel.fit]
(the [`Fitted`][posenc.tasks.Fitted] state of the training span) ->
[`scale_panel`][posenc.tasks.forecasting.panel.scale_panel]. Windows and batches:
[`posenc.tasks.forecasting.windows`][posenc.tasks.forecasting.windows].
"""

from __future__ import annotations

import dataclasses
import os
import sys
import warnings
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd
from posenc.temporal.timestamps import parse_timestamps, row_label, utc_and_local

from .schema import CHANNELS, Columns, Fitted, check_step, check_unique_columns

__all__ = ["Panel", "fit", "fit_state", "local_steps", "median_step", "numeric_column",
           "read_panel", "read_table", "release_arrow_memory", "scale_panel", "series_codes",
           "series_moments"]

_NAT = np.iinfo(np.int64).min


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
        frame = pd.read_parquet(path)
        release_arrow_memory()  # the reader's scratch buffers: 1.4x the frame
        return frame
    raise ValueError(f"data={str(path)!r}: expected a .csv or .parquet file")


def release_arrow_memory() -> None:
    """Return the memory Arrow's pool holds unused to the system: the Parquet reader's scratch
    buffers and the columns of a table read from Parquet once dropped (pandas keeps them in
    Arrow's memory). The pool keeps it for reuse otherwise, at the size of the table: on top
    of everything a set-up allocates after the read."""
    pyarrow = sys.modules.get("pyarrow")
    if pyarrow is not None:  # without it, Arrow never held any memory
        pyarrow.default_memory_pool().release_unused()


@dataclasses.dataclass(frozen=True)
class Panel:
    """Sorted, checked arrays of a long-format table (``N`` rows, ``S`` series).

    Attributes:
        utc, local: ``(N,)`` int64 ns: real time, and local wall-clock time.
        values: ``(N, C + P + K)`` raw targets, past and future covariates (float64, NaN =
            missing); float32 and scaled after
            [`scale_panel`][posenc.tasks.forecasting.panel.scale_panel].
        targets: ``(N, C)`` float32 targets in data units as read (NaN = missing), after
            [`scale_panel`][posenc.tasks.forecasting.panel.scale_panel]: what forecasts are scored
            on, exact where the data are (an unscaled 0 can come back 1e-8 off, and sMAPE counts 0/0
            points).
        starts: ``(S + 1,)`` int64: series ``s`` is rows ``starts[s]:starts[s + 1]``.
        rows: ``(N,)`` int64: each row's position in the table (for messages).
        series_keys: the ``S`` series keys: a trained model's first, then any new ones.
        zone: the zone of aware timestamps as read (None: naive).
        static: static column -> ``(S,)`` raw values (object: categories, float64: numbers).
        static_real, static_cat: ``(S, Sr)`` float32 standardized numbers and ``(S, Sc)``
            int64 category codes, after [`scale_panel`][posenc.tasks.forecasting.panel.scale_panel].
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
    """[`Panel.series_starts`][posenc.tasks.forecasting.panel.Panel.series_starts] -> the earlier of
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


def series_codes(frame: pd.DataFrame, columns: tuple[str, ...], known: tuple[tuple, ...] | None,
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
        return codes.astype(np.int64, copy=False), tuple((_plain_key(v),) for v in uniques)
    codes, uniques = pd.MultiIndex.from_frame(frame[list(columns)]).factorize(sort=True)
    return (codes.astype(np.int64, copy=False),
            tuple(tuple(_plain_key(v) for v in key) for key in uniques))


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
    codes, keys = series_codes(frame, columns.series_columns,
                                None if known is None else known.series_keys, source)
    # Localize in wall-clock order per series: ambiguous="infer" reads the repeated hour's order.
    order = np.lexsort((index.asi8, codes))
    sorted_codes = codes[order]
    del codes  # each (N,) array freed once used lowers the set-up's peak
    # Each column read, checked and placed in its sorted row one at a time: the table's
    # columns as float64 at once would be another (N, C) copy, and a gather of the (N, C)
    # stack two more, several times slower than gathers of 1D columns.
    roles = [(c, field, role, observed) for field, role, _, observed, _ in CHANNELS
             for c in getattr(columns, field)]
    values = np.empty((len(order), len(roles)))
    for j, (c, field, role, observed) in enumerate(roles):
        if queries and observed is not None:  # unknown at the times to predict
            values[:, j] = np.nan
            continue
        column = (numeric_column(frame[c], c, source) if field == "target_columns"
                  else _covariate(frame[c], c, role, source))
        missing = np.flatnonzero(np.isnan(column)) if observed is None else ()
        if len(missing):
            raise ValueError(f"{role} {c!r}: {row_label(int(missing[0]), source)} "
                             f"({stamps.iloc[int(missing[0])]!r}) is missing; a {role} "
                             "must be known at every time, including the times to predict")
        values[:, j] = column[order]
        del column  # before the next one is read
    sorted_index = index[order]
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
        sorted_codes, values = sorted_codes[again], values[again]
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
    """Per-series ``(loc, scale)``, ``(S, C)``, from
    [`series_moments`][posenc.tasks.forecasting.panel.series_moments]: a known series keeps
    ``known``'s, a new one its own mean and spread, or, without training rows, those of all series'
    training rows pooled (in series order: the same on every process)."""
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



def fit_state(columns: Columns, series_keys: tuple[tuple, ...],
              moments: tuple[np.ndarray, np.ndarray, np.ndarray], first_local: np.ndarray,
              train_end: int | None, known: Fitted | None = None, *,
              static: dict[str, np.ndarray] | None = None, step_ns: int = 0,
              aware: bool = False, zone: str | None = None,
              context_length: int | str | None = None, horizon: int | str | None = None
              ) -> Fitted:
    """The [`Fitted`][posenc.tasks.Fitted] state from its per-series parts (of a panel,
    [`fit`][posenc.tasks.forecasting.panel.fit], or of a Parquet dataset's chunks,
    [`stream`][posenc.tasks.forecasting.stream]).

    Args:
        series_keys: the ``S`` keys (``known``'s first, then new ones).
        moments: [`series_moments`][posenc.tasks.forecasting.panel.series_moments] of the ``S``
            series.
        first_local: ``(S,)`` int64 local ns of each series' first row (int64 min: none).
        step_ns: the data's median local step (ns; 0: none).
        known: a trained model's state, kept (``step_ns`` must be its step,
            [`check_step`][posenc.tasks.forecasting.schema.check_step]); None: a new state of
            ``static`` (``Panel.static``), ``step_ns``, ``aware``, ``zone`` and the windows'
            lengths.
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
    data's sampling step is ``step_ns`` (None: the panel's
    [`median_step`][posenc.tasks.forecasting.panel.median_step]); with ``known`` it must be
    ``known``'s ([`check_step`][posenc.tasks.forecasting.schema.check_step]).
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

