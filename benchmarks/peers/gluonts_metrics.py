"""GluonTS's ``Evaluator`` metrics on the fixture of ``make_metrics_fixture.py``, written to
``fixtures/gluonts_metrics.csv`` for posenc's test (``tests/tasks/forecasting/
test_gluonts_metrics.py``) to compare with to 1e-6.

Run in the peers' environment (gluonts 0.17 needs pandas 2, posenc pandas 3)::

    python benchmarks/peers/gluonts_metrics.py

Rows: ``evaluation`` (``finite``: every window but one of the zero series with a non-zero
error; ``inf``: all), ``series`` (``all`` for the aggregate, else a series: the mean of its
windows' rows, as the Evaluator averages rows, NaN rows left out), ``metric``, ``value``.
Metrics: GluonTS's ``MASE``, ``sMAPE``, ``mean_wQuantileLoss`` (aggregate only),
``abs_error``, ``seasonal_error``; and ``RMSSE``, which GluonTS has not: M5's root mean
squared scaled error with GluonTS's seasonal lag, history and fallback (its
``calculate_seasonal_error`` with squares), per window, averaged over windows as ``MASE`` is.
``seasonality``: GluonTS's ``get_seasonality`` of a step (``series`` = the step as a pandas
frequency string), for posenc's ``seasonality_for_step``.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pandas as pd
from gluonts.evaluation import Evaluator
from gluonts.model.forecast import QuantileForecast
from gluonts.time_feature import get_seasonality

HERE = Path(__file__).parent / "fixtures"
LEVELS = ("0.1", "0.5", "0.9")
STEPS = ("1s", "15s", "7s", "1min", "5min", "7min", "30min", "1h", "2h", "5h", "36h", "1D",
         "2D", "7D", "1W", "1ME", "1QE", "1YE", "100ms")


def rmsse(past: np.ndarray, target: np.ndarray, forecast: np.ndarray, m: int) -> float:
    """M5's RMSSE with GluonTS's seasonal error (masked arrays: missing values left out)."""
    lag = m if m < len(past) else 1
    scale = np.mean(np.square(past[lag:] - past[:-lag]))
    return float(np.sqrt(np.mean(np.square(target - forecast)) / scale))


def evaluate(panel: pd.DataFrame, forecasts: pd.DataFrame) -> list[dict]:
    series, predictions, rows = [], [], []
    for (name, origin), group in forecasts.groupby(["series", "origin"], sort=False):
        values = panel[panel.series == name]
        index = pd.period_range(pd.Period("2024-01-01 00:00", "h") + int(values.hour.min()),
                                periods=len(values), freq="h")
        ts = pd.Series(values.value.to_numpy(), index=index)
        start = pd.Period("2024-01-01 00:00", "h") + int(origin)
        arrays = group.sort_values("step")[[f"q{q}" for q in LEVELS]].to_numpy().T
        predictions.append(QuantileForecast(arrays, start, list(LEVELS), item_id=name))
        series.append(ts)
        past = np.ma.masked_invalid(ts.loc[:start - 1].to_numpy())
        target = np.ma.masked_invalid(ts.loc[start:start + len(group) - 1].to_numpy())
        rows.append(rmsse(past, target, arrays[1], get_seasonality("h")))
    evaluator = Evaluator(quantiles=[float(q) for q in LEVELS], num_workers=None)
    with np.errstate(divide="ignore", invalid="ignore"):
        totals, items = evaluator(series, predictions)
    items["RMSSE"] = rows
    out = [{"series": "all", "metric": m, "value": totals[m]}
           for m in ("MASE", "sMAPE", "mean_wQuantileLoss", "abs_error")]
    out.append({"series": "all", "metric": "RMSSE", "value": items["RMSSE"].mean()})
    for name, group in items.groupby("item_id", sort=False):
        out += [{"series": name, "metric": m, "value": group[m].mean()}
                for m in ("MASE", "sMAPE", "RMSSE", "abs_error", "seasonal_error")]
    return out


def main() -> None:
    panel = pd.read_csv(HERE / "metrics_panel.csv")
    forecasts = pd.read_csv(HERE / "metrics_forecasts.csv")
    rows = []
    for evaluation, chosen in (("finite", forecasts[forecasts.evaluation == "finite"]),
                               ("inf", forecasts)):
        rows += [{"evaluation": evaluation, **row} for row in evaluate(panel, chosen)]
    rows += [{"evaluation": "seasonality", "series": step, "metric": "seasonality",
              "value": get_seasonality(step)} for step in STEPS]
    pd.DataFrame(rows).to_csv(HERE / "gluonts_metrics.csv", index=False, float_format="%.12g")


if __name__ == "__main__":
    main()
