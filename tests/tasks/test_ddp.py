"""Both tasks under DDP on CPU (``accelerator: cpu, devices: 2, strategy: ddp``, gloo), run
from the command line: the ranks end with identical validation metrics, those equal a
single-process validation of the saved checkpoint, and the checkpoint loads weights-only.

The validation sets are sized so that ``DistributedSampler`` needs no padding (180 digits,
54 forecast windows): both ranks together see exactly the single-process set.
"""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pandas as pd
import pytest
import torch
from lightning.pytorch import Trainer
from posenc.tasks import (
    DigitsDataModule,
    Forecaster,
    ImageClassifier,
    MovingDigitsDataModule,
    VideoClassifier,
)
from posenc.tasks.datasets import BirthdaysDataModule, SeattleTempsDataModule

from .conftest import CONFIGS, TINY_FORECASTER, TINY_VIT, run_cli

DDP = [
    "--trainer.accelerator=cpu", "--trainer.devices=2", "--trainer.strategy=ddp",
    "--trainer.max_epochs=1", "--trainer.limit_train_batches=2",
    "--trainer.num_sanity_val_steps=0", "--trainer.enable_progress_bar=false",
    "--trainer.enable_model_summary=false", "--test_after_fit=false",
]
HERE = Path(__file__).parent


def _probe(out: Path) -> list[str]:
    return ["--trainer.callbacks+=ddp_probe.DumpMetrics", f"--trainer.callbacks.out_dir={out}"]


def _rank_metrics(out: Path) -> dict[str, float]:
    ranks = [json.loads((out / f"rank{r}.json").read_text()) for r in (0, 1)]
    assert ranks[0]["world_size"] == ranks[1]["world_size"] == 2
    val = [{k: v for k, v in r.items() if k.startswith("val/")} for r in ranks]
    assert val[0] and val[0] == val[1]  # synced: every rank ends with the same numbers
    return val[0]


def _validate(model, data, tmp_path) -> dict[str, float]:
    trainer = Trainer(accelerator="cpu", devices=1, logger=False, enable_progress_bar=False,
                      default_root_dir=tmp_path)
    return trainer.validate(model, data, verbose=False)[0]


def test_image_classifier_ddp(tmp_path):
    out = tmp_path / "metrics"
    run_cli(["fit", "--config", str(CONFIGS / "vit_mnist.yaml"),
             "--model.init_args.encoding=relbias",
             "--data=posenc.tasks.DigitsDataModule", "--data.eval_image_sizes=[8, 16]",
             "--data.batch_size=64", *TINY_VIT, *DDP, *_probe(out)],
            cwd=tmp_path, extra_path=HERE)
    metrics = _rank_metrics(out)
    assert {"val/acc_8", "val/acc_16", "val/loss_8"} <= set(metrics)
    [last] = tmp_path.rglob("last.ckpt")
    torch.load(last, weights_only=True)
    model = ImageClassifier.load_from_checkpoint(last, weights_only=True)
    data = DigitsDataModule(batch_size=64, eval_image_sizes=[8, 16])
    data.setup()
    assert len(data.val_set) % 2 == 0
    single = _validate(model, data, tmp_path)
    for key in ("val/acc_8", "val/acc_16", "val/loss_8", "val/loss_16"):
        assert single[key] == pytest.approx(metrics[key], abs=1e-5), key
    # Predictions: each rank predicts every other test digit; rank 0 writes them all, in the
    # loader's order, equal to one process's.
    run_cli(["predict", "--config", str(CONFIGS / "vit_mnist.yaml"), f"--ckpt_path={last}",
             "--data=posenc.tasks.DigitsDataModule", "--data.eval_image_sizes=[8, 16]",
             "--data.batch_size=64", *TINY_VIT, *DDP[:3], "--trainer.enable_progress_bar=false",
             "--trainer.callbacks+=posenc.tasks.ClassPredictionWriter",
             "--trainer.callbacks.path=ddp.csv"], cwd=tmp_path)
    written = pd.read_csv(tmp_path / "ddp.csv")
    assert written["input"].tolist() == data.split_indices["test"].tolist()
    images = torch.stack([image for image, _ in data.test_set])
    with torch.no_grad():
        expected = model.eval()(images).softmax(-1).numpy()
    np.testing.assert_allclose(written[[f"p_{k}" for k in range(10)]], expected, atol=1e-5)


@pytest.mark.slow
def test_video_classifier_ddp(tmp_path):
    """Clips at irregular frame times under DDP: every evaluation setting (frame rate, length)
    synced across the ranks and equal to one process's validation of the checkpoint."""
    out = tmp_path / "metrics"
    clips = dict(source="digits", num_frames=4, image_size=12, digit_size=6, train_clips=32,
                 eval_clips=16, batch_size=8)
    run_cli(["fit", "--config", str(CONFIGS / "video_digits.yaml"), *TINY_VIT, *DDP,
             *(f"--data.init_args.{k}={v}" for k, v in clips.items()),
             "--trainer.check_val_every_n_epoch=1", *_probe(out)],
            cwd=tmp_path, extra_path=HERE)
    metrics = _rank_metrics(out)
    keys = [f"val/{m}_{v}" for m in ("acc", "loss") for v in ("1x", "rate2x", "len2x")]
    assert set(keys) <= set(metrics)
    [last] = tmp_path.rglob("last.ckpt")
    model = VideoClassifier.load_from_checkpoint(last, weights_only=True)
    assert model.hparams.frame_time == "real" and model.hparams.time_scale == 8.0
    data = MovingDigitsDataModule(**clips)
    data.setup()
    single = _validate(model, data, tmp_path)
    for key in keys:
        assert single[key] == pytest.approx(metrics[key], abs=1e-5), key


def test_forecaster_ddp(tmp_path):
    out = tmp_path / "metrics"
    window = ["--data.init_args.context_length=24", "--data.init_args.horizon=24",
              "--data.init_args.stride=24", "--data.init_args.batch_size=16"]
    run_cli(["fit", "--config", str(CONFIGS / "forecast_seattle.yaml"), *TINY_FORECASTER,
             *window, *DDP, *_probe(out)], cwd=tmp_path, extra_path=HERE)
    metrics = _rank_metrics(out)
    assert {"val/mae", "val/rmse", "val/mase", "val/loss"} <= set(metrics)
    [ckpt] = tmp_path.rglob("*.ckpt")
    model = Forecaster.load_from_checkpoint(ckpt, weights_only=True)
    data = SeattleTempsDataModule(context_length=24, horizon=24, stride=24, batch_size=16)
    data.setup()
    assert len(data.datasets["val"]) % 2 == 0
    single = _validate(model, data, tmp_path)
    for key in ("val/mae", "val/rmse", "val/mase", "val/loss"):
        assert single[key] == pytest.approx(metrics[key], rel=1e-5), key


@pytest.mark.slow
def test_forecaster_ddp_on_a_panel(tmp_path):
    """A panel (4 states' daily births) under DDP: the ranks end with the same model and
    seasonal-naive metrics, and they equal one process's validation of the checkpoint (the
    per-window sums are gathered, whichever rank saw which series)."""
    out = tmp_path / "metrics"
    data = ["--data.init_args.states=[CA, TX, NY, FL]", "--data.init_args.start=1987",
            "--data.init_args.end=1988", "--data.init_args.context_length=28",
            "--data.init_args.horizon=7", "--data.init_args.stride=7",
            "--data.init_args.batch_size=16"]
    run_cli(["fit", "--config", str(CONFIGS / "forecast_birthdays.yaml"), *TINY_FORECASTER,
             *data, *DDP, *_probe(out)], cwd=tmp_path, extra_path=HERE)
    metrics = _rank_metrics(out)
    keys = ("val/mae", "val/rmse", "val/mase", "val/mae_naive", "val/mase_naive")
    assert set(keys) <= set(metrics)
    [ckpt] = tmp_path.rglob("*.ckpt")
    model = Forecaster.load_from_checkpoint(ckpt, weights_only=True)
    assert model.fitted.series_keys == (("CA",), ("FL",), ("NY",), ("TX",))
    dm = BirthdaysDataModule(states=["CA", "TX", "NY", "FL"], start=1987, end=1988,
                             context_length=28, horizon=7, stride=7, batch_size=16)
    dm.setup()
    assert len(dm.datasets["val"]) % 2 == 0
    single = _validate(model, dm, tmp_path)
    for key in keys:
        assert single[key] == pytest.approx(metrics[key], rel=1e-5), key
