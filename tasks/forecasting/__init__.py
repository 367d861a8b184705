"""posenc.tasks.forecasting: a time-series [`Forecaster`][posenc.tasks.Forecaster] and the data that
feeds it.

Modules: [`data`][posenc.tasks.forecasting.data] (reading, fitted state,
[`TimeSeriesDataModule`][posenc.tasks.TimeSeriesDataModule]),
[`datasets`][posenc.tasks.forecasting.datasets] (shipped real data),
[`windows`][posenc.tasks.forecasting.windows] (windows and batches),
[`network`][posenc.tasks.forecasting.network]
([`ForecastTransformer`][posenc.tasks.forecasting.network.ForecastTransformer]),
[`module`][posenc.tasks.forecasting.module] ([`Forecaster`][posenc.tasks.Forecaster]),
[`metrics`][posenc.tasks.forecasting.metrics] (losses, metrics, seasonal-naive baselines),
[`output`][posenc.tasks.forecasting.output] ([`make_batch`][posenc.tasks.make_batch], forecast
tables, [`ForecastWriter`][posenc.tasks.ForecastWriter]). ``__all__`` (re-exported by
[`posenc.tasks`][posenc.tasks]) is the public API.
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
