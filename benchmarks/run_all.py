"""Run every benchmark and print one table of ratios, with the machine and the versions.

    python benchmarks/run_all.py            # full sizes (several minutes on 2 CPU cores)
    python benchmarks/run_all.py --quick    # small sizes: a fast check that all run

Each row is a posenc case and the baseline it is measured against in the same run
(interleaved or alternating with it, so load on a shared machine hits both alike):

- core (bench_rope.py): RoPE on q and k vs ``timm.layers.apply_rot_embed_cat`` and vs a
  bandwidth floor (``q * 2; k * 2``);
- spatial (bench_spatial.py): fwd+bwd step of a vit_tiny-sized model per encoding vs timm's
  own learned ``pos_embed`` ViT (timm's eva02 RoPE ViT as a peer), timed on this process's
  CPU clock with one thread (as the script's default; with more, OpenMP spin-waits count as
  CPU time); the ratio is the median of per-round ratios;
- temporal (bench_temporal.py): calendar fields / cyclic features vs pandas + numpy;
- panel (panel_scale.py): set-up of a long-format panel (10M rows, 10k series) vs reading /
  sorting it with pandas, its peak memory vs the frame's own, and drawing a training batch vs
  a Forecaster training step (each set-up in a fresh child process).

``time ratio`` is posenc time / baseline time: below 1 is faster than the baseline. ``target``
is the issue's goal in the same terms. Every script also runs alone with its own table.
"""

from __future__ import annotations

import argparse
import importlib
import os
import platform
import re
import sys
import time
import traceback
from collections.abc import Sequence
from pathlib import Path

import torch

HERE = Path(__file__).resolve().parent


def machine() -> list[str]:
    """CPU model, cores, threads and library versions, one line each."""
    import numpy
    import pandas

    sys.path.insert(0, str(HERE))
    from bench_rope import cpu_name

    versions = [f"python {platform.python_version()}", f"torch {torch.__version__}"]
    for name, module in (("timm", "timm"), ("numpy", numpy), ("pandas", pandas),
                         ("lightning", "lightning")):
        try:
            mod = importlib.import_module(module) if isinstance(module, str) else module
            versions.append(f"{name} {mod.__version__}")
        except ImportError:
            versions.append(f"{name} (not installed)")
    affinity = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else None
    load = ""
    if hasattr(os, "getloadavg"):
        load = " | load avg " + " ".join(f"{x:.1f}" for x in os.getloadavg())
    return [f"CPU: {cpu_name()} | {os.cpu_count()} logical cores"
            + (f" ({affinity} usable)" if affinity else "")
            + f" | torch threads: {torch.get_num_threads()}{load}",
            "Versions: " + ", ".join(versions)]


def core_rows(quick: bool) -> list[dict]:
    import bench_rope

    shape = (2, 12, 256, 64) if quick else bench_rope.SHAPE
    rounds, warmup = (5, 2) if quick else (40, 5)
    torch.manual_seed(0)
    q, k = torch.randn(shape), torch.randn(shape)
    cands = bench_rope.candidates(q, k)
    bench_rope.check_outputs_agree(q, k, cands)
    medians = bench_rope.bench(cands, rounds, warmup)
    floor = medians["floor q*2.0; k*2.0"]
    rows = []
    for layout in ("half", "interleaved"):
        timm_t = medians[f"timm apply_rot_embed_cat ({layout})"]
        for name in (f"posenc apply_rotation ({layout})",
                     f"posenc rotate ({layout}, + cos/sin)"):
            rows.append(dict(case=f"RoPE q,k {shape}: {name[7:]}", posenc_s=medians[name],
                             baseline=f"timm apply_rot_embed_cat ({layout})",
                             baseline_s=timm_t, target="< 1" if "apply" in name else "-"))
        name = f"posenc apply_rotation ({layout})"
        rows.append(dict(case=f"RoPE q,k {shape}: {name[7:]}", posenc_s=medians[name],
                         baseline="floor q*2; k*2", baseline_s=floor, target="<= 2"))
    return rows


def spatial_rows(quick: bool) -> list[dict]:
    import bench_spatial

    sizes = [32] if quick else [32, 64]
    rounds = 2 if quick else 15
    rows = []
    base = bench_spatial.BASELINE
    for size in sizes:
        batch = bench_spatial.BATCH.get(size, 4)
        # The script's default clock: this process's CPU time (other jobs' time not counted);
        # its ratio is the median of per-round ratios to the baseline.
        threads = torch.get_num_threads()
        torch.set_num_threads(1)  # the script's default: CPU time of one thread, no spin-waits
        try:
            results = bench_spatial.run(size, rounds, batch, time.process_time)
        finally:
            torch.set_num_threads(threads)
        for name, (ratio, seconds) in results.items():
            if name == base:
                continue
            kind = bench_spatial.row_kind(name)
            target = bench_spatial.TARGETS.get(kind)
            rows.append(dict(case=f"ViT fwd+bwd {size}x{size} B={batch}: {name} ({kind})",
                             posenc_s=seconds, baseline=base, baseline_s=results[base][1],
                             ratio=ratio, target=f"<= {target:.2f}" if target else "-"))
    return rows


def temporal_rows(quick: bool) -> list[dict]:
    import bench_temporal

    n, repeats = (500_000, 1) if quick else (10_000_000, 3)
    rows = []
    for row in bench_temporal.run(n, repeats):
        target = row["target"]
        if row["ratio_kind"] == "speed-up" and target.startswith(">="):
            # "speed-up >= 2x" is "time ratio <= 0.50".
            target = f"<= {1 / float(target[2:].strip(' x')):.2f}"
        elif target.startswith("<="):
            target = target.rstrip("x").strip()
        rows.append(dict(case=f"{row['case']} (N={n:,})", posenc_s=row["posenc_s"],
                         baseline=row["baseline"], baseline_s=row["baseline_s"],
                         target=target))
    return rows


def panel_rows(quick: bool) -> list[dict]:
    import panel_scale

    rows, series, rounds = (200_000, 200, 5) if quick else (10_000_000, 10_000, 20)
    return panel_scale.rows_of(panel_scale.measure(rows, series, rounds))


SUITES = {"core": core_rows, "spatial": spatial_rows, "temporal": temporal_rows,
          "panel": panel_rows}


def _cell(row: dict, which: str) -> str:
    """A row's posenc or baseline measure: seconds (``posenc_s``) printed as ms, or an amount
    in the row's own ``unit`` (``posenc_amount``, e.g. memory in MB)."""
    if "unit" in row:
        return f"{row[which + '_amount']:,.1f} {row['unit']}"
    return f"{row[which + '_s'] * 1e3:.2f}"


def _ratio(row: dict) -> float:
    if "ratio" in row:
        return row["ratio"]
    key = "_amount" if "unit" in row else "_s"
    return row["posenc" + key] / row["baseline" + key]


def _verbatim(text: str) -> str:
    """``text`` as a Markdown cell shows it: a ``*`` would start emphasis, a ``|`` a new cell."""
    return re.sub(r"([\\*|])", r"\\\1", text)


def table(rows: list[dict]) -> str:
    """Rows -> a markdown table; ``time ratio`` is the ratio of the row's measures (a memory
    row's is a memory ratio)."""
    head = ("suite", "case", "baseline", "posenc ms", "baseline ms", "time ratio", "target")
    body = [(_verbatim(r["suite"]), _verbatim(r["case"]), _verbatim(r["baseline"]),
             _cell(r, "posenc"), _cell(r, "baseline"), f"{_ratio(r):.3f}", _verbatim(r["target"]))
            for r in rows]
    lines = ["| " + " | ".join(head) + " |", "|" + "---|" * len(head)]
    lines += ["| " + " | ".join(cells) + " |" for cells in body]
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--quick", action="store_true", help="small sizes, few repeats")
    parser.add_argument("--threads", type=int, default=None,
                        help="torch threads of the core and temporal suites (the spatial "
                             "suite always times one thread)")
    parser.add_argument("--suites", nargs="+", choices=list(SUITES), default=list(SUITES))
    args = parser.parse_args(argv)
    if args.threads:
        torch.set_num_threads(args.threads)
    sys.path.insert(0, str(HERE))
    rows, failed = [], []
    start = time.perf_counter()
    for suite in args.suites:
        try:
            rows += [{"suite": suite, **row} for row in SUITES[suite](args.quick)]
        except Exception:  # one broken suite must not hide the others' numbers
            failed.append(suite)
            traceback.print_exc()
    return report(rows, failed, f"Mode: {'quick' if args.quick else 'full'}; "
                  f"{time.perf_counter() - start:.0f} s; time ratio = posenc / baseline "
                  "(< 1: faster than the baseline)")


def report(rows: list[dict], failed: list[str], mode: str, extra: Sequence[str] = ()) -> int:
    """Print the machine, ``extra`` lines, the ``mode`` line and the ratio table; the exit
    status: 1 when any suite or case in ``failed`` did not run."""
    print("\n".join([*machine(), *extra]))
    print(mode + "\n")
    print(table(rows))
    if failed:
        print(f"\nFAILED (see the tracebacks above): {', '.join(failed)}")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
