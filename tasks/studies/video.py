"""The video study: each 3D encoding with ``t`` from the frame index or from the real frame
times, on moving-digit clips at irregular times, tested at the training frame rate, at twice
it and on longer clips ([`VideoStudy`][posenc.tasks.studies.video.VideoStudy])."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from ..plots.core import new_figure, save_png
from .runs import Study, fit_and_test, format_mean_std, markdown_table, mean_std, metric

__all__ = ["VideoStudy"]

NO_TIME = "-"
"""What a run's ``frame_time`` is for an encoding that reads no time (``none``)."""


class VideoStudy(Study):
    """Train a [`VideoClassifier`][posenc.tasks.VideoClassifier] per encoding and
    ``frame_times`` entry (``real``, ``index``) on
    [`MovingDigitsDataModule`][posenc.tasks.MovingDigitsDataModule] clips; test accuracy at each
    of the data's ``eval_variants`` (``1x``, ``rate2x``, ``len2x``). The seed is the training
    seed and the clips' (each seed draws its own clips). An encoding whose model arguments give
    ``encoding: none`` reads no time and runs once per seed (``frame_time`` ``-``).
    """

    name = "video"
    key_columns = ("encoding", "frame_time", "seed")

    def frame_times(self, encoding: str) -> list[str]:
        """The ``frame_time`` settings ``encoding`` runs with."""
        if self.model_args(encoding).get("encoding") in ("none", None):
            return [NO_TIME]
        return [str(f) for f in self.config["frame_times"]]

    def variants(self) -> list[str]:
        """The evaluation settings' names, in the data module's order."""
        from ..vision.clips import MovingDigitsDataModule

        return MovingDigitsDataModule(**self.config.get("data") or {}).variant_names

    def model_args(self, encoding: str) -> dict[str, Any]:
        spec = self.config["encodings"][encoding]
        own = {"encoding": spec} if isinstance(spec, (str, type(None))) else dict(spec)
        return {"encoding": encoding, **(self.config.get("model") or {}), **own}

    def runs(self) -> list[dict[str, Any]]:
        # Seed-major: an interrupted study has every setting at the same number of seeds.
        return [{"encoding": e, "frame_time": f, "seed": s} for s in self.config["seeds"]
                for e in self.encodings() for f in self.frame_times(e)]

    def run(self, key: dict[str, Any]) -> dict[str, float]:
        from ..vision import MovingDigitsDataModule, VideoClassifier

        frame_time = "index" if key["frame_time"] == NO_TIME else key["frame_time"]

        def build():
            return (VideoClassifier(**self.model_args(key["encoding"]), frame_time=frame_time),
                    MovingDigitsDataModule(**{**(self.config.get("data") or {}),
                                              "seed": key["seed"]}))

        return fit_and_test(self.config, key["seed"], build,
                            {f"acc_{v}": f"test/acc_{v}" for v in self.variants()})

    def _groups(self, rows: list[dict[str, str]]) -> dict[tuple[str, str], list[dict[str, str]]]:
        """``(encoding, frame_time)`` -> its rows, the config's order."""
        groups: dict[tuple[str, str], list[dict[str, str]]] = {}
        for name, block in self.by_encoding(rows).items():
            for row in block:
                groups.setdefault((name, row["frame_time"]), []).append(row)
        return groups

    def _accuracies(self, group: list[dict[str, str]]) -> list[list[float]]:
        """Per evaluation setting, the accuracy (%) of each row of ``group``."""
        return [[100 * metric(r, f"acc_{v}") for r in group] for v in self.variants()]

    def table(self, rows: list[dict[str, str]]) -> str:
        variants = self.variants()
        head = ["encoding", "t from", "seeds",
                *(f"{v} (train)" if v == "1x" else v for v in variants)]
        lines = markdown_table(head, (
            [name, frame_time, len(group),
             *(format_mean_std(values, 1, 1) for values in self._accuracies(group))]
            for (name, frame_time), group in self._groups(rows).items()))
        data = self.config.get("data") or {}
        note = (f"Test accuracy (%), mean ± std over seeds, on clips at irregular frame times "
                f"(frame rate {data.get('frame_rate', [4.0, 12.0])} fps per clip, "
                f"{data.get('drop', 0.25):.0%} of the frames dropped): 1x as in training, "
                f"rate2x at twice the frame rate (twice the frames over the same span), len2x "
                f"twice as long at the training rate. t from: the real frame times or the frame "
                f"index. Chance: 12.5%.")
        return "\n".join(lines) + f"\n\n{note}\n"

    def plot(self, rows: list[dict[str, str]], path: Path) -> None:
        variants = self.variants()
        fig = new_figure((8, 4.8), dpi=100)
        ax = fig.subplots()
        colors = {n: f"C{i % 10}" for i, n in enumerate(self.by_encoding(rows))}
        styles = {"real": "-", "index": "--", NO_TIME: ":"}
        for (name, frame_time), group in self._groups(rows).items():
            means, stds = zip(*(mean_std(v) for v in self._accuracies(group)), strict=True)
            label = name if frame_time == NO_TIME else f"{name}, t from {frame_time}"
            ax.errorbar(range(len(variants)), means, yerr=stds, marker="o", capsize=3,
                        label=label, color=colors[name],
                        linestyle=styles.get(frame_time, "-"))
        ax.set_xticks(range(len(variants)), variants)
        ax.set_xlabel("test clips (1x: as in training)")
        ax.set_ylabel("test accuracy (%)")
        ax.grid(alpha=0.3)
        ax.legend(fontsize=7, ncol=2)
        ax.set_title("Moving digits at irregular frame times: accuracy vs frame rate and length")
        save_png(fig, path)
