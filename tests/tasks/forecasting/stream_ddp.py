"""``python stream_ddp.py DATASET OUT``: 2-process CPU DDP over a Parquet dataset (run by
tests/tasks/forecasting/test_stream.py; Lightning relaunches this script for rank 1).

Trains 2 epochs, recording every training window each rank sees (``OUT/train-{rank}.json``:
per epoch, the batches' count and each real window's (series, first context time, first and
last horizon time)); saves the checkpoint (``OUT/m.ckpt``); tests (``OUT/test.json``, rank 0)
and predicts through ``ForecastWriter(per_rank=True)`` (``OUT/forecasts/part-*.parquet``).
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

import pandas as pd
import torch
from lightning.pytorch import Callback, Trainer
from posenc.tasks import Forecaster, ForecastWriter, TimeSeriesDataModule
from test_stream import ARGS, future_of


class Seen(Callback):
    def __init__(self, out: Path) -> None:
        self.out, self.epochs = out, []

    def on_train_epoch_start(self, trainer, pl_module) -> None:
        self.epochs.append({"batches": 0, "windows": []})

    def on_train_batch_start(self, trainer, pl_module, batch, batch_idx) -> None:
        epoch = self.epochs[-1]
        epoch["batches"] += 1
        for b in torch.nonzero(batch["real"]).flatten().tolist():
            nc, nh = int(batch["context_valid"][b].sum()), int(batch["target_valid"][b].sum())
            epoch["windows"].append([int(batch["series"][b]), int(batch["context_time"][b, 0]),
                                     int(batch["target_time"][b, 0]),
                                     int(batch["target_time"][b, nh - 1]), nc])

    def on_train_end(self, trainer, pl_module) -> None:
        (self.out / f"train-{trainer.global_rank}.json").write_text(json.dumps(self.epochs))


if __name__ == "__main__":
    data, out = sys.argv[1], Path(sys.argv[2])
    dm = TimeSeriesDataModule(data, **{**ARGS, "chunk_rows": 150})
    torch.manual_seed(0)
    model = Forecaster(**dm.model_sizes(), dim=16, depth=1, num_heads=2, lr=3e-3)
    common = {"accelerator": "cpu", "devices": 2, "strategy": "ddp", "logger": False,
              "enable_progress_bar": False, "enable_model_summary": False}
    # One trainer for fit, test and predict: DDP starts once.
    trainer = Trainer(max_epochs=2, enable_checkpointing=False, **common,
                      callbacks=[Seen(out), ForecastWriter(str(out / "forecasts"),
                                                           per_rank=True)])
    trainer.fit(model, datamodule=dm)
    trainer.save_checkpoint(out / "m.ckpt")
    results = trainer.test(model, datamodule=dm, verbose=False)[0]
    if trainer.is_global_zero:
        (out / "test.json").write_text(json.dumps(results))
    predictor = TimeSeriesDataModule(data, **{**ARGS, "chunk_rows": 150,
                                              "future_data": future_of(pd.read_parquet(data))})
    trainer.predict(model, datamodule=predictor, return_predictions=False)
