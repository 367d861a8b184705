"""posenc.tasks: Lightning training for ViTs and forecasters, and the ``posenc`` CLI.

- [`ImageClassifier`][posenc.tasks.ImageClassifier] (timm ViT + a posenc spatial encoding,
  multi-size evaluation) and its image data modules, and
  [`VideoClassifier`][posenc.tasks.VideoClassifier] over clips at irregular frame times, and
  [`ClassPredictionWriter`][posenc.tasks.ClassPredictionWriter], which writes their predictions
  ([`posenc.tasks.vision`][posenc.tasks.vision]);
- [`Forecaster`][posenc.tasks.Forecaster] (transformer over (value, timestamp) tokens and future
  query times; its network, [`ForecastTransformer`][posenc.tasks.ForecastTransformer], is a plain
  ``nn.Module``), its data module (a series or a long-format panel) with the
  [`Fitted`][posenc.tasks.Fitted] state it reads with, and
  [`ForecastWriter`][posenc.tasks.ForecastWriter]
  ([`posenc.tasks.forecasting`][posenc.tasks.forecasting]); the offline real data sets' data modules
  ([`posenc.tasks.datasets`][posenc.tasks.datasets]);
- ``posenc`` = [`posenc.tasks.cli.main`][posenc.tasks.cli.main] (``LightningCLI`` in subclass mode),
  with ``posenc plot`` and ``posenc study``.

Encodings are config values (a name or ``{class_path, init_args}``), so checkpoints hold plain
hyperparameters; a ``class_path`` builds only posenc's classes and those given to
[`register_module`][posenc.tasks.register_module] ([`posenc.tasks.config`][posenc.tasks.config]).
"""

from . import datasets
from .config import register_module
from .forecasting import (
    ExtrapolationWarning,
    Fitted,
    Forecaster,
    ForecastTransformer,
    ForecastWriter,
    TimeSeriesDataModule,
    make_batch,
)
from .vision import (
    ClassPredictionWriter,
    DigitsDataModule,
    ImageClassifier,
    ImageFolderDataModule,
    MNISTDataModule,
    MovingDigitsDataModule,
    PlacedScenesDataModule,
    RelationScenesDataModule,
    VideoClassifier,
)

__all__ = [
    "ClassPredictionWriter", "DigitsDataModule", "ExtrapolationWarning", "Fitted",
    "ForecastTransformer", "ForecastWriter", "Forecaster", "ImageClassifier",
    "ImageFolderDataModule", "MNISTDataModule", "MovingDigitsDataModule", "PlacedScenesDataModule",
    "RelationScenesDataModule", "TimeSeriesDataModule", "VideoClassifier", "datasets",
    "make_batch", "register_module",
]
