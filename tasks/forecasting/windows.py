"""Windows over time series and the batches a ``Forecaster`` reads.

A window is a forecast origin: the observations before it (the context) and those in the
horizon after it. Batches are dicts of tensors (``B`` windows, ``Nc`` context and ``Nh``
horizon tokens, ``C`` target columns, padded per batch):

======================  ===============  ===============================================
key                     shape / dtype    meaning
======================  ===============  ===============================================
``context_time``        (B, Nc) int64    UTC nanoseconds since the epoch (real elapsed time)
``context_local``       (B, Nc) int64    local wall-clock time as naive nanoseconds
``context_value``       (B, Nc, C) f32   scaled values (0 where missing)
``context_observed``    (B, Nc, C) bool  value present
``context_valid``       (B, Nc) bool     real token (False = padding)
``context_fields``      (B, Nc, F) i32   calendar fields of the local time, one column per
                                         name of ``posenc.temporal.calendar.FIELDS`` (in its order)
``target_*``            same, ``Nh``     the horizon: its timestamps are the query times
``loc``, ``scale``      (B, C) f32       ``value = scaled * scale + loc``
``series``              (B,) int64       the window's series (row of ``schema.series_keys``)
``series_start_local``  (B,) int64       local wall-clock ns of the series' first
                                         observation (the origin of its age)
======================  ===============  ===============================================

The calendar fields depend on the timestamps only, so they are computed once per series
(:func:`local_time_fields`) and reach the model as tensors: its forward never leaves the
device for them.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Sequence
from typing import Any

import numpy as np
import pandas as pd
import torch
from posenc import temporal
from posenc.temporal.calendar import FIELDS
from posenc.temporal.timestamps import (
    check_tz_name,
    datetime_index,
    parse_timestamps,
    utc_and_local,
)
from torch import Tensor
from torch.utils.data import Dataset

from .panel import Panel, SeriesSchema

__all__ = ["WindowDataset", "WindowIndex", "batched", "collate_windows", "count_windows",
           "duration_windows", "local_time_fields", "make_batch", "time_origins"]


def local_time_fields(local: np.ndarray | Tensor) -> Tensor:
    """Calendar fields of local wall-clock times, as the batches carry them.

    Args:
        local: ``(...)`` int64 naive local wall-clock nanoseconds (``*_local`` of a batch).

    Returns:
        ``(..., F)`` int32, column ``i`` the field ``posenc.temporal.calendar.FIELDS[i]`` (hour,
        day of week, ..., with the periods the cyclic features need).
    """
    if isinstance(local, Tensor):
        local = local.numpy(force=True)
    if not isinstance(local, np.ndarray) or local.dtype != np.int64:
        raise TypeError(f"local must be int64 nanoseconds (a numpy array or tensor), got "
                        f"{getattr(local, 'dtype', type(local).__name__)}")
    fields = temporal.calendar_fields(local)
    return torch.from_numpy(np.stack([fields[name] for name in FIELDS], axis=-1))


@dataclasses.dataclass
class WindowIndex:
    """The windows of one split, indexed lazily: memory grows with the series, not the windows.

    Count mode (lengths in observations): series ``s`` has ``counts[s]`` windows whose
    horizons start at rows ``first[s] + k * stride``; nothing per window is stored. Time mode
    (durations): windows are stored as ``(W, 3)`` row triples ``[c0, t0, t1)`` (a gap may
    leave a window without context or horizon rows, so they are filtered when built).

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
    ``[lo, hi)`` (UTC ns), origins every ``stride`` rows, within each series.

    Args:
        starts: ``(S + 1,)`` row offsets of the series (rows sorted by series, then time).
        utc: ``(N,)`` int64 UTC ns.
    """
    series = np.repeat(np.arange(len(starts) - 1), np.diff(starts))
    num = len(starts) - 1
    # Rows of each series before lo / before hi (utc is sorted within a series).
    before_lo = np.bincount(series, utc < lo, num).astype(np.int64)
    before_hi = np.bincount(series, utc < hi, num).astype(np.int64)
    first = np.maximum(starts[:-1] + context, starts[:-1] + before_lo)
    last = np.minimum(starts[1:] - horizon, starts[:-1] + before_hi - horizon)
    counts = np.where(last >= first, (last - first) // stride + 1, 0)
    return WindowIndex(offsets=np.concatenate(([0], np.cumsum(counts))).astype(np.int64),
                       first=first.astype(np.int64), context=context, horizon=horizon,
                       stride=stride)


def time_origins(starts: np.ndarray, utc: np.ndarray, lo: int, hi: int, context: int,
                 horizon: int, stride: int) -> tuple[np.ndarray, np.ndarray]:
    """Time mode: ``(first origin ns, number of origins)`` per series (``(S,)`` each) of the
    windows whose horizon ``[origin, origin + horizon)`` lies in ``[lo, hi)``; a series
    without rows (``irregular`` may empty one) has none."""
    held = np.diff(starts) > 0
    # An empty series' start is its successor's (or past the end): read no time for it.
    first_time = utc[np.where(held, starts[:-1], 0)] if len(utc) else np.zeros(len(held),
                                                                              np.int64)
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
    """The windows of one split of a :class:`~posenc.tasks.forecasting.panel.Panel` (scaled).

    Item ``i`` is a dict of unbatched tensors; a list of indexes (what a ``DataLoader`` asks
    for, :meth:`__getitems__`) gives a whole padded batch at once, gathered with array
    indexing instead of one Python call per window. Keys: see the module docstring.

    Args:
        panel: the scaled panel (:func:`~posenc.tasks.forecasting.panel.scale_panel`).
        windows: this split's :class:`WindowIndex`.
        series_start: ``(S,)`` int64 local wall-clock ns of each series' first observation;
            None: its first row in ``panel`` (the whole table in training; a forecast request
            passes the training data's, see
            :func:`~posenc.tasks.forecasting.output.request_dataset`).

    The number ``C`` of targets, ``P`` past and ``K`` future covariates among
    ``panel.values``' columns come from ``panel.schema``.
    """

    def __init__(self, panel: Any, windows: WindowIndex,
                 series_start: np.ndarray | None = None) -> None:
        schema = panel.schema
        self.schema = schema
        self.num_targets = len(schema.target_columns)
        self.num_past = len(schema.past_covariates)
        self.utc, self.local = panel.utc, panel.local
        self.values = np.ascontiguousarray(panel.values, np.float32)
        self.loc = np.asarray(schema.loc, np.float32)[:, :self.num_targets]
        self.scale = np.asarray(schema.scale, np.float32)[:, :self.num_targets]
        self.static_real = np.asarray(panel.static_real, np.float32)
        self.static_cat = np.asarray(panel.static_cat, np.int64)
        self.series_start = (panel.series_starts() if series_start is None
                             else np.asarray(series_start, np.int64))
        if self.series_start.shape != (panel.num_series,):
            raise ValueError(f"series_start must hold one start per series "
                             f"({panel.num_series}), got shape {self.series_start.shape}")
        self.windows = windows

    def __len__(self) -> int:
        return len(self.windows)

    def __getitems__(self, indexes: Sequence[int]) -> dict[str, Tensor]:
        series, c0, t0, t1 = self.windows.locate(np.asarray(indexes, np.int64))
        c, p = self.num_targets, self.num_past
        batch = {"series": torch.from_numpy(series),
                 "loc": torch.from_numpy(self.loc[series]),
                 "scale": torch.from_numpy(self.scale[series]),
                 "static_real": torch.from_numpy(self.static_real[series]),
                 "static_cat": torch.from_numpy(self.static_cat[series]),
                 "series_start_local": torch.from_numpy(self.series_start[series])}
        for side, (a, b) in (("context", (c0, t0)), ("target", (t0, t1))):
            rows, valid = _gather(a, b)
            local = self.local[rows]
            values = self.values[rows]
            present = ~np.isnan(values) & valid[..., None]
            values = np.where(present, values, 0.0).astype(np.float32)
            batch[f"{side}_valid"] = torch.from_numpy(valid)
            batch[f"{side}_time"] = torch.from_numpy(self.utc[rows])
            batch[f"{side}_local"] = torch.from_numpy(local)
            batch[f"{side}_fields"] = local_time_fields(local)
            batch[f"{side}_value"] = torch.from_numpy(values[..., :c])
            batch[f"{side}_observed"] = torch.from_numpy(present[..., :c])
            batch[f"{side}_future"] = torch.from_numpy(values[..., c + p:])
            if side == "context":
                batch["context_past"] = torch.from_numpy(values[..., c:c + p])
                batch["context_past_observed"] = torch.from_numpy(present[..., c:c + p])
        return batch

    def __getitem__(self, index: int) -> dict[str, Tensor]:
        batch = self.__getitems__([index])
        return {key: value[0] for key, value in batch.items() if not key.endswith("_valid")}


def batched(batch: dict[str, Tensor]) -> dict[str, Tensor]:
    """``collate_fn`` for a :class:`WindowDataset` loader: its ``__getitems__`` already made
    the batch."""
    return batch


def _batch_of_series(utc: np.ndarray, local: np.ndarray, values: np.ndarray,
                     context_rows: np.ndarray, target_rows: np.ndarray, num_past: int,
                     loc: np.ndarray, scale: np.ndarray, static_real: np.ndarray,
                     static_cat: np.ndarray, series_start: np.ndarray) -> dict[str, Tensor]:
    """Rows already scaled, series after series, each one window: ``context_rows[b]``
    context rows then ``target_rows[b]`` target rows -> their batch, built (padded, masked,
    with calendar fields) by :class:`WindowDataset` as every batch is.

    ``values`` is ``(N, C + P + K)`` float (NaN = missing), ``loc``/``scale`` ``(B, C)``,
    ``static_*`` ``(B, ...)``, ``series_start`` ``(B,)`` int64 local ns."""
    ends = np.cumsum(context_rows + target_rows)
    starts = np.concatenate(([0], ends)).astype(np.int64)
    num_targets = loc.shape[1]
    # Only the counts of channels and the scaling of this schema are read.
    schema = SeriesSchema(timestamp_column="time",
                          target_columns=[f"target_{c}" for c in range(num_targets)],
                          past_covariates=[f"past_{c}" for c in range(num_past)],
                          loc=loc.tolist(), scale=scale.tolist())
    panel = Panel(utc=utc, local=local, values=values, starts=starts,
                  rows=np.arange(len(utc)), static_real=static_real, static_cat=static_cat,
                  schema=schema)
    rows = np.stack((starts[:-1], starts[:-1] + context_rows, starts[1:]), 1)
    windows = WindowIndex(offsets=np.arange(len(rows) + 1, dtype=np.int64), rows=rows)
    return WindowDataset(panel, windows, series_start).__getitems__(np.arange(len(rows)))


def collate_windows(items: Sequence[dict[str, Tensor]]) -> dict[str, Tensor]:
    """Stack window dicts (:class:`WindowDataset` items), right-padding each side to the
    longest in the batch.

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
        if set(item) != set(items[0]):
            raise ValueError(f"items[{i}] has keys {sorted(item)} but items[0] has "
                             f"{sorted(items[0])}")

    def stack(key: str) -> np.ndarray:
        return torch.stack([item[key] for item in items]).numpy(force=True)

    def side(item: dict[str, Tensor], prefix: str) -> list[Tensor]:
        """The item's rows of one side: values (NaN where unobserved), past, future."""
        value = item[f"{prefix}_value"].masked_fill(~item[f"{prefix}_observed"], np.nan)
        past = item["context_past"].masked_fill(~item["context_past_observed"], np.nan) \
            if prefix == "context" else value.new_full((len(value), num_past), np.nan)
        return [item[f"{prefix}_time"], item[f"{prefix}_local"],
                torch.cat((value, past, item[f"{prefix}_future"]), -1)]

    # The items' rows again, one series each, batched by the one builder.
    num_past = int(items[0]["context_past"].shape[-1])
    rows = [side(item, prefix) for item in items for prefix in ("context", "target")]
    utc, local, values = (torch.cat(parts).numpy(force=True) for parts in zip(*rows, strict=True))
    count = [np.array([len(item[f"{p}_time"]) for item in items]) for p in ("context", "target")]
    batch = _batch_of_series(utc, local, values, *count, num_past, stack("loc"), stack("scale"),
                             stack("static_real"), stack("static_cat"),
                             stack("series_start_local"))
    batch["series"] = torch.from_numpy(stack("series"))
    return batch


def _timestamps_argument(value: Any, name: str, timestamp_format: str | None
                         ) -> pd.DatetimeIndex:
    """``make_batch``'s timestamps through the data module's checks (int64 = ns)."""
    if isinstance(value, (str, bytes)) or np.ndim(value) != 1:
        raise TypeError(f"{name} must be a 1D sequence of timestamps, got "
                        f"{type(value).__name__} ({value!r})"[:300])
    if isinstance(value, Tensor) or (isinstance(value, np.ndarray) and value.dtype.kind in "iu"):
        index, _ = datetime_index(value, name)
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
        loc: ``()`` or ``(C,)``, the data module's scaling offset (``datamodule.loc``).
        scale: ``()`` or ``(C,)``, its scale (``datamodule.scale``), finite and > 0.
        timestamp_format: format of text timestamps (see :func:`parse_timestamps`).

    The series' age (:class:`~posenc.temporal.AgeFeature`) counts from the first context
    time; for an older series set ``batch["series_start_local"]`` to the int64 local
    wall-clock ns of its first observation.
    """
    check_tz_name(tz)
    ctx_index = _timestamps_argument(context_timestamps, "context_timestamps", timestamp_format)
    qry_index = _timestamps_argument(query_timestamps, "query_timestamps", timestamp_format)
    if (ctx_index.tz is None) != (qry_index.tz is None):
        kinds = ["tz-naive", "tz-aware"]
        raise ValueError(f"context_timestamps are {kinds[ctx_index.tz is not None]} but "
                         f"query_timestamps are {kinds[qry_index.tz is not None]}; use one form")
    if len(ctx_index) == 0 or len(qry_index) == 0:
        raise ValueError("context_timestamps and query_timestamps must be non-empty")
    ctx = utc_and_local(ctx_index, tz, "raise", "raise", "context_timestamps")
    qry = utc_and_local(qry_index, tz, "raise", "raise", "query_timestamps")
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
    # Queries keep their order and may repeat: the model predicts each on its own. One
    # series: no covariates, no static attributes; its age counts from the first context time.
    nc, nh = len(ctx[0]), len(qry[0])
    values = np.concatenate((scaled, np.full((nh, channels), np.nan, np.float32)))
    return _batch_of_series(np.concatenate((ctx[0], qry[0])), np.concatenate((ctx[1], qry[1])),
                            values, np.array([nc]), np.array([nh]), 0, loc[None], scale[None],
                            np.zeros((1, 0), np.float32), np.zeros((1, 0), np.int64),
                            ctx[1][:1])
