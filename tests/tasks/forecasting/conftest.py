"""Fixtures of the forecasting tests: a small gappy hourly series as a data module, and one
of its training batches."""

from __future__ import annotations

import numpy as np
import pytest
import torch
from posenc.tasks import TimeSeriesDataModule

from ..conftest import synthetic_series


@pytest.fixture(scope="module")
def datamodule() -> TimeSeriesDataModule:
    """300 hourly rows with about 20% dropped; 1 day of context, 6 h ahead, origins 4 h apart."""
    frame = synthetic_series(300)
    frame = frame[np.random.default_rng(0).random(300) < 0.8].reset_index(drop=True)
    dm = TimeSeriesDataModule(frame, context_length="1D", horizon="6h", stride="4h",
                              batch_size=8)
    dm.setup("fit")
    return dm


@pytest.fixture(scope="module")
def batch(datamodule) -> dict[str, torch.Tensor]:
    return next(iter(datamodule.train_dataloader()))
