"""``posenc study scenes``: the resolution study on scenes where position matters.

A [`ResolutionStudy`][posenc.tasks.studies.ResolutionStudy] whose data are the scene data
modules of [`posenc.tasks.vision.scenes`][posenc.tasks.vision.scenes] (``task: placed`` or
``relation``; ``data`` holds the module's arguments). Every run is tested on the training
canvas resized to each of ``eval_image_sizes`` and on each of ``eval_canvases`` (new scenes on
a larger canvas, digits at the training size); the table and the plot keep the two axes apart.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from posenc.core._checks import check_choice

from ..plots.core import new_figure, save_png
from .resolution import ResolutionStudy
from .runs import errorbars, format_mean_std, markdown_table

__all__ = ["SCENE_TASKS", "ScenesStudy"]

#: ``task`` -> the data module class name in ``posenc.tasks.vision.scenes``.
SCENE_TASKS = {"placed": "PlacedScenesDataModule", "relation": "RelationScenesDataModule"}


def _label(size: int | list[int]) -> str:
    if isinstance(size, int):
        return str(size)
    height, width = size
    return str(height) if height == width else f"{height}x{width}"


class ScenesStudy(ResolutionStudy):
    """Train an [`ImageClassifier`][posenc.tasks.ImageClassifier] on scenes of ``task``; test on
    the training canvas resized (``eval_image_sizes``) and on larger canvases
    (``eval_canvases``)."""

    name = "scenes"

    def task(self) -> str:
        """The config's ``task``, a key of `SCENE_TASKS` (else ``ValueError`` naming it)."""
        return check_choice(self.config.get("task"), "task", tuple(SCENE_TASKS))

    def data_module(self, args: dict[str, Any]) -> Any:
        from ..vision import scenes

        return getattr(scenes, SCENE_TASKS[self.task()])(**args)

    def data_args(self, augment: str | None = "") -> dict[str, Any]:
        return {**super().data_args(augment),
                "eval_canvases": list(self.config.get("eval_canvases") or [])}

    def _resized(self) -> list[str]:
        return [_label(s) for s in self.config["eval_image_sizes"]]

    def _canvases(self) -> list[str]:
        return [str(c) for c in self.config.get("eval_canvases") or []]

    def sizes(self) -> list[str]:
        """Every test loader's image size (its metric ``acc_<size>``): resized, then canvases."""
        return self._resized() + self._canvases()

    def _heading(self, size: str) -> str:
        if size == self._train_size():
            return f"{size} (train)"
        return f"{size} (canvas)" if size in self._canvases() else f"{size} (resized)"

    def table(self, rows: list[dict[str, str]]) -> str:
        lines = markdown_table(
            ["encoding", "seeds", *(self._heading(s) for s in self.sizes())],
            ([name, len(group), *(format_mean_std(values, 1, 1)
                                  for values in self._accuracies(group))]
             for name, group in self.by_encoding(rows).items()))
        return "\n".join(lines) + (
            f"\n\nTest accuracy (%), mean ± std over seeds, {self.task()} scenes trained on a "
            f"{self._train_size()} px canvas. *resized*: the same test scenes scaled to that "
            "size (digits grow); *canvas*: new test scenes on a larger canvas, digits at the "
            "training size.\n")

    def plot(self, rows: list[dict[str, str]], path: Path) -> None:
        train = self._train_size()
        sizes = self.sizes()
        axes_sizes = [("same scene resized", self._resized()),
                      ("larger canvas, same digit size",
                       [s for s in [train] if s in sizes] + self._canvases())]
        fig = new_figure((12, 4.5), dpi=100)
        axes = fig.subplots(1, 2, sharey=True)
        colors = {n: f"C{i % 10}" for i, n in enumerate(self.by_encoding(rows))}
        for ax, (title, shown) in zip(axes, axes_sizes, strict=True):
            for name, group in self.by_encoding(rows).items():
                values = self._accuracies(group)
                errorbars(ax, [int(s.split("x")[0]) for s in shown],
                          [values[sizes.index(s)] for s in shown], name, colors[name])
            ax.set_xlabel(f"test image size (px); trained at {train}")
            ax.set_title(f"{self.task()} scenes: {title}", fontsize=10)
            ax.grid(alpha=0.3)
        axes[0].set_ylabel("test accuracy (%)")
        axes[1].legend(fontsize=7, ncol=2)
        save_png(fig, path)
