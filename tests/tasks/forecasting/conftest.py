"""Fixtures of the forecasting tests: a small gappy hourly series as a data module, and one
of its training batches; :func:`collate_windows` stacks any windows into a batch."""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np
import pytest
import torch
from posenc.tasks import TimeSeriesDataModule
from posenc.tasks.forecasting.schema import CHANNELS, Columns, Fitted
from posenc.tasks.forecasting.windows import batch_of_series
from torch import Tensor

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


@pytest.fixture
def table_reads(monkeypatch) -> list:
    """The ``known`` state of every ``TimeSeriesDataModule._read_table`` call in the test."""
    reads = []
    read_table = TimeSeriesDataModule._read_table

    def counted(self, known):
        reads.append(known)
        return read_table(self, known)

    monkeypatch.setattr(TimeSeriesDataModule, "_read_table", counted)
    return reads


def collate_windows(items: Sequence[dict[str, Tensor]]) -> dict[str, Tensor]:
    """Stack window dicts (``WindowDataset`` items: ``dataset[i]``), right-padding each side
    to the longest in the batch as ``batch_of_series`` pads (``*_valid`` marks real tokens):
    the batch of windows a loader never puts together. Every item needs a non-empty context
    and horizon and the same channels ``C``.
    """
    if not len(items):
        raise ValueError("collate_windows needs at least one window, got none")
    channels = int(items[0]["loc"].shape[-1])
    for i, item in enumerate(items):
        if int(item["loc"].shape[-1]) != channels:
            raise ValueError(f"items[{i}] has {int(item['loc'].shape[-1])} target channels but "
                             f"items[0] has {channels}")
        for prefix, what in (("context", "context"), ("target", "horizon")):
            if not item[f"{prefix}_time"].shape[0]:
                raise ValueError(f"items[{i}] has an empty {what}: a window needs at least one "
                                 "row on each side")
        if set(item) != set(items[0]):
            raise ValueError(f"items[{i}] has keys {sorted(item)} but items[0] has "
                             f"{sorted(items[0])}")
    # The items' channels back as columns (NaN where unobserved), in the layout of CHANNELS.
    first = items[0]
    columns = Columns("time", **{field: [f"{key}_{j}" for j in range(
        first[f"context_{key}"].shape[-1])] for field, _, key, *_ in CHANNELS})

    def side(item: dict[str, Tensor], prefix: str) -> list[Tensor]:
        parts = []
        for key, observed, sides, a, b in columns.groups():
            if prefix not in sides:
                parts.append(item["loc"].new_full((len(item[f"{prefix}_time"]), b - a), np.nan))
                continue
            value = item[f"{prefix}_{key}"]
            parts.append(value if observed is None else
                         value.masked_fill(~item[f"{prefix}_{observed}"], np.nan))
        raw = item[f"{prefix}_raw"].masked_fill(~item[f"{prefix}_observed"], np.nan)
        return [item[f"{prefix}_time"], item[f"{prefix}_local"], torch.cat(parts, -1), raw]

    def stack(key: str) -> np.ndarray:
        return torch.stack([item[key] for item in items]).numpy(force=True)

    rows = [side(item, prefix) for item in items for prefix in ("context", "target")]
    utc, local, values, raw = (torch.cat(parts).numpy(force=True)
                               for parts in zip(*rows, strict=True))
    count = [np.array([len(item[f"{p}_time"]) for item in items]) for p in ("context", "target")]
    # The items' values are scaled already: the covariates' scaling is not read again.
    covariates = np.zeros((len(items), len(columns.channels) - channels))
    fitted = Fitted(columns, series_start=tuple(stack("series_start_local").tolist()),
                    **{name: tuple(map(tuple, np.hstack((stack(name), covariates)).tolist()))
                       for name in ("loc", "scale")})
    batch = batch_of_series(utc, local, values, *count, fitted, stack("static_real"),
                            stack("static_cat"), targets=raw)
    batch["series"] = torch.from_numpy(stack("series"))
    batch["seasonal_error"] = torch.from_numpy(stack("seasonal_error"))  # of whole histories
    return batch
