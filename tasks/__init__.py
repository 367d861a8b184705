"""posenc.tasks: Lightning training for ViTs and forecasters, and the ``posenc`` CLI.

- :class:`ImageClassifier` (timm ViT + a posenc spatial encoding, multi-size evaluation) with
  :class:`MNISTDataModule`, :class:`DigitsDataModule`, :class:`ImageFolderDataModule`;
- :class:`Forecaster` (transformer over (value, timestamp) tokens and future query times)
  with :class:`TimeSeriesDataModule`, :class:`SeattleTempsDataModule`,
  :class:`TaylorDataModule`;
- ``posenc`` = :func:`posenc.tasks.cli.main` (``LightningCLI`` in subclass mode).

Encodings are config values (a name or ``{class_path, init_args}``), so checkpoints hold
plain hyperparameters and reload with ``Model.load_from_checkpoint(path)``.
"""

from posenc.temporal import parse_timestamps

from .forecast_network import RELATIVE_ENCODINGS, TIME_ENCODINGS, ForecastTransformer
from .forecasting import Forecaster
from .losses import MeanAbsoluteScaledError, masked_point_loss, quantile_loss
from .timeseries_data import TimeSeriesDataModule
from .timeseries_datasets import SeattleTempsDataModule, TaylorDataModule
from .vision import ImageClassifier, build_vit
from .vision_data import (
    DigitsDataModule,
    ImageDataModule,
    ImageFolderDataModule,
    MNISTDataModule,
    ResizeCollate,
    stratified_split,
)
from .windows import collate_windows, make_batch

__all__ = [
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
    "stratified_split",
]
