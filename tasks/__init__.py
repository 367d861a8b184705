"""posenc.tasks: Lightning training for ViTs and forecasters, and the ``posenc`` CLI.

- :class:`ImageClassifier` (timm ViT + a posenc spatial encoding, multi-size evaluation) and
  its image data modules (:mod:`posenc.tasks.vision`);
- :class:`Forecaster` (transformer over (value, timestamp) tokens and future query times), its
  data modules (a series, a long-format panel, offline real data) and :class:`ForecastWriter`
  (:mod:`posenc.tasks.forecasting`);
- ``posenc`` = :func:`posenc.tasks.cli.main` (``LightningCLI`` in subclass mode), with
  ``posenc plot`` and ``posenc study``.

Encodings are config values (a name or ``{class_path, init_args}``), so checkpoints hold plain
hyperparameters; a ``class_path`` builds only posenc's classes and those given to
:func:`register_module` (:mod:`posenc.tasks.config`).
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
