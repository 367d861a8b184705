"""posenc.tasks: Lightning training for ViTs and forecasters, and the ``posenc`` CLI.

- :class:`ImageClassifier` (timm ViT + a posenc spatial encoding, multi-size evaluation) with
  :class:`MNISTDataModule`, :class:`DigitsDataModule`, :class:`ImageFolderDataModule`
  (:mod:`posenc.tasks.vision`);
- :class:`Forecaster` (transformer over (value, timestamp) tokens and future query times)
  with :class:`TimeSeriesDataModule` (one series or a long-format panel with covariates) and
  the offline real data :class:`BirthdaysDataModule`, :class:`ElecDemandDataModule`,
  :class:`NYCWeatherDataModule`, :class:`GlucoseDataModule`, :class:`SeattleTempsDataModule`,
  :class:`TaylorDataModule`; forecasts out with ``Forecaster.forecast`` or
  ``posenc predict`` + :class:`ForecastWriter`; seasonal-naive baseline metrics
  (:mod:`posenc.tasks.forecasting.metrics`) beside the model's
  (:mod:`posenc.tasks.forecasting`);
- ``posenc`` = :func:`posenc.tasks.cli.main` (``LightningCLI`` in subclass mode), with
  ``posenc plot`` (:mod:`posenc.tasks.plots`) and ``posenc study``
  (:mod:`posenc.tasks.studies`).

Encodings are config values (a name or ``{class_path, init_args}``), so checkpoints hold
plain hyperparameters and reload with ``Model.load_from_checkpoint(path)``. A ``class_path``
builds only posenc's own classes and those given to :func:`register_module` (see
:mod:`posenc.tasks.config`).
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
    "BirthdaysDataModule",
    "DigitsDataModule",
    "ElecDemandDataModule",
    "ForecastWriter",
    "Forecaster",
    "GlucoseDataModule",
    "ImageClassifier",
    "ImageFolderDataModule",
    "MNISTDataModule",
    "NYCWeatherDataModule",
    "SeattleTempsDataModule",
    "TaylorDataModule",
    "TimeSeriesDataModule",
    "make_batch",
    "register_module",
]
