"""posenc's metrics equal GluonTS's ``Evaluator`` on the same forecasts: the fixture and
GluonTS's numbers are committed under benchmarks/peers/fixtures (written by
``make_metrics_fixture.py`` and ``gluonts_metrics.py`` in the peers' environment)."""

from __future__ import annotations

import math
from pathlib import Path

import numpy as np
import pandas as pd
import pytest
import torch
from posenc.tasks.forecasting.metrics import ForecastMetrics, SeasonalError, seasonality_for_step

FIXTURES = Path(__file__).parents[3] / "benchmarks" / "peers" / "fixtures"
LEVELS = [0.1, 0.5, 0.9]
M, CONTEXT = 24, 24  # hourly data: GluonTS's seasonality; the windows' context


def _gluonts() -> pd.DataFrame:
    return pd.read_csv(FIXTURES / "gluonts_metrics.csv")


def _posenc(evaluation: str) -> tuple[ForecastMetrics, list[str], np.ndarray, np.ndarray]:
    """The fixture's windows through posenc's metric (float64) -> (metric, series names,
    (W,) series index, (W,) seasonal errors)."""
    panel = pd.read_csv(FIXTURES / "metrics_panel.csv")
    forecasts = pd.read_csv(FIXTURES / "metrics_forecasts.csv")
    if evaluation == "finite":
        forecasts = forecasts[forecasts.evaluation == "finite"]
    names = list(dict.fromkeys(panel.series))
    panel = panel.sort_values(["series", "hour"], key=lambda c: c.map(names.index)
                              if c.name == "series" else c)
    sizes = panel.groupby("series", sort=False).size()[names].to_numpy()
    starts = np.concatenate(([0], np.cumsum(sizes)))
    values = panel.value.to_numpy()[:, None]
    first_hour = panel.groupby("series", sort=False).hour.min()[names].to_numpy()
    windows = list(forecasts.groupby(["series", "origin"], sort=False))
    series = np.array([names.index(name) for (name, _), _ in windows])
    origin = np.array([starts[s] + o - first_hour[s] for s, ((_, o), _) in zip(series, windows,
                                                                           strict=True)])
    horizon = len(windows[0][1])
    rows = origin[:, None] + np.arange(horizon)
    quantiles = np.stack([g.sort_values("step")[[f"q{q}" for q in LEVELS]].to_numpy()
                          for _, g in windows])[:, :, None]                   # (W, Nh, 1, Q)
    target = torch.from_numpy(values[rows])                                    # (W, Nh, 1)
    context = values[origin[:, None] - np.arange(1, CONTEXT + 1)]              # (W, Nc, 1)
    seasonal = SeasonalError(values, starts, M)(series, origin)                # (W, 1, 2)
    metric = ForecastMetrics(LEVELS)
    metric.update(torch.from_numpy(quantiles[..., 1]), target.nan_to_num(),
                  ~target.isnan(), torch.from_numpy(series),
                  torch.from_numpy(~np.isnan(context)), torch.from_numpy(seasonal),
                  torch.from_numpy(quantiles))
    return metric, names, series, seasonal[:, 0, 0]


@pytest.mark.parametrize("evaluation", ["finite", "inf"])
def test_aggregate_metrics_equal_gluonts_evaluator(evaluation):
    want = _gluonts().query("evaluation == @evaluation and series == 'all'")
    want = dict(zip(want.metric, want.value, strict=True))
    metric, *_ = _posenc(evaluation)
    got = {name: value.item() for name, value in metric.compute().items()}
    assert got["mase"] == pytest.approx(want["MASE"], abs=1e-6)
    assert got["rmsse"] == pytest.approx(want["RMSSE"], abs=1e-6)
    assert got["smape"] == pytest.approx(want["sMAPE"], abs=1e-6)
    assert got["wql"] == pytest.approx(want["mean_wQuantileLoss"], abs=1e-6)
    assert math.isinf(got["mase"]) == (evaluation == "inf")  # a zero seasonal error: inf


@pytest.mark.parametrize("evaluation", ["finite", "inf"])
def test_per_series_metrics_and_seasonal_errors_equal_gluonts(evaluation):
    want = _gluonts().query("evaluation == @evaluation and series != 'all'")
    metric, names, series, seasonal = _posenc(evaluation)
    per = metric.per_series(len(names))
    for s, name in enumerate(names):
        row = want[want.series == name].set_index("metric").value
        for ours, theirs in (("mase", "MASE"), ("rmsse", "RMSSE"), ("smape", "sMAPE")):
            # NaN: no defined row (a perfect zero forecast, 0 / 0), as GluonTS's
            np.testing.assert_allclose(per[ours][s].item(), row[theirs], atol=1e-6,
                                       err_msg=f"{ours} of {name}")
        np.testing.assert_allclose(np.nanmean(seasonal[series == s]), row["seasonal_error"],
                                   atol=1e-6, err_msg=name)
        windows = per["windows"][s].item()
        np.testing.assert_allclose(per["mae"][s].item() * per["points"][s].item() / windows,
                                   row["abs_error"], atol=1e-6, err_msg=name)


# GluonTS's frequency strings as the median steps posenc sees (months: 28-31 days).
_STEPS = {"1ME": pd.Timedelta(days=31), "1QE": pd.Timedelta(days=91),
          "1YE": pd.Timedelta(days=365), "1W": pd.Timedelta(days=7)}


def test_seasonality_for_step_equals_gluonts_get_seasonality():
    table = _gluonts().query("evaluation == 'seasonality'")
    assert len(table) >= 15
    for step, value in zip(table.series, table.value, strict=True):
        assert seasonality_for_step(_STEPS.get(step) or pd.Timedelta(step)) == value, step
