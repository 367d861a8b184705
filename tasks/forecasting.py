"""``Forecaster``: the LightningModule that trains, evaluates and serves a
:class:`~posenc.tasks.forecast_network.ForecastTransformer`."""

from __future__ import annotations

from collections.abc import Mapping
from numbers import Real

import pandas as pd
import torch
from lightning.pytorch import LightningModule
from posenc.core import (
    check_bool,
    check_choice,
    check_float,
    check_positive_float,
    check_positive_int,
)
from torch import Tensor, nn
from torchmetrics import MeanAbsoluteError, MeanSquaredError

from .forecast_network import (
    RELATIVE_ENCODINGS,
    TIME_ENCODINGS,
    ForecastTransformer,
    TimeFeatures,
    encoding_reads,
)
from .losses import LOSSES, MeanAbsoluteScaledError, masked_point_loss, quantile_loss
from .optim import check_optim_args, configure_adamw_from_hparams
from .specs import instantiate

__all__ = ["Forecaster"]


class Forecaster(LightningModule):
    """Probabilistic or point forecasting at arbitrary future timestamps.

    Args:
        num_targets: target columns of the data (``C``).
        dim, depth, num_heads, mlp_ratio, dropout: transformer size.
        encodings: additive temporal encodings (default ``[calendar, continuous]``): names
            from ``TIME_ENCODINGS`` (``calendar``, ``calendar_embedding``, ``fourier``,
            ``continuous``, ``time2vec``, ``timedelta``) or ``{class_path, init_args}`` dicts
            (a missing ``dim`` is filled in). Calendar and Fourier features read local
            wall-clock time; the others elapsed time from the forecast origin in
            ``time_unit``; each class declares which as its ``reads`` attribute (one of
            :data:`READS`; a class of your own must too). ``[]`` for none.
        relative: relative-time attention: ``rope``, ``alibi``, None, or a dict such as
            ``{class_path: posenc.core.RotaryEncoding, init_args: {base: 1000.0}}`` (missing
            ``head_dim``/``num_heads`` filled in); one instance per block.
        time_unit: unit of elapsed time (relative positions, continuous/Time2Vec/TimeDelta
            inputs), a pandas duration (``"1h"``); pick the typical sampling step.
        loss: ``mae``, ``mse`` or ``quantile``.
        quantiles: levels for the quantile loss; the one closest to 0.5 is the point forecast.
        mase_season: seasonal lag (observations) of the MASE denominator.
        instance_norm: standardize each window by its own context (RevIN) before the
            transformer and undo it on the output; helps with level shifts.
        lr, weight_decay, warmup, scheduler, min_lr_ratio: AdamW and schedule.
    """

    def __init__(
        self,
        num_targets: int = 1,
        dim: int = 64,
        depth: int = 2,
        num_heads: int = 4,
        mlp_ratio: float = 2.0,
        dropout: float = 0.0,
        encodings: list[str | dict] | None = None,
        relative: str | dict | None = "rope",
        time_unit: str = "1h",
        loss: str = "mae",
        quantiles: list[float] | None = None,
        mase_season: int = 1,
        instance_norm: bool = True,
        lr: float = 1e-3,
        weight_decay: float = 0.01,
        warmup: float = 0.05,
        scheduler: str = "cosine",
        min_lr_ratio: float = 0.0,
    ) -> None:
        super().__init__()
        self.save_hyperparameters()
        check_optim_args(lr, weight_decay, warmup, scheduler, min_lr_ratio)
        for name, value in (("num_targets", num_targets), ("dim", dim), ("depth", depth),
                            ("num_heads", num_heads), ("mase_season", mase_season)):
            check_positive_int(value, name)
        if dim % num_heads:
            raise ValueError(f"dim={dim} must be divisible by num_heads={num_heads}")
        check_positive_float(mlp_ratio, "mlp_ratio")
        if int(dim * mlp_ratio) < 1:  # Block's MLP width
            raise ValueError(f"mlp_ratio={mlp_ratio} gives a hidden width of "
                             f"{int(dim * mlp_ratio)} (dim={dim}); it must be >= 1 / dim")
        check_float(dropout, "dropout", ge=0, lt=1)
        check_bool(instance_norm, "instance_norm")
        if encodings is not None and not isinstance(encodings, (list, tuple)):
            raise TypeError(f"encodings must be a list of encodings, got "
                            f"{type(encodings).__name__} ({encodings!r})")
        check_choice(loss, "loss", LOSSES)
        if loss == "quantile":
            quantiles = [0.1, 0.5, 0.9] if quantiles is None else list(quantiles)
            if any(isinstance(q, bool) or not isinstance(q, Real) for q in quantiles):
                raise TypeError(f"quantiles must be numbers, got {quantiles}")
            if (not quantiles or any(not 0 < q < 1 for q in quantiles)
                    or sorted(set(quantiles)) != quantiles):
                raise ValueError(f"quantiles must be increasing levels in (0, 1), got "
                                 f"{quantiles}")
        elif quantiles:
            raise ValueError(f"quantiles={quantiles} need loss='quantile', got loss={loss!r}")
        try:
            unit_seconds = pd.Timedelta(time_unit).total_seconds()
        except (ValueError, TypeError) as err:
            raise ValueError(f"time_unit must be a duration such as '1h' or '30min', got "
                             f"{time_unit!r}") from err
        if not unit_seconds > 0:
            raise ValueError(f"time_unit must be positive, got {time_unit!r}")
        encodings = ["calendar", "continuous"] if encodings is None else list(encodings)

        head_dim = dim // num_heads
        defaults = {"dim": dim, "head_dim": head_dim, "num_heads": num_heads}
        modules, reads = [], []
        for i, spec in enumerate(encodings):
            module = instantiate(spec, TIME_ENCODINGS, f"encodings[{i}]", defaults)
            modules.append(module)
            reads.append(encoding_reads(module, f"encodings[{i}]"))
        relative_modules = []
        for _ in range(depth):
            if relative is None or relative == "none":
                relative_modules.append((None, None))
                continue
            module = instantiate(relative, RELATIVE_ENCODINGS, "relative", defaults)
            is_rotary = hasattr(module, "rotation")
            relative_modules.append((module, None) if is_rotary else (None, module))
        self.quantile_levels = quantiles
        self.register_buffer("quantiles", torch.tensor(quantiles or [0.5]), persistent=False)
        self.model = ForecastTransformer(
            num_targets, len(quantiles or [0.5]), dim, depth, num_heads, mlp_ratio, dropout,
            TimeFeatures(modules, reads), relative_modules, unit_seconds, instance_norm)
        self.point_index = int((self.quantiles - 0.5).abs().argmin())
        self.metrics = nn.ModuleDict({
            stage: nn.ModuleDict({"mae": MeanAbsoluteError(),
                                  "rmse": MeanSquaredError(squared=False),
                                  "mase": MeanAbsoluteScaledError(mase_season)})
            for stage in ("val", "test")})

    def setup(self, stage: str) -> None:
        datamodule = getattr(self.trainer, "datamodule", None) if self._trainer else None
        theirs = getattr(datamodule, "num_targets", None)
        if theirs is not None and theirs != self.hparams.num_targets:
            raise ValueError(f"model num_targets={self.hparams.num_targets} does not match the "
                             f"data's {theirs} target column(s) "
                             f"({getattr(datamodule, 'target_columns', '?')})")

    def forward(self, batch: Mapping[str, Tensor]) -> Tensor:
        """-> ``(B, Nh, C, Q)`` predictions in scaled units (``Q = 1`` for point losses)."""
        return self.model(batch)

    def _loss(self, pred: Tensor, batch: Mapping[str, Tensor]) -> Tensor:
        target, observed = batch["target_value"], batch["target_observed"]
        if self.hparams.loss == "quantile":
            return quantile_loss(pred.float(), target, observed, self.quantiles)
        return masked_point_loss(pred[..., 0].float(), target, observed, self.hparams.loss)

    def _unscale(self, values: Tensor, batch: Mapping[str, Tensor]) -> Tensor:
        """Scaled ``(B, N, C, ...)`` -> data units."""
        scale, loc = batch["scale"][:, None], batch["loc"][:, None]
        if values.ndim == 4:
            scale, loc = scale[..., None], loc[..., None]
        return values * scale + loc

    def training_step(self, batch: Mapping[str, Tensor], batch_idx: int) -> Tensor:
        loss = self._loss(self(batch), batch)
        self.log("train/loss", loss, prog_bar=True, batch_size=batch["target_valid"].shape[0])
        return loss

    def _eval_step(self, stage: str, batch: Mapping[str, Tensor]) -> None:
        pred = self(batch).float()
        loss = self._loss(pred, batch)
        self.log(f"{stage}/loss", loss, sync_dist=True, prog_bar=stage == "val",
                 batch_size=batch["target_valid"].shape[0])
        point = pred[..., self.point_index]
        observed = batch["target_observed"]
        metrics = self.metrics[stage]
        metrics["mae"].update(self._unscale(point, batch)[observed],
                              self._unscale(batch["target_value"], batch)[observed])
        metrics["rmse"].update(self._unscale(point, batch)[observed],
                               self._unscale(batch["target_value"], batch)[observed])
        metrics["mase"].update(point, batch["target_value"], observed, batch["context_value"],
                               batch["context_observed"])
        for name, metric in metrics.items():
            self.log(f"{stage}/{name}", metric, prog_bar=stage == "val" and name == "mae")

    def validation_step(self, batch, batch_idx: int) -> None:
        self._eval_step("val", batch)

    def test_step(self, batch, batch_idx: int) -> None:
        self._eval_step("test", batch)

    def predict_step(self, batch, batch_idx: int = 0, dataloader_idx: int = 0
                     ) -> dict[str, Tensor]:
        """Forecasts in data units: ``{"time": (B, Nh) int64 UTC ns, "valid": (B, Nh),
        "prediction": (B, Nh, C) point, "quantiles": (B, Nh, C, Q)}``."""
        pred = self._unscale(self(batch).float(), batch)
        return {"time": batch["target_time"], "valid": batch["target_valid"],
                "prediction": pred[..., self.point_index], "quantiles": pred}

    def configure_optimizers(self) -> dict:
        return configure_adamw_from_hparams(self)
