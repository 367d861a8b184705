"""Encodings of elapsed time, for irregularly sampled series, and the index baseline.

[`ContinuousSinusoidal`][posenc.temporal.ContinuousSinusoidal] (core's sinusoidal encoding with
periods in time units), [`Time2Vec`][posenc.temporal.Time2Vec] (Kazemi et al. 2019),
[`TimeDelta`][posenc.temporal.TimeDelta] (GRU-D's time gaps and mask) and
[`IndexSinusoidal`][posenc.temporal.IndexSinusoidal], the equally-spaced baseline that encodes each
token's index.
"""

from __future__ import annotations

import math

import numpy as np
import torch
from posenc.core import PositionEncoding, SinusoidalEncoding
from posenc.core._checks import (
    check_bool,
    check_choice,
    check_even,
    check_output_dtype,
    check_positions,
    check_positive_float,
    check_positive_int,
)
from posenc.core.additive import sinusoidal_encoding
from posenc.core.encoding import LAYOUTS, Float64Buffers, wide_dtype
from torch import Tensor, nn

__all__ = ["ContinuousSinusoidal", "IndexSinusoidal", "Time2Vec", "TimeDelta", "geometric_periods",
           "time_delta_features"]


def geometric_periods(count: int, min_period: float, max_period: float) -> Tensor:
    """``(count,)`` float64 periods, log-spaced from ``min_period`` to ``max_period``."""
    check_positive_int(count, "count")
    low = check_positive_float(min_period, "min_period")
    high = check_positive_float(max_period, "max_period")
    if low > high:
        raise ValueError(f"periods must satisfy 0 < min_period <= max_period (finite), got "
                         f"min_period={min_period!r}, max_period={max_period!r}")
    # Allocated by torch before numpy runs: a bound on allocations (a checkpoint's,
    # posenc.tasks) sees a forged count before numpy's own allocation.
    return torch.empty(count, dtype=torch.float64).copy_(
        torch.from_numpy(np.geomspace(low, high, count)))


def _check_mask(mask: object, name: str, like: Tensor, like_name: str) -> None:
    if not isinstance(mask, Tensor) or mask.dtype != torch.bool or mask.shape != like.shape:
        got = (f"{mask.dtype} of shape {tuple(mask.shape)}" if isinstance(mask, Tensor)
               else type(mask).__name__)
        raise TypeError(f"{name} must be a bool tensor of the shape of {like_name} "
                        f"{tuple(like.shape)}, got {got}")


class ContinuousSinusoidal(Float64Buffers):
    """Sin/cos of elapsed time at ``dim // 2`` (``dim`` even) geometric periods from
    ``min_period`` to ``max_period`` (in the unit of the times), laid out as core's
    [`SinusoidalEncoding`][posenc.core.SinusoidalEncoding]; ``min_period = 2*pi``, ``max_period =
    2*pi * 10000 ** ((dim - 2) / dim)`` reproduce it exactly (with time in steps).
    """

    kind = "additive"
    reads = "elapsed"

    def __init__(self, dim: int, min_period: float, max_period: float,
                 layout: str = "interleaved") -> None:
        super().__init__()
        self.dim = check_even(dim, "dim")
        self.layout = check_choice(layout, "layout", LAYOUTS)
        geometric_periods(dim // 2, min_period, max_period)  # validates the bounds
        self.min_period, self.max_period = float(min_period), float(max_period)
        self.reset_float64_buffers()

    def float64_buffers(self) -> dict[str, Tensor]:
        periods = geometric_periods(self.dim // 2, self.min_period, self.max_period)
        return {"inv_freq64": 2 * math.pi / periods}

    def forward(self, times: Tensor, *, dtype: torch.dtype = torch.float32) -> Tensor:
        """``(N,)`` or ``(B, N)`` elapsed times (float64 keeps full precision far from the
        origin) -> ``(..., dim)`` of ``dtype``."""
        times = check_positions(times, "times")
        check_output_dtype(dtype)
        return sinusoidal_encoding(times, self.inv_freq64, self.layout).to(dtype)

    def extra_repr(self) -> str:
        return (f"dim={self.dim}, min_period={self.min_period}, max_period={self.max_period}, "
                f"layout={self.layout!r}")


class IndexSinusoidal(PositionEncoding):
    """Core's sinusoidal encoding (``dim`` even, ``base``) of each token's index, as if samples
    were equally spaced: observations ``0, -1, -2, ...`` back from the last one, future
    unobserved tokens ``1, 2, ...``; unobserved tokens at or before the origin (padding) get
    the index of the observations after them.
    """

    kind = "additive"
    reads = "deltas"

    def __init__(self, dim: int, base: float = 10000.0) -> None:
        super().__init__()
        self.encoding = SinusoidalEncoding(dim, base=base)
        self.dim = self.encoding.dim

    def forward(self, elapsed: Tensor, observed: Tensor, *,
                dtype: torch.dtype = torch.float32) -> Tensor:
        """``(N,)`` or ``(B, N)`` time from the forecast origin (> 0 in the future) and bool
        ``observed`` of that shape -> ``(*elapsed.shape, dim)`` of ``dtype``."""
        elapsed = check_positions(elapsed, "elapsed")
        _check_mask(observed, "observed", elapsed, "elapsed")
        # Counted, not sorted: ties and any token order give the same indices.
        later = elapsed[..., None, :] > elapsed[..., :, None]  # [..., i, j]: j after i
        earlier = elapsed[..., None, :] < elapsed[..., :, None]
        future = (elapsed > 0) & ~observed
        back = -(later & observed[..., None, :]).sum(-1)
        ahead = 1 + (earlier & future[..., None, :]).sum(-1)
        index = torch.where(future, ahead, back)  # int64 counts: nothing for a check to read
        return self.encoding(index, dtype=dtype)


class Time2Vec(PositionEncoding):
    """``t2v(t)[0] = w0 * t + b0`` and ``t2v(t)[i] = sin(wi * t + bi)`` for ``i = 1..dim-1``.

    Frequencies start at N(0, 1): express times in a unit where the periods of interest are a
    few units to a few hundred, from a nearby origin (``time_positions(ts, ts[0], unit="D")``).
    """

    kind = "additive"
    reads = "elapsed"

    def __init__(self, dim: int) -> None:
        super().__init__()
        self.dim = check_positive_int(dim, "dim")
        self.weight = nn.Parameter(torch.empty(dim))
        self.bias = nn.Parameter(torch.empty(dim))
        self.reset_parameters()

    def reset_parameters(self) -> None:
        nn.init.normal_(self.weight)
        nn.init.normal_(self.bias)

    def forward(self, times: Tensor) -> Tensor:
        """``(N,)`` or ``(B, N)`` times -> ``(..., dim)`` in the parameters' dtype, computed in at
        least float32."""
        check_positions(times, "times")
        wide = torch.promote_types(torch.promote_types(times.dtype, self.weight.dtype),
                                   torch.float32)
        z = times.to(wide)[..., None] * self.weight.to(wide) + self.bias.to(wide)
        return torch.cat((z[..., :1], torch.sin(z[..., 1:])), dim=-1).to(self.weight.dtype)

    def extra_repr(self) -> str:
        return f"dim={self.dim}"


FEATURES = ("since_previous", "since_start", "observed")


def time_delta_features(times: Tensor, mask: Tensor | None = None, *, log: bool = False,
                        scale: float = 1.0, dtype: torch.dtype = torch.float32) -> Tensor:
    """``(..., N, 3)`` ``[since_previous, since_start, observed]``: time since the previous
    observation (0 where there is none, GRU-D's delta), since ``times[..., 0]``, and the mask.

    Args:
        times: ``(N,)`` or ``(B, N)`` non-decreasing integer, float32 or float64 times;
            differences are taken in their dtype (exact for integer ns).
        mask: same shape, bool, True where a value was observed; None: all observed.
        log: ``log1p(delta / scale)`` for both deltas, taming heavy-tailed gaps.
    """
    t = check_positions(times, "times")  # refuses half precision, widens integers
    if mask is not None:
        _check_mask(mask, "mask", t, "times")
    check_bool(log, "log")
    check_positive_float(scale, "scale")
    check_output_dtype(dtype)
    if not torch.compiler.is_compiling() and t.shape[-1] >= 2:
        backwards = t[..., 1:] < t[..., :-1]
        if bool(backwards.any()):
            raise ValueError(f"times must be non-decreasing along the last dim (time since the "
                             f"previous observation needs the order), but at index "
                             f"{backwards.nonzero()[0].tolist()} the next time is earlier; "
                             f"sort each series first")
        # Sorted, every difference is at most last - first, which wraps past int64.
        if not t.is_floating_point() and bool((t[..., -1] - t[..., 0] < 0).any()):
            raise ValueError("times span more than int64 holds (2**63 - 1 ticks: 292 years in "
                             "nanoseconds), so their differences would wrap; use a coarser "
                             "unit or an origin nearer the series (time_positions)")
    wide = t.dtype if t.is_floating_point() else wide_dtype(t.device)
    positions = torch.arange(t.shape[-1], device=t.device).expand(t.shape)
    if mask is None:
        observed = torch.ones_like(t, dtype=wide)
        previous = positions - 1
    else:
        observed = mask.to(wide)
        # The last observed position at or before n, a cummax of where(mask, position, -1) in
        # ONNX's operators: the k-th observation's position sits at slot k of a table, read
        # back at each position's count of observations so far.
        rank = mask.long().cumsum(-1)
        table = torch.full((*t.shape[:-1], t.shape[-1] + 1), -1, device=t.device)
        table = table.scatter_reduce(-1, torch.where(mask, rank, 0),
                                     torch.where(mask, positions, -1), "amax")
        latest = table.gather(-1, rank)
        previous = torch.cat((torch.full_like(latest[..., :1], -1), latest[..., :-1]), dim=-1)
    since_previous = torch.where(previous >= 0, t - t.gather(-1, previous.clamp(min=0)), 0)
    deltas = torch.stack((since_previous, t - t[..., :1]), dim=-1).to(wide)
    if log:
        deltas = torch.log1p(deltas / scale)
    return torch.cat((deltas, observed[..., None]), dim=-1).to(dtype)


class TimeDelta(PositionEncoding):
    """Module form of [`time_delta_features`][posenc.temporal.continuous.time_delta_features] (no
    parameters)."""

    kind = "additive"
    reads = "deltas"

    dim = len(FEATURES)
    feature_names = list(FEATURES)

    def __init__(self, log: bool = False, scale: float = 1.0) -> None:
        super().__init__()
        self.log, self.scale = check_bool(log, "log"), check_positive_float(scale, "scale")

    def forward(self, times: Tensor, mask: Tensor | None = None, *,
                dtype: torch.dtype = torch.float32) -> Tensor:
        """``(..., N)`` times and optional mask -> ``(..., N, 3)``."""
        return time_delta_features(times, mask, log=self.log, scale=self.scale, dtype=dtype)

    def extra_repr(self) -> str:
        return f"log={self.log}, scale={self.scale}"
