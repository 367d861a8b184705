"""``Forecaster``: the LightningModule that trains, evaluates and serves a
[`ForecastTransformer`][posenc.tasks.forecasting.network.ForecastTransformer]."""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd
import torch
from lightning.pytorch import LightningModule
from lightning.pytorch.trainer.states import TrainerFn
from posenc.core._checks import (
    check_bool,
    check_choice,
    check_float,
    check_int,
    check_positive_float,
    check_positive_int,
)
from posenc.temporal.timestamps import parse_duration, parse_time_unit
from torch import Tensor, nn

from ..config import (
    CheckedCheckpointLoading,
    check_optim_args,
    configure_adamw_from_hparams,
    instantiate,
)
from .datamodule import PERSISTENCE
from .metrics import (
    LOSSES,
    ForecastMetrics,
    check_quantile_levels,
    interpolated_median,
    masked_point_loss,
    median_position,
    quantile_loss,
    season_label,
    seasonal_naive,
)
from .network import (
    RELATIVE_ENCODINGS,
    TIME_ENCODINGS,
    ForecastTransformer,
    TimeFeatures,
    encoding_reads,
)
from .output import data_state, forecast_frame, request_dataset
from .schema import CHECKPOINT_KEY, Fitted

__all__ = ["KEEP_BEST", "Forecaster"]

# Validation metrics ``keep_best`` can select by (lower is better; ``wql``: quantile loss only).
KEEP_BEST = ("loss", "mae", "rmse", "mase", "rmsse", "smape", "wql")


def _check_list(value: Any, name: str, what: str) -> None:
    if value is not None and not isinstance(value, (list, tuple)):
        raise TypeError(f"{name} must be a list of {what}, got {type(value).__name__} ({value!r})")


class Forecaster(CheckedCheckpointLoading, LightningModule):
    """Probabilistic or point forecasting at arbitrary future timestamps.

    Args:
        num_targets: target columns of the data (``C``).
        num_past_covariates: past covariate columns (``P``).
        num_future_covariates: future covariate columns (``K``).
        static_cardinalities: codes per categorical static column (values + 1 for unknown).
        num_static_real: numeric static columns. ``posenc fit`` links these five sizes from
            the data module's properties of the same names; in Python ``setup`` checks them.
        dim: token width.
        depth: transformer blocks.
        num_heads: attention heads.
        mlp_ratio: MLP hidden width / ``dim``.
        dropout: dropout probability.
        encodings: additive temporal encodings (default ``[calendar, continuous]``, ``[]`` for
            none): names from ``TIME_ENCODINGS`` (``calendar``, ``calendar_embedding``,
            ``fourier``, ``continuous``, ``time2vec``, ``timedelta``, ``index_sinusoidal``,
            ``age``) or ``{class_path, init_args}`` dicts (a missing ``dim`` is filled in),
            e.g. ``{class_path: posenc.temporal.HolidayFeatures, init_args: {country: US}}``.
            A class declares what it reads as ``reads`` (one of
            `READS`) and its width as ``dim``.
        relative: relative-time attention: ``rope``, ``alibi``, None, or a dict such as
            ``{class_path: posenc.core.RotaryEncoding, init_args: {base: 1000.0}}`` (missing
            ``head_dim``/``num_heads`` filled in); one instance per block.
        time_unit: unit of elapsed time (relative positions, continuous/Time2Vec/TimeDelta
            inputs), typically the sampling step: a fixed duration (``"1h"``, ``"30min"``) or,
            for monthly or coarser data, calendar months, quarters or years (``"MS"``,
            ``"QS"``, ``"YS"``, ``"month"``, ...; see
            `parse_time_unit`) counted on the local wall
            clock. ``"M"`` is refused as ambiguous.
        loss: ``mae``, ``mse`` or ``quantile``.
        quantiles: levels for the quantile loss, including 0.5 or levels on both sides of it:
            the point forecast (and the metrics') is their median, interpolated linearly in the
            level as GluonTS's ``QuantileForecast.quantile(0.5)``.
        naive_seasons: seasons of the seasonal-naive baselines as durations (``["1D", "7D"]``;
            linked from the data module), None or ``[]`` for none. Evaluation logs each one's
            metrics beside the model's on the same points (``test/mae_naive_7d``, ...) and the
            strongest's (lowest MAE) as ``test/mae_naive``; ``{stage}/unscored`` counts the
            targets whose channel the context never observes. MASE and RMSSE use the batches'
            ``seasonal_error`` (the data module's ``mase_season``).
        instance_norm: standardize each window by its own context (RevIN) before the
            transformer and undo it on the output; helps with level shifts.
        nonnegative: forecasts (point and quantiles) never below zero in data units, for
            counts and other non-negative targets (a softplus floored at the scaled zero; see
            [`ForecastTransformer`][posenc.tasks.forecasting.network.ForecastTransformer]).
        lr: AdamW's peak learning rate.
        weight_decay: AdamW's weight decay (position parameters get none).
        warmup: fraction of training steps with linear warmup.
        scheduler: ``"cosine"`` or ``"constant"`` after warmup.
        min_lr_ratio: the cosine schedule's final learning rate / ``lr``.
        instance_norm_stats: with ``instance_norm``, ``"standard"`` (mean and standard
            deviation, RevIN), ``"robust"`` (median and MAD, neuralforecast's ``robust``) or
            ``"last"`` (the last observed value and the standard deviation: the network
            forecasts the change from persistence, NLinear's anchor;
            [`window_statistics`][posenc.tasks.forecasting.network.window_statistics]).
        lags: seasons as durations (``["1D", "7D"]``; ``"persistence"``: the last observed
            value, as the data module's ``season``), or None: each time to predict gets the
            seasonal-naive value of each season as an input (the baselines' forecast,
            [`lag_inputs`][posenc.tasks.forecasting.network.ForecastTransformer.lag_inputs]).
        patch_size: context observations per token (1: one each); ``P > 1`` makes PatchTST's
            patches, counted back from the forecast origin.
        patch_stride: observations between consecutive patches' ends (``1 <= S <= P``), or
            None for ``patch_size`` (patches side by side); ``S < P`` overlaps them (PatchTST's
            16 and 8).
        origin_tokens: ``K > 0``: every query token also gets a linear map of the context's
            latest ``K`` tokens (patches with ``patch_size``), a direct path from the latest
            values to each forecast, as a decoder starts from the encoder's last state; 0: none.
        keep_best: a validation metric of `KEEP_BEST` (``"mae"``, ``"loss"``, ...), or None:
            at the end of ``fit`` the model holds the weights of the validation run where that
            metric (``val/NAME``) was lowest, kept in memory (a CPU copy, no checkpoint file),
            instead of the last step's; ``kept_best`` says which (``{"epoch"`` (0-based),
            ``"step", "metric", "value"}``). None, or a fit that never
            validates (``limit_val_batches=0``, a refit on train + validation), keeps the last
            weights. A resumed fit selects among its own validation runs only.
    """

    def __init__(
        self, num_targets: int = 1, num_past_covariates: int = 0, num_future_covariates: int = 0,
        static_cardinalities: list[int] | None = None, num_static_real: int = 0, dim: int = 64,
        depth: int = 2, num_heads: int = 4, mlp_ratio: float = 2.0, dropout: float = 0.0,
        encodings: list[str | dict] | None = None, relative: str | dict | None = "rope",
        time_unit: str = "1h", loss: str = "mae", quantiles: list[float] | None = None,
        naive_seasons: list[str] | None = None, instance_norm: bool = True,
        nonnegative: bool = False, lr: float = 1e-3, weight_decay: float = 0.01,
        warmup: float = 0.05, scheduler: str = "cosine", min_lr_ratio: float = 0.0,
        instance_norm_stats: str = "standard", lags: list[str] | None = None,
        patch_size: int = 1, patch_stride: int | None = None, origin_tokens: int = 0,
        keep_best: str | None = None,
    ) -> None:
        super().__init__()
        self.save_hyperparameters()
        check_optim_args(lr, weight_decay, warmup, scheduler, min_lr_ratio)
        for name, value in (("num_targets", num_targets), ("dim", dim), ("depth", depth),
                            ("num_heads", num_heads)):
            check_positive_int(value, name)
        for name, value in (("num_past_covariates", num_past_covariates),
                            ("num_future_covariates", num_future_covariates),
                            ("num_static_real", num_static_real)):
            check_int(value, name, ge=0)
        _check_list(static_cardinalities, "static_cardinalities", "ints")
        for i, value in enumerate(static_cardinalities or []):
            check_positive_int(value, f"static_cardinalities[{i}]")
        _check_list(naive_seasons, "naive_seasons", "durations or None")
        # {logged-name suffix: season ns}, e.g. {"_naive_7d": 604800000000000}
        self.naive_seasons = {}
        for i, season in enumerate(naive_seasons or []):
            season_ns = parse_duration(season, f"naive_seasons[{i}]")
            suffix = f"_naive_{season_label(season_ns)}"
            if suffix in self.naive_seasons:
                raise ValueError(f"naive_seasons={naive_seasons} repeats the season {season!r}")
            self.naive_seasons[suffix] = season_ns
        _check_list(lags, "lags", "durations or None")
        # persistence: a season of 1 ns reaches back to the origin (seasonal_naive's rule)
        lag_seasons = [1 if season == PERSISTENCE else parse_duration(season, f"lags[{i}]")
                       for i, season in enumerate(lags or [])]
        if dim % num_heads:
            raise ValueError(f"dim={dim} must be divisible by num_heads={num_heads}")
        check_positive_float(mlp_ratio, "mlp_ratio")
        if int(dim * mlp_ratio) < 1:  # Block's MLP width
            raise ValueError(f"mlp_ratio={mlp_ratio} gives a hidden width of "
                             f"{int(dim * mlp_ratio)} (dim={dim}); it must be >= 1 / dim")
        check_float(dropout, "dropout", ge=0, lt=1)
        check_bool(instance_norm, "instance_norm")
        check_bool(nonnegative, "nonnegative")
        _check_list(encodings, "encodings", "encodings")
        check_choice(loss, "loss", LOSSES)
        if keep_best is not None:
            check_choice(keep_best, "keep_best", KEEP_BEST)
            if keep_best == "wql" and loss != "quantile":
                raise ValueError(f"keep_best='wql' needs loss='quantile' (the only loss whose "
                                 f"validation logs val/wql), got loss={loss!r}")
        if loss == "quantile":
            quantiles = check_quantile_levels([0.1, 0.5, 0.9] if quantiles is None else quantiles)
            median_position(quantiles)  # refused here, before the network is built
        elif quantiles:
            raise ValueError(f"quantiles={quantiles} need loss='quantile', got loss={loss!r}")
        unit = parse_time_unit(time_unit, "time_unit")
        encodings = ["calendar", "continuous"] if encodings is None else list(encodings)
        defaults = {"dim": dim, "head_dim": dim // num_heads, "num_heads": num_heads}
        modules, reads = [], []
        for i, spec in enumerate(encodings):
            module = instantiate(spec, TIME_ENCODINGS, f"encodings[{i}]", defaults,
                                 kinds=("additive",))
            modules.append(module)
            reads.append(encoding_reads(module, f"encodings[{i}]"))

        def relative_modules() -> tuple[nn.Module | None, nn.Module | None]:
            """A block's ``(rotary, bias)``: a new ``relative`` module in its slot."""
            module = None if relative in (None, "none") else instantiate(
                relative, RELATIVE_ENCODINGS, "relative", defaults,
                kinds=("rotary", "bias", "none"))
            return (module, None) if hasattr(module, "rotation") else (None, module)

        self.quantile_levels = quantiles
        self.register_buffer("quantiles", torch.tensor(quantiles or [0.5]), persistent=False)
        self.model = ForecastTransformer(
            num_targets, len(quantiles or [0.5]), dim, depth, num_heads, mlp_ratio, dropout,
            TimeFeatures(modules, reads), relative_modules, unit.nanoseconds / 1e9,
            instance_norm, num_past=num_past_covariates, num_future=num_future_covariates,
            static_cardinalities=static_cardinalities, num_static_real=num_static_real,
            unit_months=unit.months, nonnegative=nonnegative,
            instance_norm_stats=instance_norm_stats, lag_seasons=lag_seasons or None,
            patch_size=patch_size, patch_stride=patch_stride, origin_tokens=origin_tokens)
        # The state fitted on the training span: the data module's at the first fit, then kept
        # (in checkpoints, for forecast(); data it is tested on must be read with it).
        self.fitted: Fitted | None = None
        # The point forecast: the outputs' median (GluonTS's), interpolated between levels.
        self.median_at = median_position(quantiles or [0.5])
        # The model's and the seasonal-naive baselines' errors on the same windows, by suffix.
        levels = quantiles if loss == "quantile" else None
        self.metrics = nn.ModuleDict({
            stage: nn.ModuleDict({suffix or "model": ForecastMetrics(levels)
                                  for suffix in ("", *self.naive_seasons)})
            for stage in ("val", "test")})
        self.test_per_series: pd.DataFrame | None = None
        # keep_best's record of this fit: {"epoch", "step", "metric", "value"} of the
        # best validation run so far, and a CPU copy of its weights (not kept after fit).
        self.kept_best: dict[str, Any] | None = None
        self._best_state: dict[str, Tensor] | None = None

    def data_sizes(self) -> dict[str, Any]:
        """The sizes this model was built for, by the data module property they match."""
        hp = self.hparams
        return {"num_targets": hp.num_targets, "num_past_covariates": hp.num_past_covariates,
                "num_future_covariates": hp.num_future_covariates,
                "static_cardinalities": list(hp.static_cardinalities or []),
                "num_static_real": hp.num_static_real}

    def setup(self, stage: str) -> None:
        """Check the trainer's data module (its sizes, and the state it reads with: this
        model's, [`Fitted.check_data`][posenc.tasks.Fitted.check_data]); at a first fit, without a
        state yet, the data's becomes this model's."""
        state = data_state(self._trainer)
        if state is None:
            return
        if self.fitted is not None:  # first: it names the columns that differ
            self.fitted.check_data(state)
        datamodule = self._trainer.datamodule
        for name, ours in self.data_sizes().items():
            theirs = getattr(datamodule, name, None)
            if theirs is not None and list(np.atleast_1d(theirs)) != list(np.atleast_1d(ours)):
                raise ValueError(
                    f"model {name}={ours} does not match the data's {theirs} "
                    f"({type(datamodule).__name__}); posenc fit links these sizes from the "
                    f"data module, in Python pass datamodule.{name}")
        if self.fitted is None:
            self.fitted = state

    def on_save_checkpoint(self, checkpoint: dict[str, Any]) -> None:
        if self.fitted is not None:
            checkpoint[CHECKPOINT_KEY] = self.fitted.to_dict()

    def on_load_checkpoint(self, checkpoint: dict[str, Any]) -> None:
        if CHECKPOINT_KEY in checkpoint:
            try:
                self.fitted = Fitted.from_dict(checkpoint[CHECKPOINT_KEY])
            except (TypeError, ValueError) as err:  # an untrusted checkpoint's plain data
                raise type(err)(f"the checkpoint's fitted state: {err}") from err
            # Lightning restores a checkpoint after setup: the trainer's data must read with
            # this state too.
            state = data_state(self._trainer)
            if state is not None:
                self.fitted.check_data(state)

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

    def _forecast_units(self, pred: Tensor, batch: Mapping[str, Tensor]) -> Tensor:
        """Scaled ``(B, N, C, Q)`` predictions -> data units (``nonnegative``: float32 rounding
        below 0 clamped)."""
        pred = self._unscale(pred, batch)
        return pred.clamp_min(0) if self.hparams.nonnegative else pred

    def training_step(self, batch: Mapping[str, Tensor], batch_idx: int) -> Tensor:
        loss = self._loss(self(batch), batch)
        self.log("train/loss", loss, prog_bar=True, batch_size=batch["target_valid"].shape[0])
        return loss

    def _eval_step(self, stage: str, batch: Mapping[str, Tensor]) -> None:
        real = batch.get("real")
        if real is not None and not bool(real.all()):
            # A Parquet dataset's padding (every rank runs as many batches): no window.
            if not bool(real.any()):
                return
            batch = {key: value[real] for key, value in batch.items()}
        pred = self(batch).float()
        loss = self._loss(pred, batch)
        size = batch["target_valid"].shape[0]
        self.log(f"{stage}/loss", loss, sync_dist=True, prog_bar=stage == "val", batch_size=size)
        pred = self._forecast_units(pred, batch)
        # Scored on the data as read: unscale(scale(0)) can be 1e-8, not a 0/0 point of sMAPE.
        target, context = batch["target_raw"], batch["context_raw"]
        context_observed = batch["context_observed"]
        series = batch.get("series", torch.zeros(size, dtype=torch.int64, device=pred.device))
        args = (target, batch["target_observed"], series, context_observed, batch["seasonal_error"])
        quantile = self.hparams.loss == "quantile"
        metrics = self.metrics[stage]
        metrics["model"].update(interpolated_median(pred, self.median_at), *args,
                                pred if quantile else None)
        for suffix, season_ns in self.naive_seasons.items():
            naive = seasonal_naive(batch["context_time"], context, context_observed,
                                   batch["context_valid"], batch["target_time"], season_ns,
                                   context_local=batch["context_local"],
                                   target_local=batch["target_local"])
            # Every quantile at the naive value: its wQL is comparable with the model's.
            metrics[suffix].update(naive, *args, naive[..., None].expand_as(pred)
                                   if quantile else None)

    def _compared(self, stage: str) -> list[tuple[str, str, dict[str, Tensor]]]:
        """``(metrics key, logged-name suffix, computed metrics)`` of the model, each
        baseline, and the strongest baseline (lowest MAE) again as ``_naive``."""
        compared = [(key, "" if key == "model" else key, metric.compute())
                    for key, metric in self.metrics[stage].items()]
        baselines = [c for c in compared[1:] if not c[2]["mae"].isnan()]
        if baselines:
            key, _, values = min(baselines, key=lambda c: c[2]["mae"].item())
            compared.append((key, "_naive", values))
        return compared

    def _log_metrics(self, stage: str) -> None:
        """Log the epoch's ``{stage}/mae`` ..., each baseline's ``{stage}/mae_naive_7d`` ... and
        the strongest's ``{stage}/mae_naive`` ..."""
        metrics = self.metrics[stage]
        compared = self._compared(stage)
        for _, suffix, values in compared:
            for name, value in values.items():
                self.log(f"{stage}/{name}{suffix}", value, prog_bar=stage == "val"
                         and name == "mae" and not suffix)
        if stage == "test":
            self.test_per_series = self._per_series(metrics, compared)
            trainer = self._trainer
            if (self.test_per_series is not None and trainer is not None and trainer.loggers
                    and trainer.is_global_zero and trainer.log_dir):
                path = Path(trainer.log_dir) / "test_per_series.csv"
                path.parent.mkdir(parents=True, exist_ok=True)
                self.test_per_series.to_csv(path, index=False)
        for metric in metrics.values():
            metric.reset()

    def _per_series(self, metrics: nn.ModuleDict, compared: list) -> pd.DataFrame | None:
        """The test metrics per series (model, each ``*_naive_*``, the strongest's ``*_naive``),
        one row per series of the data tested."""
        fitted = data_state(self._trainer) or self.fitted
        if fitted is None:
            return None
        names = list(fitted.columns.series_columns)
        frames = []
        for who, suffix, _ in compared:
            frame = metrics[who].per_series_frame(fitted.series_keys, names)
            frames.append(frame if not suffix else frame.drop(columns=names).add_suffix(suffix))
        return pd.concat(frames, axis=1)

    def on_validation_epoch_end(self) -> None:
        self._log_metrics("val")

    def on_fit_start(self) -> None:
        self.kept_best, self._best_state = None, None

    def on_validation_end(self) -> None:
        """With ``keep_best``: copy the weights if this validation run is the best so far.
        Lightning has reduced the epoch's logged values into ``callback_metrics`` by now (the
        hook ModelCheckpoint saves in)."""
        name = self.hparams.keep_best
        trainer = self._trainer
        if (name is None or trainer is None or trainer.sanity_checking
                or trainer.state.fn != TrainerFn.FITTING):
            return
        value = trainer.callback_metrics.get(f"val/{name}")
        if value is None or not torch.isfinite(value):  # nothing scored: not a candidate
            return
        value = float(value)
        if self.kept_best is None or value < self.kept_best["value"]:
            self.kept_best = {"epoch": trainer.current_epoch, "step": trainer.global_step,
                              "metric": f"val/{name}", "value": value}
            self._best_state = {key: tensor.detach().to("cpu", copy=True)
                                for key, tensor in self.state_dict().items()}

    def on_fit_end(self) -> None:
        """With ``keep_best``: load the best validation run's weights (none: keep the last)."""
        if self._best_state is not None:
            self.load_state_dict(self._best_state)
            self._best_state = None

    def on_test_epoch_end(self) -> None:
        self._log_metrics("test")

    def validation_step(self, batch, batch_idx: int) -> None:
        self._eval_step("val", batch)

    def test_step(self, batch, batch_idx: int) -> None:
        self._eval_step("test", batch)

    def predict_step(self, batch, batch_idx: int = 0, dataloader_idx: int = 0) -> dict[str, Tensor]:
        """Forecasts in data units: ``{"series": (B,) int64 (rows of ``fitted.series_keys``),
        "origin": (B,) int64 UTC ns of the last context observation, "time": (B, Nh) int64
        UTC ns, "valid": (B, Nh), "prediction": (B, Nh, C) point, "quantiles":
        (B, Nh, C, Q)}``."""
        pred = self._forecast_units(self(batch).float(), batch)
        last = batch["context_valid"].sum(1, keepdim=True).clamp_min(1) - 1
        series = batch.get("series")
        if series is None:
            series = torch.zeros(len(last), dtype=torch.int64, device=last.device)
        valid = batch["target_valid"]
        if "real" in batch:  # a Parquet dataset's padding windows forecast nothing
            valid = valid & batch["real"][:, None]
        return {"series": series, "origin": batch["context_time"].gather(1, last)[:, 0],
                "time": batch["target_time"], "valid": valid,
                "prediction": interpolated_median(pred, self.median_at), "quantiles": pred}

    @torch.no_grad()
    def forecast(self, history: pd.DataFrame, future: pd.DataFrame | int | None = None, *,
                 batch_size: int = 256) -> pd.DataFrame:
        """History in, forecasts out: one row per series and time to predict.

        Args:
            history: long-format table with the training data's columns, read exactly as in
                training (a series new to the model is scaled by its own history). Each
                series' context is its last ``context_length``.
            future: the times to predict: a table of the series and timestamp columns (plus
                the future covariates), an int number of sampling steps, or None for the
                trained horizon.
            batch_size: series per forward pass.

        Returns:
            The [`forecast_frame`][posenc.tasks.forecasting.output.forecast_frame] table.

        Needs `fitted`, set by ``fit`` with a
        [`TimeSeriesDataModule`][posenc.tasks.TimeSeriesDataModule] and kept in its checkpoints
        (``Forecaster.load_from_checkpoint(path).forecast(df)``).
        """
        if self.fitted is None:
            raise RuntimeError("this Forecaster has no fitted state: fit it with a "
                               "TimeSeriesDataModule, or load a checkpoint written by such a fit")
        check_positive_int(batch_size, "batch_size")
        dataset = request_dataset(self.fitted, history, future)
        was_training = self.training
        self.eval()
        outputs = []
        try:
            for start in range(0, len(dataset), batch_size):
                batch = dataset.__getitems__(range(start, min(start + batch_size, len(dataset))))
                batch = {k: v.to(self.device) for k, v in batch.items()}
                outputs.append({k: v.cpu() for k, v in self.predict_step(batch).items()})
        finally:
            self.train(was_training)
        return forecast_frame(outputs, dataset.fitted, self.quantile_levels)

    def configure_optimizers(self) -> dict:
        return configure_adamw_from_hparams(self)
