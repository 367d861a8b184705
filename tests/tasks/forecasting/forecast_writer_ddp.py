"""``python forecast_writer_ddp.py OUT.csv``: 2-process CPU DDP predict through ForecastWriter
(run by tests/tasks/forecasting/test_writer.py; Lightning relaunches this script for rank 1).

Window ``w`` (of 7: DDP's predict sampler gives rank 0 four, rank 1 three) is series
``w % 3``, its origin ``T0 + w`` hours and its forecasts 3 hourly steps after it; the test
checks that the one file holds every window once.
"""

from __future__ import annotations

import sys

import torch
from lightning.pytorch import Trainer
from posenc.tasks.forecasting.output import ForecastWriter
from test_writer import HOUR, T0, FakeForecaster, _output, _schema
from torch.utils.data import DataLoader


class WindowForecaster(FakeForecaster):
    def predict_step(self, batch, batch_idx=0, dataloader_idx=0):
        outputs = [_output([int(w) % 3], origin=T0 + int(w) * HOUR, start=T0 + (int(w) + 1) * HOUR)
                   for w in batch]
        return {k: torch.cat([o[k] for o in outputs]) for k in outputs[0]}


if __name__ == "__main__":
    trainer = Trainer(accelerator="cpu", devices=2, strategy="ddp", logger=False,
                      enable_progress_bar=False, enable_model_summary=False,
                      callbacks=[ForecastWriter(sys.argv[1])])
    trainer.predict(WindowForecaster(_schema(), levels=None),
                    DataLoader(list(range(7)), batch_size=2), return_predictions=False)
