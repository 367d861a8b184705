"""``posenc study resolution``: a small ViT trained on MNIST at one size, tested at others
(optionally per training-data ``augment`` setting); the base of the scenes study."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

import torch

from ..plots.core import new_figure, save_png
from .runs import (
    Study,
    errorbars,
    fingerprint,
    fit_and_test,
    format_mean_std,
    markdown_table,
    metric,
)

__all__ = ["ResolutionStudy"]


def _size_label(size: int | Sequence[int]) -> str:
    if isinstance(size, int):
        return str(size)
    height, width = size
    return str(height) if height == width else f"{height}x{width}"


def _describe(args: dict[str, Any]) -> str:
    """``{train_scale: [0.35, 1.0]}`` -> ``"train_scale=[0.35, 1.0]"``; ``{}`` -> ``"none"``."""
    return ", ".join(f"{k}={list(v) if isinstance(v, tuple) else v}"
                     for k, v in args.items()) or "none"


class ResolutionStudy(Study):
    """Train an [`ImageClassifier`][posenc.tasks.ImageClassifier] at one size, test accuracy at
    ``eval_image_sizes``.

    An optional ``augment`` mapping (name -> ``MNISTDataModule`` arguments added to ``data``,
    e.g. ``{none: {}, scale: {train_scale: [0.35, 1.0]}}``) is a run axis.
    """

    name = "resolution"

    @property
    def key_columns(self) -> tuple[str, ...]:
        return ("encoding", "augment", "seed") if self._has_augment() else ("encoding", "seed")

    def _has_augment(self) -> bool:
        return self.config.get("augment") is not None

    def augments(self) -> dict[str, dict[str, Any]]:
        """Setting name -> data module arguments; ``{"": {}}`` without ``augment``."""
        augment = self.config.get("augment")
        if augment is None:
            return {"": {}}
        if not isinstance(augment, dict) or not augment:
            raise ValueError(f"augment must be a non-empty mapping of setting names to data "
                             f"module arguments (e.g. {{none: {{}}, scale: {{train_scale: "
                             f"[0.35, 1.0]}}}}), got {augment!r}")
        settings = {}
        for name, args in augment.items():
            if not isinstance(name, str) or not name:
                raise ValueError(f"augment setting names must be non-empty strings, got {name!r}")
            if args is not None and not isinstance(args, dict):
                raise TypeError(f"augment.{name} must be a mapping of data module arguments "
                                f"(or empty), got {type(args).__name__} ({args!r})")
            if args and "eval_image_sizes" in args:
                raise ValueError(f"augment.{name} may not set eval_image_sizes: the study's "
                                 "eval_image_sizes are the same for every run")
            settings[name] = dict(args or {})
        return settings

    def sizes(self) -> list[str]:
        return [_size_label(s) for s in self.config["eval_image_sizes"]]

    def runs(self) -> list[dict[str, Any]]:
        # Seed-major: an interrupted study has every encoding at the same number of seeds.
        axis = self._has_augment()
        return [{"encoding": e, **({"augment": a} if axis else {}), "seed": s}
                for s in self.config["seeds"] for a in self.augments() for e in self.encodings()]

    def _spec(self, encoding: str) -> dict[str, Any]:
        spec = self.config["encodings"][encoding]
        return {"encoding": spec} if isinstance(spec, (str, type(None))) else dict(spec)

    def model_args(self, encoding: str) -> dict[str, Any]:
        """``ImageClassifier`` arguments: the shared ``model``, then the entry's own (less
        ``trainer``; ``from_pretrain: true`` becomes ``checkpoint_path``)."""
        spec = self._spec(encoding)
        spec.pop("trainer", None)
        if spec.pop("from_pretrain", False):
            spec["checkpoint_path"] = str(self.pretrained_path())
        args = {**(self.config.get("model") or {}), **spec}
        args.setdefault("encoding", encoding)
        return args

    def trainer_args(self, encoding: str) -> dict[str, Any]:
        """``Trainer`` arguments: the shared ``trainer`` updated with the entry's."""
        own = self._spec(encoding).get("trainer") or {}
        if not isinstance(own, dict):
            raise TypeError(f"encodings.{encoding}.trainer must be a mapping of Trainer "
                            f"arguments, got {type(own).__name__} ({own!r})")
        return {**(self.config.get("trainer") or {}), **own}

    def _pretrain(self) -> dict[str, Any]:
        pretrain = self.config.get("pretrain")
        if not isinstance(pretrain, dict):
            raise ValueError(f"an encoding with from_pretrain: true needs the config's "
                             f"pretrain: a mapping with 'trainer' (and optionally 'model', "
                             f"'seed', 'dir', 'min_accuracy'), got {pretrain!r}")
        return pretrain

    def pretrained_path(self) -> Path:
        """``<pretrain.dir (runs/pretrain)>/vit_<hash>.pth``, the timm weights the
        ``from_pretrain`` runs start from; the hash is of everything it is trained with."""
        pretrain = self._pretrain()
        # "task" (the scenes study's data) only where given: MNIST studies keep their hashes.
        made_of = {k: self.config.get(k) for k in ("model", "data", "trainer", "pretrain", "task")
                   if k != "task" or k in self.config}
        return Path(pretrain.get("dir", "runs/pretrain")) / f"vit_{fingerprint(made_of)}.pth"

    def prepare(self, log: Callable[[str], None]) -> None:
        """Pretrain a ``learned``-encoding ``ImageClassifier`` once, if an encoding has
        ``from_pretrain`` and
        [`pretrained_path`][posenc.tasks.studies.ResolutionStudy.pretrained_path] is missing (a timm
        state dict)."""
        if not any(self._spec(e).get("from_pretrain") for e in self.encodings()):
            return
        path = self.pretrained_path()
        if path.exists():
            log(f"pretrained weights: {path} (cached)")
            return
        from posenc.spatial import timm_state_dict

        from ..vision import ImageClassifier

        pretrain = self._pretrain()
        model = ImageClassifier(**{**(self.config.get("model") or {}), "encoding": "learned",
                                   **(pretrain.get("model") or {})})
        trainer = {**(self.config.get("trainer") or {}), **(pretrain.get("trainer") or {})}
        metrics = fit_and_test({"trainer": trainer}, pretrain.get("seed", 0),
                               lambda: (model, self.data_module(self.data_args(None))),
                               {f"acc_{s}": f"test/acc_{s}" for s in self.sizes()})
        # A fine-tune study starts from a converged model: refuse weights short of the target.
        target = pretrain.get("min_accuracy")
        reached = metrics.get(f"acc_{self._train_size()}")
        if target is not None and (reached is None or reached < target):
            raise ValueError(f"pretraining reached test accuracy {reached} at the training size "
                             f"{self._train_size()}, below pretrain.min_accuracy={target}: give "
                             "pretrain.trainer more epochs (nothing was saved)")
        path.parent.mkdir(parents=True, exist_ok=True)
        tmp = path.with_suffix(".tmp")
        torch.save(timm_state_dict(model.model), tmp)
        tmp.replace(path)  # atomic: an interrupted pretraining leaves no half-written file
        log(f"pretrained weights: {path} ("
            + ", ".join(f"{k}={v:.4f}" for k, v in metrics.items()) + ")")

    def data_module(self, args: dict[str, Any]) -> Any:
        """The data module of a run from
        [`data_args`][posenc.tasks.studies.ResolutionStudy.data_args]: ``MNISTDataModule``."""
        from ..vision import MNISTDataModule

        return MNISTDataModule(**args)

    def data_args(self, augment: str | None = "") -> dict[str, Any]:
        """``MNISTDataModule`` arguments of the runs of setting ``augment``; None: the
        pretraining's, shared by every setting (``data`` alone)."""
        settings = self.augments()
        if augment is not None and augment not in settings:
            raise ValueError(f"augment={augment!r} is not a setting of the config's augment "
                             f"{sorted(settings)}")
        return {**(self.config.get("data") or {}), **settings.get(augment, {}),
                "eval_image_sizes": self.config["eval_image_sizes"]}

    def run(self, key: dict[str, Any]) -> dict[str, float]:
        from ..vision import ImageClassifier

        def build():
            return (ImageClassifier(**self.model_args(key["encoding"])),
                    self.data_module(self.data_args(key.get("augment", ""))))

        config = {**self.config, "trainer": self.trainer_args(key["encoding"])}
        return fit_and_test(config, key["seed"], build,
                            {f"acc_{s}": f"test/acc_{s}" for s in self.sizes()})

    def _accuracies(self, group: list[dict[str, str]]) -> list[list[float]]:
        """Per test size, the accuracy (%) of each row of ``group``."""
        return [[100 * metric(r, f"acc_{s}") for r in group] for s in self.sizes()]

    def by_augment(self, rows: list[dict[str, str]]) -> dict[str, list[dict[str, str]]]:
        """``rows`` grouped by augment setting, the config's order first; ``""`` without."""
        if not self._has_augment():
            return {"": rows} if rows else {}
        groups: dict[str, list[dict[str, str]]] = {a: [] for a in self.augments()}
        for row in rows:
            groups.setdefault(row["augment"], []).append(row)
        return {k: v for k, v in groups.items() if v}

    def _train_size(self) -> str:
        return _size_label(self.config.get("model", {}).get("img_size", 28))

    def table(self, rows: list[dict[str, str]]) -> str:
        train, axis = self._train_size(), self._has_augment()
        head = ["encoding", *(["augment"] if axis else []), "seeds",
                *(f"{s} (train)" if s == train else s for s in self.sizes())]
        lines = markdown_table(head, (
            [name, *([augment] if axis else []), len(group),
             *(format_mean_std(values, 1, 1) for values in self._accuracies(group))]
            for augment, block in self.by_augment(rows).items()
            for name, group in self.by_encoding(block).items()))
        note = "Test accuracy (%), mean ± std over seeds."
        if axis:
            settings = "; ".join(f"{name}: {_describe(args)}"
                                 for name, args in self.augments().items())
            note += f" Training-data augmentation ({settings})."
        return "\n".join(lines) + f"\n\n{note}\n"

    def plot(self, rows: list[dict[str, str]], path: Path) -> None:
        sizes = self.sizes()
        blocks = self.by_augment(rows)
        fig = new_figure((7 * len(blocks), 4.5), dpi=100)
        axes = fig.subplots(1, len(blocks), sharey=True, squeeze=False)[0]
        # One colour per encoding in every panel, even where a panel lacks one.
        colors = {n: f"C{i % 10}" for i, n in enumerate(self.by_encoding(rows))}
        title = "MNIST ViT: accuracy vs test resolution"
        for ax, (augment, block) in zip(axes, blocks.items(), strict=True):
            for name, group in self.by_encoding(block).items():
                errorbars(ax, range(len(sizes)), self._accuracies(group), name, colors[name])
            ax.set_xticks(range(len(sizes)), sizes)
            ax.set_xlabel(f"test image size (px); trained at {self._train_size()}")
            ax.grid(alpha=0.3)
            ax.legend(fontsize=8)
            if not augment:
                ax.set_title(title)
            else:
                args = self.augments().get(augment)
                described = f" ({_describe(args)})" if args is not None else ""
                ax.set_title(f"{title}\naugment: {augment}{described}", fontsize=10)
        axes[0].set_ylabel("test accuracy (%)")
        save_png(fig, path)
