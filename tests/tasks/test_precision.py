"""Both tasks train under ``bf16-mixed`` autocast (run here on CPU; the same code path as on a
GPU): no dtype clashes, finite losses, float32 metrics."""

from __future__ import annotations

import math

import pytest
import torch
from lightning.pytorch import Trainer, seed_everything
from posenc.tasks import DigitsDataModule, Forecaster, ImageClassifier, TimeSeriesDataModule

from .conftest import synthetic_series


def _fit(model, data, tmp_path) -> dict[str, float]:
    trainer = Trainer(accelerator="cpu", devices=1, precision="bf16-mixed", max_epochs=1,
                      limit_train_batches=2, limit_val_batches=1, logger=False,
                      enable_progress_bar=False, enable_model_summary=False,
                      enable_checkpointing=False, num_sanity_val_steps=0,
                      default_root_dir=tmp_path)
    trainer.fit(model, data)
    assert trainer.global_step == 2
    assert {p.dtype for p in model.parameters()} == {torch.float32}
    return {k: float(v) for k, v in trainer.callback_metrics.items()}


@pytest.mark.parametrize("encoding", ["learned", "rope_mixed", "relbias", "cpb"])
def test_image_classifier_bf16_mixed(encoding, tmp_path):
    seed_everything(0)
    model = ImageClassifier(encoding=encoding, img_size=8, patch_size=4, embed_dim=16, depth=1,
                            num_heads=2)
    metrics = _fit(model, DigitsDataModule(batch_size=32, eval_image_sizes=[8, 12]), tmp_path)
    assert all(math.isfinite(metrics[k]) for k in ("train/loss", "val/acc_12", "val/loss_8"))


@pytest.mark.parametrize("relative", ["rope", "alibi"])
def test_forecaster_bf16_mixed(relative, tmp_path):
    seed_everything(0)
    model = Forecaster(dim=16, depth=1, num_heads=2, relative=relative, loss="quantile",
                       encodings=["calendar", "fourier", "continuous", "time2vec", "timedelta"])
    data = TimeSeriesDataModule(synthetic_series(300), context_length=24, horizon=6,
                                batch_size=8)
    metrics = _fit(model, data, tmp_path)
    assert all(math.isfinite(metrics[k]) for k in ("train/loss", "val/mae", "val/mase"))
