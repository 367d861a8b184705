"""posenc.tasks.forecasting: a time-series :class:`Forecaster` and the data that feeds it.

Modules, each importing only those before it: :mod:`.schema` (:class:`Columns`, the
:class:`Fitted` state), :mod:`.panel` (reading, fitting and scaling a long table),
:mod:`.metrics` (losses, metrics, seasonal-naive baselines), :mod:`.windows` (windows and
batches), :mod:`.distributed` (DDP helpers), :mod:`.output` (:func:`make_batch`, forecast
requests and tables, :class:`ForecastWriter`), :mod:`.stream` (Parquet datasets read lazily),
:mod:`.datamodule` (:class:`TimeSeriesDataModule`), :mod:`.datasets` (shipped real data),
:mod:`.network` (:class:`~.network.ForecastTransformer`), :mod:`.module` (:class:`Forecaster`).
``__all__`` (re-exported by :mod:`posenc.tasks`) is the public API.
"""

from .datamodule import TimeSeriesDataModule
from .datasets import (
    BirthdaysDataModule,
    ElecDemandDataModule,
    GlucoseDataModule,
    NYCWeatherDataModule,
    SeattleTempsDataModule,
    TaylorDataModule,
)
from .module import Forecaster
from .output import ForecastWriter, make_batch

__all__ = ["BirthdaysDataModule", "ElecDemandDataModule", "ForecastWriter", "Forecaster",
           "GlucoseDataModule", "NYCWeatherDataModule", "SeattleTempsDataModule",
           "TaylorDataModule", "TimeSeriesDataModule", "make_batch"]
