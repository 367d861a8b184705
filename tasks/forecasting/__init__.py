"""posenc.tasks.forecasting: a time-series :class:`Forecaster` and the data that feeds it.

A CSV, Parquet file or DataFrame goes, module by module:

- :mod:`.data`: the long table read, checked and sorted (:class:`~.data.Columns` says what its
  columns are), the state fitted on its training span (:class:`~.data.Fitted`, what a trained
  model keeps to read new data the same way), :class:`TimeSeriesDataModule` (time splits,
  windows, loaders); :mod:`.datasets`
  the shipped real data (:class:`BirthdaysDataModule`, :class:`ElecDemandDataModule`,
  :class:`NYCWeatherDataModule`, :class:`GlucoseDataModule`, :class:`SeattleTempsDataModule`,
  :class:`TaylorDataModule`);
- :mod:`.windows`: windows and their batches;
- :mod:`.network`: :class:`~.network.ForecastTransformer` over (value, timestamp) tokens and future
  query times; :mod:`.module`: :class:`Forecaster`, the LightningModule;
- :mod:`.metrics`: losses, :class:`~.metrics.ForecastMetrics` and the seasonal-naive baseline;
- :mod:`.output`: forecast requests in (:func:`make_batch`), forecast frames and files out
  (:class:`ForecastWriter`).

``__all__`` (re-exported by :mod:`posenc.tasks`) is the public API; the rest stays importable
from the modules above.
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

__all__ = [
    "BirthdaysDataModule",
    "ElecDemandDataModule",
    "ForecastWriter",
    "Forecaster",
    "GlucoseDataModule",
    "NYCWeatherDataModule",
    "SeattleTempsDataModule",
    "TaylorDataModule",
    "TimeSeriesDataModule",
    "make_batch",
]
