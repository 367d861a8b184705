"""posenc.tasks.forecasting: a time-series :class:`Forecaster` and the data that feeds it.

A CSV, Parquet file or DataFrame goes, module by module:

- :mod:`.panel`: the long table read, checked, sorted and scaled into a :class:`Panel`
  (:class:`SeriesSchema` is what a trained model keeps to read new data the same way);
- :mod:`.data`: :class:`TimeSeriesDataModule` (time splits, windows, loaders); :mod:`.datasets`
  the shipped real data (:class:`BirthdaysDataModule`, :class:`ElecDemandDataModule`,
  :class:`NYCWeatherDataModule`, :class:`GlucoseDataModule`, :class:`SeattleTempsDataModule`,
  :class:`TaylorDataModule`);
- :mod:`.windows`: windows and their batches (:func:`make_batch`, :func:`collate_windows`);
- :mod:`.network`: :class:`ForecastTransformer` over (value, timestamp) tokens and future
  query times; :mod:`.module`: :class:`Forecaster`, the LightningModule;
- :mod:`.metrics`: losses, :class:`ForecastMetrics` and the seasonal-naive baseline;
- :mod:`.output`: forecast requests in, forecast frames and files out (:class:`ForecastWriter`).
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
from .metrics import (
    ForecastMetrics,
    MeanAbsoluteScaledError,
    masked_point_loss,
    quantile_loss,
    season_for_step,
    seasonal_naive,
)
from .module import Forecaster
from .network import RELATIVE_ENCODINGS, TIME_ENCODINGS, ForecastTransformer
from .output import ForecastWriter, forecast_frame
from .panel import SeriesSchema
from .windows import collate_windows, make_batch

__all__ = [
    "BirthdaysDataModule",
    "ElecDemandDataModule",
    "ForecastMetrics",
    "ForecastTransformer",
    "ForecastWriter",
    "Forecaster",
    "GlucoseDataModule",
    "MeanAbsoluteScaledError",
    "NYCWeatherDataModule",
    "RELATIVE_ENCODINGS",
    "SeattleTempsDataModule",
    "SeriesSchema",
    "TIME_ENCODINGS",
    "TaylorDataModule",
    "TimeSeriesDataModule",
    "collate_windows",
    "forecast_frame",
    "make_batch",
    "masked_point_loss",
    "quantile_loss",
    "season_for_step",
    "seasonal_naive",
]
