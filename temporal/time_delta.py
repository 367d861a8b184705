"""Time-gap features for irregularly sampled series (GRU-D style deltas + mask)."""

from __future__ import annotations

import torch
from posenc.core import PositionEncoding
from posenc.core.angles import wide_dtype
from posenc.core.validation import check_bool, check_positions, check_positive_float
from torch import Tensor

from .timestamps import check_output_dtype

__all__ = ["TimeDelta", "time_delta_features"]

FEATURES = ("since_previous", "since_start", "observed")


def _check_order(times: Tensor) -> None:
    if torch.compiler.is_compiling() or times.shape[-1] < 2:
        return
    backwards = times[..., 1:] < times[..., :-1]
    if bool(backwards.any()):
        where = backwards.nonzero()[0].tolist()
        raise ValueError(f"times must be non-decreasing along the last dim (time since the "
                         f"previous observation needs the order), but at index {where} the "
                         f"next time is earlier; sort each series first")
    # Sorted, every difference is at most last - first, which wraps negative past int64.
    if not times.is_floating_point() and bool((times[..., -1] - times[..., 0] < 0).any()):
        raise ValueError("times span more than int64 holds (2**63 - 1 ticks: 292 years in "
                         "nanoseconds), so their differences would wrap; use a coarser unit "
                         "or an origin nearer the series (time_positions)")


def time_delta_features(times: Tensor, mask: Tensor | None = None, *, log: bool = False,
                        scale: float = 1.0, dtype: torch.dtype = torch.float32) -> Tensor:
    """Per position: time since the previous observation, time since the series start, and
    whether it is observed.

    Args:
        times: ``(N,)`` or ``(B, N)`` non-decreasing times in any unit
            (:func:`time_positions`): integer, float32 or float64 (half precision raises:
            elapsed hours in float16 are off by whole hours past 2048). Padding should
            repeat a real time (e.g. the last).
        mask: same shape, bool, True where a value was observed; unobserved positions (gaps,
            the horizon to forecast, padding) still get their deltas but are skipped as
            "previous observation" (GRU-D's delta). ``None``: every position observed.
        log: return ``log1p(delta / scale)`` for both deltas, taming heavy-tailed gaps.
        scale: the delta (in the unit of ``times``) that ``log`` maps to ``log(2)``.
        dtype: output dtype. Differences are taken in the times' own dtype (exact for
            integer nanoseconds), then converted.

    Returns:
        ``(..., N, 3)``: ``[since_previous, since_start, observed]``. ``since_previous`` is 0
        where no earlier observation exists; ``since_start`` counts from ``times[..., 0]``.
    """
    t = check_positions(times, "times")  # refuses half precision, widens integers
    if mask is not None and (not isinstance(mask, Tensor) or mask.dtype != torch.bool
                             or mask.shape != t.shape):
        got = f"{mask.dtype} of shape {tuple(mask.shape)}" if isinstance(mask, Tensor) else (
            type(mask).__name__)
        raise TypeError(f"mask must be a bool tensor of the shape of times "
                        f"{tuple(t.shape)}, got {got}")
    check_bool(log, "log")
    check_positive_float(scale, "scale")
    check_output_dtype(dtype)
    _check_order(t)
    # Differences are taken before any cast, so integer times (nanoseconds) stay exact.
    wide = t.dtype if t.is_floating_point() else wide_dtype(t.device)
    positions = torch.arange(t.shape[-1], device=t.device).expand(t.shape)
    if mask is None:
        observed = torch.ones_like(t, dtype=wide)
        previous = positions - 1
    else:
        observed = mask.to(wide)
        # The last observed position at or before n, exactly as a cummax of
        # where(mask, position, -1), in operators ONNX has (it has no cumulative max): the
        # k-th observation's position is put at slot k of a table (slot 0: -1, none yet) and
        # read back at each position's count of observations so far.
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
    """Module form of :func:`time_delta_features` (no parameters).

    Args:
        log: log-scale the deltas, ``log1p(delta / scale)``.
        scale: delta that ``log`` maps to ``log(2)``, in the unit of the times.
    """

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
