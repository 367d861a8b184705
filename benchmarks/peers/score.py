"""Score posenc and every peer on the same points with posenc's metric code (posenc's env).

Reads each ``OUT`` folder (``points.csv``, ``peers.csv``, ``data.csv``, ``meta.json``,
``peers_cpu.json``) and writes ``docs/peers_results.csv`` (one row per data set and method)
and ``docs/peers_table.md``.

Every method is scored by :class:`~posenc.tasks.forecasting.metrics.ForecastMetrics`, the
metrics posenc logs (GluonTS's ``Evaluator`` definitions, checked against it to 1e-6):

- MAE and RMSE over all points, in the target's units;
- MASE and RMSSE: each window's error over its series' in-sample seasonal-naive error up to
  the origin (:class:`~posenc.tasks.forecasting.metrics.SeasonalError` on the series' regular
  grid, missing steps NaN as GluonTS reads data; lag ``mase_season`` steps, the data's
  seasonal period), averaged over windows; sMAPE as GluonTS;
- for methods that forecast quantiles (posenc with ``loss: quantile``, the neural peers
  trained with neuralforecast's ``MQLoss``): wQL (GluonTS's ``mean_wQuantileLoss``) and the
  coverage of the 80% interval ``[q0.1, q0.9]``.

A forecast column of ``points.csv`` / ``peers.csv`` is ``METHOD`` (one run) or
``METHOD@SEED`` (one of several seeds), its quantiles ``COLUMN_qLEVEL``; a method's row holds
each metric's mean over its seeds and sample standard deviation (``*_std``).

A window is one (series, origin); its context (``context_length`` grid steps up to the
origin) only decides whether a point is scored (a series with no observation there has no
forecast from history, ``ForecastMetrics``'s rule), the same for every method.

    python benchmarks/peers/score.py benchmarks/peers/out/elecdemand benchmarks/peers/out/nycweather
"""

from __future__ import annotations

import argparse
import json
import re
import textwrap
from pathlib import Path

import numpy as np
import pandas as pd
import torch
from posenc.tasks.forecasting.metrics import ForecastMetrics, SeasonalError

ROOT = Path(__file__).resolve().parents[2]
KEYS = ["unique_id", "origin", "ds"]
NEURAL = ("NHITS", "PatchTST", "TFT")


def window_batch(points: pd.DataFrame, data: pd.DataFrame, methods: list[str], context: int,
                 season: int) -> dict[str, torch.Tensor]:
    """The points as one batch of windows (series, origin), float64:

    ``{method: (B, Nh, 1)}`` forecasts, ``target``/``observed`` ``(B, Nh, 1)``, ``series``
    ``(B,)``, ``context_observed`` ``(B, context, 1)`` and ``seasonal_error`` ``(B, 1, 2)``.
    """
    data = data.sort_values(["unique_id", "ds"], ignore_index=True)
    ids = list(dict.fromkeys(data["unique_id"]))
    bounds = data.groupby("unique_id", sort=False).size().reindex(ids).to_numpy()
    starts = np.concatenate(([0], np.cumsum(bounds)))
    values = data["y"].to_numpy(float)[:, None]
    errors = SeasonalError(values, starts, season)
    windows = list(points.groupby(["unique_id", "origin"], sort=True))
    nh = max(len(part) for _, part in windows)
    b = len(windows)
    out = {m: torch.zeros(b, nh, 1, dtype=torch.float64) for m in methods}
    out["target"] = torch.zeros(b, nh, 1, dtype=torch.float64)
    out["observed"] = torch.zeros(b, nh, 1, dtype=torch.bool)
    out["context_observed"] = torch.zeros(b, context, 1, dtype=torch.bool)
    series = np.zeros(b, np.int64)
    origin_rows = np.zeros(b, np.int64)
    times = data["ds"].to_numpy("datetime64[ns]")
    for i, ((uid, origin), part) in enumerate(windows):
        n = len(part)
        out["target"][i, :n, 0] = torch.from_numpy(part["y"].to_numpy(float))
        out["observed"][i, :n, 0] = True
        for m in methods:
            out[m][i, :n, 0] = torch.from_numpy(part[m].to_numpy(float))
        s = ids.index(uid)
        lo, hi = starts[s], starts[s + 1]
        row = lo + int(np.searchsorted(times[lo:hi], np.datetime64(origin, "ns"), "right"))
        seen = ~np.isnan(values[max(lo, row - context):row, 0])
        out["context_observed"][i, context - len(seen):, 0] = torch.from_numpy(seen)
        series[i], origin_rows[i] = s, row
    out["series"] = torch.from_numpy(series)
    out["seasonal_error"] = torch.from_numpy(errors(series, origin_rows))
    return out


_QUANTILE = re.compile(r"^(?P<column>.+)_q(?P<level>0\.\d+)$")
METRICS = ("mae", "rmse", "mase", "rmsse", "smape", "wql", "coverage_80")


def forecast_columns(columns: list[str]) -> dict[str, list[str]]:
    """``{point column: its quantile columns, by increasing level}`` of the forecasts in
    ``columns``: a point column is ``METHOD`` (one run) or ``METHOD@SEED``; its quantiles
    ``COLUMN_qLEVEL`` (``NHITS@0_q0.1``)."""
    points = [c for c in columns if c not in (*KEYS, "y") and not _QUANTILE.match(c)]
    out = {c: [] for c in points}
    for c in columns:
        match = _QUANTILE.match(c)
        if match and match["column"] in out:
            out[match["column"]].append(c)
    return {c: sorted(q, key=lambda name: float(_QUANTILE.match(name)["level"]))
            for c, q in out.items()}


def _run_metrics(batch: dict[str, torch.Tensor], column: str, quantiles: list[str],
                 name: str) -> dict[str, float]:
    """ForecastMetrics of one forecast column (and its quantiles) on the batch."""
    pred = batch[column]
    missing = batch["observed"] & pred.isnan()
    if bool(missing.any()):
        raise ValueError(f"{name}: {column} has no forecast at {int(missing.sum())} points")
    levels = [float(_QUANTILE.match(q)["level"]) for q in quantiles] or None
    metric = ForecastMetrics(levels)
    metric.update(pred, batch["target"], batch["observed"], batch["series"],
                  batch["context_observed"], batch["seasonal_error"],
                  torch.stack([batch[q] for q in quantiles], -1) if quantiles else None)
    return {k: float(v) for k, v in metric.compute().items()}


def score(out: Path) -> pd.DataFrame:
    """One row per method of ``out``: each metric's mean over the method's runs (seeds), its
    sample standard deviation (``*_std``, NaN for one run) and ``seeds``, the number of runs;
    ``wql``, ``coverage_80`` for methods with quantile forecasts (else NaN)."""
    meta = json.loads((out / "meta.json").read_text())
    peers_meta = json.loads((out / "peers_cpu.json").read_text())
    points = pd.read_csv(out / "points.csv", parse_dates=["origin", "ds"])
    peers = pd.read_csv(out / "peers.csv", parse_dates=["origin", "ds"])
    data = pd.read_csv(out / "data.csv", parse_dates=["ds"], usecols=["unique_id", "ds", "y"])
    table = points.merge(peers, on=KEYS, how="left", validate="one_to_one")
    runs = forecast_columns(list(table.columns))
    cpu = {**meta["cpu_seconds"], **peers_meta["cpu_seconds"]}
    batch = window_batch(table, data, [c for run, q in runs.items() for c in (run, *q)],
                         int(meta["context_length"]), int(meta["mase_season"]))
    values = pd.DataFrame([{"method": run.split("@")[0], "cpu_seconds": float(cpu[run]),
                            **_run_metrics(batch, run, quantiles, out.name)}
                           for run, quantiles in runs.items()])
    rows = []
    for m, part in values.groupby("method", sort=False):
        row = {"dataset": out.name, "method": m}
        for name in METRICS:
            column = part[name] if name in part else pd.Series(np.nan, index=part.index)
            row[name], row[f"{name}_std"] = column.mean(), column.std(ddof=1)
        unscored = part["unscored"].iloc[0]
        rows.append({
            **row, "seeds": len(part), "cpu_seconds": round(part["cpu_seconds"].mean(), 1),
            "windows": int(batch["observed"].any(1).sum()),
            "points": int(batch["observed"].sum()) - int(unscored),
            "mase_season": int(meta["mase_season"]),
            "budget": (f"{meta['max_epochs']} epochs"
                       + (" refit on train + validation" if meta.get("refit") else "")
                       if m == "posenc" else
                       f"{peers_meta['max_steps']} steps" if m in NEURAL else ""),
            "config": meta["config"] if m == "posenc" else "",
        })
    for m, why in peers_meta.get("skipped", {}).items():
        rows.append({"dataset": out.name, "method": m, "budget": f"not run: {why}"})
    return pd.DataFrame(rows)


def _within_spread(row: pd.Series, own: pd.Series) -> bool:
    """Whether ``row``'s mean MAE lies within the sum of its and posenc's seed standard
    deviations from posenc's (False where neither was run at more than one seed)."""
    spread = np.nan_to_num(row.mae_std) + np.nan_to_num(own.mae_std)
    return spread > 0 and abs(row.mae - own.mae) <= spread


def _cell(value: float, std: float, digits: str) -> str:
    """``mean`` or ``mean ± std`` (empty for NaN)."""
    if pd.isna(value):
        return ""
    return f"{value:{digits}}" + (f" ± {std:.2g}" if pd.notna(std) else "")


def markdown(results: pd.DataFrame) -> str:
    results = results.fillna({"budget": "", "config": ""})  # empty cells read back as NaN
    for name in (*METRICS, *(f"{m}_std" for m in METRICS), "seeds"):
        if name not in results:  # a table scored before seeds and quantiles
            results[name] = 1 if name == "seeds" else np.nan
    lines = ["# Peer comparison (generated by benchmarks/peers/score.py; do not edit)", "",
             "The same (series, origin, time) points of posenc's test backtest for every "
             "method, scored by posenc's `ForecastMetrics` (GluonTS's definitions): MAE and "
             "RMSE in the target's units; MASE, RMSSE scaled by each series' in-sample "
             "seasonal-naive error up to the origin at the data's seasonal period; wQL "
             "(GluonTS's mean weighted quantile loss) and the coverage of the 80% interval "
             "(the share of points between the 0.1 and 0.9 quantiles) for methods that "
             "forecast quantiles; CPU seconds are the fit plus all test forecasts on one "
             "thread of a shared machine (`benchmarks/peers/`, `docs/benchmarks.md`). A "
             "method run at several seeds shows mean ± sample standard deviation (its CPU "
             "time the mean); † marks an MAE within the sum of its and posenc's standard "
             "deviations of posenc's: a difference inside the seeds' spread.", ""]
    for dataset, part in results.groupby("dataset", sort=False):
        skipped = part[part["mae"].isna()]
        part = part[part["mae"].notna()].sort_values("mae")
        own, naive, peer = _compared(part)
        lines += [f"## {dataset}", "",
                  "| method | MAE | RMSE | MASE | RMSSE | sMAPE | wQL | 80% cov. | CPU s | "
                  "budget |", "|---|---|---|---|---|---|---|---|---|---|"]
        lines += [f"| {r.method} | {_cell(r.mae, r.mae_std, '.4g')}"
                  f"{' †' if r.method != 'posenc' and _within_spread(r, own) else ''} | "
                  f"{r.rmse:.4g} | {r.mase:.3f} | {r.rmsse:.3f} | {r.smape:.3f} | "
                  f"{_cell(r.wql, r.wql_std, '.3f')} | "
                  f"{_cell(r.coverage_80, r.coverage_80_std, '.2f')} | {r.cpu_seconds:g} | "
                  f"{r.budget}{f' ({int(r.seeds)} seeds)' if r.seeds > 1 else ''} |"
                  for r in part.itertuples()]
        first = part.iloc[0]
        ratio = _cpu_ratio(part, own)
        met = own.mae <= peer.mae and ratio <= 2
        lines += ["", f"{int(first.windows)} windows, {int(first.points)} points; MASE "
                  f"season {int(first.mase_season)} steps; posenc: `{own.config}`. posenc's MAE "
                  f"is {own.mae / peer.mae - 1:+.1%} against the best neural peer "
                  f"({peer.method}) and {own.mae / naive.mae - 1:+.1%} against the strongest "
                  f"naive ({naive.method}), at {ratio:.1f}x NHITS's CPU time: the target (MAE "
                  f"no worse than the best neural peer's at most at 2x NHITS's CPU time) is "
                  f"{'met' if met else 'not met'}."]
        if _within_spread(peer, own):
            lines[-1] += f" posenc and {peer.method} differ by less than their seeds' spread."
        models = part[~part["method"].str.startswith("naive_")]
        if models["mae"].min() > naive.mae:
            lines[-1] += f" No model here beats {naive.method}."
        calibrated = part.dropna(subset=["coverage_80"])
        if len(calibrated):
            best = calibrated.loc[(calibrated["coverage_80"] - 0.8).abs().idxmin()]
            lines[-1] += (f" Best calibrated: {best.method} (80% interval coverage "
                          f"{best.coverage_80:.2f}).")
        lines += [f"{r.method} {r.budget}." for r in skipped.itertuples()] + [""]
    lines += ["## Targets", "", *targets(results), ""]
    return "\n".join(lines)


NAMES = {"birthdays": "births", "elecdemand": "demand", "glucose": "glucose",
         "nycweather": "weather"}


def _best(part: pd.DataFrame, methods: tuple[str, ...] | str) -> pd.Series:
    """The row of the lowest MAE among ``methods`` (a tuple of names, or a name prefix)."""
    chosen = part[part["method"].isin(methods) if isinstance(methods, tuple)
                  else part["method"].str.startswith(methods)]
    return chosen.sort_values("mae").iloc[0]


def _compared(part: pd.DataFrame) -> tuple[pd.Series, pd.Series, pd.Series]:
    """A data set's rows of posenc, its strongest naive and its best neural peer."""
    return part[part["method"] == "posenc"].iloc[0], _best(part, "naive_"), _best(part, NEURAL)


def _mae(row: pd.Series) -> str:
    """A row's MAE as quoted: ``mean`` for one run, ``mean ± std`` over seeds."""
    return _cell(row["mae"], row.get("mae_std", np.nan), ".4g")


def config_quote(results: pd.DataFrame, dataset: str) -> str:
    """The sentence a shipped config's header quotes for its number (checked by
    ``tests/tasks/forecasting/test_peers.py``)."""
    part = results[results["dataset"] == dataset]
    own, naive, peer = _compared(part)
    return (f"Test MAE {_mae(own)} against {_mae(naive)} for {naive.method} and "
            f"{_mae(peer)} for {peer.method} on the same points (docs/peers_table.md).")


def _cpu_ratio(part: pd.DataFrame, own: pd.Series) -> float:
    """posenc's CPU seconds over NHITS's (means over seeds) in a data set's rows."""
    return own.cpu_seconds / part.loc[part["method"] == "NHITS", "cpu_seconds"].iloc[0]


def headline(results: pd.DataFrame) -> str:
    """The README's line on the peers (checked by ``tests/tasks/forecasting/test_peers.py``):
    per data set posenc's MAE, the best neural peer's, the strongest naive's, and posenc's
    CPU time over NHITS's."""
    parts = []
    for dataset, part in results.groupby("dataset", sort=True):
        own, naive, peer = _compared(part)
        parts.append(f"{NAMES.get(dataset, dataset)} {_mae(own)} vs {_mae(peer)} "
                     f"({peer.method}) and {_mae(naive)} ({naive.method}) at "
                     f"{_cpu_ratio(part, own):.1f}x NHITS's CPU time")
    return ("Test MAE of the shipped configs against the best of NHITS, PatchTST and TFT and "
            "the strongest naive on the same points ([peers](docs/peers_table.md)): "
            + "; ".join(parts) + ".")


def targets(results: pd.DataFrame) -> list[str]:
    """The comparison's targets, each ``met`` or ``not met`` with the numbers behind it:
    posenc's mean MAE no worse than the best neural peer's on at least 3 of the data sets
    (all of them when fewer than 4), never worse than the strongest naive, at most 2x NHITS's
    CPU time on every one."""
    rows = {}
    for dataset, part in results[results["mae"].notna()].groupby("dataset", sort=True):
        compared = _compared(part)
        rows[dataset] = compared, _cpu_ratio(part, compared[0])
    ahead = [d for d, ((own, _, peer), _) in rows.items() if own.mae <= peer.mae]
    behind_naive = [d for d, ((own, naive, _), _) in rows.items() if own.mae > naive.mae]
    costly = [d for d, (_, ratio) in rows.items() if ratio > 2]
    needed = min(3, len(rows))

    def status(ok: bool) -> str:
        return "**met**" if ok else "**not met**"

    def listed(names: list[str]) -> str:
        return ", ".join(names) if names else "none"

    versus = "; ".join(f"{d} {own.mae / peer.mae - 1:+.1%} ({peer.method})"
                       for d, ((own, _, peer), _) in rows.items())
    ratios = "; ".join(f"{d} {ratio:.1f}x" for d, (_, ratio) in rows.items())
    return [
        f"- Accuracy: posenc's mean MAE no worse than the best neural peer's on at least "
        f"{needed} of {len(rows)} data sets: {status(len(ahead) >= needed)}, on "
        f"{len(ahead)} ({listed(ahead)}; posenc against the best neural peer: {versus}).",
        f"- Never worse than the strongest naive: {status(not behind_naive)} (worse on "
        f"{listed(behind_naive)}).",
        f"- Cost: posenc's CPU time at most 2x NHITS's on every data set: "
        f"{status(not costly)} ({ratios}).",
    ]


def write_quote(results: pd.DataFrame, dataset: str) -> None:
    """Put :func:`config_quote` into the header of the data set's config: in place of its
    previous quote (from ``# Test MAE`` to ``(docs/peers_table.md).``) or of a ``# QUOTE``
    line."""
    config = results.loc[(results["dataset"] == dataset) & (results["method"] == "posenc"),
                         "config"].iloc[0]
    path = ROOT / config
    lines = path.read_text().splitlines()
    quote = ["# " + line for line in textwrap.wrap(config_quote(results, dataset), 93)]
    start = next(i for i, line in enumerate(lines)
                 if line == "# QUOTE" or line.startswith("# Test MAE "))
    end = start if lines[start] == "# QUOTE" else next(
        i for i in range(start, len(lines)) if lines[i].endswith("(docs/peers_table.md)."))
    path.write_text("\n".join(lines[:start] + quote + lines[end + 1:]) + "\n")


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("outs", type=Path, nargs="+")
    parser.add_argument("--docs", type=Path, default=ROOT / "docs")
    parser.add_argument("--write_configs", action="store_true",
                        help="put each data set's quote into its config's header")
    args = parser.parse_args(argv)
    results = pd.concat([score(out) for out in args.outs], ignore_index=True)
    results.to_csv(args.docs / "peers_results.csv", index=False, float_format="%.6g")
    (args.docs / "peers_table.md").write_text(markdown(results))
    print(markdown(results))
    print("README:", headline(results))
    for dataset in results["dataset"].unique():
        print(f"configs ({dataset}):", config_quote(results, dataset))
        if args.write_configs:
            write_quote(results, dataset)


if __name__ == "__main__":
    main()
