"""``posenc study``: train the same model with each encoding over seeds and report the spread.

    posenc study {resolution,irregular,forecast,scenes,video} --config configs/study_<name>.yaml
    posenc study resolution --config configs/study_resolution.yaml --seeds 1 --max_epochs 1

- ``resolution``: a small ViT trained on MNIST at 28x28, tested at other sizes (optionally
  per training-data ``augment`` setting).
- ``irregular``: the Forecaster on Seattle hourly temperatures with a fraction of the
  observations kept.
- ``forecast``: the Forecaster on real data, each encoding's skill against seasonal naive.
- ``scenes``: the resolution study on scenes of placed MNIST digits (``task: placed`` or
  ``relation``), tested resized and on larger canvases.
- ``video``: the VideoClassifier on moving-digit clips at irregular frame times, ``t`` from the
  frame index or the real times, tested at other frame rates and lengths.

A study config (YAML) holds ``seeds``, ``encodings`` (name -> model arguments), ``model``,
``data``, ``trainer`` and the study's own axis. Each study writes ``results.csv`` (a row per
run, appended as it finishes; a rerun skips the runs it holds), ``table.md`` (mean ± std over
seeds) and ``plot.png`` to ``--out`` (default ``runs/study_<name>/``).
"""

from __future__ import annotations

import argparse
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

from posenc.core._checks import check_positive_int

# Configs and checkpoints written before IndexSinusoidal moved to the library name it here.
from posenc.temporal import IndexSinusoidal  # noqa: F401

from ..plots.core import new_figure, save_png
from .forecast import ForecastStudy
from .resolution import ResolutionStudy
from .runs import (
    Study,
    errorbars,
    fit_and_test,
    format_mean_std,
    markdown_table,
    metric,
    run_missing,
    summarize,
)
from .scenes import ScenesStudy
from .video import VideoStudy

__all__ = ["STUDIES", "ForecastStudy", "IrregularStudy", "ResolutionStudy", "ScenesStudy",
           "Study", "VideoStudy", "main", "run_study", "summarize"]


class IrregularStudy(Study):
    """Train a [`Forecaster`][posenc.tasks.Forecaster] per keep fraction; test MAE / RMSE (degrees
    F)."""

    name = "irregular"
    key_columns = ("encoding", "keep", "seed")
    metrics = ("mae", "rmse", "mase")  # results columns, logged as test/<name>
    shown = ("mae", "rmse")  # in the table and the plot

    def runs(self) -> list[dict[str, Any]]:
        return [{"encoding": e, "keep": float(k), "seed": s} for s in self.config["seeds"]
                for k in self.config["keep"] for e in self.encodings()]

    def run(self, key: dict[str, Any]) -> dict[str, float]:
        from ..datasets import SeattleTempsDataModule
        from ..forecasting import Forecaster

        keep = key["keep"]

        def build():
            # The dropped observations differ per seed (and so does the training seed).
            return (Forecaster(**self.model_args(key["encoding"])),
                    SeattleTempsDataModule(**{**(self.config.get("data") or {}),
                                              "irregular": None if keep >= 1 else keep,
                                              "seed": key["seed"]}))

        return fit_and_test(self.config, key["seed"], build, {m: f"test/{m}" for m in self.metrics})

    def _keeps(self) -> list[float]:
        return [float(k) for k in self.config["keep"]]

    def _errors(self, group: list[dict[str, str]], name: str) -> list[list[float]]:
        """Per keep fraction, metric ``name`` of each row of ``group`` run at it."""
        return [[metric(r, name) for r in group if float(r["keep"]) == k] for k in self._keeps()]

    def table(self, rows: list[dict[str, str]]) -> str:
        head = [f"{m.upper()} @ {k:.0%}" for m in self.shown for k in self._keeps()]
        lines = markdown_table(["encoding", "seeds", *head], (
            [name, len({r["seed"] for r in group}),
             *(format_mean_std(values, 1, 2) for m in self.shown
               for values in self._errors(group, m))]
            for name, group in self.by_encoding(rows).items()))
        return "\n".join(lines) + (
            "\n\nTest MAE / RMSE in degrees F at each fraction of observations kept, "
            "mean ± std over seeds.\n")

    def plot(self, rows: list[dict[str, str]], path: Path) -> None:
        percent = [100 * k for k in self._keeps()]
        fig = new_figure((10, 4.2), dpi=100)
        axes = fig.subplots(1, len(self.shown))
        for name, group in self.by_encoding(rows).items():
            for ax, m in zip(axes, self.shown, strict=True):
                errorbars(ax, percent, self._errors(group, m), name)
        for ax, m in zip(axes, self.shown, strict=True):
            ax.set_xlabel("observations kept (%)")
            ax.set_ylabel(f"test {m.upper()} (°F)")
            ax.grid(alpha=0.3)
        axes[0].legend(fontsize=8)
        fig.suptitle("Seattle hourly temperature, irregular sampling: error vs keep fraction")
        save_png(fig, path)


STUDIES: dict[str, type[Study]] = {"resolution": ResolutionStudy, "irregular": IrregularStudy,
                                   "forecast": ForecastStudy, "scenes": ScenesStudy,
                                   "video": VideoStudy}


def run_study(name: str, config: dict, out: str | Path,
              log: Callable[[str], None] = print, plot: bool = True, workers: int = 1,
              threads: int | None = None) -> Path:
    """Run every missing run of study ``name``; -> ``out``. See
    [`run_missing`][posenc.tasks.studies.run_missing]."""
    if name not in STUDIES:
        raise ValueError(f"study must be one of {sorted(STUDIES)}, got {name!r}")
    return run_missing(STUDIES[name], config, out, log=log, plot=plot, workers=workers,
                       threads=threads)


# What each study's config must list (after the command-line overrides).
_REQUIRED = {"resolution": ("seeds", "eval_image_sizes"), "irregular": ("seeds", "keep"),
             "forecast": ("seeds", "datasets"), "scenes": ("seeds", "eval_image_sizes", "task"),
             "video": ("seeds", "frame_times")}


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


def _subset(config: dict, key: str, text: str, option: str) -> dict:
    """The entries of ``config[key]`` that comma-separated ``text`` names, in its order."""
    names = [n.strip() for n in text.split(",") if n.strip()]
    have = config.get(key) or {}
    unknown = sorted(set(names) - set(have))
    if unknown:
        raise ValueError(f"{option} {unknown} not in the config's {key} {sorted(have)}")
    return {n: have[n] for n in names}


def _apply_overrides(config: dict, args: argparse.Namespace) -> dict:
    config = {**config, "trainer": dict(config.get("trainer") or {})}
    if args.seeds is not None:  # the listed seeds first, then the next unused ones
        listed = list(config.get("seeds") or [])
        config["seeds"] = (listed + list(range(max(listed, default=-1) + 1,
                                               args.seeds + 1)))[:args.seeds]
    if args.encodings:
        config["encodings"] = _subset(config, "encodings", args.encodings, "--encodings")
    if args.keep:
        config["keep"] = [float(k) for k in args.keep.split(",")]
    if args.datasets:
        config["datasets"] = _subset(config, "datasets", args.datasets, "--datasets")
    for name in ("max_epochs", "limit_train_batches", "limit_test_batches"):
        if getattr(args, name) is not None:
            config["trainer"][name] = getattr(args, name)
    return config


def _limit(text: str) -> int | float:
    value = float(text)
    return int(value) if value.is_integer() and value > 1 else value


def main(argv: Sequence[str] | None = None) -> Path:
    """``posenc study {resolution,irregular,forecast,scenes,video} --config FILE [overrides]``."""
    parser = argparse.ArgumentParser(
        prog="posenc study", description=__doc__.split("\n\n")[0],
        formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("study", choices=sorted(STUDIES))
    parser.add_argument("--config", required=True, help="study YAML (configs/study_*.yaml)")
    parser.add_argument("--out", help="output folder (default runs/study_<name>/)")
    parser.add_argument("--seeds", type=int, help="use only the first N seeds")
    parser.add_argument("--encodings", help="comma-separated subset of the config's encodings")
    parser.add_argument("--keep", help="irregular: comma-separated keep fractions")
    parser.add_argument("--datasets", help="forecast: comma-separated subset of the datasets")
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

