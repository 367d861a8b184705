"""posenc.tasks: Lightning training for ViTs and forecasters, and the ``posenc`` CLI.

- :class:`ImageClassifier` (timm ViT + a posenc spatial encoding, multi-size evaluation) and
  its image data modules (:mod:`posenc.tasks.vision`);
- :class:`Forecaster` (transformer over (value, timestamp) tokens and future query times; its
  network, :class:`ForecastTransformer`, is a plain ``nn.Module``), its data module (a series
  or a long-format panel) with the :class:`Fitted` state it reads with, and
  :class:`ForecastWriter` (:mod:`posenc.tasks.forecasting`); the offline real data sets'
  data modules (:mod:`posenc.tasks.datasets`);
- ``posenc`` = :func:`posenc.tasks.cli.main` (``LightningCLI`` in subclass mode), with
  ``posenc plot`` and ``posenc study``.

Encodings are config values (a name or ``{class_path, init_args}``), so checkpoints hold plain
hyperparameters; a ``class_path`` builds only posenc's classes and those given to
:func:`register_module` (:mod:`posenc.tasks.config`).
"""

from . import datasets
from .config import register_module
from .forecasting import (
    Fitted,
    Forecaster,
    ForecastTransformer,
    ForecastWriter,
    TimeSeriesDataModule,
    make_batch,
)
from .vision import DigitsDataModule, ImageClassifier, ImageFolderDataModule, MNISTDataModule

__all__ = [
    "DigitsDataModule", "Fitted", "ForecastTransformer", "ForecastWriter", "Forecaster",
    "ImageClassifier", "ImageFolderDataModule", "MNISTDataModule", "TimeSeriesDataModule",
    "datasets", "make_batch", "register_module",
]
