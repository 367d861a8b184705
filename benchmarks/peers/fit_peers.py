"""The peers' side of the comparison (run in the peer environment, requirements.txt here).

Reads what ``posenc_windows.py`` wrote in ``OUT`` (``data.csv``, ``points.csv``,
``meta.json``) and writes ``OUT/peers.csv`` (the points with one forecast column per method;
the columns of methods not run again are kept)
and ``OUT/peers_cpu.json`` (CPU seconds per forecast column: fit and all test forecasts,
this process's CPU clock, ``--threads`` torch threads).

Every method forecasts each point from the history up to its own origin:

- NHITS, PatchTST, TFT (neuralforecast): trained with a multi-quantile loss (``MQLoss``,
  levels 0.1, 0.5, 0.9: posenc's ``loss: quantile`` default; the point forecast is the
  median), once per seed of ``--seeds`` on the data before the first test origin, then
  ``cross_validation`` with ``refit=False`` at origins ``step`` grid steps apart
  (``step``: the gcd of posenc's origin spacing), of which the points' origins are a subset.
  NHITS and TFT get the calendar features and the data's future covariates as future inputs
  (``futr_*``) and the past covariates as historic inputs (``past_*``); PatchTST takes the
  target only (it has no exogenous inputs).
- MSTL (seasons day and week, AutoETS trend) and AutoETS (daily season) (statsforecast):
  ``cross_validation`` at the same origins, fitted on the last ``--stats_input`` grid steps.
- The naives: the last observed value at or before ``ds - k * season``, with the smallest
  ``k`` that reaches the origin (posenc's baseline rule), for each natural season, and the
  last observed value (persistence).

Missing target values are linearly interpolated for the peers' inputs only (neuralforecast
and statsforecast need a complete regular grid); missing past covariates are carried forward.

Columns of ``peers.csv``: ``METHOD`` for the single runs (statistical, naive), and for the
neural peers ``METHOD@SEED`` (the median) with ``METHOD@SEED_q0.1`` ... ``_q0.9`` (what
``score.py`` reads).

    python benchmarks/peers/fit_peers.py benchmarks/peers/out/elecdemand --seeds 0 1 2
"""

from __future__ import annotations

import argparse
import json
import logging
import math
import time
from functools import reduce
from pathlib import Path

import numpy as np
import pandas as pd
import torch

KEYS = ["unique_id", "origin", "ds"]
NEURAL = ("NHITS", "PatchTST", "TFT")
STATS = ("MSTL", "AutoETS")
LEVELS = (0.1, 0.5, 0.9)  # MQLoss(level=[80]): columns -lo-80, -median, -hi-80
SUFFIXES = {0.1: "-lo-80", 0.5: "-median", 0.9: "-hi-80"}


def natural_seasons(step: pd.Timedelta) -> dict[str, pd.Timedelta]:
    """The naives of data sampled every ``step``: the last value (persistence: a season of
    1 ns reaches back to the origin exactly), and the seasonal ones of a day and a week below
    a day, of a week and a year (52 weeks, same weekday) for daily data."""
    last = {"naive_last": pd.Timedelta(1, "ns")}
    if step < pd.Timedelta("1D"):
        return {**last, "naive_1D": pd.Timedelta("1D"), "naive_7D": pd.Timedelta("7D")}
    return {**last, "naive_7D": pd.Timedelta("7D"), "naive_364D": pd.Timedelta("364D")}


def seasonal_naive(data: pd.DataFrame, points: pd.DataFrame, season: pd.Timedelta
                   ) -> np.ndarray:
    """``(len(points),)``: the last observed ``y`` at or before ``ds - k * season``, ``k`` the
    smallest with ``ds - k * season <= origin``."""
    out = np.full(len(points), np.nan)
    observed = data[data["y"].notna()]
    for uid, part in points.groupby("unique_id"):
        rows = observed[observed["unique_id"] == uid]
        times = rows["ds"].to_numpy("datetime64[ns]").astype(np.int64)
        lead = (part["ds"] - part["origin"]).to_numpy("timedelta64[ns]").astype(np.int64)
        k = np.ceil(lead / season.value).astype(np.int64)
        at = part["ds"].to_numpy("datetime64[ns]").astype(np.int64) - k * season.value
        index = np.searchsorted(times, at, side="right") - 1
        values = np.where(index >= 0, rows["y"].to_numpy()[np.maximum(index, 0)], np.nan)
        out[points.index.get_indexer(part.index)] = values
    return out


def peer_input(data: pd.DataFrame) -> pd.DataFrame:
    """The grid with ``y`` interpolated and past covariates filled, per series."""
    frame = data.copy()
    filled = [c for c in frame.columns if c == "y" or c.startswith("past_")]
    frame[filled] = frame.groupby("unique_id")[filled].transform(
        lambda s: s.interpolate(limit_direction="both") if s.name == "y" else s.ffill().bfill())
    return frame


def origin_lattice(points: pd.DataFrame, step: pd.Timedelta) -> tuple[pd.Timestamp, int, int]:
    """``(last_origin, step_size, n_windows)``: origins ``step_size`` grid steps apart ending at
    the last one that hold every origin of the points."""
    origins = np.sort(points["origin"].unique())
    first, last = origins[0], origins[-1]
    offsets = ((origins - first) / step).astype(np.int64)
    size = int(reduce(math.gcd, offsets.tolist(), 0)) or 1
    return pd.Timestamp(last), size, int(offsets[-1] // size) + 1


def neural_model(name: str, h: int, input_size: int, futr: list[str], hist: list[str],
                 max_steps: int, seed: int = 0):
    from neuralforecast.losses.pytorch import MQLoss
    from neuralforecast.models import NHITS, TFT, PatchTST

    common = {"h": h, "input_size": input_size, "max_steps": max_steps, "scaler_type": "robust",
              "random_seed": seed, "loss": MQLoss(level=[80]), "windows_batch_size": 256,
              "enable_progress_bar": False, "logger": False,
              "enable_checkpointing": False, "accelerator": "cpu", "devices": 1}
    if name == "NHITS":
        return NHITS(futr_exog_list=futr, hist_exog_list=hist,
                     mlp_units=[[256, 256]] * 3, **common)
    if name == "PatchTST":
        return PatchTST(hidden_size=64, n_heads=4, encoder_layers=2, linear_hidden_size=128,
                        **common)
    # TFT's LSTMs over every input step make a step of 256 windows ~10x NHITS's on a CPU core.
    return TFT(futr_exog_list=futr, hist_exog_list=hist, hidden_size=32, n_head=4,
               **{**common, "windows_batch_size": 64})


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("out", type=Path)
    parser.add_argument("--methods", nargs="*", default=["NHITS", *STATS, "PatchTST", "TFT"])
    parser.add_argument("--max_steps", type=int, default=300)
    parser.add_argument("--stats_input", type=int, default=None,
                        help="grid steps statsforecast fits on (default: 8 weeks, at least "
                        "3 of the longest season)")
    parser.add_argument("--threads", type=int, default=1)
    parser.add_argument("--seeds", type=int, nargs="+", default=[0],
                        help="the neural peers' random seeds, one run each")
    parser.add_argument("--max_stats_fits", type=int, default=1500,
                        help="skip MSTL and AutoETS beyond this many (series, origin) fits")
    args = parser.parse_args(argv)
    torch.set_num_threads(args.threads)
    logging.getLogger("lightning.pytorch").setLevel(logging.WARNING)
    meta = json.loads((args.out / "meta.json").read_text())
    data = pd.read_csv(args.out / "data.csv", parse_dates=["ds"])
    points = pd.read_csv(args.out / "points.csv", parse_dates=["origin", "ds"])
    step = pd.Timedelta(meta["step"])
    h = int(meta["horizon"])
    context = int(meta["context_length"])
    last_origin, step_size, n_windows = origin_lattice(points, step)
    frame = peer_input(data)
    frame = frame[frame["ds"] <= last_origin + h * step]
    ends = frame.groupby("unique_id")["ds"].max()
    if ends.nunique() != 1:
        raise ValueError(f"series end at different times after the cut: {ends.to_dict()}")
    futr = [c for c in frame.columns if c.startswith("futr_")]
    hist = [c for c in frame.columns if c.startswith("past_")]
    freq = pd.tseries.frequencies.to_offset(step)
    result = points[KEYS].copy()
    cpu: dict[str, float] = {}
    skipped: dict[str, str] = {}
    if (args.out / "peers.csv").exists():  # keep the methods not run again
        kept = pd.read_csv(args.out / "peers.csv", parse_dates=["origin", "ds"])
        kept = kept.drop(columns=[c for c in kept.columns if c not in KEYS and method_of(c)
                                  in args.methods])
        result = result.merge(kept, on=KEYS, how="left")
        before = json.loads((args.out / "peers_cpu.json").read_text())
        cpu = {c: t for c, t in before["cpu_seconds"].items() if c in kept.columns}
        skipped = {m: why for m, why in before.get("skipped", {}).items()
                   if m not in args.methods}
    for name, season in natural_seasons(step).items():
        start = time.process_time()
        result[name] = seasonal_naive(data, points, season)
        cpu[name] = time.process_time() - start
    print(f"{args.out.name}: {len(points)} points, origins every {step_size} steps, "
          f"{n_windows} windows, h={h}, context={context}", flush=True)

    fits = n_windows * frame["unique_id"].nunique()
    for name in args.methods:
        if name in STATS and fits > args.max_stats_fits:
            # statsforecast fits each (series, origin) anew: ~2.4 CPU s an MSTL fit on hourly
            # data here, hours for the irregular glucose monitor's 5-min origin lattice.
            skipped[name] = (f"{fits} (series, origin) fits on the origin lattice, over "
                             f"--max_stats_fits {args.max_stats_fits}")
            print(f"  {name}: not run ({skipped[name]})", flush=True)
            write(args, result, cpu, step_size, n_windows, skipped)
            continue
        if name in NEURAL:
            from neuralforecast import NeuralForecast

            for seed in args.seeds:
                start = time.process_time()
                model = neural_model(name, h, context, futr, hist, args.max_steps, seed)
                nf = NeuralForecast(models=[model], freq=freq)
                used = ["unique_id", "ds", "y", *([] if name == "PatchTST" else futr + hist)]
                cv = nf.cross_validation(df=frame[used], n_windows=n_windows,
                                         step_size=step_size, refit=False)
                column = f"{name}@{seed}"
                cpu[column] = time.process_time() - start
                renamed = {f"{name}{SUFFIXES[q]}": f"{column}_q{q}" for q in LEVELS}
                cv = _keyed(cv).rename(columns=renamed)
                cv[column] = cv[f"{column}_q0.5"]
                result = _merged(result, cv[KEYS + [column, *renamed.values()]], column,
                                 cpu[column])
                write(args, result, cpu, step_size, n_windows, skipped)  # each run kept
            continue
        start = time.process_time()
        if name in STATS:
            from statsforecast import StatsForecast
            from statsforecast.models import MSTL, AutoETS

            day = int(pd.Timedelta("1D") / step)
            seasons = [day, 7 * day] if day > 1 else [7, 365]
            model = (MSTL(season_length=seasons, trend_forecaster=AutoETS(model="ZZN"))
                     if name == "MSTL" else AutoETS(season_length=seasons[0]))
            sf = StatsForecast(models=[model], freq=freq, n_jobs=1)
            cv = sf.cross_validation(h=h, df=frame[["unique_id", "ds", "y"]],
                                     n_windows=n_windows, step_size=step_size,
                                     input_size=args.stats_input or max(8 * 7 * day,
                                                                        3 * max(seasons)),
                                     refit=False)
        else:
            raise ValueError(f"unknown method {name!r}; expected one of {NEURAL + STATS}")
        cpu[name] = time.process_time() - start
        cv = _keyed(cv)
        column = next(c for c in cv.columns if c.startswith(name))
        result = _merged(result, cv.rename(columns={column: name})[KEYS + [name]], name,
                         cpu[name])
        write(args, result, cpu, step_size, n_windows, skipped)  # each method kept as done


def method_of(column: str) -> str:
    """The method of a forecast column: ``NHITS`` of ``NHITS``, ``NHITS@1``, ``NHITS@1_q0.9``."""
    return column.split("@")[0]


def _keyed(cv: pd.DataFrame) -> pd.DataFrame:
    """A ``cross_validation`` result with ``unique_id`` a column and ``cutoff`` as ``origin``."""
    cv = cv.reset_index() if "unique_id" not in cv.columns else cv
    return cv.rename(columns={"cutoff": "origin"})


def _merged(result: pd.DataFrame, cv: pd.DataFrame, column: str, cpu: float) -> pd.DataFrame:
    """``result`` with ``cv``'s forecast columns at its points; prints the run's cost."""
    result = result.merge(cv, on=KEYS, how="left")
    missing = int(result[column].isna().sum())
    print(f"  {column}: {cpu:.1f} CPU s, {missing} points without a forecast", flush=True)
    return result


def write(args: argparse.Namespace, result: pd.DataFrame, cpu: dict[str, float],
          step_size: int, n_windows: int, skipped: dict[str, str]) -> None:
    result.to_csv(args.out / "peers.csv", index=False)
    (args.out / "peers_cpu.json").write_text(json.dumps(
        {"cpu_seconds": cpu, "max_steps": args.max_steps, "threads": args.threads,
         "step_size": step_size, "n_windows": n_windows, "skipped": skipped}, indent=1))


if __name__ == "__main__":
    main()
