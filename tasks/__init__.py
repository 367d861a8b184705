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
  (:class:`ForecastMetrics`) beside the model's (:mod:`posenc.tasks.forecasting`);
- ``posenc`` = :func:`posenc.tasks.cli.main` (``LightningCLI`` in subclass mode), with
  ``posenc plot`` (:mod:`posenc.tasks.plots`) and ``posenc study``
  (:mod:`posenc.tasks.studies`).

Encodings are config values (a name or ``{class_path, init_args}``), so checkpoints hold
plain hyperparameters and reload with ``Model.load_from_checkpoint(path)``. A ``class_path``
builds only posenc's own classes and those given to :func:`register_module` (see
:mod:`posenc.tasks.config`).
"""

from posenc.temporal import parse_timestamps

from .config import register_module
from .forecasting import (
    RELATIVE_ENCODINGS,
    TIME_ENCODINGS,
    BirthdaysDataModule,
    ElecDemandDataModule,
    Forecaster,
    ForecastMetrics,
    ForecastTransformer,
    ForecastWriter,
    GlucoseDataModule,
    MeanAbsoluteScaledError,
    NYCWeatherDataModule,
    SeattleTempsDataModule,
    SeriesSchema,
    TaylorDataModule,
    TimeSeriesDataModule,
    collate_windows,
    forecast_frame,
    make_batch,
    masked_point_loss,
    quantile_loss,
    season_for_step,
    seasonal_naive,
)
from .vision import (
    DigitsDataModule,
    ImageClassifier,
    ImageDataModule,
    ImageFolderDataModule,
    MNISTDataModule,
    ResizeCollate,
    build_vit,
    stratified_split,
)

__all__ = [
    "BirthdaysDataModule",
    "ElecDemandDataModule",
    "ForecastMetrics",
    "ForecastWriter",
    "GlucoseDataModule",
    "NYCWeatherDataModule",
    "SeriesSchema",
    "forecast_frame",
    "season_for_step",
    "seasonal_naive",
    "RELATIVE_ENCODINGS",
    "TIME_ENCODINGS",
    "DigitsDataModule",
    "ForecastTransformer",
    "Forecaster",
    "ImageClassifier",
    "ImageDataModule",
    "ImageFolderDataModule",
    "MNISTDataModule",
    "MeanAbsoluteScaledError",
    "ResizeCollate",
    "SeattleTempsDataModule",
    "TaylorDataModule",
    "TimeSeriesDataModule",
    "build_vit",
    "collate_windows",
    "make_batch",
    "masked_point_loss",
    "parse_timestamps",
    "quantile_loss",
    "register_module",
    "stratified_split",
]
