"""posenc's side of the peer comparison (run in posenc's environment).

For one shipped forecasting config this writes, under ``--out`` (default
``benchmarks/peers/out/NAME``):

- ``data.csv``: the data as a long table every peer reads: ``unique_id``, ``ds`` (UTC instants,
  tz-naive, on a regular grid of the median step from each series' first observation
  whatever the local clock does at DST; irregular data (glucose) is snapped to the nearest
  grid time, the first of the observations that meet there kept; a missing observation is a
  row with ``y`` NaN), ``y``, the
  data module's past and future covariates (``past_*`` / ``futr_*``), and calendar features
  of the local time (``futr_cal_*``: sin/cos of the hour of day, day of week and day of year),
  which are known ahead and go to every model that takes future inputs;
- ``points.csv``: the ``(unique_id, origin, ds)`` points of posenc's test backtest (the data
  module's test windows; ``origin`` is the last context time), with the truth ``y`` observed
  at that time and posenc's forecast ``posenc@SEED`` for it (its quantiles
  ``posenc@SEED_qLEVEL`` with ``loss: quantile``), a column per seed of ``--seeds``;
  ``origin`` and ``ds`` are snapped to the grid as in ``data.csv`` (identity on regular
  data), the keys the peers forecast at; of points that snap to one key, the first is kept;
- ``meta.json``: the peers' horizon and context length in grid steps, sampling step, the MASE season
  (in steps) and posenc's CPU seconds (fit and test forecasts, this process's CPU clock).

    python benchmarks/peers/posenc_windows.py configs/forecast_elecdemand.yaml --seeds 0 1 2
    python benchmarks/peers/posenc_windows.py configs/forecast_glucose.yaml --refit_epochs 12

Other arguments go to ``posenc fit`` (e.g. ``--trainer.max_epochs 10``,
``--refit_epochs 30``) and are recorded in ``meta.json``.
"""

from __future__ import annotations

import argparse
import json
import tempfile
import time
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd
import torch
from posenc.tasks.cli import posenc_cli
from posenc.tasks.forecasting.output import ORIGIN_COLUMN, forecast_frame, quantile_column

HERE = Path(__file__).resolve().parent
SERIES_ID = "__single__"


def _utc_and_local(stamps: pd.Series, tz: str | None) -> tuple[pd.Series, pd.Series]:
    """Tz-naive UTC and local wall-clock times of ``stamps`` (naive data: both the same)."""
    stamps = pd.to_datetime(stamps)
    if stamps.dt.tz is None:
        if tz is None:
            return stamps, stamps
        stamps = stamps.dt.tz_localize(tz, ambiguous="infer")
    local = stamps.dt.tz_convert(tz) if tz is not None else stamps
    return stamps.dt.tz_convert("UTC").dt.tz_localize(None), local.dt.tz_localize(None)


def calendar_features(local: pd.Series) -> pd.DataFrame:
    """Sin/cos of the local hour of day, day of week and day of year (the cyclic calendar a
    peer gets as future inputs); constant features (daily data's hour) are left out."""
    hour = local.dt.hour + local.dt.minute / 60
    parts = {"hour": (hour, 24.0), "dow": (local.dt.dayofweek, 7.0),
             "doy": (local.dt.dayofyear - 1, 365.25)}
    out = {}
    for name, (value, period) in parts.items():
        if value.nunique() <= 1:
            continue
        angle = 2 * np.pi * value.to_numpy(float) / period
        out[f"futr_cal_{name}_sin"], out[f"futr_cal_{name}_cos"] = np.sin(angle), np.cos(angle)
    return pd.DataFrame(out, index=local.index)


def series_ids(frame: pd.DataFrame, columns) -> pd.Series:
    """Each row's series as one string (its key columns joined by ``|``)."""
    if not columns.series_columns:
        return pd.Series(SERIES_ID, index=frame.index)
    return frame[list(columns.series_columns)].astype(str).agg("|".join, axis=1)


def snap(times: pd.Series, first: pd.Timestamp | pd.Series, step: pd.Timedelta) -> pd.Series:
    """``times`` moved to the nearest ``first + k * step`` (identity on the grid; ``first``
    per row or one for all)."""
    return first + ((times - first) / step).round().astype(np.int64) * step


def long_table(dm, pad: int = 0) -> pd.DataFrame:
    """The data module's table as ``unique_id, ds, y, past_*, futr_*``, sorted, on each
    series' regular UTC grid of the median step, ``pad`` steps past its last observation
    (``y`` and the past covariates NaN at a missing time, the data's future covariates
    carried forward, the calendar features of every grid time)."""
    columns = dm.columns
    frame = dm.load_frame()
    utc, _ = _utc_and_local(frame[columns.timestamp_column], columns.tz)
    ids = series_ids(frame, columns)
    rows = pd.DataFrame({"unique_id": ids, "ds": utc,
                         "y": frame[columns.target_columns[0]].astype(float)})
    for name in columns.past_covariates:
        rows[f"past_{name}"] = frame[name].astype(float)
    futures = [f"futr_{name}" for name in columns.future_covariates]
    for name, column in zip(columns.future_covariates, futures, strict=True):
        rows[column] = frame[name].astype(float)
    step = pd.Timedelta(dm.fitted.step_ns)
    parts = []
    for uid, part in rows.groupby("unique_id", sort=True):
        part = part.sort_values("ds", kind="stable")
        part["ds"] = snap(part["ds"], part["ds"].min(), step)
        part = part.drop_duplicates("ds")
        grid = pd.date_range(part["ds"].min(), part["ds"].max() + pad * step, freq=step,
                             name="ds")
        part = part.set_index("ds").reindex(grid).reset_index()
        part["unique_id"] = uid
        part[futures] = part[futures].ffill().bfill()
        parts.append(part)
    out = pd.concat(parts, ignore_index=True)
    zone = dm.fitted.clock_zone
    local = (out["ds"] if zone is None else
             out["ds"].dt.tz_localize("UTC").dt.tz_convert(zone).dt.tz_localize(None))
    return pd.concat([out, calendar_features(local)], axis=1)


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("config", type=Path)
    parser.add_argument("--out", type=Path, default=None)
    parser.add_argument("--threads", type=int, default=1)
    parser.add_argument("--seeds", type=int, nargs="+", default=[0],
                        help="seed_everything of each run (0: the shipped configs' own)")
    args, overrides = parser.parse_known_args(argv)
    torch.set_num_threads(args.threads)
    name = args.config.stem.removeprefix("forecast_")
    for i, seed in enumerate(args.seeds):
        run(args.config, args.out or HERE / "out" / name, overrides, args.threads, seed,
            keep=i > 0)


def run(config: Path, out: Path, overrides: list[str], threads: int = 1, seed: int = 0,
        keep: bool = False) -> Any:
    """Fit ``config`` at ``seed`` (with the ``posenc fit`` ``overrides``), predict its test
    backtest and write ``out``'s files (module docstring; the forecasts as columns
    ``posenc@SEED`` and, with quantiles, ``posenc@SEED_qLEVEL``); ``keep``: add them to the
    other seeds' in ``out`` (the same points). -> the ``LightningCLI`` (its model, data
    module and trainer)."""
    name = config.stem.removeprefix("forecast_")
    column = f"posenc@{seed}"
    out.mkdir(parents=True, exist_ok=True)

    # `posenc fit` itself (seeded by the CLI before it builds the model; a refit_epochs of the
    # config or the command line refits on train + validation), so this run is the config's
    # own: the number its header quotes. The test backtest is predicted below.
    with tempfile.TemporaryDirectory() as root:
        cli_args = ["fit", "--config", str(config), "--trainer.logger", "false",
                    "--trainer.enable_checkpointing", "false", "--trainer.accelerator", "cpu",
                    "--trainer.devices", "1", "--trainer.enable_progress_bar", "false",
                    "--trainer.default_root_dir", root, "--test_after_fit", "false",
                    "--seed_everything", str(seed), *overrides]
        start = time.process_time()
        cli = posenc_cli(cli_args)
        fit_cpu = time.process_time() - start
    model, dm, trainer = cli.model, cli.datamodule, cli.trainer
    dm.predict_split = "test"
    start = time.process_time()
    predictions = trainer.predict(model, datamodule=dm)
    predict_cpu = time.process_time() - start
    frame = forecast_frame(predictions, model.fitted, model.quantile_levels)

    step = pd.Timedelta(dm.fitted.step_ns)
    # Windows by duration start after a gap at times: their points lie further than the
    # horizon from the last observation. The peers forecast up to twice the horizon in steps
    # (the grid runs that far past each series' end, so a last window has its times); the few
    # points beyond are left out for every method (counted in meta.json).
    horizon = int(np.ceil(dm.horizon / step)) if dm.by_time else int(dm.horizon)
    limit = 2 * horizon if dm.by_time else horizon
    data = long_table(dm, pad=limit if dm.by_time else 0)
    data.to_csv(out / "data.csv", index=False)
    columns = dm.columns
    utc, _ = _utc_and_local(frame[columns.timestamp_column], columns.tz)
    origin, _ = _utc_and_local(frame[ORIGIN_COLUMN], columns.tz)
    ids = series_ids(frame, columns)
    target = columns.target_columns[0]
    points = pd.DataFrame({"unique_id": ids, "origin": origin, "ds": utc,
                           column: frame[target].astype(float)})
    for level in model.quantile_levels or []:
        points[quantile_column(column, level)] = frame[quantile_column(target, level)]
    raw = dm.load_frame()
    raw_ids = series_ids(raw, columns)
    truth = pd.DataFrame({"unique_id": raw_ids,
                          "ds": _utc_and_local(raw[columns.timestamp_column], columns.tz)[0],
                          "y": raw[columns.target_columns[0]].astype(float)})
    truth = truth.dropna().drop_duplicates(["unique_id", "ds"])
    points = points.merge(truth, on=["unique_id", "ds"], how="inner")  # scored where observed
    first = data.groupby("unique_id")["ds"].min()
    start = points["unique_id"].map(first)
    for key in ("origin", "ds"):
        points[key] = snap(points[key], start, step)
    merged = len(points)
    points = points.drop_duplicates(["unique_id", "origin", "ds"])
    merged -= len(points)
    lead = (points["ds"] - points["origin"]) / step
    beyond = int((lead > limit).sum())
    points = points[lead <= limit]
    cpu = {column: fit_cpu + predict_cpu}
    if keep:
        before = pd.read_csv(out / "points.csv", parse_dates=["origin", "ds"])
        points = before.merge(points.drop(columns="y"), on=["unique_id", "origin", "ds"],
                              how="left", validate="one_to_one")
        if points[column].isna().any() or len(points) != len(before):
            raise ValueError(f"seed {seed} forecast other points than the seeds before")
        cpu = {**json.loads((out / "meta.json").read_text())["cpu_seconds"], **cpu}
    points.to_csv(out / "points.csv", index=False)

    meta = {"config": str(config), "name": name,
            "max_epochs": trainer.max_epochs, "overrides": overrides,
            # a refit leaves the CLI with the refit's config (train_on_val, its epochs)
            "refit": bool(cli.config["fit"]["data"]["init_args"].get("train_on_val")),
            "threads": threads,
            "horizon": limit, "points_beyond_horizon": beyond,
            "context_length": int(dm.context_length) if not dm.by_time
            else int(dm.context_length / step),
            "points_merged_by_snapping": merged,
            "step": str(step), "mase_season": int(dm.mase_season),
            "naive_seasons": dm.naive_seasons,
            "past_covariates": list(columns.past_covariates),
            "future_covariates": list(columns.future_covariates),
            "cpu_seconds": cpu,
            "posenc_fit_cpu": fit_cpu, "posenc_predict_cpu": predict_cpu,
            "windows": int(points.groupby(["unique_id", "origin"]).ngroups),
            "points": len(points)}
    (out / "meta.json").write_text(json.dumps(meta, indent=1))
    print(json.dumps(meta, indent=1))
    return cli


if __name__ == "__main__":
    main()
