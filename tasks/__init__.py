"""posenc.tasks: Lightning training for ViTs and forecasters, and the ``posenc`` CLI.

- [`ImageClassifier`][posenc.tasks.ImageClassifier] (timm ViT + a posenc spatial encoding,
  multi-size evaluation) and its image data modules ([`posenc.tasks.vision`][posenc.tasks.vision]);
- [`Forecaster`][posenc.tasks.Forecaster] (transformer over (value, timestamp) tokens and future
  query times), its data modules (a series, a long-format panel, offline real data) and
  [`ForecastWriter`][posenc.tasks.ForecastWriter]
  ([`posenc.tasks.forecasting`][posenc.tasks.forecasting]);
- ``posenc`` = [`posenc.tasks.cli.main`][posenc.tasks.cli.main] (``LightningCLI`` in subclass mode),
  with ``posenc plot`` and ``posenc study``.

Encodings are config values (a name or ``{class_path, init_args}``), so checkpoints hold plain
hyperparameters; a ``class_path`` builds only posenc's classes and those given to
[`register_module`][posenc.tasks.register_module] ([`posenc.tasks.config`][posenc.tasks.config]).
"""

from .config import register_module
from .forecasting import (
    BirthdaysDataModule,
    ElecDemandDataModule,
    Forecaster,
    ForecastWriter,
    GlucoseDataModule,
    NYCWeatherDataModule,
    SeattleTempsDataModule,
    TaylorDataModule,
    TimeSeriesDataModule,
    make_batch,
)
from .vision import DigitsDataModule, ImageClassifier, ImageFolderDataModule, MNISTDataModule

__all__ = [
    "BirthdaysDataModule", "DigitsDataModule", "ElecDemandDataModule", "ForecastWriter",
    "Forecaster", "GlucoseDataModule", "ImageClassifier", "ImageFolderDataModule",
    "MNISTDataModule", "NYCWeatherDataModule", "SeattleTempsDataModule", "TaylorDataModule",
    "TimeSeriesDataModule", "make_batch", "register_module",
]
