"""Shared helpers for the task tests: synthetic series, tiny models, the CLI as users run it."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import pandas as pd
import pytest

REPO = Path(__file__).resolve().parents[2]
CONFIGS = REPO / "configs"

# Overrides that make any ImageClassifier config tiny (Digits are 8x8: patch 4 divides 8/12/16).
TINY_VIT = [
    "--model.init_args.embed_dim=16", "--model.init_args.depth=1",
    "--model.init_args.num_heads=2", "--model.init_args.img_size=8",
    "--model.init_args.patch_size=4",
]
TINY_FORECASTER = [
    "--model.init_args.dim=16", "--model.init_args.depth=1", "--model.init_args.num_heads=2",
]
ONE_EPOCH = [
    "--trainer.max_epochs=1", "--trainer.limit_train_batches=2",
    "--trainer.limit_val_batches=1", "--trainer.limit_test_batches=1",
    "--trainer.enable_progress_bar=false", "--trainer.enable_model_summary=false",
    "--trainer.num_sanity_val_steps=0",
]


def run_cli(args: list[str], cwd: Path, timeout: float = 240, extra_path: Path | None = None
            ) -> subprocess.CompletedProcess:
    """``python -m posenc.tasks.cli ARGS`` in ``cwd``; fails the test with its output."""
    env = dict(os.environ)
    env.setdefault("OMP_NUM_THREADS", "1")
    if extra_path is not None:
        env["PYTHONPATH"] = os.pathsep.join(filter(None, [str(extra_path),
                                                          env.get("PYTHONPATH")]))
    proc = subprocess.run([sys.executable, "-m", "posenc.tasks.cli", *args], cwd=cwd, env=env,
                          capture_output=True, text=True, timeout=timeout)
    if proc.returncode:
        pytest.fail(f"posenc {' '.join(args)} exited with {proc.returncode}\n"
                    f"--- stdout ---\n{proc.stdout[-4000:]}\n--- stderr ---\n{proc.stderr[-6000:]}")
    return proc


def synthetic_series(n: int = 400, freq: str = "1h", start: str = "2021-01-01",
                     seed: int = 0, columns: int = 1) -> pd.DataFrame:
    """A daily sine plus noise, ``timestamp`` + ``value`` (+ ``value2``...) columns."""
    rng = np.random.default_rng(seed)
    stamps = pd.date_range(start, periods=n, freq=freq)
    hours = np.arange(n)
    frame = {"timestamp": stamps}
    for c in range(columns):
        name = "value" if c == 0 else f"value{c + 1}"
        frame[name] = 10 + 3 * np.sin(2 * np.pi * hours / 24 + c) + rng.normal(0, 0.3, n)
    return pd.DataFrame(frame)


@pytest.fixture
def series() -> pd.DataFrame:
    return synthetic_series()


@pytest.fixture(autouse=True)
def _quiet_lightning(monkeypatch):
    """Fewer threads (the suite runs on 2 cores) and no tips/warnings noise."""
    import torch

    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(threads)


HOUR = 3600 * 10**9  # ns


def setup_series(frame, **kwargs):
    """A ``TimeSeriesDataModule`` over ``frame`` (24 h context, 6 h horizon unless given),
    set up for fitting."""
    from posenc.tasks import TimeSeriesDataModule

    dm = TimeSeriesDataModule(frame, **{"context_length": 24, "horizon": 6, **kwargs})
    dm.setup("fit")
    return dm


def cpu_trainer(tmp_path, **kwargs):
    """A quiet one-device CPU ``Trainer`` without logger, checkpoints or sanity steps."""
    from lightning.pytorch import Trainer

    return Trainer(**{"accelerator": "cpu", "devices": 1, "logger": False,
                      "enable_progress_bar": False, "enable_model_summary": False,
                      "enable_checkpointing": False, "default_root_dir": tmp_path,
                      "num_sanity_val_steps": 0, **kwargs})


def fit_and_save(model, datamodule, tmp_path, **kwargs):
    """Fit ``model`` on ``datamodule`` with :func:`cpu_trainer` ``(**kwargs)``; -> the path of
    the checkpoint saved after it."""
    trainer = cpu_trainer(tmp_path, **kwargs)
    trainer.fit(model, datamodule)
    path = tmp_path / "model.ckpt"
    trainer.save_checkpoint(path)
    return path


@pytest.fixture(autouse=True)
def _isolated_module_registry(monkeypatch):
    """Classes registered with ``posenc.tasks.register_module`` (by a test or by the CLI from a
    config) are process state: each test starts from none."""
    from posenc.tasks import config

    monkeypatch.setattr(config, "REGISTERED", set())
