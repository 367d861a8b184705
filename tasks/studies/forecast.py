"""``posenc study forecast``: which time encoding helps a Forecaster on real data, against the
seasonal-naive forecast on the same windows (skill ``1 - MAE / MAE_naive``).

A config's ``datasets`` maps a name to ``data`` (a posenc.tasks data module class name and its
arguments), ``model`` (``Forecaster`` arguments for that data), and optionally ``baseline``
(its name in the table, default "seasonal naive") and ``trainer`` (overrides for that data).
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from ..plots.core import new_figure, save_png
from .runs import Study, fit_and_test, format_mean_std, markdown_table, mean_std, metric

__all__ = ["ForecastStudy", "data_module"]

METRICS = ("mae", "rmse", "mase", "mae_naive", "rmse_naive", "mase_naive")


def data_module(spec: dict[str, Any], where: str) -> Any:
    """``{"class": "BirthdaysDataModule", "init_args": {...}}`` -> that data module (only
    ``TimeSeriesDataModule`` and those of ``posenc.tasks.datasets``: a config imports no
    code)."""
    from posenc.tasks import TimeSeriesDataModule, datasets

    if not isinstance(spec, dict) or not isinstance(spec.get("class"), str):
        raise ValueError(f"{where} must be a mapping with 'class' (a posenc.tasks data module "
                         f"name) and 'init_args', got {spec!r}")
    known = {name: getattr(datasets, name) for name in datasets.__all__
             if name.endswith("DataModule")}
    known["TimeSeriesDataModule"] = TimeSeriesDataModule
    cls = known.get(spec["class"])
    if cls is None:
        raise ValueError(f"{where}.class={spec['class']!r} is not a time-series data module "
                         f"of posenc.tasks.datasets; one of {sorted(known)}")
    return cls(**(spec.get("init_args") or {}))


def _skill(row: dict[str, str]) -> float:
    return 1.0 - metric(row, "mae") / metric(row, "mae_naive")


class ForecastStudy(Study):
    """Train a [`Forecaster`][posenc.tasks.Forecaster] per (dataset, encoding, seed); test it and
    seasonal naive."""

    name = "forecast"
    key_columns = ("dataset", "encoding", "seed")

    def datasets(self) -> list[str]:
        return list(self.config["datasets"])

    def runs(self) -> list[dict[str, Any]]:
        return [{"dataset": d, "encoding": e, "seed": s} for s in self.config["seeds"]
                for d in self.datasets() for e in self.encodings()]

    def model_args(self, encoding: str, dataset: str | None = None) -> dict[str, Any]:
        """``Forecaster`` arguments: the study's, the dataset's, then the encoding's."""
        extra = (self.config["datasets"][dataset].get("model") or {}) if dataset else {}
        return {**(self.config.get("model") or {}), **extra,
                **(self.config["encodings"][encoding] or {})}

    def trainer_args(self, dataset: str) -> dict[str, Any]:
        """``Trainer`` settings of ``dataset``'s runs: the study's, then the dataset's."""
        own = self.config["datasets"][dataset].get("trainer") or {}
        if not isinstance(own, dict):
            raise ValueError(f"datasets.{dataset}.trainer must be a mapping of Trainer "
                             f"arguments (e.g. {{limit_train_batches: 8}}), got {own!r}")
        return {**(self.config.get("trainer") or {}), **own}

    def run(self, key: dict[str, Any]) -> dict[str, float]:
        from ..forecasting import Forecaster

        dataset = key["dataset"]

        def build():
            data = data_module(self.config["datasets"][dataset].get("data"),
                               f"datasets.{dataset}.data")
            # The sizes the CLI would link: targets, covariates, static columns, season.
            model = Forecaster(**data.model_sizes(), **self.model_args(key["encoding"], dataset))
            return model, data

        config = {**self.config, "trainer": self.trainer_args(dataset)}
        return fit_and_test(config, key["seed"], build, {m: f"test/{m}" for m in METRICS})

    def _group(self, rows: list[dict[str, str]], dataset: str) -> dict[str, list[dict]]:
        return self.by_encoding([r for r in rows if r["dataset"] == dataset])

    def _baseline(self, dataset: str) -> str:
        return self.config["datasets"][dataset].get("baseline", "seasonal naive")

    def table(self, rows: list[dict[str, str]]) -> str:
        lines = []
        for dataset in self.datasets():
            groups = self._group(rows, dataset)
            if not groups:
                continue
            baseline = self._baseline(dataset)
            cells = [[name, len({r["seed"] for r in group}),
                      *(format_mean_std([metric(r, m) for r in group], 1, 3)
                        for m in ("mae", "mase")),
                      format_mean_std([_skill(r) for r in group], 100, 1) + " %"]
                     for name, group in groups.items()]
            naive = [r for group in groups.values() for r in group]
            cells.append([f"*{baseline}*", "-",
                          *(format_mean_std([metric(r, m) for r in naive], 1, 3)
                            for m in ("mae_naive", "mase_naive")), "0 %"])
            lines += [f"**{dataset}**", "", *markdown_table(
                ["encoding", "seeds", "MAE", "MASE", f"skill vs {baseline}"], cells), ""]
        return "\n".join(lines) + (
            "Test MAE in the data's units and MASE (mean ± std over seeds); skill = 1 - MAE / "
            "MAE of the baseline forecast on the same windows (positive: better).\n")

    def plot(self, rows: list[dict[str, str]], path: Path) -> None:
        datasets = [d for d in self.datasets() if self._group(rows, d)]
        fig = new_figure((4.2 * len(datasets), 4.0), dpi=100)
        axes = fig.subplots(1, len(datasets), squeeze=False)[0]
        for ax, dataset in zip(axes, datasets, strict=True):
            groups = self._group(rows, dataset)
            names = list(groups)
            stats = [mean_std([100 * _skill(r) for r in groups[n]]) for n in names]
            ax.barh(range(len(names)), [m for m, _ in stats], xerr=[s for _, s in stats],
                    capsize=3, color=["tab:green" if m > 0 else "tab:red" for m, _ in stats])
            ax.set_yticks(range(len(names)), names, fontsize=8)
            ax.axvline(0, color="black", lw=0.8)
            ax.invert_yaxis()
            ax.set_xlabel(f"skill vs {self._baseline(dataset)} (%)")
            ax.set_title(dataset)
            ax.grid(alpha=0.3, axis="x")
        fig.suptitle("Forecaster time encodings on real data: test MAE skill vs each data "
                     "set's trivial baseline")
        save_png(fig, path)
