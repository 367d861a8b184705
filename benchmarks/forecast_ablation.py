"""Forecaster model ablation (issue 20): the shipped configs with one change at a time.

Each variant is a list of ``posenc fit`` command-line overrides of the dataset's shipped
config with the studied options off (BASE: ``lags`` null, whatever the config ships); a run
trains and tests on one torch thread (``OMP_NUM_THREADS=1``), reads the test
metrics ``posenc fit`` prints, and appends a row to the results CSV (dataset, variant, seed,
mae, rmse, mase, cpu_seconds, overrides); the table is regenerated from the CSV.

    python benchmarks/forecast_ablation.py --dataset elecdemand --variant lags_1d_7d --seed 0
    python benchmarks/forecast_ablation.py --table     # only rewrite the table from the CSV
"""

from __future__ import annotations

import argparse
import csv
import os
import re
import resource
import subprocess
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
RESULTS = ROOT / "docs" / "studies" / "forecast_ablation_results.csv"
TABLE = ROOT / "docs" / "studies" / "forecast_ablation_table.md"
COLUMNS = ["dataset", "variant", "seed", "mae", "rmse", "mase", "cpu_seconds", "overrides"]
MODEL = "--model.init_args."

CONFIGS = {"birthdays": "configs/forecast_birthdays.yaml",
           "elecdemand": "configs/forecast_elecdemand.yaml",
           "nycweather": "configs/forecast_nycweather.yaml"}
# Every run starts from the shipped config with the options studied here off (the
# elecdemand config ships lags since this study), then applies its variant's overrides.
BASE = [MODEL + "lags", "null"]
# variant -> overrides of the shipped config + BASE (the same for every dataset).
VARIANTS: dict[str, list[str]] = {
    "baseline": [],
    "lags_1d_7d": [MODEL + "lags", "[1D, 7D]"],
    "lags_1d": [MODEL + "lags", "[1D]"],
    "robust_norm": [MODEL + "instance_norm_stats", "robust"],
    "epochs_x2": ["--trainer.max_epochs", "{epochs_x2}"],
    "lags_1d_7d_epochs_x2": [MODEL + "lags", "[1D, 7D]", "--trainer.max_epochs", "{epochs_x2}"],
    "lags_1d_7d_robust": [MODEL + "lags", "[1D, 7D]", MODEL + "instance_norm_stats",
                          "robust"],
    "patch_8": [MODEL + "patch_size", "8"],
    "lags_1d_7d_patch_8": [MODEL + "lags", "[1D, 7D]", MODEL + "patch_size", "8"],
    "lags_1d_7d_patch_8_epochs_x2": [MODEL + "lags", "[1D, 7D]", MODEL + "patch_size", "8",
                                     "--trainer.max_epochs", "{epochs_x2}"],
    "refit": ["--refit_epochs", "{epochs}"],
    "lags_1d_7d_patch_8_epochs_x4": [MODEL + "lags", "[1D, 7D]", MODEL + "patch_size", "8",
                                     "--trainer.max_epochs", "{epochs_x4}"],
}
# "{epochs}", "{epochs_x2}", "{epochs_x4}": once, twice, four times each dataset's config's
# max_epochs ("refit": a fresh model trained on train + validation for as many epochs, tested).
EPOCHS = {"birthdays": 8, "elecdemand": 30, "nycweather": 20}
METRIC = re.compile(r"^[\s│┃|]*test/(mae|rmse|mase)\s*[│┃|]?\s+([-+0-9.eE]+|nan)\s*[│┃|]?\s*$")


def overrides(dataset: str, variant: str) -> list[str]:
    epochs = EPOCHS[dataset]
    return [arg.format(epochs=epochs, epochs_x2=2 * epochs, epochs_x4=4 * epochs)
            for arg in VARIANTS[variant]]


def run(dataset: str, variant: str, seed: int) -> dict[str, object]:
    """One ``posenc fit`` of the variant; -> its CSV row (appended to RESULTS)."""
    extra = overrides(dataset, variant)
    command = [str(Path(sys.executable).with_name("posenc")), "fit", "--config",
               CONFIGS[dataset], "--trainer.logger", "false",
               "--trainer.enable_checkpointing", "false", "--trainer.enable_progress_bar",
               "false", "--seed_everything", str(seed), *BASE, *extra]
    with tempfile.TemporaryDirectory() as root:  # where the CLI saves its config.yaml
        command += ["--trainer.default_root_dir", root]
        before = resource.getrusage(resource.RUSAGE_CHILDREN)
        proc = subprocess.run(command, cwd=ROOT, capture_output=True, text=True,
                              env={**os.environ, "OMP_NUM_THREADS": "1"})
        after = resource.getrusage(resource.RUSAGE_CHILDREN)
    log = ROOT / "runs" / "forecast_ablation" / f"{dataset}_{variant}_s{seed}.log"
    log.parent.mkdir(parents=True, exist_ok=True)
    log.write_text(proc.stdout + proc.stderr)  # the whole run, metrics of every stage
    if proc.returncode:
        sys.exit(f"{' '.join(command)} exited with {proc.returncode}\n{proc.stderr[-4000:]}")
    metrics = {}
    for line in proc.stdout.splitlines():
        match = METRIC.match(line)
        if match:
            metrics[match.group(1)] = float(match.group(2))
    if set(metrics) != {"mae", "rmse", "mase"}:
        sys.exit(f"no test/mae, rmse, mase in the output of {' '.join(command)}:\n"
                 f"{proc.stdout[-4000:]}")
    cpu = (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)
    row = {"dataset": dataset, "variant": variant, "seed": seed, **metrics,
           "cpu_seconds": round(cpu, 1), "overrides": " ".join(extra)}
    new = not RESULTS.exists()
    with RESULTS.open("a", newline="") as f:
        writer = csv.DictWriter(f, COLUMNS)
        if new:
            writer.writeheader()
        writer.writerow(row)
    return row


def table() -> str:
    """The markdown table of RESULTS: per dataset and variant, each seed's test MAE, the
    mean MAE / RMSE / MASE and CPU seconds over its seeds, and the MAE change against the
    baseline on the seeds both have."""
    with RESULTS.open() as f:
        rows = list(csv.DictReader(f))
    lines = ["# Forecaster ablation (generated by benchmarks/forecast_ablation.py; do not edit)",
             "", "Test metrics of `posenc fit --config configs/forecast_<dataset>.yaml "
             "--model.init_args.lags null` (the studied options off) with the overrides "
             "shown, one torch thread on a shared 2-core CPU; MAE and RMSE in "
             "the target's units, MASE as `posenc fit` logs it. Δ MAE: the variant's mean "
             "MAE minus the baseline's over the seeds both ran. The rows ran on the configs "
             "of issue 20's study (one token per observation, mean-centred windows, the MAE "
             "loss); the shipped configs' later changes are measured one at a time, at 3 seeds "
             "on the peer table's points, in each config's header.", ""]
    for dataset in dict.fromkeys(r["dataset"] for r in rows):
        ours = [r for r in rows if r["dataset"] == dataset]
        base = {r["seed"]: float(r["mae"]) for r in ours if r["variant"] == "baseline"}
        lines += [f"## {dataset}", "",
                  "| variant | MAE by seed | MAE | RMSE | MASE | Δ MAE | CPU s | overrides |",
                  "|---|---|---|---|---|---|---|---|"]
        for variant in dict.fromkeys(r["variant"] for r in ours):
            runs = [r for r in ours if r["variant"] == variant]

            def mean(key: str, runs=runs) -> float:
                return sum(float(r[key]) for r in runs) / len(runs)

            shared = [r for r in runs if r["seed"] in base]
            delta = (sum(float(r["mae"]) - base[r["seed"]] for r in shared) / len(shared)
                     if shared and variant != "baseline" else None)
            by_seed = ", ".join(f"{float(r['mae']):.4f} (s{r['seed']})" for r in runs)
            lines.append(f"| {variant} | {by_seed} | {mean('mae'):.4f} | {mean('rmse'):.4f} | "
                         f"{mean('mase'):.4f} | "
                         f"{'' if delta is None else f'{delta:+.4f}'} | "
                         f"{mean('cpu_seconds'):.0f} | "
                         f"{'`' + runs[0]['overrides'] + '`' if runs[0]['overrides'] else ''} |")
        lines.append("")
    return "\n".join(lines)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--dataset", choices=list(CONFIGS))
    parser.add_argument("--variant", choices=list(VARIANTS), nargs="+")
    parser.add_argument("--seed", type=int, nargs="+", default=[0])
    parser.add_argument("--table", action="store_true", help="only regenerate the table")
    args = parser.parse_args()
    if not args.table:
        if not args.dataset or not args.variant:
            parser.error("give --dataset and --variant (or --table)")
        for variant in args.variant:
            for seed in args.seed:
                print(run(args.dataset, variant, seed), flush=True)
    TABLE.write_text(table() + "\n")
    print(TABLE.read_text())


if __name__ == "__main__":
    main()
