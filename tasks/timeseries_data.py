"""Time-series data for forecasting: a CSV/Parquet file or DataFrame -> sliding windows.

A window is a forecast origin: the observations before it (the context) and those in the
horizon after it. Context and horizon lengths are counts of observations (``168``) or
durations with a unit (``"7D"``, ``"36h"``; a bare ``"24"`` is refused, pandas would read
nanoseconds). Text timestamps share one format: the first row's, or ``timestamp_format``; a
row in another format is an error naming it, never a guess. Splits are by time: a window
belongs to the split that holds its whole horizon, so no training target lies in the
validation or test period, and every context ends before its horizon starts. Scaling
statistics come from the training period only.

Batches are dicts of tensors (``B`` windows, ``Nc`` context and ``Nh`` horizon tokens,
``C`` target columns, padded per batch):

====================  ===============  ===============================================
key                   shape / dtype    meaning
====================  ===============  ===============================================
``context_time``      (B, Nc) int64    UTC nanoseconds since the epoch (real elapsed time)
``context_local``     (B, Nc) int64    local wall-clock time as naive nanoseconds
``context_value``     (B, Nc, C) f32   scaled values (0 where missing)
``context_observed``  (B, Nc, C) bool  value present
``context_valid``     (B, Nc) bool     real token (False = padding)
``context_fields``    (B, Nc, F) i32   calendar fields of the local time, one column per
                                       name of ``posenc.temporal.FIELDS`` (in its order)
``target_*``          same, ``Nh``     the horizon: its timestamps are the query times
``loc``, ``scale``    (B, C) f32       ``value = scaled * scale + loc``
====================  ===============  ===============================================

The calendar fields depend on the timestamps only, so they are computed here, once per series
(:func:`local_time_fields`), and reach the model as tensors: its forward never leaves the
device for them.
"""

from __future__ import annotations

import datetime as dt
import os
import re
import warnings
from collections.abc import Sequence
from numbers import Real
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd
import torch
from lightning.pytorch import LightningDataModule
from pandas.tseries.api import guess_datetime_format
from posenc import temporal
from posenc.core import check_choice, check_int, check_positive_int
from torch import Tensor
from torch.utils.data import DataLoader, Dataset

from .hparams import make_hparams_plain, plain
from .splits import check_split_fractions

__all__ = [
    "WindowDataset",
    "collate_windows",
    "local_time_fields",
    "make_batch",
    "parse_timestamps",
    "TimeSeriesDataModule",
    "SeattleTempsDataModule",
    "TaylorDataModule",
]

AMBIGUOUS = ("raise", "earliest", "latest", "infer")
NONEXISTENT = ("raise", "shift_forward", "shift_backward")
# A window with more rows than this could not be attended to anyway; a duration long for the
# data's sampling (years of seconds) is refused before its windows are built.
MAX_WINDOW_ROWS = 100_000
# More forecast origins than this many per observation repeat the same rows (the stride is
# below the sampling interval): refused before any window is built.
MAX_ORIGINS_PER_ROW = 10
# A count without a unit ("24") is 24 ns to pandas: durations must say their unit.
_UNITLESS = re.compile(r"\s*[+-]?(?:\d+\.?\d*|\.\d+)(?:[eE][+-]?\d+)?\s*")
_NULL_TEXT = ("", "nat", "nan", "none", "null")
_RELATIVE = ("now", "today", "yesterday", "tomorrow")


def _row(position: int, source: str | None) -> str:
    where = f"row {position}"
    if source is not None and source.lower().endswith(".csv"):
        where += f" (line {position + 2} of {source})"
    return where


def _aware(value: str, fmt: str | None) -> bool | None:
    """Whether one timestamp string parses to a tz-aware time (None: it does not parse)."""
    try:
        stamp = pd.to_datetime(value, format=fmt)
    except (ValueError, TypeError, OverflowError):
        try:
            stamp = pd.Timestamp(value)
        except (ValueError, TypeError, OverflowError):
            return None
    return None if pd.isna(stamp) else stamp.tzinfo is not None


def _mixed_zones(name: str, naive_row: int, aware_row: int, column: pd.Series,
                 source: str | None) -> ValueError:
    return ValueError(
        f"timestamp column {name!r} mixes tz-naive and tz-aware values: "
        f"{_row(naive_row, source)} is {column.iloc[naive_row]!r} (no UTC offset) but "
        f"{_row(aware_row, source)} is {column.iloc[aware_row]!r}; use one form")


def _parse_objects(column: pd.Series, name: str, source: str | None) -> pd.DatetimeIndex:
    """An object column of ``datetime``/``Timestamp`` values (no text)."""
    values = column.to_numpy()
    aware = [i for i, v in enumerate(values) if isinstance(v, dt.datetime) and v.tzinfo]
    naive = [i for i, v in enumerate(values) if isinstance(v, dt.datetime) and not v.tzinfo]
    if aware and naive:
        raise _mixed_zones(name, naive[0], aware[0], column, source)
    return pd.DatetimeIndex(pd.to_datetime(values, utc=bool(aware)))


def _first_kinds(text: pd.Series, fmt: str) -> dict[bool, int]:
    """First row of each kind (False naive, True aware) among the rows of ``text``."""
    # Parse one row per shape (digits masked), in row order: few shapes, whatever N.
    shapes = text.str.replace(r"\d", "0", regex=True)
    kinds: dict[bool, int] = {}
    for position in shapes.drop_duplicates().index:
        kind = _aware(text.loc[position], fmt)
        if kind is not None:
            kinds.setdefault(kind, int(position))
    return kinds


def _parse_text(column: pd.Series, name: str, source: str | None,
                timestamp_format: str | None) -> pd.DatetimeIndex:
    """Text timestamps, all in one format: ``timestamp_format``, else the first row's."""
    text = column.reset_index(drop=True)
    if not pd.api.types.is_string_dtype(text) or text.dtype == object:
        text = text.astype("string")
    null_like = text.isna().to_numpy(dtype=bool)
    present = np.flatnonzero(~null_like)
    # pandas reads "", "nan", "NaT" as missing: skip them when looking for the first row.
    first = next((int(i) for i in present
                  if str(text.iloc[int(i)]).strip().lower() not in _NULL_TEXT), None)
    if first is None:
        return pd.DatetimeIndex(np.full(len(text), np.datetime64("NaT", "ns")))
    sample = text.iloc[first]
    fmt = timestamp_format
    if fmt is None:
        # pandas infers a format from the first row too, but on a mismatch its retry
        # (format="mixed") guesses every row: one "01/02/2021" among ISO rows became 2 Jan.
        fmt = guess_datetime_format(sample)
        if fmt is None:
            iso = pd.to_datetime(text[~null_like], format="ISO8601", errors="coerce", utc=True)
            hint = (" (every row is ISO 8601: timestamp_format='ISO8601' reads them)"
                    if iso.notna().all() else "")
            raise ValueError(
                f"timestamp column {name!r}: the format of {_row(first, source)} value "
                f"{column.iloc[first]!r} cannot be inferred; pass timestamp_format (a strftime "
                f"format such as '%Y-%m-%d %H:%M:%S%z', or 'ISO8601'){hint}. Numbers since the "
                "epoch: convert them with pd.to_datetime(..., unit='s'/'ms'/'ns')")
    try:
        if fmt in ("ISO8601", "mixed"):
            # These take naive and offset rows alike; pandas refuses a column holding both
            # (or several offsets) unless utc=True, which would read naive rows as UTC.
            try:
                parsed = pd.to_datetime(text, format=fmt, errors="coerce")
            except ValueError:
                kinds = _first_kinds(text[~null_like], fmt)
                if len(kinds) == 2:
                    raise _mixed_zones(name, kinds[False], kinds[True], column, source
                                       ) from None
                parsed = pd.to_datetime(text, format=fmt, errors="coerce", utc=True)
            if isinstance(parsed.dtype, pd.DatetimeTZDtype):
                parsed = parsed.dt.tz_convert("UTC")
        else:
            parsed = pd.to_datetime(text, format=fmt, errors="coerce",
                                    utc="%z" in fmt or "%Z" in fmt)
    except (ValueError, TypeError) as err:
        if isinstance(err, ValueError) and str(err).startswith("timestamp column"):
            raise
        raise ValueError(f"timestamp_format={fmt!r} is not a usable format for timestamp "
                         f"column {name!r}: {err}") from err
    unread = pd.isna(parsed).to_numpy() & ~null_like
    if unread.any():
        # Text that pandas reads as missing is reported as missing (NaT) by the caller.
        rows = np.flatnonzero(unread)
        blank = text.iloc[rows].str.strip().str.lower().isin(_NULL_TEXT).to_numpy(dtype=bool)
        rows = rows[~blank]
    else:
        rows = np.zeros(0, np.int64)
    if len(rows):
        row = int(rows[0])
        value = column.iloc[row]
        forms = (_aware(sample, fmt), _aware(text.iloc[row], None))
        if None not in forms and forms[0] != forms[1]:
            naive, aware = (row, first) if forms[0] else (first, row)
            raise _mixed_zones(name, naive, aware, column, source)
        if timestamp_format is None:
            raise ValueError(
                f"timestamp column {name!r}: {_row(row, source)} value {value!r} cannot be "
                f"parsed: it does not match the format {fmt!r} of {_row(first, source)} "
                f"({column.iloc[first]!r}); a column holds one format: fix the row, or "
                f"pass timestamp_format ('ISO8601' reads every ISO 8601 variant, 'mixed' "
                f"guesses each row)")
        raise ValueError(f"timestamp column {name!r}: {_row(row, source)} value {value!r} "
                         f"cannot be parsed as a timestamp with timestamp_format={fmt!r}")
    return pd.DatetimeIndex(parsed)


def parse_timestamps(column: pd.Series, name: str, source: str | None = None,
                     timestamp_format: str | None = None) -> pd.DatetimeIndex:
    """A timestamp column -> ``(N,)`` ``DatetimeIndex`` (naive, or tz-aware in its own zone
    or UTC), at any resolution; ``parsed[i]`` is row ``i``.

    Args:
        column: ``(N,)`` datetime values, ``datetime`` objects or text.
        name: the column's name, for messages.
        source: the file it came from (rows of a ``.csv`` are also named by line).
        timestamp_format: ``pd.to_datetime`` format of text timestamps (``"%d/%m/%Y %H:%M"``,
            ``"ISO8601"``, ``"mixed"``); None takes the format pandas infers from the first
            row, and every row must match it.

    Raises ``ValueError`` naming the column and the first bad row for missing (NaT),
    unparseable, differently formatted or mixed naive/offset timestamps, and ``TypeError``
    for numeric columns (their unit is ambiguous: convert with ``pd.to_datetime(..., unit=)``).
    """
    if not isinstance(column, pd.Series):
        raise TypeError(f"column must be a pandas Series, got {type(column).__name__}")
    if timestamp_format is not None and not isinstance(timestamp_format, str):
        raise TypeError(f"timestamp_format must be a str or None, got "
                        f"{type(timestamp_format).__name__} ({timestamp_format!r})")
    if isinstance(column.dtype, pd.DatetimeTZDtype) or pd.api.types.is_datetime64_dtype(column):
        parsed = pd.DatetimeIndex(column)
    elif pd.api.types.is_timedelta64_dtype(column):
        raise TypeError(f"timestamp column {name!r} holds {column.dtype} durations, expected "
                        "timestamps (add them to a start time first)")
    elif pd.api.types.is_numeric_dtype(column) or pd.api.types.is_bool_dtype(column):
        raise TypeError(f"timestamp column {name!r} holds {column.dtype} numbers; their unit is "
                        "ambiguous: convert it with pd.to_datetime(..., unit='s'/'ms'/'ns') "
                        "or store timestamps as text")
    elif column.dtype == object and len(column) and all(
            isinstance(v, dt.datetime) or v is None or v is pd.NaT for v in column):
        parsed = _parse_objects(column, name, source)
    else:
        parsed = _parse_text(column, name, source, timestamp_format)
    missing = np.flatnonzero(parsed.isna())
    if len(missing):
        raise ValueError(f"timestamp column {name!r}: {_row(int(missing[0]), source)} is missing "
                         f"(NaT); {len(missing)} row(s) without a timestamp")
    outside = np.flatnonzero((parsed < _NS_MIN[parsed.tz is not None])
                             | (parsed > _NS_MAX[parsed.tz is not None]))
    if len(outside):
        raise ValueError(f"timestamp column {name!r}: {_row(int(outside[0]), source)} value "
                         f"{column.iloc[int(outside[0])]!r} is outside the nanosecond range "
                         f"({pd.Timestamp.min} to {pd.Timestamp.max})")
    return parsed


_NS_MIN = {False: pd.Timestamp.min, True: pd.Timestamp.min.tz_localize("UTC")}
_NS_MAX = {False: pd.Timestamp.max, True: pd.Timestamp.max.tz_localize("UTC")}


def _check_tz(tz: str | None) -> str | None:
    if tz is not None and not isinstance(tz, str):
        raise TypeError(f"tz must be an IANA time zone name (str) or None, got "
                        f"{type(tz).__name__} ({tz!r})")
    if tz is not None:
        try:
            pd.Timestamp(0, tz=tz)
        except Exception as err:  # zoneinfo/pytz raise different types for unknown zones
            raise ValueError(f"tz={tz!r} is not a known time zone (use an IANA name such as "
                             "'Europe/Berlin')") from err
    return tz


def _localize(index: pd.DatetimeIndex, tz: str | None, ambiguous: str, nonexistent: str,
              name: str) -> tuple[np.ndarray, np.ndarray]:
    """-> (UTC ns, local wall-clock ns) int64 arrays, through posenc.temporal's conversion."""
    if index.tz is None and tz is not None:
        amb: Any = {"earliest": np.ones(len(index), bool),
                    "latest": np.zeros(len(index), bool)}.get(ambiguous, ambiguous)
        try:
            index = temporal.localize(index, tz, ambiguous=amb, nonexistent=nonexistent)
        except ValueError as err:
            raise ValueError(f"timestamp column {name!r}: {err}. Here: ambiguous is one of "
                             f"{list(AMBIGUOUS)}, nonexistent one of {list(NONEXISTENT)}"
                             ) from err
    elif index.tz is not None and tz is not None:
        index = index.tz_convert(tz)
    index = index.as_unit("ns")
    # tz-aware asi8 is UTC; naive data is taken as its own clock (no zone, no DST).
    utc = np.asarray(index.asi8, np.int64)
    local = np.asarray(temporal.local_wall_time(index), np.int64)
    return utc, local


def _length(value: Any, name: str) -> int | pd.Timedelta:
    """An observation count (int) or a duration with a unit (str or timedelta)."""
    expected = (f"{name} must be an int (a count of observations) or a duration with a unit "
                "such as '7D' or '36h'")
    if isinstance(value, (bool, np.bool_)):
        raise TypeError(f"{expected}, got {value!r}")
    # np.timedelta64 is a numpy integer subclass: test it first.
    if isinstance(value, np.timedelta64) and np.datetime_data(value.dtype)[0] == "generic":
        raise ValueError(f"{name}={value!r} has no unit: give np.timedelta64(n, 'h') or a "
                         "string such as '24h'")
    if isinstance(value, (int, np.integer)) and not isinstance(value, np.timedelta64):
        return check_positive_int(int(value), name)
    if isinstance(value, str):
        if _UNITLESS.fullmatch(value):
            raise ValueError(f"{name}={value!r} has no unit (pandas would read it as "
                             f"nanoseconds): write {value.strip()} as an int for a count of "
                             f"observations, or a duration such as '{value.strip()}h'")
    elif not isinstance(value, (dt.timedelta, np.timedelta64)):
        raise TypeError(f"{expected}, got {type(value).__name__} ({value!r})")
    try:
        delta = pd.Timedelta(value)
    except (OverflowError, pd.errors.OutOfBoundsTimedelta) as err:
        raise ValueError(f"{name}={value!r} is out of range (durations reach about 292 "
                         "years)") from err
    except (ValueError, TypeError) as err:
        raise ValueError(f"{expected}, got {value!r}") from err
    if pd.isna(delta) or delta <= pd.Timedelta(0):
        raise ValueError(f"{name} must be a positive duration, got {value!r}")
    return delta


def _check_unique(columns: list[Any], where: str) -> None:
    seen: set[Any] = set()
    for name in columns:
        if name in seen:
            count = sum(1 for c in columns if c == name)
            raise ValueError(f"{where} has {count} columns named {name!r}; column names must "
                             "be unique")
        seen.add(name)


def _target_values(column: pd.Series, name: str, source: str | None) -> np.ndarray:
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
        raise ValueError(f"target column {name!r}: {_row(int(bad[0]), source)} value "
                         f"{column.iloc[int(bad[0])]!r} is not numeric")
    values = numeric.to_numpy(dtype=np.float64, na_value=np.nan)
    infinite = np.flatnonzero(np.isinf(values))
    if len(infinite):
        raise ValueError(f"target column {name!r}: {_row(int(infinite[0]), source)} is "
                         "infinite")
    huge = np.flatnonzero(np.abs(values) > np.finfo(np.float32).max)
    if len(huge):
        raise ValueError(f"target column {name!r}: {_row(int(huge[0]), source)} value "
                         f"{float(values[int(huge[0])])!r} does not fit float32 (batches are "
                         "float32)")
    return values


def local_time_fields(local: np.ndarray | Tensor) -> Tensor:
    """Calendar fields of local wall-clock times, as the batches carry them.

    Args:
        local: ``(...)`` int64 naive local wall-clock nanoseconds (``*_local`` of a batch).

    Returns:
        ``(..., F)`` int32, column ``i`` the field ``posenc.temporal.FIELDS[i]`` (hour, day of
        week, ..., with the periods the cyclic features need).
    """
    if isinstance(local, Tensor):
        local = local.numpy(force=True)
    if not isinstance(local, np.ndarray) or local.dtype != np.int64:
        raise TypeError(f"local must be int64 nanoseconds (a numpy array or tensor), got "
                        f"{getattr(local, 'dtype', type(local).__name__)}")
    fields = temporal.calendar_fields(local)
    return torch.from_numpy(np.stack([fields[name] for name in temporal.FIELDS], axis=-1))


class WindowDataset(Dataset):
    """Windows over one multivariate series; item ``i`` is a dict (see the module docstring).

    Args:
        utc, local: ``(N,)`` int64 ns, sorted by ``utc``.
        values: ``(N, C)`` float32 scaled values, NaN where missing.
        windows: ``(W, 4)`` int64 ``[context_start, context_end, target_start, target_end)``
            row ranges, ``context_end <= target_start``.
        loc, scale: ``(C,)`` scaling of ``values``.
        fields: ``(N, F)`` :func:`local_time_fields` of ``local``, if already computed (the
            data module computes them once for all its splits).
    """

    def __init__(self, utc: np.ndarray, local: np.ndarray, values: np.ndarray,
                 windows: np.ndarray, loc: np.ndarray, scale: np.ndarray,
                 fields: Tensor | None = None) -> None:
        utc = np.ascontiguousarray(utc, np.int64)
        local = np.ascontiguousarray(local, np.int64)
        values = np.ascontiguousarray(values, np.float32)
        windows = np.asarray(windows, np.int64).reshape(-1, 4)
        loc, scale = np.asarray(loc, np.float32), np.asarray(scale, np.float32)
        n = len(utc)
        if utc.ndim != 1 or local.shape != utc.shape:
            raise ValueError(f"utc and local must be (N,) arrays of one length, got shapes "
                             f"{utc.shape} and {local.shape}")
        if values.ndim != 2 or len(values) != n:
            raise ValueError(f"values must be (N, C); values has {len(values)} rows but utc "
                             f"has {n}" if values.ndim == 2 else
                             f"values must be (N, C), got shape {values.shape}")
        channels = values.shape[1]
        for key, array in (("loc", loc), ("scale", scale)):
            if array.shape != (channels,):
                raise ValueError(f"{key} has shape {array.shape} but values has {channels} "
                                 "channel(s)")
        if n > 1 and not (np.diff(utc) > 0).all():
            raise ValueError("utc must be strictly increasing (sorted, no repeated timestamp)")
        c0, c1, t0, t1 = windows.T
        ok = (0 <= c0) & (c0 < c1) & (c1 <= t0) & (t0 < t1) & (t1 <= n)
        if not ok.all():
            i = int(np.flatnonzero(~ok)[0])
            raise ValueError(f"windows[{i}] = {windows[i].tolist()} must satisfy 0 <= "
                             f"context_start < context_end <= target_start < target_end <= "
                             f"{n} rows")
        if fields is None:
            fields = local_time_fields(local)
        elif not isinstance(fields, Tensor):
            raise TypeError(f"fields must be the tensor local_time_fields(local), got "
                            f"{type(fields).__name__}")
        elif fields.shape != (n, len(temporal.FIELDS)):
            raise ValueError(f"fields must be the ({n}, {len(temporal.FIELDS)}) tensor "
                             f"local_time_fields(local), got shape {tuple(fields.shape)}")
        self.utc = torch.from_numpy(utc)
        self.local = torch.from_numpy(local)
        self.fields = fields
        self.observed = torch.from_numpy(~np.isnan(values))
        self.values = torch.from_numpy(np.nan_to_num(values, nan=0.0))
        self.windows = torch.from_numpy(windows)
        self.loc = torch.from_numpy(loc)
        self.scale = torch.from_numpy(scale)

    def __len__(self) -> int:
        return len(self.windows)

    def __getitem__(self, index: int) -> dict[str, Tensor]:
        c0, c1, t0, t1 = self.windows[index].tolist()
        item = {"loc": self.loc, "scale": self.scale}
        for prefix, (a, b) in (("context", (c0, c1)), ("target", (t0, t1))):
            item[f"{prefix}_time"] = self.utc[a:b]
            item[f"{prefix}_local"] = self.local[a:b]
            item[f"{prefix}_fields"] = self.fields[a:b]
            item[f"{prefix}_value"] = self.values[a:b]
            item[f"{prefix}_observed"] = self.observed[a:b]
        return item


def _pad(tensors: Sequence[Tensor], length: int, edge: bool) -> Tensor:
    """Right-pad to ``length`` along dim 0 with zeros, or by repeating the last row."""
    out = []
    for t in tensors:
        missing = length - t.shape[0]
        if missing:
            fill = t[-1:].expand(missing, *t.shape[1:]) if edge else t.new_zeros(
                (missing, *t.shape[1:]))
            t = torch.cat((t, fill))
        out.append(t)
    return torch.stack(out)


def collate_windows(items: Sequence[dict[str, Tensor]]) -> dict[str, Tensor]:
    """Stack window dicts, right-padding each side to the longest in the batch.

    Padded timestamps (and their calendar fields) repeat the last real one (they stay finite
    and in range); padded values are 0 and unobserved; ``*_valid`` marks the real tokens.
    Every item needs a non-empty context and horizon and the same channels ``C``.
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
    batch = {"loc": torch.stack([i["loc"] for i in items]),
             "scale": torch.stack([i["scale"] for i in items])}
    for prefix in ("context", "target"):
        lengths = [i[f"{prefix}_time"].shape[0] for i in items]
        n = max(lengths)
        batch[f"{prefix}_valid"] = torch.arange(n)[None] < torch.tensor(lengths)[:, None]
        for key in ("time", "local", "fields"):
            batch[f"{prefix}_{key}"] = _pad([i[f"{prefix}_{key}"] for i in items], n, True)
        for key in ("value", "observed"):
            batch[f"{prefix}_{key}"] = _pad([i[f"{prefix}_{key}"] for i in items], n, False)
    return batch


def _timestamps_argument(value: Any, name: str, timestamp_format: str | None
                         ) -> pd.DatetimeIndex:
    """``make_batch``'s timestamps through the data module's checks (int64 = ns)."""
    if isinstance(value, (str, bytes)) or np.ndim(value) != 1:
        raise TypeError(f"{name} must be a 1D sequence of timestamps, got "
                        f"{type(value).__name__} ({value!r})"[:300])
    if isinstance(value, Tensor) or (isinstance(value, np.ndarray) and value.dtype.kind in "iu"):
        index, _ = temporal.datetime_index(value, name)
        return index
    if isinstance(value, pd.Index):
        value = value.to_series(index=pd.RangeIndex(len(value)))
    return parse_timestamps(pd.Series(value).reset_index(drop=True), name,
                            timestamp_format=timestamp_format)


def _check_sorted(utc: np.ndarray, index: pd.DatetimeIndex, name: str) -> None:
    step = np.diff(utc)
    if (step < 0).any():
        i = int(np.flatnonzero(step < 0)[0]) + 1
        raise ValueError(f"{name} must be sorted in time: row {i} ({index[i]}) is before row "
                         f"{i - 1} ({index[i - 1]}); sort the timestamps with their values")
    if (step == 0).any():
        i = int(np.flatnonzero(step == 0)[0]) + 1
        raise ValueError(f"{name}: row {i} repeats the timestamp of row {i - 1} ({index[i]}); "
                         "one observation per time (merge the rows)")


def _channel_vector(value: Any, name: str, channels: int) -> np.ndarray:
    array = np.asarray(value, np.float64)
    if array.ndim > 1 or (array.ndim == 1 and array.shape[0] not in (1, channels)):
        raise ValueError(f"{name} has shape {array.shape} but context_values has {channels} "
                         "channels; give one value or one per channel")
    return np.broadcast_to(array, (channels,)).copy()


def make_batch(
    context_timestamps: Any,
    context_values: Any,
    query_timestamps: Any,
    *,
    tz: str | None = None,
    loc: Any = 0.0,
    scale: Any = 1.0,
    timestamp_format: str | None = None,
) -> dict[str, Tensor]:
    """One forecasting request -> a batch of one window, for ``Forecaster.predict``.

    Args:
        context_timestamps: ``(Nc,)`` observation times, sorted, no repeats, no NaT:
            a ``DatetimeIndex``, datetime ``Series``/array, text (checked as the data
            module's timestamp column) or int64 nanoseconds.
        context_values: ``(Nc,)`` or ``(Nc, C)`` observed values (NaN = missing), in the units
            the model was trained on *before* scaling; ``loc``/``scale`` scale them.
        query_timestamps: ``(Nh,)`` future times to predict, all after the last context time,
            in any order (the predictions follow it; queries do not see each other).
        tz: time zone of naive timestamps (as the data module's ``tz``); aware ones are
            converted to it. Context and queries must both be naive or both be aware.
        loc, scale: ``()`` or ``(C,)``, the data module's scaling (``datamodule.loc``,
            ``datamodule.scale``); ``scale`` finite and > 0.
        timestamp_format: format of text timestamps (see :func:`parse_timestamps`).
    """
    _check_tz(tz)
    ctx_index = _timestamps_argument(context_timestamps, "context_timestamps", timestamp_format)
    qry_index = _timestamps_argument(query_timestamps, "query_timestamps", timestamp_format)
    if (ctx_index.tz is None) != (qry_index.tz is None):
        kinds = ["tz-naive", "tz-aware"]
        raise ValueError(f"context_timestamps are {kinds[ctx_index.tz is not None]} but "
                         f"query_timestamps are {kinds[qry_index.tz is not None]}; use one form")
    if len(ctx_index) == 0 or len(qry_index) == 0:
        raise ValueError("context_timestamps and query_timestamps must be non-empty")
    ctx = _localize(ctx_index, tz, "raise", "raise", "context_timestamps")
    qry = _localize(qry_index, tz, "raise", "raise", "query_timestamps")
    _check_sorted(ctx[0], ctx_index, "context_timestamps")
    try:
        values = np.asarray(context_values, dtype=np.float64)
    except (ValueError, TypeError) as err:
        raise ValueError(f"context_values must be numbers (NaN = missing): {err}") from err
    if values.ndim not in (1, 2):
        raise ValueError(f"context_values must be (Nc,) or (Nc, C), got shape {values.shape}")
    values = values[:, None] if values.ndim == 1 else values
    if values.shape[0] != len(ctx[0]):
        raise ValueError(f"context_values has {values.shape[0]} rows but context_timestamps "
                         f"has {len(ctx[0])}")
    infinite = np.flatnonzero(np.isinf(values).any(1))
    if len(infinite):
        raise ValueError(f"context_values: row {int(infinite[0])} is infinite (NaN marks a "
                         "missing value)")
    if qry[0].min() <= ctx[0].max():
        raise ValueError("every query timestamp must be after the last context timestamp")
    channels = values.shape[1]
    loc = _channel_vector(loc, "loc", channels)
    scale = _channel_vector(scale, "scale", channels)
    if not np.isfinite(loc).all():
        raise ValueError(f"loc must be finite, got {loc}")
    if not (np.isfinite(scale) & (scale > 0)).all():
        raise ValueError(f"scale must be finite and > 0, got {scale}")
    with np.errstate(over="ignore"):
        scaled = ((values - loc) / scale).astype(np.float32)
    overflow = np.flatnonzero(np.isinf(scaled).any(1))
    if len(overflow):
        raise ValueError(f"context_values: row {int(overflow[0])} overflows float32 once "
                         "scaled by loc/scale")
    # Queries keep their order and may repeat: the model predicts each on its own.
    nh = len(qry[0])
    item = {"loc": torch.from_numpy(loc.astype(np.float32)),
            "scale": torch.from_numpy(scale.astype(np.float32)),
            "context_time": torch.from_numpy(ctx[0]), "context_local": torch.from_numpy(ctx[1]),
            "context_fields": local_time_fields(ctx[1]),
            "context_value": torch.from_numpy(np.nan_to_num(scaled, nan=0.0)),
            "context_observed": torch.from_numpy(~np.isnan(scaled)),
            "target_time": torch.from_numpy(qry[0]), "target_local": torch.from_numpy(qry[1]),
            "target_fields": local_time_fields(qry[1]),
            "target_value": torch.zeros(nh, channels),
            "target_observed": torch.zeros(nh, channels, dtype=torch.bool)}
    return collate_windows([item])


class TimeSeriesDataModule(LightningDataModule):
    """Sliding-window forecasting data from a CSV/Parquet file or a DataFrame.

    Args:
        data: path (``str`` or ``os.PathLike``, stored as text) to a ``.csv`` / ``.parquet``
            file, or a ``pandas.DataFrame``. Column names must be unique.
        timestamp_column: column holding the timestamps (text or datetime; naive or with a UTC
            offset, one form for the whole column). Rows are sorted by time; duplicate
            timestamps (the same instant, whatever its offset) are an error.
        target_columns: numeric column(s) to forecast (one channel each); NaN = missing. A
            channel that is constant over the training period gets ``scale`` 1.
        tz: IANA time zone. Naive timestamps are local times there (localized with
            ``ambiguous``/``nonexistent``, in wall-clock order); aware ones are converted to
            it. Calendar features use this local time; elapsed time is always real (UTC) time.
        ambiguous: repeated local hour at a DST fall-back: ``raise``, ``earliest`` (the
            DST reading), ``latest`` (standard time) or ``infer`` (from the order).
        nonexistent: skipped local hour at a DST spring-forward: ``raise``,
            ``shift_forward`` or ``shift_backward``.
        context_length: context per window: observations (int) or a duration with a unit
            (``"7D"``, a ``timedelta``); a bare number such as ``"168"`` or ``168.0`` is refused.
        horizon: predicted span per window: observations (int) or a duration (``"24h"``).
        stride: distance between consecutive forecast origins, same kind as the lengths
            (default: ``horizon``). Durations may not place more than ``MAX_ORIGINS_PER_ROW``
            origins per observation (a stride below the sampling interval repeats windows),
            and a window holds at most ``MAX_WINDOW_ROWS`` rows.
        val_fraction, test_fraction: the last fractions of the time span for validation and
            test (ignored where ``val_start``/``test_start`` are given).
        val_start, test_start: explicit split times (text or ``datetime``) in the form of the
            timestamps: naive for naive data (read in ``tz`` where given), with a UTC offset
            for aware data (naive ones are accepted there only with ``tz``).
        irregular: keep a random fraction of observations (seeded), for irregular sampling;
            None keeps all.
        seed: seed of ``irregular``.
        batch_size, eval_batch_size, num_workers: loader settings.
        timestamp_format: ``pd.to_datetime`` format of text timestamps (``"%d/%m/%Y %H:%M"``,
            ``"ISO8601"``, ``"mixed"``). None: the format pandas infers from the first row,
            which every row must match (a row in another format is an error, not a guess).
    """

    def __init__(
        self,
        data: str | os.PathLike | Any = None,
        timestamp_column: str = "timestamp",
        target_columns: str | list[str] = "value",
        tz: str | None = None,
        ambiguous: str = "raise",
        nonexistent: str = "raise",
        context_length: int | str = 168,
        horizon: int | str = 24,
        stride: int | str | None = None,
        val_fraction: float = 0.15,
        test_fraction: float = 0.15,
        val_start: str | None = None,
        test_start: str | None = None,
        irregular: float | None = None,
        seed: int = 0,
        batch_size: int = 64,
        eval_batch_size: int | None = None,
        num_workers: int = 0,
        timestamp_format: str | None = None,
    ) -> None:
        super().__init__()
        # A DataFrame is data, not a hyperparameter: keep it out of the checkpoint.
        self.save_hyperparameters(ignore=[] if isinstance(data, (str, os.PathLike, type(None)))
                                  else ["data"])
        # Paths, numpy scalars, timestamps and timedeltas as builtins: a checkpoint that
        # pickled them would not load with torch.load(weights_only=True).
        make_hparams_plain(self.hparams)
        self.data = data
        if timestamp_column is None:
            raise TypeError("timestamp_column must name a column, got None")
        self.timestamp_column = timestamp_column
        if target_columns is None or not isinstance(
                target_columns, (str, Sequence, pd.Index, np.ndarray)):
            raise TypeError(f"target_columns must be a column name or a list of names, got "
                            f"{type(target_columns).__name__} ({target_columns!r})")
        self.target_columns = ([target_columns] if isinstance(target_columns, str)
                               else list(target_columns))
        if not self.target_columns:
            raise ValueError("target_columns must name at least one column")
        for i, name in enumerate(self.target_columns):
            if name in self.target_columns[:i]:
                raise ValueError(f"target_columns repeats {name!r}: {self.target_columns}")
            if name == timestamp_column:
                raise ValueError(f"{name!r} is both the timestamp column and a target column")
        if timestamp_format is not None and not isinstance(timestamp_format, str):
            raise TypeError(f"timestamp_format must be a str or None, got "
                            f"{type(timestamp_format).__name__} ({timestamp_format!r})")
        self.timestamp_format = timestamp_format
        self.tz = _check_tz(tz)
        self.ambiguous = check_choice(ambiguous, "ambiguous", AMBIGUOUS)
        self.nonexistent = check_choice(nonexistent, "nonexistent", NONEXISTENT)
        self.context_length = _length(context_length, "context_length")
        self.horizon = _length(horizon, "horizon")
        self.stride = self.horizon if stride is None else _length(stride, "stride")
        kinds = {type(v) for v in (self.context_length, self.horizon, self.stride)}
        if len(kinds) != 1:
            raise ValueError(
                f"context_length={context_length!r}, horizon={horizon!r} and stride={stride!r} "
                "must all be observation counts (int) or all durations (str)")
        self.by_time = kinds == {pd.Timedelta}
        if not self.by_time and self.context_length + self.horizon > MAX_WINDOW_ROWS:
            raise ValueError(
                f"context_length + horizon = {self.context_length + self.horizon} rows per "
                f"window, above the limit of MAX_WINDOW_ROWS={MAX_WINDOW_ROWS}")
        self.val_fraction, self.test_fraction = check_split_fractions(val_fraction,
                                                                      test_fraction)
        self.val_start = self._split_argument(val_start, "val_start")
        self.test_start = self._split_argument(test_start, "test_start")
        if irregular is not None and (isinstance(irregular, (bool, np.bool_)) or not (
                isinstance(irregular, Real) and 0 < irregular <= 1)):  # NaN fails this too
            raise ValueError(f"irregular is the fraction of observations kept, in (0, 1], "
                             f"got {irregular!r}")
        self.irregular = irregular
        if isinstance(seed, (bool, np.bool_)) or not isinstance(seed, (int, np.integer)):
            raise TypeError(f"seed must be an int, got {type(seed).__name__} ({seed!r})")
        self.seed = int(seed)
        self.batch_size = check_positive_int(plain(batch_size), "batch_size")
        self.eval_batch_size = (self.batch_size if eval_batch_size is None
                                else check_positive_int(plain(eval_batch_size),
                                                        "eval_batch_size"))
        self.num_workers = check_int(plain(num_workers), "num_workers", ge=0)
        self.datasets: dict[str, WindowDataset] = {}

    @staticmethod
    def _split_argument(value: Any, name: str) -> pd.Timestamp | None:
        """``val_start``/``test_start`` -> a Timestamp (zone applied later), checked now."""
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
    def num_targets(self) -> int:
        """Target channels ``C``."""
        return len(self.target_columns)

    # -- loading ---------------------------------------------------------------------------
    def load_frame(self) -> pd.DataFrame:
        """The raw table (override in subclasses for built-in data)."""
        data = self.data
        if isinstance(data, pd.DataFrame):
            return data
        if data is None:
            raise ValueError(f"{type(self).__name__} needs data: a .csv/.parquet path or a "
                             "pandas DataFrame")
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
            _check_unique(header, f"data={str(path)!r}")
            return frame
        if suffix in (".parquet", ".pq"):
            return pd.read_parquet(path)
        raise ValueError(f"data={str(path)!r}: expected a .csv or .parquet file")

    def _source(self) -> str | None:
        return os.fspath(self.data) if isinstance(self.data, (str, os.PathLike)) else None

    def _describe_data(self) -> str:
        source = self._source()
        if source is not None:
            return f"data={source!r}"
        return "data (a DataFrame)" if isinstance(self.data, pd.DataFrame) else type(self).__name__

    def _read(self) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
        """-> sorted (utc ns, local ns, values (N, C) float64 with NaN, rows: each one's row
        in the table) after all checks."""
        frame = self.load_frame()
        source = self._source()
        _check_unique(list(frame.columns), self._describe_data())
        if not len(frame):
            raise ValueError(f"{self._describe_data()} has no rows (columns "
                             f"{[str(c) for c in frame.columns]})")
        columns = [str(c) for c in frame.columns]
        for name in (self.timestamp_column, *self.target_columns):
            if name not in frame.columns:
                hint = ("; the DataFrame's index is a DatetimeIndex: reset_index() it into a "
                        "column" if isinstance(frame.index, pd.DatetimeIndex) else "")
                raise ValueError(f"column {name!r} not found; the data has columns "
                                 f"{columns}{hint}")
        stamps = frame[self.timestamp_column]
        index = parse_timestamps(stamps, self.timestamp_column, source, self.timestamp_format)
        values = np.empty((len(frame), self.num_targets))
        for c, name in enumerate(self.target_columns):
            values[:, c] = _target_values(frame[name], name, source)
        # Localize in wall-clock order: ambiguous="infer" reads the repeated hour's order.
        order = np.argsort(index.asi8, kind="stable")
        utc, local = _localize(index[order], self.tz, self.ambiguous, self.nonexistent,
                               self.timestamp_column)
        again = np.argsort(utc, kind="stable")  # shifted nonexistent times may reorder
        order, utc, local = order[again], utc[again], local[again]
        values = values[order]
        dup = np.flatnonzero(np.diff(utc) == 0)
        if len(dup):
            first, second = sorted((int(order[dup[0]]), int(order[dup[0] + 1])))
            raise ValueError(f"timestamp column {self.timestamp_column!r}: {_row(second, source)} "
                             f"repeats the timestamp of {_row(first, source)} "
                             f"({stamps.iloc[first]!r})")
        self._aware = index.tz is not None
        return utc, local, values, order

    def _split_times(self, utc: np.ndarray) -> tuple[int, int]:
        start, end = int(utc[0]), int(utc[-1])

        def explicit(stamp: pd.Timestamp, name: str) -> int:
            given = self._given(name)
            if stamp.tzinfo is None:
                if self._aware and self.tz is None:
                    raise ValueError(f"{name}={given!r} has no UTC offset but the timestamps "
                                     "are tz-aware: add an offset, or set tz to read it in")
                if self.tz is not None:
                    amb: Any = {"earliest": True, "latest": False}.get(self.ambiguous,
                                                                       self.ambiguous)
                    try:
                        stamp = stamp.tz_localize(
                            self.tz, ambiguous="raise" if amb == "infer" else amb,
                            nonexistent=self.nonexistent)
                    except (ValueError, TypeError) as err:
                        raise ValueError(f"{name}={given!r} is not a single local time in "
                                         f"tz={self.tz!r}: {err}") from err
            elif not self._aware and self.tz is None:
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

    def _origins(self, utc: np.ndarray, lo: int, hi: int) -> tuple[int, int]:
        """Time mode: (first origin ns, number of origins) of windows in ``[lo, hi)``."""
        ctx, hor, stride = (int(v.value) for v in (self.context_length, self.horizon,
                                                    self.stride))
        origin = max(lo, int(utc[0]) + ctx)
        return origin, max(0, (hi - hor - origin) // stride + 1)

    def _windows(self, utc: np.ndarray, lo: int, hi: int) -> np.ndarray:
        """``(W, 4)`` windows whose whole horizon lies in ``[lo, hi)`` (ns)."""
        n = len(utc)
        if not self.by_time:
            ctx, hor, stride = self.context_length, self.horizon, self.stride
            first = max(ctx, int(np.searchsorted(utc, lo, "left")))
            t0 = np.arange(first, max(first, n - hor + 1), stride, dtype=np.int64)
            t0 = t0[utc[t0 + hor - 1] < hi]  # utc is sorted: a prefix of the origins
            return np.stack((t0 - ctx, t0, t0, t0 + hor), 1).reshape(-1, 4)
        ctx, hor, stride = (int(v.value) for v in (self.context_length, self.horizon,
                                                    self.stride))
        first, count = self._origins(utc, lo, hi)
        origins = first + stride * np.arange(count, dtype=np.int64)
        c0 = np.searchsorted(utc, origins - ctx, "left")
        t0 = np.searchsorted(utc, origins, "left")
        t1 = np.searchsorted(utc, origins + hor, "left")
        keep = (t0 > c0) & (t1 > t0)
        return np.stack((c0, t0, t0, t1), 1)[keep].astype(np.int64).reshape(-1, 4)

    def _check_cost(self, utc: np.ndarray, bounds: dict[str, tuple[int, int]]) -> None:
        """Time mode: refuse strides and lengths whose windows would not fit, before the work."""
        origins = sum(self._origins(utc, lo, hi)[1] for lo, hi in bounds.values())
        if origins > MAX_ORIGINS_PER_ROW * len(utc):
            spacing = pd.Timedelta(int(np.median(np.diff(utc))))
            raise ValueError(
                f"stride={self._given('stride') or self._given('horizon')!r} places about "
                f"{origins:.2g} forecast origins in data of {len(utc)} observations (more than "
                f"MAX_ORIGINS_PER_ROW={MAX_ORIGINS_PER_ROW} per observation): windows would "
                f"repeat the same rows; use a stride of at least the sampling interval "
                f"(median {spacing} here)")

    def setup(self, stage: str | None = None) -> None:
        if self.datasets:
            return
        utc, local, values, rows = self._read()
        if self.irregular is not None and self.irregular < 1:
            keep = np.random.default_rng(self.seed).random(len(utc)) < self.irregular
            utc, local, values, rows = utc[keep], local[keep], values[keep], rows[keep]
        if len(utc) < 2:
            raise ValueError(f"the series in {self._describe_data()} has {len(utc)} "
                             "observation(s); forecasting needs many more")
        t_val, t_test = self._split_times(utc)
        train = utc < t_val
        with np.errstate(all="ignore"), warnings.catch_warnings():
            warnings.simplefilter("ignore", RuntimeWarning)  # all-NaN channel: checked below
            loc = np.nanmean(values[train], axis=0)
            scale = np.nanstd(values[train], axis=0)
        for c, name in enumerate(self.target_columns):
            if not np.isfinite(loc[c]):
                raise ValueError(f"target column {name!r} has no observed value in the training "
                                 f"period (before {pd.Timestamp(t_val)} UTC)"
                                 if np.isnan(loc[c]) else
                                 f"target column {name!r}: values too large to average")
        # A constant channel has no spread to divide by; it is only centred.
        scale = np.where(scale > 0, scale, 1.0)
        with np.errstate(over="ignore", invalid="ignore"):
            scaled = ((values - loc) / scale).astype(np.float32)
        overflow = np.argwhere(np.isinf(scaled) | (np.isnan(scaled) & ~np.isnan(values)))
        if len(overflow):
            row, c = (int(v) for v in overflow[0])
            raise ValueError(f"target column {self.target_columns[c]!r}: "
                             f"{_row(int(rows[row]), self._source())} value "
                             f"{float(values[row, c])!r} does not fit float32 once scaled by "
                             f"loc={loc[c]:.3g}, scale={scale[c]:.3g} (the training spread is "
                             "too small for it)")
        self.loc, self.scale = loc.astype(np.float32), scale.astype(np.float32)
        self.split_times = {"val": t_val, "test": t_test}
        bounds = {"train": (int(utc[0]), t_val), "val": (t_val, t_test),
                  "test": (t_test, int(utc[-1]) + 1)}
        if self.by_time:
            self._check_cost(utc, bounds)
        datasets = {}
        fields = local_time_fields(local)  # once for every split
        for split, (lo, hi) in bounds.items():
            windows = self._windows(utc, lo, hi)
            if not len(windows):
                raise ValueError(self._no_window(split, utc, lo, hi))
            rows = int((windows[:, 3] - windows[:, 0]).max())
            if rows > MAX_WINDOW_ROWS:
                raise ValueError(
                    f"context_length={self._given('context_length')!r} and horizon="
                    f"{self._given('horizon')!r} make windows of up to {rows} rows in the {split} "
                    f"split, above the limit of MAX_WINDOW_ROWS={MAX_WINDOW_ROWS}")
            datasets[split] = WindowDataset(utc, local, scaled, windows, self.loc, self.scale,
                                            fields)
        self.datasets = datasets

    def _no_window(self, split: str, utc: np.ndarray, lo: int, hi: int) -> str:
        count = int(((utc >= lo) & (utc < hi)).sum())
        message = (f"the {split} split ({pd.Timestamp(lo)} to {pd.Timestamp(hi)} UTC, {count} "
                   f"observations) fits no window of context_length="
                   f"{self._given('context_length')!r} and horizon={self._given('horizon')!r}")
        spacing = pd.Timedelta(int(np.median(np.diff(utc))))
        if self.by_time and min(self.context_length, self.horizon) < spacing:
            return (message + f": a window needs an observation in its context and in its "
                    f"horizon, and these durations are shorter than the median sampling "
                    f"interval {spacing}; lengthen them")
        return message + ": the series is too short for these windows; shorten them or move " \
            "the split"

    # -- loaders ---------------------------------------------------------------------------
    def _loader(self, split: str, shuffle: bool) -> DataLoader:
        if split not in self.datasets:
            raise RuntimeError(f"{type(self).__name__}.setup() must run before asking for "
                               "data loaders")
        return DataLoader(self.datasets[split],
                          batch_size=self.batch_size if shuffle else self.eval_batch_size,
                          shuffle=shuffle, collate_fn=collate_windows,
                          num_workers=self.num_workers, persistent_workers=self.num_workers > 0)

    def train_dataloader(self) -> DataLoader:
        return self._loader("train", True)

    def val_dataloader(self) -> DataLoader:
        return self._loader("val", False)

    def test_dataloader(self) -> DataLoader:
        return self._loader("test", False)

    def predict_dataloader(self) -> DataLoader:
        return self._loader("test", False)


class SeattleTempsDataModule(TimeSeriesDataModule):
    """Hourly Seattle temperatures of 2010 (``vega_datasets``, offline; 8759 rows).

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
    ) -> None:
        super().__init__(
            data=None, timestamp_column="date", target_columns="temp",
            tz="America/Los_Angeles", ambiguous="earliest", nonexistent="shift_forward",
            context_length=context_length, horizon=horizon, stride=stride,
            val_fraction=val_fraction, test_fraction=test_fraction, irregular=irregular,
            seed=seed, batch_size=batch_size, eval_batch_size=eval_batch_size,
            num_workers=num_workers)

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
    ) -> None:
        super().__init__(
            data=None, timestamp_column="timestamp", target_columns="demand", tz=None,
            context_length=context_length, horizon=horizon, stride=stride,
            val_fraction=val_fraction, test_fraction=test_fraction, irregular=irregular,
            seed=seed, batch_size=batch_size, eval_batch_size=eval_batch_size,
            num_workers=num_workers)

    def load_frame(self) -> pd.DataFrame:
        try:
            from pmdarima.datasets import load_taylor
        except ImportError as err:  # pragma: no cover - depends on the environment
            raise ImportError("TaylorDataModule needs pmdarima: pip install 'posenc[data]'"
                              ) from err
        demand = load_taylor()
        stamps = pd.date_range("2000-06-05 00:00", periods=len(demand), freq="30min")
        return pd.DataFrame({"timestamp": stamps, "demand": demand})
