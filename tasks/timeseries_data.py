"""Time-series data for forecasting: a CSV/Parquet file or DataFrame -> sliding windows.

A window is a forecast origin: the observations before it (the context) and those in the
horizon after it. Context and horizon lengths are counts of observations (``168``) or
durations (``"7D"``, ``"36h"``). Splits are by time: a window belongs to the split that
holds its whole horizon, so no training target lies in the validation or test period, and
every context ends before its horizon starts. Scaling statistics come from the training
period only.

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
``target_*``          same, ``Nh``     the horizon: its timestamps are the query times
``loc``, ``scale``    (B, C) f32       ``value = scaled * scale + loc``
====================  ===============  ===============================================
"""

from __future__ import annotations

import os
import re
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd
import torch
from lightning.pytorch import LightningDataModule
from posenc import temporal
from posenc.core import check_choice, check_positive_int
from torch import Tensor
from torch.utils.data import DataLoader, Dataset

__all__ = [
    "WindowDataset",
    "collate_windows",
    "make_batch",
    "parse_timestamps",
    "TimeSeriesDataModule",
    "SeattleTempsDataModule",
    "TaylorDataModule",
]

AMBIGUOUS = ("raise", "earliest", "latest", "infer")
NONEXISTENT = ("raise", "shift_forward", "shift_backward")
_OFFSET = re.compile(r"(?:Z|[+-]\d\d:?\d\d)$")


def _row(position: int, source: str | None) -> str:
    where = f"row {position}"
    if source is not None and source.lower().endswith(".csv"):
        where += f" (line {position + 2} of {source})"
    return where


def parse_timestamps(column: pd.Series, name: str, source: str | None = None
                     ) -> pd.DatetimeIndex:
    """A timestamp column -> ``DatetimeIndex`` (naive, or tz-aware in its own zone or UTC).

    Raises ``ValueError`` naming the column and the first bad row for missing (NaT),
    unparseable or mixed naive/offset timestamps, and ``TypeError`` for numeric columns
    (their unit is ambiguous: convert with ``pd.to_datetime(..., unit=...)``).
    """
    if isinstance(column.dtype, pd.DatetimeTZDtype) or pd.api.types.is_datetime64_dtype(column):
        parsed = pd.DatetimeIndex(column)
    elif pd.api.types.is_numeric_dtype(column) or pd.api.types.is_bool_dtype(column):
        raise TypeError(f"timestamp column {name!r} holds {column.dtype} numbers; their unit is "
                        "ambiguous: convert it with pd.to_datetime(..., unit='s'/'ms'/'ns') "
                        "or store timestamps as text")
    else:
        text = column.astype("string")
        present = text.notna().to_numpy()
        with_offset = text.str.strip().str.contains(_OFFSET, na=False).to_numpy()
        if with_offset.any() and (present & ~with_offset).any():
            naive_row = int(np.flatnonzero(present & ~with_offset)[0])
            aware_row = int(np.flatnonzero(with_offset)[0])
            raise ValueError(
                f"timestamp column {name!r} mixes tz-naive and tz-aware values: "
                f"{_row(naive_row, source)} is {column.iloc[naive_row]!r} (no UTC offset) but "
                f"{_row(aware_row, source)} is {column.iloc[aware_row]!r}; use one form")
        utc = bool(with_offset.any())
        try:
            parsed = pd.DatetimeIndex(pd.to_datetime(column, utc=utc))
        except (ValueError, TypeError, OverflowError) as err:
            coerced = pd.to_datetime(column, errors="coerce", utc=utc, format="mixed")
            bad = np.flatnonzero(pd.isna(coerced) & present)
            if len(bad):
                raise ValueError(f"timestamp column {name!r}: {_row(int(bad[0]), source)} "
                                 f"value {column.iloc[int(bad[0])]!r} cannot be parsed as a "
                                 "timestamp") from err
            parsed = pd.DatetimeIndex(coerced)
    missing = np.flatnonzero(parsed.isna())
    if len(missing):
        raise ValueError(f"timestamp column {name!r}: {_row(int(missing[0]), source)} is missing "
                         f"(NaT); {len(missing)} row(s) without a timestamp")
    return parsed


def _check_tz(tz: str | None) -> str | None:
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


def _length(value: int | str, name: str) -> int | pd.Timedelta:
    if isinstance(value, bool):
        raise TypeError(f"{name} must be an int (observations) or a duration string, got {value}")
    if isinstance(value, (int, np.integer)):
        return check_positive_int(int(value), name)
    try:
        delta = pd.Timedelta(value)
    except (ValueError, TypeError) as err:
        raise ValueError(f"{name} must be an int (observations) or a duration such as '7D' or "
                         f"'36h', got {value!r}") from err
    if delta <= pd.Timedelta(0):
        raise ValueError(f"{name} must be a positive duration, got {value!r}")
    return delta


class WindowDataset(Dataset):
    """Windows over one multivariate series; item ``i`` is a dict (see the module docstring).

    Args:
        utc, local: ``(N,)`` int64 ns, sorted by ``utc``.
        values: ``(N, C)`` float32 scaled values, NaN where missing.
        windows: ``(W, 4)`` int64 ``[context_start, context_end, target_start, target_end)``
            row ranges, ``context_end <= target_start``.
        loc, scale: ``(C,)`` scaling of ``values``.
    """

    def __init__(self, utc: np.ndarray, local: np.ndarray, values: np.ndarray,
                 windows: np.ndarray, loc: np.ndarray, scale: np.ndarray) -> None:
        self.utc = torch.from_numpy(np.ascontiguousarray(utc, np.int64))
        self.local = torch.from_numpy(np.ascontiguousarray(local, np.int64))
        values = np.ascontiguousarray(values, np.float32)
        self.observed = torch.from_numpy(~np.isnan(values))
        self.values = torch.from_numpy(np.nan_to_num(values, nan=0.0))
        self.windows = torch.from_numpy(np.asarray(windows, np.int64).reshape(-1, 4))
        self.loc = torch.as_tensor(loc, dtype=torch.float32)
        self.scale = torch.as_tensor(scale, dtype=torch.float32)

    def __len__(self) -> int:
        return len(self.windows)

    def __getitem__(self, index: int) -> dict[str, Tensor]:
        c0, c1, t0, t1 = self.windows[index].tolist()
        item = {"loc": self.loc, "scale": self.scale}
        for prefix, (a, b) in (("context", (c0, c1)), ("target", (t0, t1))):
            item[f"{prefix}_time"] = self.utc[a:b]
            item[f"{prefix}_local"] = self.local[a:b]
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

    Padded timestamps repeat the last real one (they stay finite and in range); padded values
    are 0 and unobserved; ``*_valid`` marks the real tokens.
    """
    batch = {"loc": torch.stack([i["loc"] for i in items]),
             "scale": torch.stack([i["scale"] for i in items])}
    for prefix in ("context", "target"):
        lengths = [i[f"{prefix}_time"].shape[0] for i in items]
        n = max(lengths)
        batch[f"{prefix}_valid"] = torch.arange(n)[None] < torch.tensor(lengths)[:, None]
        for key in ("time", "local"):
            batch[f"{prefix}_{key}"] = _pad([i[f"{prefix}_{key}"] for i in items], n, True)
        for key in ("value", "observed"):
            batch[f"{prefix}_{key}"] = _pad([i[f"{prefix}_{key}"] for i in items], n, False)
    return batch


def make_batch(
    context_timestamps: Any,
    context_values: Any,
    query_timestamps: Any,
    *,
    tz: str | None = None,
    loc: Any = 0.0,
    scale: Any = 1.0,
) -> dict[str, Tensor]:
    """One forecasting request -> a batch of one window, for ``Forecaster.predict``.

    Args:
        context_timestamps: ``(Nc,)`` observation times (anything ``pd.DatetimeIndex`` takes).
        context_values: ``(Nc,)`` or ``(Nc, C)`` observed values (NaN = missing), in the units
            the model was trained on *before* scaling; ``loc``/``scale`` scale them.
        query_timestamps: ``(Nh,)`` future times to predict, regular or not; calendar
            features are computed from them by the model.
        tz: time zone of naive timestamps (as the data module's ``tz``).
        loc, scale: the data module's scaling (``datamodule.loc``, ``datamodule.scale``).
    """
    _check_tz(tz)
    ctx = _localize(pd.DatetimeIndex(context_timestamps), tz, "raise", "raise",
                    "context_timestamps")
    qry = _localize(pd.DatetimeIndex(query_timestamps), tz, "raise", "raise",
                    "query_timestamps")
    values = np.asarray(context_values, dtype=np.float64)
    values = values[:, None] if values.ndim == 1 else values
    if values.shape[0] != len(ctx[0]):
        raise ValueError(f"context_values has {values.shape[0]} rows but context_timestamps "
                         f"has {len(ctx[0])}")
    if len(ctx[0]) == 0 or len(qry[0]) == 0:
        raise ValueError("context_timestamps and query_timestamps must be non-empty")
    if qry[0].min() <= ctx[0].max():
        raise ValueError("every query timestamp must be after the last context timestamp")
    channels = values.shape[1]
    loc = np.broadcast_to(np.asarray(loc, np.float64), (channels,)).copy()
    scale = np.broadcast_to(np.asarray(scale, np.float64), (channels,)).copy()
    utc = np.concatenate((ctx[0], qry[0]))
    local = np.concatenate((ctx[1], qry[1]))
    all_values = np.concatenate((values, np.full((len(qry[0]), channels), np.nan)))
    nc = len(ctx[0])
    dataset = WindowDataset(utc, local, (all_values - loc) / scale,
                            np.array([[0, nc, nc, len(utc)]]), loc, scale)
    return collate_windows([dataset[0]])


class TimeSeriesDataModule(LightningDataModule):
    """Sliding-window forecasting data from a CSV/Parquet file or a DataFrame.

    Args:
        data: path to a ``.csv`` / ``.parquet`` file, or a ``pandas.DataFrame``.
        timestamp_column: column holding the timestamps (text or datetime; naive or with a UTC
            offset). Rows are sorted by time; duplicate timestamps are an error.
        target_columns: numeric column(s) to forecast (one channel each); NaN = missing.
        tz: IANA time zone. Naive timestamps are local times there (localized with
            ``ambiguous``/``nonexistent``); aware ones are converted to it. Calendar
            features use this local time; elapsed time is always real (UTC) time.
        ambiguous: repeated local hour at a DST fall-back: ``raise``, ``earliest`` (the
            DST reading), ``latest`` (standard time) or ``infer`` (from the order).
        nonexistent: skipped local hour at a DST spring-forward: ``raise``,
            ``shift_forward`` or ``shift_backward``.
        context_length: context per window: observations (int) or a duration (``"7D"``).
        horizon: predicted span per window: observations (int) or a duration (``"24h"``).
        stride: distance between consecutive forecast origins, same kind as the lengths
            (default: ``horizon``).
        val_fraction, test_fraction: the last fractions of the time span for validation and
            test (ignored where ``val_start``/``test_start`` are given).
        val_start, test_start: explicit split times (same form/zone as the timestamps).
        irregular: keep a random fraction of observations (seeded), for irregular sampling;
            None keeps all.
        seed: seed of ``irregular``.
        batch_size, eval_batch_size, num_workers: loader settings.
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
    ) -> None:
        super().__init__()
        # A DataFrame is data, not a hyperparameter: keep it out of the checkpoint.
        self.save_hyperparameters(ignore=[] if isinstance(data, (str, os.PathLike, type(None)))
                                  else ["data"])
        self.data = data
        self.timestamp_column = timestamp_column
        self.target_columns = ([target_columns] if isinstance(target_columns, str)
                               else list(target_columns))
        if not self.target_columns:
            raise ValueError("target_columns must name at least one column")
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
        for name, value in (("val_fraction", val_fraction), ("test_fraction", test_fraction)):
            if not 0 < value < 1:
                raise ValueError(f"{name} must be in (0, 1), got {value!r}")
        if val_fraction + test_fraction >= 1:
            raise ValueError("val_fraction + test_fraction must be < 1")
        self.val_fraction, self.test_fraction = val_fraction, test_fraction
        self.val_start, self.test_start = val_start, test_start
        if irregular is not None and not 0 < irregular <= 1:
            raise ValueError(f"irregular is the fraction of observations kept, in (0, 1], "
                             f"got {irregular!r}")
        self.irregular = irregular
        self.seed = seed
        self.batch_size = batch_size
        self.eval_batch_size = eval_batch_size or batch_size
        self.num_workers = num_workers
        self.datasets: dict[str, WindowDataset] = {}

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
            return pd.read_csv(path)
        if suffix in (".parquet", ".pq"):
            return pd.read_parquet(path)
        raise ValueError(f"data={str(path)!r}: expected a .csv or .parquet file")

    def _source(self) -> str | None:
        return str(self.data) if isinstance(self.data, (str, os.PathLike)) else None

    def _read(self) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """-> sorted (utc ns, local ns, values (N, C) float64 with NaN) after all checks."""
        frame = self.load_frame()
        source = self._source()
        columns = [str(c) for c in frame.columns]
        for name in (self.timestamp_column, *self.target_columns):
            if name not in frame.columns:
                raise ValueError(f"column {name!r} not found; the data has columns {columns}")
        index = parse_timestamps(frame[self.timestamp_column], self.timestamp_column, source)
        utc, local = _localize(index, self.tz, self.ambiguous, self.nonexistent,
                               self.timestamp_column)
        values = np.empty((len(frame), self.num_targets))
        for c, name in enumerate(self.target_columns):
            column = frame[name]
            if pd.api.types.is_bool_dtype(column):
                raise TypeError(f"target column {name!r} is boolean, expected numbers")
            numeric = pd.to_numeric(column, errors="coerce")
            bad = np.flatnonzero(numeric.isna().to_numpy() & column.notna().to_numpy())
            if len(bad):
                raise ValueError(f"target column {name!r}: {_row(int(bad[0]), source)} value "
                                 f"{column.iloc[int(bad[0])]!r} is not numeric")
            values[:, c] = numeric.to_numpy(dtype=np.float64, na_value=np.nan)
            infinite = np.flatnonzero(np.isinf(values[:, c]))
            if len(infinite):
                raise ValueError(f"target column {name!r}: {_row(int(infinite[0]), source)} is "
                                 "infinite")
        order = np.argsort(utc, kind="stable")
        utc, local, values = utc[order], local[order], values[order]
        dup = np.flatnonzero(np.diff(utc) == 0)
        if len(dup):
            first, second = sorted((int(order[dup[0]]), int(order[dup[0] + 1])))
            raise ValueError(f"timestamp column {self.timestamp_column!r}: {_row(second, source)} "
                             f"repeats the timestamp of {_row(first, source)} "
                             f"({frame[self.timestamp_column].iloc[first]!r})")
        return utc, local, values

    def _split_times(self, utc: np.ndarray) -> tuple[int, int]:
        start, end = int(utc[0]), int(utc[-1])

        def explicit(value: str, name: str) -> int:
            stamp = pd.Timestamp(value)
            if stamp.tzinfo is None and self.tz is not None:
                stamp = stamp.tz_localize(self.tz)
            elif stamp.tzinfo is not None and self.tz is None:
                stamp = stamp.tz_convert("UTC").tz_localize(None)
            return int(stamp.as_unit("ns").value)

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

    def _windows(self, utc: np.ndarray, lo: int, hi: int) -> np.ndarray:
        """Windows whose whole horizon lies in ``[lo, hi)`` (ns)."""
        rows = []
        n = len(utc)
        if not self.by_time:
            ctx, hor, stride = self.context_length, self.horizon, self.stride
            first = max(ctx, int(np.searchsorted(utc, lo, "left")))
            for t0 in range(first, n - hor + 1, stride):
                if utc[t0 + hor - 1] >= hi:
                    break
                rows.append((t0 - ctx, t0, t0, t0 + hor))
        else:
            ctx, hor, stride = (int(v.value) for v in (self.context_length, self.horizon,
                                                        self.stride))
            origin = max(lo, int(utc[0]) + ctx)
            while origin + hor <= hi:
                c0 = int(np.searchsorted(utc, origin - ctx, "left"))
                t0 = int(np.searchsorted(utc, origin, "left"))
                t1 = int(np.searchsorted(utc, origin + hor, "left"))
                if t0 > c0 and t1 > t0:
                    rows.append((c0, t0, t0, t1))
                origin += stride
        return np.asarray(rows, np.int64).reshape(-1, 4)

    def setup(self, stage: str | None = None) -> None:
        if self.datasets:
            return
        utc, local, values = self._read()
        if self.irregular is not None and self.irregular < 1:
            keep = np.random.default_rng(self.seed).random(len(utc)) < self.irregular
            utc, local, values = utc[keep], local[keep], values[keep]
        if len(utc) < 2:
            raise ValueError(f"the series has {len(utc)} observation(s); forecasting needs "
                             "many more")
        t_val, t_test = self._split_times(utc)
        train = utc < t_val
        loc = np.nanmean(values[train], axis=0) if train.any() else np.zeros(self.num_targets)
        scale = np.nanstd(values[train], axis=0) if train.any() else np.ones(self.num_targets)
        for c, name in enumerate(self.target_columns):
            if not np.isfinite(loc[c]):
                raise ValueError(f"target column {name!r} has no observed value in the training "
                                 "period")
        scale = np.where(np.isfinite(scale) & (scale > 0), scale, 1.0)
        self.loc, self.scale = loc.astype(np.float32), scale.astype(np.float32)
        self.split_times = {"val": t_val, "test": t_test}
        bounds = {"train": (int(utc[0]), t_val), "val": (t_val, t_test),
                  "test": (t_test, int(utc[-1]) + 1)}
        scaled = (values - loc) / scale
        for split, (lo, hi) in bounds.items():
            windows = self._windows(utc, lo, hi)
            if not len(windows):
                raise ValueError(
                    f"the {split} split ({pd.Timestamp(lo)} to {pd.Timestamp(hi)} UTC, "
                    f"{int(((utc >= lo) & (utc < hi)).sum())} observations) fits no window of "
                    f"context_length={self.hparams.context_length!r} and "
                    f"horizon={self.hparams.horizon!r}: the series is too short for these "
                    "windows; shorten them or move the split")
            self.datasets[split] = WindowDataset(utc, local, scaled, windows, self.loc,
                                                 self.scale)

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
