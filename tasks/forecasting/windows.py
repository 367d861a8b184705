"""Windows over time series (a forecast origin: the context before it, the horizon after) and
the batches a ``Forecaster`` reads: dicts of tensors (``B`` windows, ``Nc`` context and ``Nh``
horizon tokens, ``C`` target columns, padded per batch):

======================  ===============  ===============================================
key                     shape / dtype    meaning
======================  ===============  ===============================================
``context_time``        (B, Nc) int64    UTC nanoseconds since the epoch (real elapsed time)
``context_local``       (B, Nc) int64    local wall-clock time as naive nanoseconds
``context_value``       (B, Nc, C) f32   scaled values (0 where missing)
``context_observed``    (B, Nc, C) bool  value present
``context_raw``         (B, Nc, C) f32   the values in data units as read (0 where missing):
                                         what is scored, exact where the data are
``context_valid``       (B, Nc) bool     real token (False = padding)
``context_fields``      (B, Nc, F) i32   calendar fields of the local time, one column per
                                         name of ``posenc.temporal.calendar.FIELDS``
``target_*``            same, ``Nh``     the horizon: its timestamps are the query times
``context_past``        (B, Nc, P) f32   past covariates (``*_observed`` as for values)
``*_future``            (B, N, K) f32    future covariates, on both sides
``static_real``         (B, Sr) f32      standardized numeric static columns
``static_cat``          (B, Sc) int64    category codes (0: not seen in training)
``loc``, ``scale``      (B, C) f32       ``value = scaled * scale + loc``
``series``              (B,) int64       the window's series (row of ``fitted.series_keys``)
``series_start_local``  (B,) int64       local wall-clock ns of the series' first
                                         observation (the origin of its age)
``seasonal_error``      (B, C, 2) f32    mean ``|y[t] - y[t-m]|`` and ``(y[t] - y[t-m])^2``
                                         of the series' history before the origin, in data
                                         units as read (MASE/RMSSE denominators; NaN:
                                         undefined)
======================  ===============  ===============================================
"""

from __future__ import annotations

import dataclasses
from collections.abc import Sequence
from typing import Any

import numpy as np
import torch
from posenc.temporal.calendar import FIELDS
from torch import Tensor
from torch.utils.data import Dataset

from posenc import temporal

from .metrics import SeasonalError
from .panel import Panel
from .schema import Fitted

__all__ = ["WindowDataset", "WindowIndex", "batch_of_series", "batched", "count_plan",
           "count_windows", "duration_windows", "local_time_fields", "origins_from_first",
           "time_origins"]


def local_time_fields(local: np.ndarray | Tensor) -> Tensor:
    """``(...)`` int64 naive local wall-clock ns (``*_local`` of a batch) -> ``(..., F)`` int32
    calendar fields, column ``i`` the field ``posenc.temporal.calendar.FIELDS[i]``."""
    if isinstance(local, Tensor):
        local = local.numpy(force=True)
    if not isinstance(local, np.ndarray) or local.dtype != np.int64:
        raise TypeError(f"local must be int64 nanoseconds (a numpy array or tensor), got "
                        f"{getattr(local, 'dtype', type(local).__name__)}")
    fields = temporal.calendar_fields(local)
    return torch.from_numpy(np.stack([fields[name] for name in FIELDS], axis=-1))


@dataclasses.dataclass
class WindowIndex:
    """The windows of one split. Count mode: series ``s``'s windows have horizons starting at
    rows ``first[s] + k * stride`` (nothing per window is stored); time mode: ``(W, 3)`` rows.

    Attributes:
        offsets: ``(S + 1,)`` int64 cumulative window counts per series.
        first: ``(S,)`` int64 first horizon row per series (count mode).
        context, horizon, stride: in rows (count mode).
        rows: ``(W, 3)`` int64 ``[context_start, horizon_start, horizon_end)`` (time mode).
    """

    offsets: np.ndarray
    first: np.ndarray | None = None
    context: int = 0
    horizon: int = 0
    stride: int = 1
    rows: np.ndarray | None = None

    def __len__(self) -> int:
        return int(self.offsets[-1])

    def locate(self, index: np.ndarray) -> tuple[np.ndarray, ...]:
        """``(B,)`` window indexes -> ``(series, c0, t0, t1)``, each ``(B,)`` int64."""
        index = np.asarray(index, np.int64)
        if index.size and (index.min() < 0 or index.max() >= len(self)):
            bad = index[(index < 0) | (index >= len(self))][0]
            raise IndexError(f"window {int(bad)} out of range for {len(self)} windows")
        series = np.searchsorted(self.offsets, index, "right") - 1
        if self.rows is None:
            t0 = self.first[series] + (index - self.offsets[series]) * self.stride
            return series, t0 - self.context, t0, t0 + self.horizon
        c0, t0, t1 = self.rows[index].T
        return series, c0, t0, t1


def count_windows(starts: np.ndarray, utc: np.ndarray, lo: int, hi: int, context: int,
                  horizon: int, stride: int) -> WindowIndex:
    """Count mode: windows of ``context`` + ``horizon`` rows whose whole horizon lies in
    ``[lo, hi)`` (UTC ns), origins every ``stride`` rows, given the ``(S + 1,)`` row offsets of
    the series (rows sorted by series, then time) and their ``(N,)`` int64 ``utc``."""
    series = np.repeat(np.arange(len(starts) - 1), np.diff(starts))
    num = len(starts) - 1
    before_lo = np.bincount(series, utc < lo, num).astype(np.int64)
    before_hi = np.bincount(series, utc < hi, num).astype(np.int64)
    first, counts = count_plan(starts, before_lo, before_hi, context, horizon, stride)
    return WindowIndex(offsets=np.concatenate(([0], np.cumsum(counts))).astype(np.int64),
                       first=first.astype(np.int64), context=context, horizon=horizon,
                       stride=stride)


def count_plan(starts: np.ndarray, before_lo: np.ndarray, before_hi: np.ndarray,
               context: int, horizon: int, stride: int) -> tuple[np.ndarray, np.ndarray]:
    """[`count_windows`][posenc.tasks.forecasting.windows.count_windows] from per-series numbers
    only: ``(first horizon row, number of windows)``, each ``(S,)``, from the ``(S + 1,)`` row
    offsets and each series' ``(S,)`` counts of rows before ``lo`` and before ``hi``."""
    first = np.maximum(starts[:-1] + context, starts[:-1] + before_lo)
    last = np.minimum(starts[1:] - horizon, starts[:-1] + before_hi - horizon)
    return first, np.where(last >= first, (last - first) // stride + 1, 0)


def time_origins(starts: np.ndarray, utc: np.ndarray, lo: int, hi: int, context: int,
                 horizon: int, stride: int) -> tuple[np.ndarray, np.ndarray]:
    """Time mode: ``(first origin ns, number of origins)`` per series (``(S,)`` each) of the
    windows whose horizon ``[origin, origin + horizon)`` lies in ``[lo, hi)``; a series
    without rows (``irregular`` may empty one) has none."""
    held = np.diff(starts) > 0
    # An empty series' start is its successor's (or past the end): read no time for it.
    first_time = (utc[np.where(held, starts[:-1], 0)] if len(utc)
                  else np.zeros(len(held), np.int64))
    return origins_from_first(first_time, held, lo, hi, context, horizon, stride)


def origins_from_first(first_time: np.ndarray, held: np.ndarray, lo: int, hi: int,
                       context: int, horizon: int, stride: int
                       ) -> tuple[np.ndarray, np.ndarray]:
    """[`time_origins`][posenc.tasks.forecasting.windows.time_origins] from each series' ``(S,)``
    first time (UTC ns) and whether it has
    rows: the origins depend on nothing else (a gap drops a window afterwards)."""
    first = np.maximum(lo, first_time + context)
    return first, np.where(held, np.maximum(0, (hi - horizon - first) // stride + 1), 0)


def duration_windows(starts: np.ndarray, utc: np.ndarray, lo: int, hi: int, context: int,
                     horizon: int, stride: int) -> WindowIndex:
    """Time mode: windows ``[origin - context, origin)`` / ``[origin, origin + horizon)`` (ns)
    with origins every ``stride`` ns from the first time a full context exists, whose horizon
    lies in ``[lo, hi)``; a window without a row on either side (a gap) is left out."""
    first, counts = time_origins(starts, utc, lo, hi, context, horizon, stride)
    rows, offsets = [], [0]
    for s in range(len(starts) - 1):
        a, b = int(starts[s]), int(starts[s + 1])
        origins = first[s] + stride * np.arange(counts[s], dtype=np.int64)
        times = utc[a:b]
        c0 = np.searchsorted(times, origins - context, "left")
        t0 = np.searchsorted(times, origins, "left")
        t1 = np.searchsorted(times, origins + horizon, "left")
        keep = (t0 > c0) & (t1 > t0)
        rows.append(np.stack((c0, t0, t1), 1)[keep] + a)
        offsets.append(offsets[-1] + int(keep.sum()))
    return WindowIndex(offsets=np.asarray(offsets, np.int64),
                       rows=np.concatenate(rows).astype(np.int64).reshape(-1, 3))


def _gather(start: np.ndarray, end: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Row ranges ``[start, end)`` -> ``(B, L)`` rows (the last real row repeated as padding)
    and the ``(B, L)`` mask of real ones, ``L`` the longest range."""
    length = int((end - start).max()) if len(start) else 0
    rows = start[:, None] + np.arange(length)
    valid = rows < end[:, None]
    return np.minimum(rows, end[:, None] - 1), valid


class WindowDataset(Dataset):
    """The windows of one split of a scaled panel; item ``i`` is a dict of unbatched tensors,
    a list of indexes (`__getitems__`) a whole padded batch (keys: module docstring).

    Args:
        panel: the scaled [`Panel`][posenc.tasks.forecasting.panel.Panel] (with its
            ``targets`` in data units).
        fitted: its [`Fitted`][posenc.tasks.Fitted] state: the channel layout
            of ``panel.values``, the targets' scaling and each series' start.
        windows: this split's [`WindowIndex`][posenc.tasks.forecasting.windows.WindowIndex].
        seasonality: the lag ``m`` (rows) of ``seasonal_error``
            ([`SeasonalError`][posenc.tasks.forecasting.metrics.SeasonalError]).
        seasonal_error: the panel's ``SeasonalError`` already built (its prefix sums are
            ``6 * C`` float64 per row: the splits of one panel share one); None: built here
            from ``panel.targets`` with lag ``seasonality``.
    """

    def __init__(self, panel: Any, fitted: Any, windows: WindowIndex, seasonality: int = 1,
                 *, seasonal_error: SeasonalError | None = None) -> None:
        self.fitted = fitted
        self.groups = fitted.columns.groups()
        self.utc, self.local = panel.utc, panel.local
        self.values = np.ascontiguousarray(panel.values, np.float32)
        if panel.targets is None:
            raise ValueError("panel.targets is None: a WindowDataset needs the targets in data "
                             "units (a panel scaled by scale_panel has them)")
        self.targets = np.ascontiguousarray(panel.targets, np.float32)
        self.loc, self.scale = fitted.target_scaling()
        self.static_real = np.asarray(panel.static_real, np.float32)
        self.static_cat = np.asarray(panel.static_cat, np.int64)
        self.series_start = np.asarray(fitted.series_start, np.int64)
        if self.series_start.shape != (panel.num_series,):
            raise ValueError(f"fitted.series_start must hold one start per series "
                             f"({panel.num_series}), got shape {self.series_start.shape}")
        self.windows = windows
        self.target_slice = next(slice(first, end) for key, _, _, first, end in self.groups
                                 if key == "value")
        if seasonal_error is None:
            seasonal_error = SeasonalError(self.targets, panel.starts, seasonality)
        elif not isinstance(seasonal_error, SeasonalError):
            raise TypeError(f"seasonal_error must be a SeasonalError or None, got "
                            f"{type(seasonal_error).__name__}")
        elif not np.array_equal(seasonal_error.starts, panel.starts):
            raise ValueError("seasonal_error was built for another panel (its series offsets "
                             "differ from panel.starts)")
        self.seasonal_error = seasonal_error

    def __len__(self) -> int:
        return len(self.windows)

    def __getitems__(self, indexes: Sequence[int]) -> dict[str, Tensor]:
        series, c0, t0, t1 = self.windows.locate(np.asarray(indexes, np.int64))
        batch = {"series": torch.from_numpy(series),
                 "loc": torch.from_numpy(self.loc[series]),
                 "scale": torch.from_numpy(self.scale[series]),
                 "static_real": torch.from_numpy(self.static_real[series]),
                 "static_cat": torch.from_numpy(self.static_cat[series]),
                 "series_start_local": torch.from_numpy(self.series_start[series])}
        batch["seasonal_error"] = torch.from_numpy(
            self.seasonal_error(series, t0).astype(np.float32))
        for side, (a, b) in (("context", (c0, t0)), ("target", (t0, t1))):
            rows, valid = _gather(a, b)
            local = self.local[rows]
            values = self.values[rows]
            present = ~np.isnan(values) & valid[..., None]
            values = np.where(present, values, 0.0).astype(np.float32)
            targets = present[..., self.target_slice]
            batch[f"{side}_raw"] = torch.from_numpy(
                np.where(targets, self.targets[rows], 0.0).astype(np.float32))
            batch[f"{side}_valid"] = torch.from_numpy(valid)
            batch[f"{side}_time"] = torch.from_numpy(self.utc[rows])
            batch[f"{side}_local"] = torch.from_numpy(local)
            batch[f"{side}_fields"] = local_time_fields(local)
            for key, observed, sides, first, end in self.groups:
                if side in sides:
                    batch[f"{side}_{key}"] = torch.from_numpy(values[..., first:end])
                    if observed is not None:
                        batch[f"{side}_{observed}"] = torch.from_numpy(present[..., first:end])
        return batch

    def __getitem__(self, index: int) -> dict[str, Tensor]:
        batch = self.__getitems__([index])
        return {key: value[0] for key, value in batch.items() if not key.endswith("_valid")}


def batched(batch: dict[str, Tensor]) -> dict[str, Tensor]:
    """``collate_fn`` of a [`WindowDataset`][posenc.tasks.forecasting.windows.WindowDataset] loader:
    ``__getitems__`` made the batch."""
    return batch


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

