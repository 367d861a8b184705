"""``python stream_ddp.py DATASET OUT``: 2-process CPU DDP over a Parquet dataset (run by
tests/tasks/forecasting/test_stream.py; Lightning relaunches this script for rank 1).

Trains 2 epochs, recording every training window each rank sees (``OUT/train-{rank}.json``:
per epoch, the batches' count and each real window's (series, first context time, first and
last horizon time)); saves the checkpoint (``OUT/m.ckpt``); tests (``OUT/test.json``, rank 0)
and predicts through ``ForecastWriter(per_rank=True, overwrite=True)`` (``OUT/forecasts/``)
with a new data module given the model's state, set up inside the trainer: the row groups each
rank scanned and the chunks it read for the state, and whether its state and window plan are
the model's and the other rank's (``OUT/setup-{rank}.json``).
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

import pandas as pd
import torch
from lightning.pytorch import Callback, Trainer
from posenc.tasks import Forecaster, ForecastWriter, TimeSeriesDataModule
from posenc.tasks.forecasting import stream
from test_stream import ARGS, future_of

READ: dict[str, list[int]] = {"scan": [], "fit": []}


def _recorded(kind, read):
    def recording(self_or_group, index, *args):
        READ[kind].append(int(index))
        return read(self_or_group, index, *args)
    return recording


stream._scan_group = _recorded("scan", stream._scan_group)
stream.DatasetPanel.chunk_stats = _recorded("fit", stream.DatasetPanel.chunk_stats)


class SetUp(Callback):
    """After the predictor's set-up: what this rank read, whether its state is the model's,
    and its window plan (rows of each series before the split times)."""

    def __init__(self, out: Path) -> None:
        self.out = out

    def on_predict_start(self, trainer, pl_module) -> None:
        dm = trainer.datamodule
        (self.out / f"setup-{trainer.global_rank}.json").write_text(json.dumps({
            **READ, "model_state": dm.fitted == pl_module.fitted,
            "plan": dm._reading()[0].before.tolist()}))


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
                      callbacks=[SetUp(out), Seen(out), ForecastWriter(str(out / "forecasts"),
                                                           per_rank=True, overwrite=True)])
    trainer.fit(model, datamodule=dm)
    trainer.save_checkpoint(out / "m.ckpt")
    results = trainer.test(model, datamodule=dm, verbose=False)[0]
    if trainer.is_global_zero:
        (out / "test.json").write_text(json.dumps(results))
    predictor = TimeSeriesDataModule(data, **{**ARGS, "chunk_rows": 150,
                                              "future_data": future_of(pd.read_parquet(data))},
                                     fitted=model.fitted)
    READ["scan"].clear()
    READ["fit"].clear()
    trainer.predict(model, datamodule=predictor, return_predictions=False)
