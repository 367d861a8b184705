"""Windows over time series and the batches a ``Forecaster`` reads.

A window is a forecast origin: the observations before it (the context) and those in the
horizon after it. Batches are dicts of tensors (``B`` windows, ``Nc`` context and ``Nh``
horizon tokens, ``C`` target columns, padded per batch):

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

The calendar fields depend on the timestamps only, so they are computed once per series
(:func:`local_time_fields`) and reach the model as tensors: its forward never leaves the
device for them.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np
import pandas as pd
import torch
from posenc import temporal
from posenc.temporal.columns import check_tz_name, parse_timestamps, utc_and_local
from torch import Tensor
from torch.utils.data import Dataset

__all__ = ["WindowDataset", "collate_windows", "local_time_fields", "make_batch"]


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
