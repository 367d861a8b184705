"""Forecast losses and evaluation: the masked training losses (MAE, MSE, quantile), the
seasonal-naive baselines, the seasonal period and the seasonal error of a series' history, and
MAE, RMSE, MASE, RMSSE, sMAPE and wQL per series and aggregated, as GluonTS's ``Evaluator``,
and the empirical coverage of the central prediction intervals.
"""

from __future__ import annotations

import bisect
import datetime
from collections.abc import Mapping, Sequence
from numbers import Real

import numpy as np
import pandas as pd
import torch
from posenc.core._checks import check_positive_int
from torch import Tensor
from torchmetrics import Metric
from torchmetrics.utilities import dim_zero_cat

__all__ = ["LOSSES", "ForecastMetrics", "SeasonalError", "central_intervals", "interpolated_median",
           "masked_point_loss", "median_position", "natural_seasons", "pinball", "quantile_loss",
           "season_label", "seasonal_naive", "seasonality_for_step"]


LOSSES = ("mae", "mse", "quantile")


def _masked_mean(values: Tensor, mask: Tensor) -> Tensor:
    mask = mask.to(values.dtype)
    return (values * mask).sum() / mask.sum().clamp_min(1)


def masked_point_loss(pred: Tensor, target: Tensor, mask: Tensor, kind: str) -> Tensor:
    """Mean ``|pred - target|`` (``"mae"``) or ``(pred - target)^2`` (``"mse"``) over ``mask``
    (bool, True where ``target`` is observed; all three of one shape)."""
    error = pred - target
    if kind == "mae":
        return _masked_mean(error.abs(), mask)
    if kind == "mse":
        return _masked_mean(error.square(), mask)
    raise ValueError(f"kind must be 'mae' or 'mse', got {kind!r}")


def pinball(pred: Tensor, target: Tensor, quantiles: Tensor) -> Tensor:
    """Elementwise pinball loss ``max(q * e, (q - 1) * e)``, ``e = target - pred``: ``pred``
    ``(..., Q)``, ``target`` ``(...)``, ``quantiles`` ``(Q,)`` in (0, 1) -> ``(..., Q)``."""
    error = target[..., None] - pred
    q = quantiles.to(pred.dtype)
    return torch.maximum(q * error, (q - 1) * error)


def quantile_loss(pred: Tensor, target: Tensor, mask: Tensor, quantiles: Tensor) -> Tensor:
    """[`pinball`][posenc.tasks.forecasting.metrics.pinball] averaged over the quantiles and the
    targets where ``mask`` ``(...)``."""
    return _masked_mean(pinball(pred, target, quantiles).mean(-1), mask)


def _check_tensor(value: object, name: str, kind: str, ndim: int,
                  shape: tuple[int, ...] | None = None, spec: str = "") -> Tensor:
    """``kind``: ``int64``, ``bool``, ``float`` or ``integer``; ``shape``: `_check_shape`."""
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
    if shape is not None:
        _check_shape(value, name, shape, spec)
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

    For a query time ``t`` and the origin ``o`` (the last valid context time): the channel's last
    observed context value at or before ``t - k * season``, ``k >= 1`` the smallest with
    ``t - k * season <= o`` (on a regular grid the textbook ``y[t - m * ceil(h / m)]``); with
    no such value the last observed one (naive); NaN for a channel never observed.
    A season of whole days uses the local wall-clock times when given (the same local day
    across DST; at a fall-back the last point before the clock first passes the lookup).
    No host synchronisation.

    Args:
        context_time: ``(B, Nc)`` int64 UTC ns, non-decreasing (not checked); right padding
            repeats the last real time.
        context_value: ``(B, Nc, C)`` floating values.
        context_observed: ``(B, Nc, C)`` bool, True where the value is present.
        context_valid: ``(B, Nc)`` bool, False on padding.
        target_time: ``(B, Nh)`` int64 UTC ns, the query times.
        season_ns: the season in nanoseconds (``pd.Timedelta.value``), in (0, 2**62].
        context_local: ``(B, Nc)`` int64 local wall-clock ns, with ``target_local`` or
            neither; read only for a season of whole days.
        target_local: ``(B, Nh)`` int64 local wall-clock ns.

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
        _check_tensor(context_local, "context_local", "int64", 2, (b, nc),
                      "(B, Nc) as context_time")
        _check_tensor(target_local, "target_local", "int64", 2, tuple(target_time.shape),
                      "(B, Nh) as target_time")
        if season_ns % _DAY_NS == 0:
            # The wall clock repeats an hour at a fall-back: its running max is non-decreasing.
            context_time = context_local.cummax(1).values
            target_time = target_local

    last_valid = (context_valid.sum(1, keepdim=True) - 1).clamp_min(0)
    origin = context_time.gather(1, last_valid)                               # (B, 1)
    # k = max(1, ceil((t - o) / season)) in int64: float64 ns are exact only to ~256 ns.
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


# -- seasonality and the seasonal error of a series' history ----------------------------------
# gluonts.time_feature.seasonality.DEFAULT_SEASONALITIES by the step's largest whole unit.
_UNITS = ((pd.Timedelta(days=1), 1), (pd.Timedelta(hours=1), 24),
          (pd.Timedelta(minutes=1), 1440), (pd.Timedelta(seconds=1), 3600))
_YEAR = pd.Timedelta(days=365)
# The calendar periods a seasonal naive repeats (see natural_seasons).
_DAY, _WEEK = pd.Timedelta(days=1), pd.Timedelta(days=7)


def _check_step(step: object) -> pd.Timedelta:
    if isinstance(step, (str, bytes)) or not isinstance(step, (datetime.timedelta,
                                                               np.timedelta64)):
        raise TypeError(f"step must be a pandas.Timedelta (or datetime.timedelta, "
                        f"numpy.timedelta64), got {type(step).__name__} ({step!r})")
    step = pd.Timedelta(step)
    if pd.isna(step) or step <= pd.Timedelta(0):
        raise ValueError(f"step must be a positive duration, got {step!r}")
    return step


def _months(step: pd.Timedelta) -> int:
    """12 for a step of a calendar month (28-31 days), 4 of a quarter (89-92), else 0."""
    days = step / _DAY
    return 12 if 28 <= days <= 31 else 4 if 89 <= days <= 92 else 0


def seasonality_for_step(step: pd.Timedelta | datetime.timedelta | np.timedelta64) -> int:
    """The seasonal period ``m`` in steps of data sampled every ``step``, as GluonTS's
    ``get_seasonality``: 24 for hourly, 48 half-hourly, 1 daily and weekly, 12 monthly (28-31
    days), 4 quarterly (89-92 days); 1 where the step does not divide the base period."""
    step = _check_step(step)
    months = _months(step)
    if months:
        return months
    for unit, base in _UNITS:
        if step % unit == pd.Timedelta(0):
            count, remainder = divmod(base, step // unit)
            return count if not remainder else 1
    return 1


def natural_seasons(step: pd.Timedelta | datetime.timedelta | np.timedelta64,
                    context: pd.Timedelta | None = None) -> list[pd.Timedelta]:
    """The seasonal-naive seasons of data sampled every ``step``: a day and a week for
    sub-daily data, a week and a year (365 days) for daily, a year for coarser; only those
    within ``context`` (None: no limit) and divisible by the step; none: ``[1 ns]``."""
    step = _check_step(step)
    if _months(step):
        candidates = [_YEAR]
    elif step < _DAY:
        candidates = [p for p in (_DAY, _WEEK) if p % step == pd.Timedelta(0)]
    else:
        candidates = [p for p in (_WEEK, _YEAR) if p > step and (p % step == pd.Timedelta(0)
                                                               or p == _YEAR)]
    seasons = [p for p in candidates if context is None or p <= context]
    return seasons or [pd.Timedelta(1, "ns")]


def season_label(season_ns: int) -> str:
    """A baseline's name in logged keys: ``"1d"``, ``"7d"``, ``"24h"``, ``"30min"``;
    ``"persistence"`` for 1 ns (the last observed value)."""
    check_positive_int(season_ns, "season_ns")
    if season_ns == 1:
        return "persistence"
    for unit, ns in (("d", _DAY_NS), ("h", 3600 * 10**9), ("min", 60 * 10**9), ("s", 10**9)):
        if season_ns % ns == 0:
            return f"{season_ns // ns}{unit}"
    return f"{season_ns}ns"


class SeasonalError:
    """The seasonal error of each series' whole history before a forecast origin (the MASE and
    RMSSE denominators): ``mean |y[t] - y[t - m]|`` and ``mean (y[t] - y[t - m])^2`` over
    observed pairs ``m`` rows apart, as GluonTS's ``calculate_seasonal_error`` (lag 1 for a
    history of at most ``m`` rows; NaN without a pair). Float64 prefix sums.

    Args:
        values: ``(N, C)`` target values, rows sorted by series then time, NaN where missing.
        starts: ``(S + 1,)`` row offsets of the series.
        seasonality: ``m``, in rows.
    """

    def __init__(self, values: np.ndarray, starts: np.ndarray, seasonality: int) -> None:
        self.seasonality = check_positive_int(seasonality, "seasonality")
        values = np.asarray(values, np.float64)
        if values.ndim != 2:
            raise ValueError(f"values must be (N, C), got shape {values.shape}")
        self.starts = np.asarray(starts, np.int64)
        offset = np.arange(len(values)) - np.repeat(self.starts[:-1], np.diff(self.starts))
        self.sums = {lag: self._prefix(values, offset, lag) for lag in {1, self.seasonality}}

    @staticmethod
    def _prefix(values: np.ndarray, offset: np.ndarray, lag: int) -> np.ndarray:
        """``(N + 1, C, 3)`` running sums of ``|d|``, ``d^2``, pairs; ``d = y[t] - y[t-lag]``.
        The terms are written into the sums' own buffer and summed in place: a data module's
        set-up peaks here, and each (N, C, 3) temporary is 24 bytes a row and channel."""
        diff = np.full(values.shape, np.nan)
        diff[lag:] = values[lag:] - values[:-lag]
        diff[offset < lag] = np.nan  # the pair would cross into the previous series
        pair = ~np.isnan(diff)
        diff[~pair] = 0.0
        sums = np.empty((len(values) + 1, *values.shape[1:], 3))
        sums[0] = 0.0
        np.abs(diff, out=sums[1:, ..., 0])
        np.multiply(diff, diff, out=sums[1:, ..., 1])
        sums[1:, ..., 2] = pair
        np.cumsum(sums[1:], 0, out=sums[1:])
        return sums

    def __call__(self, series: np.ndarray, origin: np.ndarray) -> np.ndarray:
        """``(B,)`` series and ``(B,)`` origin rows (the first not in the history) -> ``(B, C,
        2)`` float64 mean absolute and mean squared seasonal errors."""
        start = self.starts[series]
        short = (origin - start <= self.seasonality)[:, None, None]
        total = np.where(short, self.sums[1][origin] - self.sums[1][start],
                         self.sums[self.seasonality][origin]
                         - self.sums[self.seasonality][start])
        with np.errstate(invalid="ignore", divide="ignore"):
            return total[..., :2] / np.where(total[..., 2:] > 0, total[..., 2:], np.nan)


# -- metrics ---------------------------------------------------------------------------------
_RATIOS = ("mase", "rmsse", "smape")  # per-row metrics, averaged over rows


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


def median_position(levels: Sequence[float], name: str = "quantiles"
                    ) -> tuple[int, int, float]:
    """Where the median lies among quantile ``levels`` (checked by
    `check_quantile_levels`): ``(i, j, w)``, the median of quantiles ``q`` being
    ``(1 - w) * q[i] + w * q[j]``, linear in the level between the nearest levels below and
    above 0.5 as GluonTS's ``QuantileForecast.quantile(0.5)`` (``i == j``, ``w = 0`` at 0.5).
    ``ValueError`` for levels all on one side of 0.5, where GluonTS extrapolates a tail."""
    levels = check_quantile_levels(levels, name)
    above = bisect.bisect_left(levels, 0.5)
    if above < len(levels) and levels[above] == 0.5:
        return above, above, 0.0
    if above in (0, len(levels)):
        raise ValueError(f"{name}={levels} must include 0.5 or levels on both sides of it: the "
                         "point forecast is their median, interpolated between the nearest "
                         "levels below and above 0.5 (GluonTS's QuantileForecast.quantile)")
    low, high = levels[above - 1], levels[above]
    return above - 1, above, (0.5 - low) / (high - low)


def interpolated_median(quantiles: Tensor, position: tuple[int, int, float]) -> Tensor:
    """``(..., Q)`` quantiles -> ``(...)`` their median at ``position``
    ([`median_position`][posenc.tasks.forecasting.metrics.median_position])."""
    i, j, weight = position
    if i == j:  # a level of 0.5: that quantile exactly (lerp of inf and inf would be NaN)
        return quantiles[..., i]
    return torch.lerp(quantiles[..., i], quantiles[..., j], weight)


def central_intervals(levels: Sequence[float]) -> dict[str, tuple[int, int]]:
    """The central prediction intervals among quantile ``levels``: ``{"coverage_80": (i, j)}``
    for each pair ``levels[i] = tau < 0.5``, ``levels[j] = 1 - tau`` (to 1e-9), named by its
    nominal coverage ``1 - 2 * tau`` in percent (``coverage_80`` for 0.1 and 0.9)."""
    out = {}
    for i, low in enumerate(levels):
        for j, high in enumerate(levels):
            if low < 0.5 and abs(low + high - 1) < 1e-9:
                out[f"coverage_{round(100 * (1 - 2 * low), 6):g}"] = (i, j)
    return out


_STATES = ("series", "abs_error", "squared_error", "points", "abs_target", "unscored",
           "pinball", "inside", *(f"{name}{part}" for name in _RATIOS for part in ("", "_rows")))


class ForecastMetrics(Metric):
    """MAE, RMSE, MASE, RMSSE, sMAPE and (with quantiles) wQL of forecasts, per series and
    aggregated, as GluonTS's ``Evaluator`` (``aggregate_no_nan``, missing targets masked).

    Per-window sums are ``cat`` states (DDP gathers them without knowing the number of series).
    A *row* is one (window, channel), GluonTS's per-forecast row. Scored points are the observed
    targets whose channel the window's context observes; the others are counted in
    ``unscored`` (their seasonal-naive forecast is NaN).

    - ``mae``, ``rmse``: pooled over every scored point (GluonTS's ``RMSE`` is the root of the
      mean per-row MSE: the same when rows have as many points).
    - ``mase``: per row ``mean |y - yhat| / seasonal_error``
      ([`SeasonalError`][posenc.tasks.forecasting.metrics.SeasonalError]); ``rmsse`` (M5's): per row
      ``sqrt(mean (y - yhat)^2 / mean (y[t] - y[t-m])^2)``; each the mean over rows, NaN rows left
      out (``x / 0 = inf`` as in GluonTS).
    - ``smape``: per row ``2 * mean |y - yhat| / (|y| + |yhat|)`` over non-zero denominators.
    - ``wql`` (``mean_wQuantileLoss``): per level ``2 * sum pinball / sum |y|``, averaged.
    - ``coverage_80`` (and one per pair of levels ``tau``, ``1 - tau``:
      [`central_intervals`][posenc.tasks.forecasting.metrics.central_intervals]): the fraction
      of scored points with ``q_tau <= y <= q_(1 - tau)`` (nominally ``1 - 2 * tau``; GluonTS's
      ``Coverage[q]`` is the fraction with ``y <= q`` of one level).

    Computed in float32, or in float64 when the inputs are float64.

    Args:
        quantiles: the levels of ``quantile_prediction``, increasing in (0, 1); None for point
            forecasts only (no ``wql``).
    """

    full_state_update = False
    is_differentiable = False
    higher_is_better = False

    def __init__(self, quantiles: list[float] | None = None, **kwargs) -> None:
        super().__init__(**kwargs)
        self.quantiles = check_quantile_levels(quantiles)
        self.register_buffer("levels", torch.tensor(self.quantiles or [], dtype=torch.float32),
                             persistent=False)
        self.intervals = central_intervals(self.quantiles or [])
        # (P,) level indexes of each interval's lower and upper quantile
        self._low = [low for low, _ in self.intervals.values()]
        self._high = [high for _, high in self.intervals.values()]
        for name in _STATES:
            self.add_state(name, default=[], dist_reduce_fx="cat")

    def update(self, prediction: Tensor, target: Tensor, observed: Tensor, series: Tensor,
               context_observed: Tensor, seasonal_error: Tensor,
               quantile_prediction: Tensor | None = None) -> None:
        """Add a batch of windows (all values in the same, data units).

        Args:
            prediction: ``(B, Nh, C)`` point forecasts.
            target: ``(B, Nh, C)`` truth (any value where unobserved).
            observed: ``(B, Nh, C)`` bool, True where ``target`` is present.
            series: ``(B,)`` integer index of each window's series (>= 0).
            context_observed: ``(B, Nc, C)`` bool (which channels the context observes).
            seasonal_error: ``(B, C, 2)``
                [`SeasonalError`][posenc.tasks.forecasting.metrics.SeasonalError]'s of each window's
                history.
            quantile_prediction: ``(B, Nh, C, Q)`` at ``quantiles``; required iff the metric
                has quantiles.
        """
        _check_tensor(prediction, "prediction", "float", 3)
        shape = tuple(prediction.shape)
        b, _, channels = shape
        _check_tensor(target, "target", "float", 3, shape, "(B, Nh, C) as prediction")
        _check_tensor(observed, "observed", "bool", 3, shape, "(B, Nh, C) as prediction")
        _check_tensor(series, "series", "integer", 1, (b,), "(B,)")
        _check_tensor(context_observed, "context_observed", "bool", 3)
        _check_shape(context_observed, "context_observed",
                     (b, context_observed.shape[1], channels), "(B, Nc, C)")
        _check_tensor(seasonal_error, "seasonal_error", "float", 3, (b, channels, 2), "(B, C, 2)")
        if (quantile_prediction is None) != (self.quantiles is None):
            raise ValueError(
                "quantile_prediction is required: the metric was built with quantiles="
                f"{self.quantiles}" if quantile_prediction is None else
                "quantile_prediction was given but the metric has quantiles=None")
        dtype = torch.promote_types(prediction.dtype, torch.float32)
        prediction, target = prediction.to(dtype), target.to(dtype)
        seasonal_error = seasonal_error.to(dtype)
        scored = observed & context_observed.any(1, keepdim=True)
        error = (prediction - target).where(scored, 0)
        points = scored.sum(1)                                                    # (B, C)
        # IEEE division gives GluonTS's values: x / 0 = inf, 0 / 0 = NaN (no point or pair).
        denominator = target.abs() + prediction.abs()
        kept = scored & (denominator != 0)
        ratio = (error.abs() / denominator).where(kept, 0)
        rows = {"mase": error.abs().sum(1) / points / seasonal_error[..., 0],
                "rmsse": (error.square().sum(1) / points / seasonal_error[..., 1]).sqrt(),
                "smape": 2 * ratio.sum(1) / kept.sum(1)}
        self.series.append(series.long())
        self.abs_error.append(error.abs().sum((1, 2)))
        self.squared_error.append(error.square().sum((1, 2)))
        self.points.append(points.sum(1).to(dtype))
        self.abs_target.append(target.abs().where(scored, 0).sum((1, 2)))
        self.unscored.append((observed & ~scored).sum((1, 2)).to(dtype))
        for name, value in rows.items():
            defined = ~value.isnan()
            getattr(self, name).append(value.where(defined, 0).sum(1))
            getattr(self, f"{name}_rows").append(defined.sum(1).to(dtype))
        if quantile_prediction is not None:
            _check_tensor(quantile_prediction, "quantile_prediction", "float", 4,
                          (*shape, len(self.quantiles)), f"(B, Nh, C, Q = {len(self.quantiles)})")
            loss = pinball(quantile_prediction.to(dtype), target, self.levels)
            # flat (B * Q,): DDP fills a rank without windows with a 1D empty state
            self.pinball.append(loss.where(scored[..., None], 0).sum((1, 2)).flatten())
            within = ((quantile_prediction[..., self._low] <= target[..., None])
                      & (target[..., None] <= quantile_prediction[..., self._high]))
            self.inside.append((within & scored[..., None]).sum((1, 2)).to(dtype).flatten())

    def _sums(self) -> dict[str, Tensor]:
        """The per-window states, float64 on the CPU; ``pinball`` as ``(W, Q)``."""
        states = {}
        for name in _STATES:
            value = getattr(self, name)
            value = dim_zero_cat(value) if isinstance(value, Tensor) or value else torch.zeros(0)
            states[name] = value.detach().to("cpu", torch.float64)
        states["series"] = states["series"].long()
        states["pinball"] = states["pinball"].reshape(len(states["series"]),
                                                      len(self.quantiles or []))
        states["inside"] = states["inside"].reshape(len(states["series"]), len(self.intervals))
        if len(states["series"]) and int(states["series"].min()) < 0:
            raise ValueError(f"series indices must be >= 0, got {int(states['series'].min())}")
        return states

    def _metrics(self, sums: dict[str, Tensor]) -> dict[str, Tensor]:
        out = {"mae": sums["abs_error"] / sums["points"],
               "rmse": (sums["squared_error"] / sums["points"]).sqrt(),
               **{name: sums[name] / sums[f"{name}_rows"] for name in _RATIOS}}
        if self.quantiles is not None:
            out["wql"] = (2 * sums["pinball"] / sums["abs_target"][..., None]).mean(-1)
        for k, name in enumerate(self.intervals):
            out[name] = sums["inside"][..., k] / sums["points"]
        return out

    def compute(self) -> dict[str, Tensor]:
        """Aggregated: ``{"mae", "rmse", "mase", "rmsse", "smape"[, "wql", "coverage_80", ...],
        "unscored"}`` 0-dim float32 tensors on the metric's device (NaN when nothing was
        scored)."""
        sums = {name: value.sum(0) for name, value in self._sums().items() if name != "series"}
        out = {**self._metrics(sums), "unscored": sums["unscored"]}
        return {name: value.to(self.device, torch.float32) for name, value in out.items()}

    def per_series(self, num_series: int | None = None) -> dict[str, Tensor]:
        """The metrics of each series (synchronised across processes under DDP).

        Args:
            num_series: length of the result (``dm.num_series``); default one past the
                largest series index seen.

        Returns:
            ``{"mae", "rmse", "mase", "rmsse", "smape"[, "wql", "coverage_80", ...], "windows",
            "points", "unscored"}``: ``(S,)`` float64 CPU tensors indexed by series.
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
        """[`per_series`][posenc.tasks.forecasting.metrics.ForecastMetrics.per_series] as a table:
        row ``i`` holds ``series_keys[i]`` (a tuple, one value per ``series_columns``) then series
        ``i``'s metrics."""
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
