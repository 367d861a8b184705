"""Forecast losses and evaluation: the training losses (MAE, MSE, quantile) and the MASE
metric, all with missing-value masks; the seasonal-naive baseline and per-series MAE, RMSE,
MASE and wQL.

Evaluating a model and its seasonal-naive baseline on the same windows, in data units
(``unscale``: ``value * scale + loc`` per series, as ``Forecaster`` does)::

    target, context = unscale(batch["target_value"]), unscale(batch["context_value"])
    args = (target, batch["target_observed"], batch["series"], context,
            batch["context_observed"])
    metrics.update(point, *args, quantile_prediction=quantiles)          # (B,Nh,C,Q) or None
    naive = seasonal_naive(batch["context_time"], context, batch["context_observed"],
                           batch["context_valid"], batch["target_time"], season.value,
                           context_local=batch["context_local"],
                           target_local=batch["target_local"])
    naive_metrics.update(naive, *args, quantile_prediction=None if quantiles is None
                         else naive[..., None].expand_as(quantiles))

A point forecast's quantiles are the point itself (how GluonTS scores point forecasters), so
the baseline's wQL is comparable with the model's.
"""

from __future__ import annotations

import datetime
from collections.abc import Mapping, Sequence
from numbers import Real

import numpy as np
import pandas as pd
import torch
from posenc.core.encoding import check_positive_int
from torch import Tensor
from torchmetrics import Metric
from torchmetrics.utilities import dim_zero_cat

__all__ = ["ForecastMetrics", "seasonal_naive", "season_for_step", "LOSSES", "masked_point_loss",
           "pinball", "quantile_loss", "naive_scale", "scaled_errors", "MeanAbsoluteScaledError"]


LOSSES = ("mae", "mse", "quantile")


def _masked_mean(values: Tensor, mask: Tensor) -> Tensor:
    mask = mask.to(values.dtype)
    return (values * mask).sum() / mask.sum().clamp_min(1)


def masked_point_loss(pred: Tensor, target: Tensor, mask: Tensor, kind: str) -> Tensor:
    """Mean ``|pred - target|`` (``"mae"``) or ``(pred - target)^2`` (``"mse"``) over ``mask``.

    Args:
        pred: ``(...)``.
        target: ``(...)``, the shape of ``pred``.
        mask: ``(...)`` bool, True where ``target`` is observed.
    """
    error = pred - target
    if kind == "mae":
        return _masked_mean(error.abs(), mask)
    if kind == "mse":
        return _masked_mean(error.square(), mask)
    raise ValueError(f"kind must be 'mae' or 'mse', got {kind!r}")


def pinball(pred: Tensor, target: Tensor, quantiles: Tensor) -> Tensor:
    """Elementwise pinball loss ``max(q * e, (q - 1) * e)``, ``e = target - pred``.

    Args:
        pred: ``(..., Q)`` predicted quantiles.
        target: ``(...)``.
        quantiles: ``(Q,)`` levels in (0, 1).

    Returns:
        ``(..., Q)``.
    """
    error = target[..., None] - pred
    q = quantiles.to(pred.dtype)
    return torch.maximum(q * error, (q - 1) * error)


def quantile_loss(pred: Tensor, target: Tensor, mask: Tensor, quantiles: Tensor) -> Tensor:
    """Pinball loss ``max(q * e, (q - 1) * e)``, ``e = target - pred``, averaged over the
    observed targets and the quantiles.

    Args:
        pred: ``(..., Q)`` predicted quantiles.
        target: ``(...)``.
        mask: ``(...)`` bool observed.
        quantiles: ``(Q,)`` levels in (0, 1).
    """
    return _masked_mean(pinball(pred, target, quantiles).mean(-1), mask)


def naive_scale(context: Tensor, observed: Tensor, season: int = 1) -> tuple[Tensor, Tensor]:
    """In-sample MAE of the seasonal naive forecast ``y[t] = y[t - season]`` per window and
    channel (the MASE denominator, as GluonTS computes it from the context).

    Args:
        context: ``(B, N, C)`` values in time order.
        observed: ``(B, N, C)`` bool.
        season: lag in observations; windows without an observed pair that far apart fall
            back to lag 1, as GluonTS does for contexts shorter than the season.

    Returns:
        ``(scale, count)`` of shape ``(B, C)``: mean absolute lag difference and how many pairs
        it averages (0 where the context has no observed pair ``season`` apart).
    """
    check_positive_int(season, "season")

    def lagged(lag: int) -> tuple[Tensor, Tensor]:
        if lag >= context.shape[1]:
            empty = context.new_zeros(context.shape[0], context.shape[2])
            return empty, empty.long()
        pair = observed[:, lag:] & observed[:, :-lag]
        # where, not a product: a NaN left at a missing value must not reach the sum
        diff = (context[:, lag:] - context[:, :-lag]).abs().where(pair, 0)
        count = pair.sum(1)
        return diff.sum(1) / count.clamp_min(1), count

    scale, count = lagged(season)
    if season > 1:
        # GluonTS's fallback: a context too short for the season uses the lag-1 naive error.
        scale_1, count_1 = lagged(1)
        scale, count = scale.where(count > 0, scale_1), count.where(count > 0, count_1)
    return scale, count


def scaled_errors(pred: Tensor, target: Tensor, target_observed: Tensor, context: Tensor,
                  context_observed: Tensor, season: int = 1) -> tuple[Tensor, Tensor]:
    """Each window's MASE per channel: its MAE over the horizon divided by its context's
    seasonal-naive MAE (:func:`naive_scale`).

    Args:
        pred: ``(B, Nh, C)``.
        target: ``(B, Nh, C)``.
        target_observed: ``(B, Nh, C)`` bool.
        context: ``(B, Nc, C)`` in the units of ``target``.
        context_observed: ``(B, Nc, C)`` bool.
        season: lag in observations of the denominator.

    Returns:
        ``(ratio, defined)`` of shape ``(B, C)``: ``defined`` is False (and ``ratio`` 0) where
        the horizon has no observed target or the denominator is undefined or zero (a
        constant context), as no finite scaled error exists there.
    """
    scale, pairs = naive_scale(context, context_observed, season)
    n = target_observed.sum(1)
    mae = (pred - target).abs().where(target_observed, 0).sum(1) / n.clamp_min(1)
    defined = (n > 0) & (pairs > 0) & (scale > 0)
    ratio = (mae / scale.where(defined, torch.ones_like(scale))).where(defined, 0)
    return ratio, defined


class MeanAbsoluteScaledError(Metric):
    """MASE: each window's MAE over the horizon divided by its context's seasonal-naive MAE,
    averaged over (window, channel) pairs whose denominator is defined and non-zero.

    Scale-free, so scaled and original units give the same value.
    """

    full_state_update = False

    def __init__(self, season: int = 1) -> None:
        super().__init__()
        self.season = season
        self.add_state("total", default=torch.zeros(()), dist_reduce_fx="sum")
        self.add_state("count", default=torch.zeros(()), dist_reduce_fx="sum")

    def update(self, pred: Tensor, target: Tensor, target_observed: Tensor, context: Tensor,
               context_observed: Tensor) -> None:
        """``pred``/``target``/``target_observed``: ``(B, Nh, C)``; context ones ``(B, Nc, C)``."""
        ratio, defined = scaled_errors(pred.float(), target.float(), target_observed,
                                       context.float(), context_observed, self.season)
        self.total += ratio.sum()
        self.count += defined.sum()

    def compute(self) -> Tensor:
        return self.total / self.count


def _check_tensor(value: object, name: str, kind: str, ndim: int) -> Tensor:
    """``kind``: ``int64``, ``bool``, ``float`` or ``integer``."""
    if not isinstance(value, Tensor):
        raise TypeError(f"{name} must be a tensor, got {type(value).__name__}")
    ok = {"int64": value.dtype == torch.int64, "bool": value.dtype == torch.bool,
          "float": value.is_floating_point(),
          "integer": not value.is_floating_point() and not value.is_complex()
          and value.dtype != torch.bool}[kind]
    if not ok:
        what = {"int64": "int64 (UTC nanoseconds)", "float": "floating point",
                "integer": "integer (series indices)"}.get(kind, kind)
        raise TypeError(f"{name} must be a {what} tensor, got {value.dtype}")
    if value.ndim != ndim:
        raise ValueError(f"{name} must have {ndim} dimensions, got shape {tuple(value.shape)}")
    return value


def _check_shape(value: Tensor, name: str, shape: tuple[int, ...], spec: str) -> None:
    if tuple(value.shape) != shape:
        raise ValueError(f"{name} must be {spec} = {shape}, got shape {tuple(value.shape)}")


_MAX_SEASON_NS = 2**62
_DAY_NS = 86_400 * 10**9


# -- seasonal naive --------------------------------------------------------------------------
def seasonal_naive(context_time: Tensor, context_value: Tensor, context_observed: Tensor,
                   context_valid: Tensor, target_time: Tensor, season_ns: int, *,
                   context_local: Tensor | None = None, target_local: Tensor | None = None
                   ) -> Tensor:
    """The seasonal-naive forecast at arbitrary query times, per channel.

    For a query time ``t`` and the forecast origin ``o`` (the last valid context time) the
    forecast is the channel's last observed context value at or before ``t - k * season``,
    with ``k >= 1`` the smallest integer such that ``t - k * season <= o``. On a regular grid
    with step ``s`` and ``season = m * s`` this is the textbook ``y[t - m * ceil(h / m)]``
    (``h`` steps ahead); on irregular data it is the last value seen a whole number of
    seasons earlier. Where the channel has no observation at or before that time in the
    context, the forecast falls back to the channel's last observed context value (the
    naive forecast); a channel never observed in the context gives NaN (nothing to repeat).

    A season of whole days (``1D``, ``7D``, ``365D``) means the same local day or weekday:
    given ``context_local``/``target_local``, ``t``, ``o`` and the lookups are local
    wall-clock times, so a daily series at local midnight repeats the same local day across
    a DST change (in UTC that day is 23 or 25 hours long). Where the wall clock falls back
    (a repeated hour) a lookup takes the last context point before the clock first passes
    it. Shorter seasons (hours) stay in elapsed (UTC) time, as do all seasons without the
    local times (tz-naive data, whose local times are its UTC times).

    Vectorised over the batch (``searchsorted``), no host synchronisation, on any device.

    Args:
        context_time: ``(B, Nc)`` int64 UTC ns, non-decreasing (not checked: that would
            read the device; batches are sorted by construction); right padding repeats the
            last real time (as ``collate_windows`` pads).
        context_value: ``(B, Nc, C)`` floating values.
        context_observed: ``(B, Nc, C)`` bool, True where the value is present.
        context_valid: ``(B, Nc)`` bool, False on padding.
        target_time: ``(B, Nh)`` int64 UTC ns, the query times.
        season_ns: the season in nanoseconds (``pd.Timedelta.value``), in (0, 2**62].
        context_local: ``(B, Nc)`` int64 local wall-clock ns (a batch's ``context_local``), with
            ``target_local`` or neither; read only for a season of whole days.
        target_local: ``(B, Nh)`` int64 local wall-clock ns (a batch's ``target_local``).

    Returns:
        ``(B, Nh, C)`` in the dtype of ``context_value``.
    """
    _check_tensor(context_time, "context_time", "int64", 2)
    _check_tensor(context_value, "context_value", "float", 3)
    _check_tensor(context_observed, "context_observed", "bool", 3)
    _check_tensor(context_valid, "context_valid", "bool", 2)
    _check_tensor(target_time, "target_time", "int64", 2)
    check_positive_int(season_ns, "season_ns")
    if season_ns > _MAX_SEASON_NS:  # t - k * season would wrap around int64
        raise ValueError(f"season_ns must be at most 2**62 ns (146 years), got {season_ns}")
    b, nc = context_time.shape
    channels = context_value.shape[-1]
    _check_shape(context_value, "context_value", (b, nc, channels), "(B, Nc, C)")
    _check_shape(context_observed, "context_observed", (b, nc, channels), "(B, Nc, C)")
    _check_shape(context_valid, "context_valid", (b, nc), "(B, Nc)")
    if target_time.shape[0] != b:
        raise ValueError(f"target_time must be (B, Nh) with B = {b} (context_time's), got "
                         f"shape {tuple(target_time.shape)}")
    if nc == 0:
        raise ValueError("context_time has no context tokens (Nc = 0): nothing to repeat")
    if (context_local is None) != (target_local is None):
        raise ValueError("context_local and target_local go together: give both (local "
                         "wall-clock ns) or neither")
    if context_local is not None:
        _check_shape(_check_tensor(context_local, "context_local", "int64", 2),
                     "context_local", (b, nc), "(B, Nc) as context_time")
        _check_shape(_check_tensor(target_local, "target_local", "int64", 2),
                     "target_local", tuple(target_time.shape), "(B, Nh) as target_time")
        if season_ns % _DAY_NS == 0:
            # The wall clock repeats an hour at a fall-back: its running maximum is the
            # non-decreasing key searchsorted needs (equal to it wherever it does not).
            context_time = context_local.cummax(1).values
            target_time = target_local

    last_valid = (context_valid.sum(1, keepdim=True) - 1).clamp_min(0)
    origin = context_time.gather(1, last_valid)                               # (B, 1)
    # k = max(1, ceil((t - o) / season)) in integer arithmetic: float64 ns are exact only
    # to ~256 ns at today's epoch, enough to put a lookup on the wrong side of a sample.
    ahead = target_time - origin
    k = (-torch.div(-ahead, season_ns, rounding_mode="floor")).clamp_min(1)
    lookup = target_time - k * season_ns                                      # (B, Nh)
    # Index of the last context point at or before each lookup time (-1: none).
    at_or_before = torch.searchsorted(context_time.contiguous(), lookup.contiguous(),
                                      right=True) - 1
    observed = context_observed & context_valid[..., None]
    positions = torch.arange(nc, device=context_time.device)[None, :, None]
    # last_seen[b, j, c]: the latest observed index <= j of channel c (-1 before the first).
    last_seen = torch.where(observed, positions, -1).cummax(1).values         # (B, Nc, C)
    index = last_seen.gather(1, at_or_before.clamp_min(0)[..., None].expand(-1, -1, channels))
    index = index.where(at_or_before[..., None] >= 0, -1)
    index = index.where(index >= 0, last_seen[:, -1:, :])                    # naive fallback
    value = context_value.gather(1, index.clamp_min(0))
    return value.where(index >= 0, torch.full_like(value, float("nan")))


# GluonTS's default seasonalities, gluonts.time_feature.seasonality.DEFAULT_SEASONALITIES
# (https://github.com/awslabs/gluonts/blob/dev/src/gluonts/time_feature/seasonality.py):
# S: 3600, T (min): 1440, H: 24, D: 1, W: 1, M: 12, B: 5, Q: 4, divided by the offset's
# multiple, falling back to 1 (naive) when it does not divide. As durations: seconds -> 1 hour,
# minutes and hours -> 1 day, a day or a week -> itself, months and quarters -> 1 year.
_BASE_PERIODS = ((pd.Timedelta(minutes=1), pd.Timedelta(days=1)),   # T and H: one day
                 (pd.Timedelta(seconds=1), pd.Timedelta(hours=1)))  # S: one hour
_YEAR = pd.Timedelta(days=365)


def season_for_step(step: pd.Timedelta | datetime.timedelta | np.timedelta64) -> pd.Timedelta:
    """The default seasonal-naive season for data sampled every ``step``, as GluonTS's
    ``get_seasonality`` picks it for the step's frequency, as a duration.

    =====================================  ==========================================
    step                                   season
    =====================================  ==========================================
    whole minutes or hours, < 1 day        1 day if ``step`` divides it, else ``step``
    whole seconds (not minutes)            1 hour if ``step`` divides it, else ``step``
    whole days (1 day, 1 week, ...)        ``step`` (GluonTS: ``D`` and ``W`` -> 1)
    28-31 or 89-92 days (months/quarters)  365 days (GluonTS: ``M`` -> 12, ``Q`` -> 4)
    anything else (sub-second, 36 h, ...)  ``step`` (the naive forecast)
    =====================================  ==========================================

    Daily data thus gets the naive forecast (GluonTS's choice); pass a season of 7 days for
    weekly structure. Months are not a fixed duration: with 365 days, a query exactly 12
    months past an origin before a 29 February repeats the value of two years earlier.
    """
    if isinstance(step, (str, bytes)) or not isinstance(step, (datetime.timedelta,
                                                               np.timedelta64)):
        raise TypeError(f"step must be a pandas.Timedelta (or datetime.timedelta, "
                        f"numpy.timedelta64), got {type(step).__name__} ({step!r})")
    step = pd.Timedelta(step)
    if pd.isna(step) or step <= pd.Timedelta(0):
        raise ValueError(f"step must be a positive duration, got {step!r}")
    day = pd.Timedelta(days=1)
    if step % day == pd.Timedelta(0):
        days = step // day
        return _YEAR if 28 <= days <= 31 or 89 <= days <= 92 else step
    for unit, base in _BASE_PERIODS:
        if step % unit == pd.Timedelta(0):
            return base if base % step == pd.Timedelta(0) else step
    return step


# -- metrics ---------------------------------------------------------------------------------
def check_quantile_levels(levels: object, name: str = "quantiles") -> list[float] | None:
    """None, or ``levels`` as floats increasing in (0, 1), else an error naming ``name``."""
    if levels is None:
        return None
    if isinstance(levels, (str, bytes, Mapping)) or not isinstance(levels, Sequence):
        raise TypeError(f"{name} must be a list of levels or None, got "
                        f"{type(levels).__name__} ({levels!r})")
    if any(isinstance(q, bool) or not isinstance(q, Real) for q in levels):
        raise TypeError(f"{name} must be numbers, got {list(levels)}")
    floats = [float(q) for q in levels]
    if not floats or any(not 0 < q < 1 for q in floats) or sorted(set(floats)) != floats:
        raise ValueError(f"{name} must be increasing levels in (0, 1), got {list(levels)}")
    return floats


_STATES = ("series", "abs_error", "squared_error", "points", "scaled_error", "scaled_count",
           "abs_target", "pinball", "unscored")


class ForecastMetrics(Metric):
    """MAE, RMSE, MASE and (with quantiles) wQL of forecasts, per series and aggregated.

    Each window's sums are kept (``cat`` states, so DDP gathers them without knowing the
    number of series) and summed per series (a weighted ``bincount``) when computed:

    - Scored points: the observed (window, time, channel) targets whose channel is observed
      somewhere in the window's context. Where it is not (an outage longer than the
      context) no forecast from history exists, the seasonal-naive one is NaN, and the
      point is left out of every metric below and counted in ``unscored``: a model and its
      baseline are compared on the same points, as MASE's undefined pairs (the same
      context's) are left out of both. The rule reads only the window, so the model's
      metrics do not depend on whether a baseline is evaluated beside it.
    - ``mae`` = sum ``|y - yhat|`` / points; ``rmse`` = sqrt(sum ``(y - yhat)^2`` /
      points): pooled over every scored point (GluonTS's ``RMSE`` is the root of the mean
      per-forecast MSE: the same when every window has as many scored points).
    - ``mase``: GluonTS's ``mase`` (gluonts/evaluation/metrics.py: ``mean(|Y - Yhat|) /
      seasonal_error``, ``seasonal_error = mean(|Y[t] - Y[t-m]|)`` of the past, lag 1 when the
      past is shorter than the season) per window and channel, the past being the window's
      context; aggregated as GluonTS's ``Evaluator`` does (``MASE: "mean"`` over its
      per-forecast rows, each rolling window one row): the mean over (window, channel)
      pairs. Pairs with no observed target or a zero or undefined denominator (a constant
      context) have no finite value and are left out (counted in ``scaled_count``).
    - ``wql`` (GluonTS ``mean_wQuantileLoss``): for each level ``q``, ``quantile_loss = 2 *
      sum |(Y - Yhat_q) * (1[Y <= Yhat_q] - q)|`` (twice the pinball loss) summed over all
      scored points, divided by their ``sum |Y|``; then the mean over the levels.
    - ``unscored``: how many observed target points were left out (no context history).

    Args:
        quantiles: the levels of ``quantile_prediction``, increasing in (0, 1); None for point
            forecasts only (no ``wql``).
        mase_season: lag in observations of the MASE denominator (``dm.mase_season``).
    """

    full_state_update = False
    is_differentiable = False
    higher_is_better = False

    def __init__(self, quantiles: list[float] | None = None, mase_season: int = 1,
                 **kwargs) -> None:
        super().__init__(**kwargs)
        self.quantiles = check_quantile_levels(quantiles)
        self.mase_season = check_positive_int(mase_season, "mase_season")
        self.register_buffer("levels", torch.tensor(self.quantiles or [], dtype=torch.float32),
                             persistent=False)
        for name in _STATES:
            self.add_state(name, default=[], dist_reduce_fx="cat")

    def update(self, prediction: Tensor, target: Tensor, observed: Tensor, series: Tensor,
               context_value: Tensor, context_observed: Tensor,
               quantile_prediction: Tensor | None = None) -> None:
        """Add a batch of windows (all values in the same, data units).

        Args:
            prediction: ``(B, Nh, C)`` point forecasts.
            target: ``(B, Nh, C)`` truth (any value where unobserved).
            observed: ``(B, Nh, C)`` bool, True where ``target`` is present (False on
                padding).
            series: ``(B,)`` integer index of each window's series (>= 0).
            context_value: ``(B, Nc, C)``; context_observed: ``(B, Nc, C)`` bool (MASE's
                denominator).
            quantile_prediction: ``(B, Nh, C, Q)`` at ``quantiles``; required iff the metric
                has quantiles.
        """
        _check_tensor(prediction, "prediction", "float", 3)
        shape = tuple(prediction.shape)
        b, _, channels = shape
        _check_shape(_check_tensor(target, "target", "float", 3), "target", shape,
                     "(B, Nh, C) as prediction")
        _check_shape(_check_tensor(observed, "observed", "bool", 3), "observed", shape,
                     "(B, Nh, C) as prediction")
        _check_shape(_check_tensor(series, "series", "integer", 1), "series", (b,), "(B,)")
        _check_tensor(context_value, "context_value", "float", 3)
        _check_shape(context_value, "context_value", (b, context_value.shape[1], channels),
                     "(B, Nc, C)")
        _check_shape(_check_tensor(context_observed, "context_observed", "bool", 3),
                     "context_observed", tuple(context_value.shape), "(B, Nc, C)")
        if (quantile_prediction is None) != (self.quantiles is None):
            raise ValueError(
                "quantile_prediction is required: the metric was built with quantiles="
                f"{self.quantiles}" if quantile_prediction is None else
                "quantile_prediction was given but the metric has quantiles=None")
        prediction, target = prediction.float(), target.float()
        # No context observation of the channel: no forecast from history (class docstring).
        scored = observed & context_observed.any(1, keepdim=True)
        error = (prediction - target).where(scored, 0)
        ratio, defined = scaled_errors(prediction, target, scored, context_value.float(),
                                       context_observed, self.mase_season)
        self.series.append(series.long())
        self.abs_error.append(error.abs().sum((1, 2)))
        self.squared_error.append(error.square().sum((1, 2)))
        self.points.append(scored.sum((1, 2)).float())
        self.scaled_error.append(ratio.sum(1))
        self.scaled_count.append(defined.sum(1).float())
        self.abs_target.append(target.abs().where(scored, 0).sum((1, 2)))
        self.unscored.append((observed & ~scored).sum((1, 2)).float())
        if quantile_prediction is not None:
            _check_tensor(quantile_prediction, "quantile_prediction", "float", 4)
            _check_shape(quantile_prediction, "quantile_prediction",
                         (*shape, len(self.quantiles)), f"(B, Nh, C, Q = {len(self.quantiles)})")
            loss = pinball(quantile_prediction.float(), target, self.levels)
            # flat (B * Q,): DDP fills a rank without windows with a 1D empty state
            self.pinball.append(loss.where(scored[..., None], 0).sum((1, 2)).flatten())

    def _sums(self) -> dict[str, Tensor]:
        """The per-window states, float64 on the CPU (exact, deterministic bincount);
        ``pinball`` as ``(W, Q)``."""
        states = {}
        for name in _STATES:
            value = getattr(self, name)
            value = dim_zero_cat(value) if isinstance(value, Tensor) or value else \
                torch.zeros(0)
            states[name] = value.detach().to("cpu", torch.float64)
        states["series"] = states["series"].long()
        states["pinball"] = states["pinball"].reshape(len(states["series"]),
                                                      len(self.quantiles or []))
        if len(states["series"]) and int(states["series"].min()) < 0:
            raise ValueError(f"series indices must be >= 0, got "
                             f"{int(states['series'].min())}")
        return states

    def _metrics(self, sums: dict[str, Tensor]) -> dict[str, Tensor]:
        out = {"mae": sums["abs_error"] / sums["points"],
               "rmse": (sums["squared_error"] / sums["points"]).sqrt(),
               "mase": sums["scaled_error"] / sums["scaled_count"]}
        if self.quantiles is not None:
            out["wql"] = (2 * sums["pinball"] / sums["abs_target"][..., None]).mean(-1)
        return out

    def compute(self) -> dict[str, Tensor]:
        """Aggregated over all series and windows: ``{"mae", "rmse", "mase"[, "wql"],
        "unscored"}`` 0-dim float32 tensors on the metric's device (NaN when nothing was
        scored; ``unscored`` a count)."""
        sums = {name: value.sum(0) for name, value in self._sums().items()
                if name != "series"}
        out = {**self._metrics(sums), "unscored": sums["unscored"]}
        return {name: value.to(self.device, torch.float32) for name, value in out.items()}

    def per_series(self, num_series: int | None = None) -> dict[str, Tensor]:
        """The metrics of each series (synchronised across processes under DDP).

        Args:
            num_series: length of the result (``dm.num_series``); default one past the
                largest series index seen.

        Returns:
            ``{"mae", "rmse", "mase"[, "wql"], "windows", "points", "unscored"}``: ``(S,)``
            float64 CPU tensors indexed by series (NaN and 0 windows for a series without
            windows); ``points`` the scored points, ``unscored`` those left out.
        """
        with self.sync_context(dist_sync_fn=self.dist_sync_fn,
                               should_sync=self._to_sync and not self._is_synced):
            sums = self._sums()
        seen = int(sums["series"].max()) + 1 if len(sums["series"]) else 0
        size = seen if num_series is None else check_positive_int(num_series, "num_series")
        if size < seen:
            raise ValueError(f"num_series={num_series} but series index {seen - 1} was seen")
        series = sums.pop("series")
        # index_add_ is bincount with weights for (W,) and (W, Q) alike (exact on the CPU)
        totals = {name: value.new_zeros((size, *value.shape[1:])).index_add_(0, series, value)
                  for name, value in sums.items()}
        out = self._metrics(totals)
        out["windows"] = torch.bincount(series, minlength=size).double()
        out["points"] = totals["points"]
        out["unscored"] = totals["unscored"]
        return out

    def per_series_frame(self, series_keys: Sequence[tuple], series_columns: Sequence[str]
                         ) -> pd.DataFrame:
        """:meth:`per_series` as a table: one row per entry of ``series_keys`` (``dm.series_keys``,
        tuples of one value per column of ``series_columns``), its key columns then the
        metrics; row ``i`` is series index ``i``."""
        series_columns = list(series_columns)
        for i, key in enumerate(series_keys):
            if not isinstance(key, tuple) or len(key) != len(series_columns):
                raise ValueError(f"series_keys[{i}] = {key!r} must be a tuple of "
                                 f"{len(series_columns)} value(s), one per series column "
                                 f"{series_columns}")
        values = self.per_series(len(series_keys))
        frame = pd.DataFrame(list(series_keys), columns=series_columns,
                             index=pd.RangeIndex(len(series_keys), name="series_index"))
        for name, value in values.items():
            frame[name] = value.numpy()
        for count in ("windows", "points", "unscored"):
            frame[count] = frame[count].astype(np.int64)
        return frame
