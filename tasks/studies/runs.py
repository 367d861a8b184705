"""How a study runs and what it writes: the [`Study`][posenc.tasks.studies.Study] interface, one
Lightning fit + test per run, and the scheduler that runs every run missing from ``results.csv``
(serially or in a process pool), each row with hashes of its configuration. A missing metric is an
error, never a NaN (a renamed metric must not turn into a blank cell).
"""

from __future__ import annotations

import csv
import hashlib
import json
import math
import time
from collections.abc import Callable, Iterable, Mapping, Sequence
from pathlib import Path
from typing import Any

import torch
from posenc.core._checks import check_positive_int
from torch import nn

from ..plots.core import require_matplotlib

__all__ = ["Study", "append_row", "errorbars", "fingerprint", "fit_and_test", "format_mean_std",
           "logged_metrics", "markdown_table", "mean_std", "metric", "read_rows", "row_key",
           "run_missing", "summarize"]

# Run axes (a changed list adds or drops runs, it does not change them) and how runs are
# scheduled: not part of a run's configuration.
NOT_FINGERPRINTED = frozenset({"seeds", "encodings", "keep", "threads", "workers"})


def read_rows(path: Path) -> list[dict[str, str]]:
    """The rows of the CSV at ``path`` (none if it does not exist yet)."""
    if not path.exists():
        return []
    with path.open(newline="") as handle:
        return list(csv.DictReader(handle))


def append_row(path: Path, row: Mapping[str, Any]) -> None:
    """Add ``row`` to the CSV at ``path``; columns it adds go after the existing ones."""
    rows = read_rows(path)
    fields = list(rows[0]) if rows else []
    fields += [k for k in row if k not in fields]
    rows.append({k: str(v) for k, v in row.items()})
    tmp = path.with_suffix(".tmp")
    with tmp.open("w", newline="") as handle:
        writer = csv.DictWriter(handle, fieldnames=fields, restval="")
        writer.writeheader()
        writer.writerows(rows)
    tmp.replace(path)  # atomic: an interrupted study never leaves a half-written CSV


def fingerprint(value: Any) -> str:
    """A 12-hex-digit hash of a JSON-able configuration (key order does not matter)."""
    return hashlib.sha1(json.dumps(value, sort_keys=True, default=str).encode()).hexdigest()[:12]


def row_key(row: Mapping[str, Any], columns: Sequence[str]) -> tuple[str, ...]:
    """The identity of a run, from the CSV or the study (``"0.5"`` and ``0.5`` are one keep)."""
    return tuple(str(float(row[c])) if c == "keep" else str(row[c]) for c in columns)


def metric(row: Mapping[str, str], name: str) -> float:
    """The value of metric ``name`` in a ``results.csv`` row; absent or empty raises a
    ``ValueError`` naming the metric and the row's columns."""
    text = row.get(name)
    if text is None or text == "":
        key = {k: row[k] for k in ("encoding", "keep", "seed") if k in row}
        raise ValueError(f"results row {key} has no value for metric {name!r}; its columns: "
                         f"{sorted(k for k, v in row.items() if v not in (None, ''))}")
    return float(text)


def logged_metrics(logged: Iterable[Mapping[str, float]], names: Mapping[str, str]
                   ) -> dict[str, float]:
    """``{column: value}`` of the metrics a ``Trainer.test`` call logged, ``names`` mapping
    each results column to its logged name (``{"mae": "test/mae"}``); a missing one raises."""
    merged = {k: v for result in logged for k, v in result.items()}
    missing = [logged_name for logged_name in names.values() if logged_name not in merged]
    if missing:
        raise ValueError(f"the test run logged no metric {missing[0]!r} (wanted "
                         f"{list(names.values())}); it logged {sorted(merged)}")
    return {column: float(merged[logged_name]) for column, logged_name in names.items()}


def mean_std(values: Sequence[float]) -> tuple[float, float]:
    """Mean and sample std (n - 1) of ``values``: std 0 for one value, both NaN for none or
    for a NaN value (a diverged run is not dropped)."""
    if not values:
        return math.nan, math.nan
    mean = sum(values) / len(values)
    if len(values) == 1:
        return mean, 0.0
    return mean, math.sqrt(sum((v - mean) ** 2 for v in values) / (len(values) - 1))


def format_mean_std(values: Sequence[float], scale: float, digits: int) -> str:
    """``"mean ± std"`` of ``values * scale`` at ``digits`` decimals; the mean alone for one
    value, ``"–"`` for none."""
    if not values:
        return "–"
    mean, std = mean_std([v * scale for v in values])
    if len(values) == 1:
        return f"{mean:.{digits}f}"
    return f"{mean:.{digits}f} ± {std:.{digits}f}"


def markdown_table(head: Sequence[str], rows: Iterable[Sequence[Any]]) -> list[str]:
    """The lines of a Markdown table: ``head`` and one line per row of cells."""
    return ["| " + " | ".join(head) + " |", "|" + "---|" * len(head),
            *("| " + " | ".join(str(cell) for cell in row) + " |" for row in rows)]


def errorbars(ax: Any, x: Sequence[float], values: Sequence[Sequence[float]], label: str,
              color: str | None = None) -> None:
    """One line of mean ± std over seeds: ``values[i]`` are the seeds' values at ``x[i]``."""
    means, stds = zip(*(mean_std(v) for v in values), strict=True)
    ax.errorbar(x, means, yerr=stds, marker="o", capsize=3, label=label, color=color)


class Study:
    """One study: its runs (a key per run), how to do one, and how to summarize them.

    Subclasses set ``name`` and ``key_columns`` (the columns that identify a run) and implement
    ``runs()``, ``run(key) -> {metric: value}``, ``table(rows)`` (Markdown) and ``plot(rows,
    path)``.
    """

    name: str
    key_columns: tuple[str, ...]

    def __init__(self, config: dict) -> None:
        self.config = config

    def runs(self) -> list[dict[str, Any]]:
        raise NotImplementedError

    def run(self, key: dict[str, Any]) -> dict[str, float]:
        raise NotImplementedError

    def table(self, rows: list[dict[str, str]]) -> str:
        raise NotImplementedError

    def plot(self, rows: list[dict[str, str]], path: Path) -> None:
        raise NotImplementedError

    def model_args(self, encoding: str) -> dict[str, Any]:
        """Model arguments of ``encoding``'s runs: the config's ``model``, then its own."""
        return {**(self.config.get("model") or {}), **(self.config["encodings"][encoding] or {})}

    def encodings(self) -> list[str]:
        return list(self.config["encodings"])

    def prepare(self, log: Callable[[str], None]) -> None:
        """Work every run needs, done once before the runs (none here)."""

    def fingerprints(self) -> tuple[str, dict[str, str]]:
        """Hashes of the shared settings and of each encoding's spec, stored with every row so
        a resumed study never mixes in rows of a changed configuration."""
        shared = {k: v for k, v in self.config.items() if k not in NOT_FINGERPRINTED}
        return fingerprint(shared), {name: fingerprint(spec)
                                     for name, spec in self.config["encodings"].items()}

    def by_encoding(self, rows: list[dict[str, str]]) -> dict[str, list[dict[str, str]]]:
        """``rows`` grouped by encoding, the config's order first; empty groups left out."""
        groups: dict[str, list[dict[str, str]]] = {}
        for name in self.encodings() + [r["encoding"] for r in rows]:
            groups.setdefault(name, [])
        for row in rows:
            groups[row["encoding"]].append(row)
        return {k: v for k, v in groups.items() if v}


def fit_and_test(config: Mapping[str, Any], seed: int, build: Callable[[], tuple[nn.Module, Any]],
                 metrics: Mapping[str, str]) -> dict[str, float]:
    """Seed, ``build()`` the ``(model, data module)``, fit with the config's ``trainer`` and
    test: ``{column: value}`` of the logged ``metrics`` (see
    [`logged_metrics`][posenc.tasks.studies.runs.logged_metrics])."""
    from lightning.pytorch import Trainer, seed_everything

    seed_everything(seed, workers=True)
    kwargs = dict(accelerator="cpu", devices=1, logger=False, enable_checkpointing=False,
                  enable_progress_bar=False, enable_model_summary=False,
                  num_sanity_val_steps=0, limit_val_batches=0)
    trainer = Trainer(**{**kwargs, **(config.get("trainer") or {})})
    model, data = build()
    trainer.fit(model, datamodule=data)
    return logged_metrics(trainer.test(model, datamodule=data, verbose=False), metrics)


def summarize(study: Study, out: Path, plot: bool = True) -> None:
    """(Re)write ``table.md`` and ``plot.png`` from ``results.csv``."""
    rows = read_rows(out / "results.csv")
    (out / "table.md").write_text(study.table(rows))
    if plot and rows:
        study.plot(rows, out / "plot.png")


def _run_one(study_class: type[Study], config: dict, key: dict[str, Any],
             threads: int | None) -> tuple[dict[str, float], float]:
    """One run with ``threads`` torch threads (restored after): ``(metrics, seconds)``."""
    previous = torch.get_num_threads()
    if threads:
        torch.set_num_threads(threads)
    try:
        start = time.perf_counter()
        metrics = study_class(config).run(key)
        return metrics, time.perf_counter() - start
    finally:
        torch.set_num_threads(previous)


def run_missing(study_class: type[Study], config: dict, out: str | Path,
                log: Callable[[str], None] = print, plot: bool = True, workers: int = 1,
                threads: int | None = None) -> Path:
    """Run every run of ``study_class(config)`` not yet in ``out/results.csv``; -> ``out``.

    ``workers`` > 1 trains that many runs at once in spawned processes, each with ``threads``
    torch threads; this process appends their rows as they finish.
    """
    workers = check_positive_int(workers, "workers")
    if plot:
        require_matplotlib()  # now, not after the last run
    study = study_class(config)
    out = Path(out)
    out.mkdir(parents=True, exist_ok=True)
    csv_path = out / "results.csv"
    shared, specs = study.fingerprints()
    rows = read_rows(csv_path)
    stale = sorted({r["encoding"] for r in rows if r.get("config") != shared
                    or (r["encoding"] in specs and r.get("spec") != specs[r["encoding"]])})
    if stale:
        raise ValueError(f"{csv_path} holds results of another configuration (encodings "
                         f"{stale}: the model, data, trainer, test or encoding settings "
                         f"changed since they ran); write to a new --out, or delete {out} "
                         f"to run them again")
    done = {row_key(r, study.key_columns) for r in rows}
    runs = study.runs()
    todo = []
    for i, key in enumerate(runs, 1):
        if row_key(key, study.key_columns) in done:
            log(f"[{i}/{len(runs)}] {key}: already in {csv_path}, skipped")
        else:
            todo.append((i, key))

    def record(i: int, key: dict[str, Any], metrics: dict[str, float], seconds: float) -> None:
        append_row(csv_path, {**key, **metrics, "seconds": round(seconds, 1),
                              "config": shared, "spec": specs[key["encoding"]]})
        shown = ", ".join(f"{k}={v:.4f}" for k, v in metrics.items())
        log(f"[{i}/{len(runs)}] {key}: {shown} ({seconds:.0f} s)")
        summarize(study, out, plot=False)

    if todo:
        study.prepare(log)
    if workers == 1:
        for i, key in todo:
            record(i, key, *_run_one(study_class, config, key, threads))
    else:
        import multiprocessing
        from concurrent.futures import ProcessPoolExecutor, as_completed

        # spawn, not fork: a forked child inherits the parent's OpenMP thread pool state.
        context = multiprocessing.get_context("spawn")
        with ProcessPoolExecutor(workers, mp_context=context) as pool:
            futures = {pool.submit(_run_one, study_class, config, key, threads): (i, key)
                       for i, key in todo}
            for future in as_completed(futures):
                record(*futures[future], *future.result())
    summarize(study, out, plot=plot)
    return out
