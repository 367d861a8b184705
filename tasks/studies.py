"""``posenc study``: train the same model with each encoding over seeds and report the spread.

    posenc study resolution --config configs/study_resolution.yaml
    posenc study irregular --config configs/study_irregular.yaml
    posenc study resolution --config configs/study_resolution.yaml --seeds 1 --max_epochs 1

- ``resolution``: a small ViT (:class:`~posenc.tasks.ImageClassifier`) trained on MNIST at
  28x28 and tested at larger and non-square sizes, one column per test size.
- ``irregular``: the :class:`~posenc.tasks.Forecaster` on the Seattle hourly temperatures
  with a random fraction of the observations kept; test MAE / RMSE per keep fraction.

Each study writes to ``--out`` (default ``runs/study_<name>/``): ``results.csv`` (one row per
run and seed, appended as each run finishes), ``table.md`` (mean ± std over seeds) and
``plot.png`` (matplotlib, the ``plot`` extra). A run whose row is already in ``results.csv``
is skipped, so an interrupted study continues where it stopped; every row records hashes of
its configuration, and a folder holding rows of a changed configuration is refused rather
than mixed into the new table.

A study config (YAML) holds ``seeds``, ``encodings`` (name -> the model arguments that make
that encoding), ``model`` and ``data`` (``init_args`` of the model / data module, shared by
every run), ``trainer`` (``lightning.pytorch.Trainer`` arguments) and the study's own axis
(``eval_image_sizes`` or ``keep``). Training is the tasks' own Lightning code.
"""

from __future__ import annotations

import argparse
import csv
import hashlib
import json
import math
import time
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

import torch
from posenc.core import check_positive_int
from torch import Tensor, nn

from .plots_figure import new_figure, require_matplotlib, save_png

__all__ = ["IndexSinusoidal", "STUDIES", "main", "run_study", "summarize"]


class IndexSinusoidal(nn.Module):
    """Sinusoidal encoding of each token's *index*, as if samples were equally spaced.

    Context observations get ``0, -1, -2, ...`` counting back from the last one, query tokens
    ``1, 2, ...`` in time order: the gaps of irregular sampling are invisible to it (the
    baseline that continuous-time encodings are compared with). A ``"deltas"`` input of the
    :class:`~posenc.tasks.Forecaster` (elapsed time and the observed-token mask).

    Args:
        dim: even output width.
        base: wavelength base of the sinusoids.
    """

    posenc_input = "deltas"

    def __init__(self, dim: int, base: float = 10000.0) -> None:
        super().__init__()
        from posenc.core import SinusoidalEncoding

        self.encoding = SinusoidalEncoding(dim, base=base)

    def forward(self, elapsed: Tensor, observed: Tensor) -> Tensor:
        """``elapsed`` ``(B, N)`` float, ``observed`` ``(B, N)`` bool -> ``(B, N, dim)``."""
        later = elapsed[:, None, :] > elapsed[:, :, None]  # [b, i, j]: token j after token i
        earlier = elapsed[:, None, :] < elapsed[:, :, None]
        future = (elapsed > 0) & ~observed
        back = -(later & observed[:, None, :]).sum(-1)
        ahead = 1 + (earlier & future[:, None, :]).sum(-1)
        index = torch.where(future, ahead, back).to(torch.float32)
        return self.encoding(index)


# -- shared runner ----------------------------------------------------------------------------

def _fmt(values: Sequence[float], scale: float, digits: int) -> str:
    values = [v * scale for v in values if v == v]
    if not values:
        return "–"
    mean = sum(values) / len(values)
    if len(values) == 1:
        return f"{mean:.{digits}f}"
    std = math.sqrt(sum((v - mean) ** 2 for v in values) / (len(values) - 1))
    return f"{mean:.{digits}f} ± {std:.{digits}f}"


def _read_rows(path: Path) -> list[dict[str, str]]:
    if not path.exists():
        return []
    with path.open(newline="") as handle:
        return list(csv.DictReader(handle))


def _append_row(path: Path, row: dict[str, Any]) -> None:
    rows = _read_rows(path)
    fields = list(rows[0]) if rows else []
    fields += [k for k in row if k not in fields]
    rows.append({k: str(v) for k, v in row.items()})
    tmp = path.with_suffix(".tmp")
    with tmp.open("w", newline="") as handle:
        writer = csv.DictWriter(handle, fieldnames=fields, restval="")
        writer.writeheader()
        writer.writerows(rows)
    tmp.replace(path)  # atomic: an interrupted study never leaves a half-written CSV


def _trainer(config: dict, seed: int):
    from lightning.pytorch import Trainer, seed_everything

    seed_everything(seed, workers=True)
    kwargs = dict(accelerator="cpu", devices=1, logger=False, enable_checkpointing=False,
                  enable_progress_bar=False, enable_model_summary=False,
                  num_sanity_val_steps=0, limit_val_batches=0)
    kwargs.update(config.get("trainer") or {})
    return Trainer(**kwargs)


class Study:
    """One study: its runs (a key per run), how to do one, and how to summarize them."""

    name: str
    key_columns: tuple[str, ...]

    def __init__(self, config: dict) -> None:
        self.config = config

    def runs(self) -> list[dict[str, Any]]:
        raise NotImplementedError

    def run(self, key: dict[str, Any]) -> dict[str, float]:
        raise NotImplementedError

    def model_args(self, encoding: str) -> dict[str, Any]:
        raise NotImplementedError

    def table(self, rows: list[dict[str, str]]) -> str:
        raise NotImplementedError

    def plot(self, rows: list[dict[str, str]], path: Path) -> None:
        raise NotImplementedError

    def encodings(self) -> list[str]:
        return list(self.config["encodings"])

    def fingerprints(self) -> tuple[str, dict[str, str]]:
        """Hashes of what a run's result depends on besides its key: the shared settings
        (model, data, trainer, test sizes: everything but the run axes and the worker
        settings) and each encoding's spec. Stored with every row, so a resumed study never
        mixes in rows of a changed configuration."""
        shared = {k: v for k, v in self.config.items() if k not in _NOT_FINGERPRINTED}
        return _fingerprint(shared), {name: _fingerprint(spec)
                                      for name, spec in self.config["encodings"].items()}

    def _by_encoding(self, rows: list[dict[str, str]]) -> dict[str, list[dict[str, str]]]:
        groups: dict[str, list[dict[str, str]]] = {}
        for name in self.encodings() + [r["encoding"] for r in rows]:
            groups.setdefault(name, [])
        for row in rows:
            groups[row["encoding"]].append(row)
        return {k: v for k, v in groups.items() if v}


# Run axes (a changed list adds or drops runs, it does not change them) and how runs are
# scheduled: not part of a run's configuration.
_NOT_FINGERPRINTED = frozenset({"seeds", "encodings", "keep", "threads", "workers"})


def _fingerprint(value: Any) -> str:
    return hashlib.sha1(json.dumps(value, sort_keys=True, default=str).encode()).hexdigest()[:12]


def _size_label(size: int | Sequence[int]) -> str:
    if isinstance(size, int):
        return str(size)
    height, width = size
    return str(height) if height == width else f"{height}x{width}"


class ResolutionStudy(Study):
    """Train an :class:`ImageClassifier` at one size, test accuracy at ``eval_image_sizes``."""

    name = "resolution"
    key_columns = ("encoding", "seed")

    def sizes(self) -> list[str]:
        return [_size_label(s) for s in self.config["eval_image_sizes"]]

    def runs(self) -> list[dict[str, Any]]:
        # Seed-major: an interrupted study has every encoding at the same number of seeds.
        return [{"encoding": e, "seed": s} for s in self.config["seeds"]
                for e in self.encodings()]

    def model_args(self, encoding: str) -> dict[str, Any]:
        """``ImageClassifier`` arguments of the runs of ``encoding``."""
        spec = self.config["encodings"][encoding]
        args = {**(self.config.get("model") or {}),
                **({"encoding": spec} if isinstance(spec, (str, type(None))) else spec)}
        args.setdefault("encoding", encoding)
        return args

    def run(self, key: dict[str, Any]) -> dict[str, float]:
        from .vision import ImageClassifier
        from .vision_data import MNISTDataModule

        trainer = _trainer(self.config, key["seed"])
        model = ImageClassifier(**self.model_args(key["encoding"]))
        data = MNISTDataModule(**{**(self.config.get("data") or {}),
                                  "eval_image_sizes": self.config["eval_image_sizes"]})
        trainer.fit(model, datamodule=data)
        results = trainer.test(model, datamodule=data, verbose=False)
        merged = {k: v for result in results for k, v in result.items()}
        return {f"acc_{s}": float(merged.get(f"test/acc_{s}", math.nan)) for s in self.sizes()}

    def table(self, rows: list[dict[str, str]]) -> str:
        sizes = self.sizes()
        train = _size_label(self.config.get("model", {}).get("img_size", 28))
        head = [f"{s} (train)" if s == train else s for s in sizes]
        lines = ["| encoding | seeds | " + " | ".join(head) + " |",
                 "|---|---|" + "---|" * len(sizes)]
        for name, group in self._by_encoding(rows).items():
            cells = [_fmt([float(r.get(f"acc_{s}") or "nan") for r in group], 100, 1)
                     for s in sizes]
            lines.append(f"| {name} | {len(group)} | " + " | ".join(cells) + " |")
        return "\n".join(lines) + "\n\nTest accuracy (%), mean ± std over seeds.\n"

    def plot(self, rows: list[dict[str, str]], path: Path) -> None:
        sizes = self.sizes()
        fig = new_figure((7, 4.5), dpi=100)
        ax = fig.subplots()
        for name, group in self._by_encoding(rows).items():
            means, stds = [], []
            for s in sizes:
                vals = [100 * float(r.get(f"acc_{s}") or "nan") for r in group]
                vals = [v for v in vals if v == v] or [math.nan]
                mean = sum(vals) / len(vals)
                means.append(mean)
                stds.append(math.sqrt(sum((v - mean) ** 2 for v in vals) / max(len(vals) - 1, 1)))
            ax.errorbar(range(len(sizes)), means, yerr=stds, marker="o", capsize=3, label=name)
        ax.set_xticks(range(len(sizes)), [f"{s}" for s in sizes])
        ax.set_xlabel("test image size (px); trained at "
                      f"{self.config.get('model', {}).get('img_size', 28)}")
        ax.set_ylabel("test accuracy (%)")
        ax.set_title("MNIST ViT: accuracy vs test resolution")
        ax.grid(alpha=0.3)
        ax.legend(fontsize=8)
        save_png(fig, path)


class IrregularStudy(Study):
    """Train a :class:`Forecaster` per keep fraction; test MAE / RMSE (degrees F)."""

    name = "irregular"
    key_columns = ("encoding", "keep", "seed")

    def runs(self) -> list[dict[str, Any]]:
        return [{"encoding": e, "keep": float(k), "seed": s} for s in self.config["seeds"]
                for k in self.config["keep"] for e in self.encodings()]

    def model_args(self, encoding: str) -> dict[str, Any]:
        """``Forecaster`` arguments of the runs of ``encoding``."""
        return {**(self.config.get("model") or {}), **(self.config["encodings"][encoding] or {})}

    def run(self, key: dict[str, Any]) -> dict[str, float]:
        from .forecasting import Forecaster
        from .timeseries_data import SeattleTempsDataModule

        trainer = _trainer(self.config, key["seed"])
        model = Forecaster(**self.model_args(key["encoding"]))
        keep = key["keep"]
        # The dropped observations differ per seed (and so does the training seed).
        data = SeattleTempsDataModule(**{**(self.config.get("data") or {}),
                                         "irregular": None if keep >= 1 else keep,
                                         "seed": key["seed"]})
        trainer.fit(model, datamodule=data)
        results = trainer.test(model, datamodule=data, verbose=False)
        merged = {k: v for result in results for k, v in result.items()}
        return {m: float(merged.get(f"test/{m}", math.nan)) for m in ("mae", "rmse", "mase")}

    def _keeps(self) -> list[float]:
        return [float(k) for k in self.config["keep"]]

    def table(self, rows: list[dict[str, str]]) -> str:
        keeps = self._keeps()
        head = [f"{m} @ {k:.0%}" for m in ("MAE", "RMSE") for k in keeps]
        lines = ["| encoding | seeds | " + " | ".join(head) + " |",
                 "|---|---|" + "---|" * len(head)]
        for name, group in self._by_encoding(rows).items():
            cells = []
            for metric in ("mae", "rmse"):
                for k in keeps:
                    sel = [float(r[metric]) for r in group if float(r["keep"]) == k]
                    cells.append(_fmt(sel, 1, 2))
            seeds = len({r["seed"] for r in group})
            lines.append(f"| {name} | {seeds} | " + " | ".join(cells) + " |")
        return "\n".join(lines) + (
            "\n\nTest MAE / RMSE in degrees F at each fraction of observations kept, "
            "mean ± std over seeds.\n")

    def plot(self, rows: list[dict[str, str]], path: Path) -> None:
        keeps = self._keeps()
        fig = new_figure((10, 4.2), dpi=100)
        axes = fig.subplots(1, 2)
        for name, group in self._by_encoding(rows).items():
            for ax, metric in zip(axes, ("mae", "rmse"), strict=True):
                means, stds = [], []
                for k in keeps:
                    vals = [float(r[metric]) for r in group if float(r["keep"]) == k]
                    vals = vals or [math.nan]
                    mean = sum(vals) / len(vals)
                    means.append(mean)
                    stds.append(math.sqrt(sum((v - mean) ** 2 for v in vals)
                                          / max(len(vals) - 1, 1)))
                ax.errorbar([100 * k for k in keeps], means, yerr=stds, marker="o", capsize=3,
                            label=name)
        for ax, metric in zip(axes, ("MAE", "RMSE"), strict=True):
            ax.set_xlabel("observations kept (%)")
            ax.set_ylabel(f"test {metric} (°F)")
            ax.grid(alpha=0.3)
        axes[0].legend(fontsize=8)
        fig.suptitle("Seattle hourly temperature, irregular sampling: error vs keep fraction")
        save_png(fig, path)


STUDIES: dict[str, type[Study]] = {"resolution": ResolutionStudy, "irregular": IrregularStudy}


def _key_of(row: dict[str, Any], columns: Sequence[str]) -> tuple[str, ...]:
    return tuple(str(float(row[c])) if c == "keep" else str(row[c]) for c in columns)


def summarize(study: Study, out: Path, plot: bool = True) -> None:
    """(Re)write ``table.md`` and ``plot.png`` from ``results.csv``."""
    rows = _read_rows(out / "results.csv")
    (out / "table.md").write_text(study.table(rows))
    if plot and rows:
        study.plot(rows, out / "plot.png")


def _run_one(name: str, config: dict, key: dict[str, Any], threads: int | None
             ) -> tuple[dict[str, float], float]:
    """One run with ``threads`` torch threads (restored after): ``(metrics, seconds)``."""
    previous = torch.get_num_threads()
    if threads:
        torch.set_num_threads(threads)
    try:
        start = time.perf_counter()
        metrics = STUDIES[name](config).run(key)
        return metrics, time.perf_counter() - start
    finally:
        torch.set_num_threads(previous)


def run_study(name: str, config: dict, out: str | Path,
              log: Callable[[str], None] = print, plot: bool = True, workers: int = 1,
              threads: int | None = None) -> Path:
    """Run every missing (encoding, [keep,] seed) of study ``name``; -> the out folder.

    ``workers`` > 1 trains that many runs at once in spawned processes, each with
    ``threads`` torch threads (on a small CPU, one single-threaded run per core finishes a
    study sooner than one run using every core: these models are too small to scale). Rows
    are appended by this process as runs finish, so ``results.csv`` stays consistent.
    """
    if name not in STUDIES:
        raise ValueError(f"study must be one of {sorted(STUDIES)}, got {name!r}")
    workers = check_positive_int(workers, "workers")
    if plot:
        require_matplotlib()  # now, not after the last run
    study = STUDIES[name](config)
    out = Path(out)
    out.mkdir(parents=True, exist_ok=True)
    csv_path = out / "results.csv"
    shared, specs = study.fingerprints()
    rows = _read_rows(csv_path)
    stale = sorted({r["encoding"] for r in rows if r.get("config") != shared
                    or (r["encoding"] in specs and r.get("spec") != specs[r["encoding"]])})
    if stale:
        raise ValueError(f"{csv_path} holds results of another configuration (encodings "
                         f"{stale}: the model, data, trainer, test or encoding settings "
                         f"changed since they ran); write to a new --out, or delete {out} "
                         f"to run them again")
    done = {_key_of(r, study.key_columns) for r in rows}
    runs = study.runs()
    todo = []
    for i, key in enumerate(runs, 1):
        if _key_of(key, study.key_columns) in done:
            log(f"[{i}/{len(runs)}] {key}: already in {csv_path}, skipped")
        else:
            todo.append((i, key))

    def record(i: int, key: dict[str, Any], metrics: dict[str, float], seconds: float) -> None:
        _append_row(csv_path, {**key, **metrics, "seconds": round(seconds, 1),
                               "config": shared, "spec": specs[key["encoding"]]})
        shown = ", ".join(f"{k}={v:.4f}" for k, v in metrics.items())
        log(f"[{i}/{len(runs)}] {key}: {shown} ({seconds:.0f} s)")
        summarize(study, out, plot=False)

    if workers == 1:
        for i, key in todo:
            record(i, key, *_run_one(name, config, key, threads))
    else:
        import multiprocessing
        from concurrent.futures import ProcessPoolExecutor, as_completed

        # spawn, not fork: a forked child inherits the parent's OpenMP thread pool state.
        context = multiprocessing.get_context("spawn")
        with ProcessPoolExecutor(workers, mp_context=context) as pool:
            futures = {pool.submit(_run_one, name, config, key, threads): (i, key)
                       for i, key in todo}
            for future in as_completed(futures):
                record(*futures[future], *future.result())
    summarize(study, out, plot=plot)
    return out


# What each study's config must list (after the command-line overrides).
_REQUIRED = {"resolution": ("seeds", "eval_image_sizes"), "irregular": ("seeds", "keep")}


def _load_config(path: str) -> dict:
    import yaml

    try:
        with open(path) as handle:
            config = yaml.safe_load(handle)
    except FileNotFoundError:
        raise ValueError(f"--config {path!r}: no such file") from None
    except (OSError, UnicodeDecodeError) as err:  # a folder, unreadable, not text
        raise ValueError(f"--config {path!r} cannot be read: {err}") from None
    except yaml.YAMLError as err:
        raise ValueError(f"--config {path!r} is not valid YAML: {' '.join(str(err).split())}"
                         ) from None
    if not isinstance(config, dict):
        got = "an empty file" if config is None else type(config).__name__
        raise ValueError(f"--config {path!r} must hold a mapping (seeds, encodings, ...), got "
                         f"{got}")
    return config


def _apply_overrides(config: dict, args: argparse.Namespace) -> dict:
    config = {**config, "trainer": dict(config.get("trainer") or {})}
    if args.seeds is not None:
        listed = list(config.get("seeds") or [])
        config["seeds"] = (listed + list(range(max(listed, default=-1) + 1,
                                               args.seeds + 1)))[:args.seeds]
    if args.encodings:
        names = [n.strip() for n in args.encodings.split(",") if n.strip()]
        unknown = sorted(set(names) - set(config["encodings"]))
        if unknown:
            raise ValueError(f"--encodings {unknown} not in the config's encodings "
                             f"{sorted(config['encodings'])}")
        config["encodings"] = {n: config["encodings"][n] for n in names}
    if args.keep:
        config["keep"] = [float(k) for k in args.keep.split(",")]
    for name in ("max_epochs", "limit_train_batches", "limit_test_batches"):
        value = getattr(args, name)
        if value is not None:
            config["trainer"][name] = value
    return config


def _limit(text: str) -> int | float:
    value = float(text)
    return int(value) if value.is_integer() and value > 1 else value


def main(argv: Sequence[str] | None = None) -> Path:
    """``posenc study {resolution,irregular} --config FILE [overrides]``."""
    parser = argparse.ArgumentParser(
        prog="posenc study", description=__doc__.split("\n\n")[0],
        formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("study", choices=sorted(STUDIES))
    parser.add_argument("--config", required=True, help="study YAML (configs/study_*.yaml)")
    parser.add_argument("--out", help="output folder (default runs/study_<name>/)")
    parser.add_argument("--seeds", type=int, help="use only the first N seeds")
    parser.add_argument("--encodings", help="comma-separated subset of the config's encodings")
    parser.add_argument("--keep", help="irregular: comma-separated keep fractions")
    parser.add_argument("--max_epochs", type=int)
    parser.add_argument("--limit_train_batches", type=_limit)
    parser.add_argument("--limit_test_batches", type=_limit)
    parser.add_argument("--threads", type=int,
                        help="torch threads per run (default: the config's threads)")
    parser.add_argument("--workers", type=int,
                        help="runs trained at once, in separate processes (default: the "
                             "config's workers, else 1)")
    parser.add_argument("--no_plot", action="store_true", help="skip the PNG")
    args = parser.parse_args(list(argv) if argv is not None else None)
    config = _load_config(args.config)
    if not isinstance(config.get("encodings"), dict) or not config["encodings"]:
        raise ValueError(f"--config {args.config!r} needs 'encodings': a mapping of names to "
                         f"model arguments, got {config.get('encodings')!r}")
    config = _apply_overrides(config, args)
    missing = [k for k in _REQUIRED[args.study] if not config.get(k)]
    if missing:
        raise ValueError(f"--config {args.config!r} lacks {missing} (a non-empty list each) "
                         f"for the {args.study} study")
    threads = args.threads or config.get("threads")
    threads = check_positive_int(threads, "threads") if threads is not None else None
    out = run_study(args.study, config, args.out or f"runs/study_{args.study}",
                    plot=not args.no_plot, workers=args.workers or config.get("workers", 1),
                    threads=threads)
    print((out / "table.md").read_text())
    print(f"Wrote {out / 'results.csv'}, {out / 'table.md'}"
          + ("" if args.no_plot else f", {out / 'plot.png'}"))
    return out


if __name__ == "__main__":
    main()
