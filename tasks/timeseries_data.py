"""``TimeSeriesDataModule``: a CSV/Parquet file or DataFrame -> sliding forecast windows.

Context and horizon lengths are counts of observations (``168``) or durations with a unit
(``"7D"``, ``"36h"``; a bare ``"24"`` is refused, pandas would read nanoseconds). Text
timestamps share one format: the first row's, or ``timestamp_format``; a row in another format
is an error naming it, never a guess. Splits are by time: a window belongs to the split that
holds its whole horizon, so no training target lies in the validation or test period, and
every context ends before its horizon starts. Scaling statistics come from the training
period only. Batches: see :mod:`posenc.tasks.windows`.
"""

from __future__ import annotations

import datetime as dt
import os
import warnings
from collections.abc import Sequence
from numbers import Real
from typing import Any

import numpy as np
import pandas as pd
from lightning.pytorch import LightningDataModule
from posenc.core import check_choice, check_int, check_positive_int
from posenc.temporal.columns import (
    AMBIGUOUS,
    NONEXISTENT,
    check_tz_name,
    parse_timestamps,
    row_label,
    utc_and_local,
)
from torch.utils.data import DataLoader

from .hparams import make_hparams_plain, plain
from .series_frame import check_unique_columns, numeric_column, parse_length, read_table
from .splits import check_split_fractions
from .windows import WindowDataset, collate_windows, local_time_fields

__all__ = ["MAX_ORIGINS_PER_ROW", "MAX_WINDOW_ROWS", "TimeSeriesDataModule"]

# A window with more rows than this could not be attended to anyway; a duration long for the
# data's sampling (years of seconds) is refused before its windows are built.
MAX_WINDOW_ROWS = 100_000
# More forecast origins than this many per observation repeat the same rows (the stride is
# below the sampling interval): refused before any window is built.
MAX_ORIGINS_PER_ROW = 10
# A count without a unit ("24") is 24 ns to pandas: durations must say their unit.
_RELATIVE = ("now", "today", "yesterday", "tomorrow")


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
        self.tz = check_tz_name(tz)
        self.ambiguous = check_choice(ambiguous, "ambiguous", AMBIGUOUS)
        self.nonexistent = check_choice(nonexistent, "nonexistent", NONEXISTENT)
        self.context_length = parse_length(context_length, "context_length")
        self.horizon = parse_length(horizon, "horizon")
        self.stride = self.horizon if stride is None else parse_length(stride, "stride")
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
        return read_table(data)

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
        check_unique_columns(list(frame.columns), self._describe_data())
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
            values[:, c] = numeric_column(frame[name], name, source)
        # Localize in wall-clock order: ambiguous="infer" reads the repeated hour's order.
        order = np.argsort(index.asi8, kind="stable")
        utc, local = utc_and_local(index[order], self.tz, self.ambiguous, self.nonexistent,
                               self.timestamp_column)
        again = np.argsort(utc, kind="stable")  # shifted nonexistent times may reorder
        order, utc, local = order[again], utc[again], local[again]
        values = values[order]
        dup = np.flatnonzero(np.diff(utc) == 0)
        if len(dup):
            first, second = sorted((int(order[dup[0]]), int(order[dup[0] + 1])))
            raise ValueError(f"timestamp column {self.timestamp_column!r}: "
                             f"{row_label(second, source)} repeats the timestamp of "
                             f"{row_label(first, source)} "
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
                             f"{row_label(int(rows[row]), self._source())} value "
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
