"""Write the small deterministic fixture on which posenc's metrics are checked against
GluonTS's ``Evaluator`` (``gluonts_metrics.py``; tests/tasks/forecasting/
test_gluonts_metrics.py).

``fixtures/metrics_panel.csv``: an hourly panel (series, hour index, value; NaN = missing)
with daily seasonality, missing values, a series that starts late (its first origin has less
than a day of history: GluonTS's lag-1 fallback), a constant zero series (zero seasonal
error) and a series whose history has no observed pair a day apart.
``fixtures/metrics_forecasts.csv``: forecast windows (series, origin hour, step) with the
0.1, 0.5 and 0.9 quantiles; ``evaluation`` ``finite`` or ``inf`` (the latter adds a window of
the zero series with a non-zero error: MASE ``inf``). Run: ``python make_metrics_fixture.py``.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pandas as pd

HERE = Path(__file__).parent / "fixtures"
HOURS, HORIZON, CONTEXT = 120, 6, 24


def main() -> None:
    rng = np.random.default_rng(20)
    t = np.arange(HOURS)
    daily = 10 + 4 * np.sin(2 * np.pi * t / 24)
    series = {
        "a": daily + rng.normal(0, 1, HOURS),
        "b": 50 + 20 * np.sin(2 * np.pi * t / 24 + 1) + rng.normal(0, 3, HOURS),
        "zero": np.zeros(HOURS),
        "late": np.r_[np.full(70, np.nan), 5 + daily[70:] / 2 + rng.normal(0, 0.5, 50)],
        "sparse": np.where(t % 24 < 12, daily + rng.normal(0, 0.5, HOURS), np.nan),
    }
    series["a"][[5, 17, 40, 41, 42, 99, 103]] = np.nan      # history and horizon gaps
    series["b"][[30, 54, 78, 100]] = np.nan
    # sparse: the first 12 hours of each day, but hours 36-47 (not 24-35) on day 1: no
    # pair 24 h apart before its first origin (50), whose window has no seasonal error (NaN).
    series["sparse"][24:48] = np.where(t[24:48] >= 36, daily[24:48], np.nan)
    panel = pd.concat([pd.DataFrame({"series": name, "hour": t, "value": values})
                       for name, values in series.items()])
    # "late" begins at hour 70: its rows start there (GluonTS: the series' own start).
    panel = panel[~((panel.series == "late") & (panel.hour < 70))]
    HERE.mkdir(exist_ok=True)
    panel.to_csv(HERE / "metrics_panel.csv", index=False, float_format="%.6f")

    origins = {"a": [48, 72, 96], "b": [24, 60, 108], "zero": [48, 96], "late": [80, 100],
               "sparse": [50, 74]}
    rows = []
    for name, starts in origins.items():
        values = series[name]
        for origin in starts:
            truth = values[origin:origin + HORIZON]
            past = values[origin - 24:origin]
            if not np.isfinite(past).any():
                raise AssertionError(f"{name}@{origin}: a context needs an observation")
            if name == "zero":
                # origin 48: perfect forecasts (0 / 0 everywhere); origin 96: an error
                median = np.zeros(HORIZON) if origin == 48 else np.full(HORIZON, 0.5)
            else:
                level = np.nanmean(past[-24:])
                median = np.where(np.isfinite(truth), truth, level) + rng.normal(
                    0, 0.3 * np.nanstd(past) + 0.1, HORIZON)
            spread = np.abs(rng.normal(1.0, 0.3, HORIZON)) * (name != "zero")
            for step in range(HORIZON):
                rows.append({"evaluation": "inf" if (name, origin) == ("zero", 96)
                             else "finite", "series": name, "origin": origin, "step": step,
                             "q0.1": median[step] - 1.28 * spread[step],
                             "q0.5": median[step], "q0.9": median[step] + 1.28 * spread[step]})
    pd.DataFrame(rows).to_csv(HERE / "metrics_forecasts.csv", index=False,
                              float_format="%.6f")


if __name__ == "__main__":
    main()
