"""posenc.tasks.forecasting: a time-series [`Forecaster`][posenc.tasks.Forecaster] and the data that
feeds it.

Modules, each importing only those before it: [`schema`][posenc.tasks.forecasting.schema] (the
columns' roles and the [`Fitted`][posenc.tasks.Fitted] state),
[`panel`][posenc.tasks.forecasting.panel] (reading, fitting and scaling a long table),
[`metrics`][posenc.tasks.forecasting.metrics] (losses, metrics, seasonal-naive baselines),
[`windows`][posenc.tasks.forecasting.windows] (windows and batches),
[`output`][posenc.tasks.forecasting.output] ([`make_batch`][posenc.tasks.make_batch], forecast
requests and tables, [`ForecastWriter`][posenc.tasks.ForecastWriter]),
[`stream`][posenc.tasks.forecasting.stream] (Parquet datasets read lazily),
[`datamodule`][posenc.tasks.forecasting.datamodule]
([`TimeSeriesDataModule`][posenc.tasks.TimeSeriesDataModule]),
[`network`][posenc.tasks.forecasting.network]
([`ForecastTransformer`][posenc.tasks.ForecastTransformer], the network as a plain ``nn.Module``),
[`module`][posenc.tasks.forecasting.module] ([`Forecaster`][posenc.tasks.Forecaster], its
LightningModule). The shipped data sets' data modules are
[`posenc.tasks.datasets`][posenc.tasks.datasets]. ``__all__`` (re-exported by
[`posenc.tasks`][posenc.tasks]) is the public API.
"""

from .datamodule import TimeSeriesDataModule
from .module import Forecaster
from .network import ForecastTransformer
from .output import ExtrapolationWarning, ForecastWriter, make_batch
from .schema import Fitted

__all__ = ["ExtrapolationWarning", "ForecastTransformer", "ForecastWriter", "Forecaster", "Fitted",
           "TimeSeriesDataModule", "make_batch"]
