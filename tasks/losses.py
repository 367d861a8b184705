"""Forecasting losses (MAE, MSE, quantile) and the MASE metric, all with missing-value masks."""

from __future__ import annotations

import torch
from posenc.core import check_positive_int
from torch import Tensor
from torchmetrics import Metric

__all__ = ["LOSSES", "masked_point_loss", "pinball", "quantile_loss", "naive_scale",
           "scaled_errors", "MeanAbsoluteScaledError"]

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
