"""posenc.tasks.forecasting: a time-series :class:`Forecaster` and the data that feeds it.

Modules, each importing only those before it: :mod:`.schema` (the columns' roles and the
:class:`Fitted` state), :mod:`.panel` (reading, fitting and scaling a long table),
:mod:`.metrics` (losses, metrics, seasonal-naive baselines), :mod:`.windows` (windows and
batches), :mod:`.distributed` (DDP helpers), :mod:`.output` (:func:`make_batch`, forecast
requests and tables, :class:`ForecastWriter`), :mod:`.stream` (Parquet datasets read lazily),
:mod:`.datamodule` (:class:`TimeSeriesDataModule`), :mod:`.network`
(:class:`ForecastTransformer`, the network as a plain ``nn.Module``), :mod:`.module`
(:class:`Forecaster`, its LightningModule). The shipped data sets' data modules are
:mod:`posenc.tasks.datasets`. ``__all__`` (re-exported by :mod:`posenc.tasks`) is the public
API.
"""

from .datamodule import TimeSeriesDataModule
from .module import Forecaster
from .network import ForecastTransformer
from .output import ForecastWriter, make_batch
from .schema import Fitted

__all__ = ["ForecastTransformer", "ForecastWriter", "Forecaster", "Fitted",
           "TimeSeriesDataModule", "make_batch"]
