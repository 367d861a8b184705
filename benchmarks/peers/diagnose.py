"""Where a shipped forecasting config loses to persistence (posenc's environment; issue 31's
NYC-weather diagnosis).

One run of ``posenc_windows.run`` (the config's own ``posenc fit`` with the given overrides,
then its test backtest), and from it, on the test points (``points.csv``), beside the same
points' persistence (``naive_last``) and same-time-yesterday (``naive_1D``) forecasts of
``fit_peers.py``:

- the validation curve (``val/loss``, ``val/mae`` per epoch, from the run's CSV log);
- MAE by lead (steps after the origin, in groups of ``--lead_group``) and by series;
- MAE on windows whose context is complete, misses target values, or past covariates;
- with ``--beyond``, MAE of ``Forecaster.forecast(history, 2 * horizon)`` at the test origins
  for leads ``1..H`` and ``H+1..2H`` (the trained horizon ``H``; a forecast past it warns),
  beside persistence's.

Writes ``OUT/diagnosis.json`` and prints it; ``OUT`` defaults to ``runs/diagnose/NAME``.
Train under ``nice -n 10`` with ``OMP_NUM_THREADS=1`` on a shared machine.

    python benchmarks/peers/diagnose.py configs/forecast_nycweather.yaml --name ship --beyond
    python benchmarks/peers/diagnose.py configs/forecast_nycweather.yaml --name no_cal \\
        --model.init_args.encodings '[timedelta]'
"""

from __future__ import annotations

import argparse
import json
import warnings
from pathlib import Path

import numpy as np
import pandas as pd
import torch
from fit_peers import natural_seasons, seasonal_naive
from posenc.tasks import ExtrapolationWarning
from posenc_windows import _utc_and_local, run, series_ids

ROOT = Path(__file__).resolve().parents[2]


def _mae(frame: pd.DataFrame, columns: list[str]) -> dict[str, float]:
    return {c: round(float((frame[c] - frame["y"]).abs().mean()), 4) for c in columns}


def by_lead_and_series(out: Path, group: int, seed: int) -> dict[str, object]:
    """Test MAE of posenc and the naives by lead group and by series, from ``out``'s files."""
    meta = json.loads((out / "meta.json").read_text())
    step = pd.Timedelta(meta["step"])
    points = pd.read_csv(out / "points.csv", parse_dates=["origin", "ds"])
    points = points.rename(columns={f"posenc@{seed}": "posenc"})
    data = pd.read_csv(out / "data.csv", parse_dates=["ds"], usecols=["unique_id", "ds", "y"])
    methods = ["posenc"]
    for name, season in natural_seasons(step).items():
        if name != "naive_7D":
            points[name] = seasonal_naive(data, points, season)
            methods.append(name)
    lead = ((points["ds"] - points["origin"]) / step).astype(int)
    groups = (lead - 1) // group
    by_lead = {f"{g * group + 1}-{(g + 1) * group}": _mae(part, methods)
               for g, part in points.groupby(groups)}
    by_series = {uid: _mae(part, methods) for uid, part in points.groupby("unique_id")}
    return {"all": _mae(points, methods), "by_lead": by_lead, "by_series": by_series}


def by_context_gaps(out: Path, seed: int) -> dict[str, object]:
    """Test MAE of posenc and persistence on windows whose context (the ``context_length``
    grid steps up to the origin) is complete, has a missing target (a gap or NaN), or misses
    a past covariate somewhere, from ``out``'s files."""
    meta = json.loads((out / "meta.json").read_text())
    data = pd.read_csv(out / "data.csv", parse_dates=["ds"])
    points = pd.read_csv(out / "points.csv", parse_dates=["origin", "ds"])
    points = points.rename(columns={f"posenc@{seed}": "posenc"})
    points["naive_last"] = seasonal_naive(data, points, pd.Timedelta(1, "ns"))
    context = int(meta["context_length"])
    past = [c for c in data.columns if c.startswith("past_")]
    kinds = {}
    for uid, part in data.groupby("unique_id"):
        part = part.set_index("ds")
        target = part["y"].isna().to_numpy()
        covariate = part[past].isna().any(axis=1).to_numpy()
        for origin in points.loc[points["unique_id"] == uid, "origin"].unique():
            end = part.index.get_indexer([origin])[0] + 1
            lo = max(0, end - context)
            kinds[uid, origin] = ("target missing" if target[lo:end].any() else
                                  "covariate missing" if covariate[lo:end].any() else
                                  "complete")
    points["context"] = [kinds[key] for key in zip(points["unique_id"], points["origin"],
                                                   strict=True)]
    return {kind: {**_mae(part, ["posenc", "naive_last"]),
                   "windows": int(part.groupby(["unique_id", "origin"]).ngroups)}
            for kind, part in points.groupby("context")}


def beyond_horizon(cli, out: Path, context_rows: int) -> dict[str, object]:
    """MAE of forecasts ``2 * H`` steps ahead from the test origins, split at ``H``."""
    model, dm = cli.model, cli.datamodule
    columns = dm.columns
    meta = json.loads((out / "meta.json").read_text())
    h = int(meta["horizon"]) if not dm.by_time else int(meta["horizon"]) // 2
    frame = dm.load_frame()
    frame["_uid"] = series_ids(frame, columns)
    frame["_utc"] = _utc_and_local(frame[columns.timestamp_column], columns.tz)[0]
    frame = frame.sort_values(["_uid", "_utc"], kind="stable")
    target = columns.target_columns[0]
    points = pd.read_csv(out / "points.csv", parse_dates=["origin", "ds"])
    rows = []
    for origin in np.sort(points["origin"].unique()):
        past = frame[frame["_utc"] <= origin].groupby("_uid").tail(context_rows)
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", ExtrapolationWarning)  # asked for: 2 * H
            forecast = model.forecast(past.drop(columns=["_uid", "_utc"]), 2 * h)
        forecast["_uid"] = series_ids(forecast, columns)
        forecast["_utc"] = _utc_and_local(forecast[columns.timestamp_column], columns.tz)[0]
        forecast["lead"] = forecast.groupby("_uid").cumcount() + 1
        last = past.dropna(subset=[target]).groupby("_uid")[target].last()
        forecast["naive_last"] = forecast["_uid"].map(last)
        truth = frame[["_uid", "_utc", target]].dropna()
        merged = forecast.merge(truth, on=["_uid", "_utc"], suffixes=("", "_true"))
        rows.append(merged[["lead", target, f"{target}_true", "naive_last"]])
    table = pd.concat(rows, ignore_index=True).rename(columns={target: "posenc",
                                                               f"{target}_true": "y"})
    inside = table["lead"] <= h
    return {"horizon": h, "origins": int(points["origin"].nunique()),
            f"1-{h}": _mae(table[inside], ["posenc", "naive_last"]),
            f"{h + 1}-{2 * h}": _mae(table[~inside], ["posenc", "naive_last"])}


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("config", type=Path)
    parser.add_argument("--name", required=True)
    parser.add_argument("--out", type=Path, default=None)
    parser.add_argument("--lead_group", type=int, default=6)
    parser.add_argument("--beyond", action="store_true")
    parser.add_argument("--seed", type=int, default=0)
    args, overrides = parser.parse_known_args(argv)
    torch.set_num_threads(1)
    out = args.out or ROOT / "runs" / "diagnose" / args.name
    logs = out / "logs"
    cli = run(args.config, out, ["--trainer.logger", "lightning.pytorch.loggers.CSVLogger",
                                 "--trainer.logger.init_args.save_dir", str(logs), *overrides],
              seed=args.seed)
    meta = json.loads((out / "meta.json").read_text())
    curve = pd.concat([pd.read_csv(p) for p in sorted(logs.rglob("metrics.csv"))])
    curve = curve.dropna(subset=["val/loss"]).groupby("epoch")[["val/loss", "val/mae"]].last()
    result = {"name": args.name, "seed": args.seed, "overrides": overrides,
              "cpu_seconds": round(meta["cpu_seconds"][f"posenc@{args.seed}"], 1),
              "val_curve": {int(e): [round(v, 4) for v in row]
                            for e, row in curve.iterrows()},
              **by_lead_and_series(out, args.lead_group, args.seed),
              "by_context": by_context_gaps(out, args.seed)}
    if args.beyond:
        result["beyond"] = beyond_horizon(cli, out, 2 * int(meta["context_length"]))
    (out / "diagnosis.json").write_text(json.dumps(result, indent=1))
    print(json.dumps(result, indent=1))


if __name__ == "__main__":
    main()
