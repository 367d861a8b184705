"""How a study runs: the :class:`Study` interface, one Lightning fit + test per run, and the
scheduler that runs every run missing from ``results.csv`` (serially or in a process pool),
appending each row as it finishes."""

from __future__ import annotations

import time
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any

import torch
from posenc.core.encoding import check_positive_int
from torch import nn

from ..plots.figure import require_matplotlib
from .results import append_row, fingerprint, logged_metrics, read_rows, row_key

__all__ = ["Study", "fit_and_test", "run_missing", "summarize"]

# Run axes (a changed list adds or drops runs, it does not change them) and how runs are
# scheduled: not part of a run's configuration.
NOT_FINGERPRINTED = frozenset({"seeds", "encodings", "keep", "threads", "workers"})


class Study:
    """One study: its runs (a key per run), how to do one, and how to summarize them.

    Subclasses set ``name`` and ``key_columns`` (the columns that identify a run in
    ``results.csv``) and implement the methods that raise here.
    """

    name: str
    key_columns: tuple[str, ...]

    def __init__(self, config: dict) -> None:
        self.config = config

    def runs(self) -> list[dict[str, Any]]:
        """Every run's key, in the order to run them."""
        raise NotImplementedError

    def run(self, key: dict[str, Any]) -> dict[str, float]:
        """Train and test the run ``key``: ``{metric column: value}``."""
        raise NotImplementedError

    def model_args(self, encoding: str) -> dict[str, Any]:
        """Model constructor arguments of the runs of ``encoding``."""
        raise NotImplementedError

    def table(self, rows: list[dict[str, str]]) -> str:
        """Markdown table of mean ± std over seeds of ``rows`` (``results.csv``)."""
        raise NotImplementedError

    def plot(self, rows: list[dict[str, str]], path: Path) -> None:
        """PNG of ``rows`` at ``path``."""
        raise NotImplementedError

    def encodings(self) -> list[str]:
        return list(self.config["encodings"])

    def prepare(self, log: Callable[[str], None]) -> None:
        """Work every run needs, done once before the runs (none here)."""

    def fingerprints(self) -> tuple[str, dict[str, str]]:
        """Hashes of what a run's result depends on besides its key: the shared settings
        (model, data, trainer, test sizes: everything but the run axes and the worker
        settings) and each encoding's spec. Stored with every row, so a resumed study never
        mixes in rows of a changed configuration."""
        shared = {k: v for k, v in self.config.items() if k not in NOT_FINGERPRINTED}
        return fingerprint(shared), {name: fingerprint(spec)
                                     for name, spec in self.config["encodings"].items()}

    def by_encoding(self, rows: list[dict[str, str]]) -> dict[str, list[dict[str, str]]]:
        """``rows`` grouped by encoding: the config's order first, then any others the CSV
        holds; encodings without rows are left out."""
        groups: dict[str, list[dict[str, str]]] = {}
        for name in self.encodings() + [r["encoding"] for r in rows]:
            groups.setdefault(name, [])
        for row in rows:
            groups[row["encoding"]].append(row)
        return {k: v for k, v in groups.items() if v}


def fit_and_test(config: Mapping[str, Any], seed: int,
                 build: Callable[[], tuple[nn.Module, Any]], metrics: Mapping[str, str]
                 ) -> dict[str, float]:
    """Seed everything, then ``build()`` the ``(model, data module)`` (so the seed fixes the
    initial weights too), fit with the study's ``trainer`` settings and test: ``{column:
    value}`` of the logged ``metrics`` (column -> logged name; one that was not logged
    raises, see :func:`~posenc.tasks.studies.results.logged_metrics`)."""
    from lightning.pytorch import Trainer, seed_everything

    seed_everything(seed, workers=True)
    kwargs = dict(accelerator="cpu", devices=1, logger=False, enable_checkpointing=False,
                  enable_progress_bar=False, enable_model_summary=False,
                  num_sanity_val_steps=0, limit_val_batches=0)
    kwargs.update(config.get("trainer") or {})
    trainer = Trainer(**kwargs)
    model, data = build()
    trainer.fit(model, datamodule=data)
    return logged_metrics(trainer.test(model, datamodule=data, verbose=False), metrics)


def summarize(study: Study, out: Path, plot: bool = True) -> None:
    """(Re)write ``table.md`` and ``plot.png`` from ``results.csv``."""
    rows = read_rows(out / "results.csv")
    (out / "table.md").write_text(study.table(rows))
    if plot and rows:
        study.plot(rows, out / "plot.png")


def _run_one(study_class: type[Study], config: dict, key: dict[str, Any], threads: int | None
             ) -> tuple[dict[str, float], float]:
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

    ``workers`` > 1 trains that many runs at once in spawned processes, each with
    ``threads`` torch threads (on a small CPU, one single-threaded run per core finishes a
    study sooner than one run using every core: these models are too small to scale). Rows
    are appended by this process as runs finish, so ``results.csv`` stays consistent.
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
