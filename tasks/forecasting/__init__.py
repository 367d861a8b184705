"""posenc.tasks.forecasting: a time-series :class:`Forecaster` and the data that feeds it.

Modules: :mod:`.data` (reading, fitted state, :class:`TimeSeriesDataModule`), :mod:`.datasets`
(shipped real data), :mod:`.windows` (windows and batches), :mod:`.network`
(:class:`~.network.ForecastTransformer`), :mod:`.module` (:class:`Forecaster`), :mod:`.metrics`
(losses, metrics, seasonal-naive baselines), :mod:`.output` (:func:`make_batch`, forecast
tables, :class:`ForecastWriter`). ``__all__`` (re-exported by :mod:`posenc.tasks`) is the
public API.
"""

from .data import TimeSeriesDataModule
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
