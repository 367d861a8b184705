"""Built-in forecasting data that ships offline inside pip packages (the ``data`` extra)."""

from __future__ import annotations

import pandas as pd

from .timeseries_data import TimeSeriesDataModule

__all__ = ["SeattleTempsDataModule", "TaylorDataModule"]


class SeattleTempsDataModule(TimeSeriesDataModule):
    """Hourly Seattle temperatures of 2010 (``vega_datasets``, offline; 8759 rows).

    The file holds naive local times with the DST artifacts of real data (no repeated hour
    in November, a 02:00 reading on the spring-forward day): they are localized to
    America/Los_Angeles with ``ambiguous="earliest"``, ``nonexistent="shift_forward"``.
    Columns: ``date`` (timestamp), ``temp`` (degrees F).
    """

    def __init__(
        self,
        context_length: int | str = 168,
        horizon: int | str = 24,
        stride: int | str | None = None,
        val_fraction: float = 0.15,
        test_fraction: float = 0.15,
        irregular: float | None = None,
        seed: int = 0,
        batch_size: int = 64,
        eval_batch_size: int | None = None,
        num_workers: int = 0,
    ) -> None:
        super().__init__(
            data=None, timestamp_column="date", target_columns="temp",
            tz="America/Los_Angeles", ambiguous="earliest", nonexistent="shift_forward",
            context_length=context_length, horizon=horizon, stride=stride,
            val_fraction=val_fraction, test_fraction=test_fraction, irregular=irregular,
            seed=seed, batch_size=batch_size, eval_batch_size=eval_batch_size,
            num_workers=num_workers)

    def load_frame(self) -> pd.DataFrame:
        try:
            from vega_datasets import data
        except ImportError as err:  # pragma: no cover - depends on the environment
            raise ImportError("SeattleTempsDataModule needs vega_datasets: "
                              "pip install 'posenc[data]'") from err
        return data.seattle_temps()


class TaylorDataModule(TimeSeriesDataModule):
    """Half-hourly electricity demand of England and Wales, June-August 2000 (``pmdarima``'s
    ``load_taylor``, 4032 rows, daily and weekly seasonality).

    The data has no timestamps; they are rebuilt as 2000-06-05 00:00 + 30 min steps (naive).
    Columns: ``timestamp``, ``demand`` (MW).
    """

    def __init__(
        self,
        context_length: int | str = 336,
        horizon: int | str = 48,
        stride: int | str | None = None,
        val_fraction: float = 0.15,
        test_fraction: float = 0.15,
        irregular: float | None = None,
        seed: int = 0,
        batch_size: int = 64,
        eval_batch_size: int | None = None,
        num_workers: int = 0,
    ) -> None:
        super().__init__(
            data=None, timestamp_column="timestamp", target_columns="demand", tz=None,
            context_length=context_length, horizon=horizon, stride=stride,
            val_fraction=val_fraction, test_fraction=test_fraction, irregular=irregular,
            seed=seed, batch_size=batch_size, eval_batch_size=eval_batch_size,
            num_workers=num_workers)

    def load_frame(self) -> pd.DataFrame:
        try:
            from pmdarima.datasets import load_taylor
        except ImportError as err:  # pragma: no cover - depends on the environment
            raise ImportError("TaylorDataModule needs pmdarima: pip install 'posenc[data]'"
                              ) from err
        demand = load_taylor()
        stamps = pd.date_range("2000-06-05 00:00", periods=len(demand), freq="30min")
        return pd.DataFrame({"timestamp": stamps, "demand": demand})
