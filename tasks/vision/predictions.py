"""Class predictions out: [`ClassPredictionWriter`][posenc.tasks.ClassPredictionWriter] writes what
``posenc predict`` computes with an [`ImageClassifier`][posenc.tasks.ImageClassifier] or a
[`VideoClassifier`][posenc.tasks.VideoClassifier] to one ``.csv`` or ``.parquet`` table.

Its columns, in order: ``input`` (what the data module's ``predict_names()`` calls each input: a
file relative to the folder for [`ImageFolderDataModule`][posenc.tasks.ImageFolderDataModule], a
row of the data set for the array data sets; else its position in the predict loader),
``prediction`` (the most probable class's name), ``probability`` (its probability), then
``p_{name}`` for each class, by label. One row per input, in the loader's order.
"""

from __future__ import annotations

import os
from collections.abc import Sequence
from typing import Any

import numpy as np
import pandas as pd
import torch
from lightning.pytorch.callbacks import BasePredictionWriter
from posenc.core._checks import check_bool

from ..distributed import gather_to_rank_zero, on_every_rank
from ..tables import table_path, write_table

__all__ = ["ClassPredictionWriter", "prediction_frame"]


def prediction_frame(probabilities: torch.Tensor | np.ndarray, names: Sequence[Any],
                     class_names: Sequence[str]) -> pd.DataFrame:
    """``(N, K)`` class probabilities of ``N`` inputs -> the predictions table (layout in the
    module docstring).

    Args:
        probabilities: ``(N, K)``, each row a distribution over the ``K`` classes.
        names: ``N`` names of the inputs, in row order (the ``input`` column).
        class_names: ``K`` class names, by label.
    """
    probabilities = np.asarray(torch.as_tensor(probabilities, dtype=torch.float32))
    if probabilities.ndim != 2:
        raise ValueError(f"probabilities must be (N, K), got shape {probabilities.shape}")
    count, classes = probabilities.shape
    if len(names) != count:
        raise ValueError(f"{len(names)} input names for {count} predictions: the data module's "
                         "predict_names() must name every input of its predict loader")
    class_names = [str(name) for name in class_names]
    if len(class_names) != classes:
        raise ValueError(f"the model predicts {classes} classes, the data module names "
                         f"{len(class_names)} ({class_names[:5]}...)")
    if len(set(class_names)) != classes:
        raise ValueError(f"class names must be distinct, got {class_names}")
    best = probabilities.argmax(1) if count else np.zeros(0, np.int64)
    frame = pd.DataFrame({"input": list(names),
                          "prediction": np.asarray(class_names, dtype=object)[best],
                          "probability": probabilities[np.arange(count), best]})
    columns = pd.DataFrame(probabilities, columns=[f"p_{name}" for name in class_names])
    return pd.concat([frame, columns], axis=1)


class ClassPredictionWriter(BasePredictionWriter):
    """Write the class probabilities of ``trainer.predict`` to one ``.csv`` or ``.parquet``
    file: the [`prediction_frame`][posenc.tasks.vision.predictions.prediction_frame] table, its
    folder created. The inputs' and classes' names come from the trainer's data module
    (``predict_names()``, ``class_names``) where it has them. Under DDP rank 0 gathers the
    ranks' predictions, puts them back in the loader's order and writes.

    A file already at ``path`` is never replaced unless ``overwrite=True``: every rank refuses
    (``ValueError`` naming the path) before predicting. In a config::

        trainer:
          callbacks:
            - class_path: posenc.tasks.ClassPredictionWriter
              init_args: {path: predictions/test.csv}
    """

    def __init__(self, path: str | os.PathLike, overwrite: bool = False) -> None:
        super().__init__(write_interval="epoch")
        self.path = table_path(path, "ClassPredictionWriter path")
        self.overwrite = check_bool(overwrite, "overwrite")

    def on_predict_start(self, trainer: Any, pl_module: Any) -> None:
        """Refuse an existing ``path`` unless ``overwrite``, on every rank (rank 0 looks)."""
        seen = (self.path.exists(), self.path.is_file()) if trainer.is_global_zero else None
        exists, is_file = on_every_rank(seen, trainer)[0]
        if not exists:
            return
        where = f"ClassPredictionWriter path={str(self.path)!r}"
        if not is_file:
            raise ValueError(f"{where} exists and is not a file: choose another path")
        if not self.overwrite:
            raise ValueError(
                f"{where} already holds predictions, which are never replaced without a word: "
                "choose another path (init_args.path in the config, or "
                "--trainer.callbacks.init_args.path=...) or pass overwrite=True")

    def write_on_epoch_end(self, trainer: Any, pl_module: Any, predictions: Sequence[Any],
                           batch_indices: Sequence[Any]) -> None:
        # Lightning nests the batch indices by loader (and the predictions too, for several).
        if len(batch_indices) > 1:
            raise ValueError(f"ClassPredictionWriter writes one predict loader's predictions, "
                             f"got {len(batch_indices)} loaders")
        batches = batch_indices[0] if batch_indices else []
        if len(predictions) != len(batches):
            raise ValueError(f"{len(predictions)} batches of predictions for {len(batches)} "
                             "batches predicted: ClassPredictionWriter needs the predictions "
                             "kept (trainer.predict(..., return_predictions=True), the default)")
        # The loader's positions: ranks hold interleaved parts of it under DDP.
        positions = np.asarray([i for batch in batches for i in batch], np.int64)
        classes = getattr(pl_module.hparams, "num_classes", 0)
        probabilities = (torch.cat([p.float().cpu() for p in predictions]) if predictions
                         else torch.zeros(0, classes))
        parts = gather_to_rank_zero((positions, probabilities.numpy()), trainer)
        if trainer.is_global_zero:
            positions = np.concatenate([part[0] for part in parts])
            order = np.argsort(positions, kind="stable")
            probabilities = np.concatenate([part[1] for part in parts])[order]
            positions = positions[order]
            datamodule = getattr(trainer, "datamodule", None)
            if hasattr(datamodule, "predict_names"):  # limit_predict_batches: some of them
                every = datamodule.predict_names()
                names = [every[i] for i in positions]
            else:
                names = positions.tolist()
            classes = getattr(datamodule, "class_names", None) or [
                str(label) for label in range(probabilities.shape[1])]
            write_table(prediction_frame(probabilities, names, classes), self.path)
        trainer.strategy.barrier("ClassPredictionWriter")
