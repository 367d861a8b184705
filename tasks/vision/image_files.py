"""Reading image files: every PIL mode scaled by its real maximum into 1 or 3 channels, a
readability check (the loader's own decode), and the class-folder layout (what counts as an
image, what is skipped).

Used by :class:`posenc.tasks.ImageFolderDataModule`; :func:`load_image` is the same
preprocessing for images given to a trained model.
"""

from __future__ import annotations

import os
from pathlib import Path

import numpy as np
import torch
import torch.nn.functional as F
from posenc.core import check_positive_int
from torch import Tensor
from torch.utils.data import Dataset

__all__ = [
    "IMAGE_EXTENSIONS",
    "load_image",
    "check_channels",
    "why_unreadable",
    "scan_image_folder",
    "FolderImages",
]

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
    """A decoded PIL image as ``(H, W, 1)`` gray or ``(H, W, 3)`` RGB float32 in [0, 1].

    Each mode is divided by its own maximum (65535 for 16-bit). Mode "I" (32-bit int, how
    some readers hand over 16-bit data) must hold values in [0, 65535], mode "F" (float)
    values in [0, 1]: anything else has no known scale and raises. Alpha is dropped.
    """
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

    The EXIF orientation is applied; each PIL mode is scaled by its own maximum (8-bit, 16-bit
    gray, bilevel, palette, CMYK ...; see ``_unit_pixels``); gray becomes RGB by repetition,
    RGB becomes gray by ITU-R 601-2 luma; alpha is dropped; a multi-frame file gives its first
    frame. A file that cannot be decoded raises ``ValueError`` naming it.

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
    """The fully decoded PIL image of a file, EXIF orientation applied; PIL's own errors."""
    from PIL import Image, ImageOps

    with Image.open(path) as image:
        # exif_transpose returns a decoded copy, so decode errors surface here
        return ImageOps.exif_transpose(image)


def why_unreadable(path: str | os.PathLike) -> str | None:
    """Why :func:`load_image` would fail on ``path``, or None: the same full decode and the
    same mode and value checks. A cheaper check misses files that fail mid-epoch: PIL's PNG
    ``verify()`` passes a corrupt compressed stream with valid CRCs, and it passes a truncated
    JPEG."""
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


def _raise(err: OSError) -> None:
    raise err


def scan_image_folder(root: Path) -> tuple[list[str], list[tuple[str, int]], list[str]]:
    """Class names, ``(file, label)`` samples (sorted) and skipped non-image files of a folder.

    Links are followed, to files and to folders, as torchvision's ``ImageFolder`` does. Each
    real folder is read once: one reached again through a link (a loop, or two links to one
    folder) raises ``ValueError``; broken links raise ``FileNotFoundError`` and a folder that
    cannot be listed raises its ``OSError``, each naming the path, so no file is dropped
    unseen.
    """
    entries = sorted(os.scandir(root), key=lambda e: e.name)
    classes = [e.name for e in entries if e.is_dir() and not _hidden(e.name)]
    skipped = [e.path for e in entries if not e.is_dir() and not _hidden(e.name)]
    samples = []
    # real path -> the path it was first read as; root counts, so a link up to it is a loop
    read = {os.path.realpath(root): os.fspath(root)}
    for label, name in enumerate(classes):
        for folder, dirs, files in os.walk(root / name, followlinks=True, onerror=_raise):
            real = os.path.realpath(folder)
            if real in read:
                raise ValueError(f"folder {folder!r} is {read[real]!r} again (through a link); "
                                 "each folder is read once: remove the link")
            read[real] = folder
            dirs[:] = sorted(d for d in dirs if not _hidden(d))
            for file in sorted(f for f in files if not _hidden(f)):
                path = os.path.join(folder, file)
                if file.lower().endswith(IMAGE_EXTENSIONS):
                    samples.append((path, label))
                else:
                    skipped.append(path)
    # os.walk lists a link to nothing as a file: a moved folder or image, never "not an image"
    broken = [path for path in (*skipped, *(path for path, _ in samples))
              if os.path.islink(path) and not os.path.exists(path)]
    if broken:
        listing = "\n".join(f"  {path} -> {os.readlink(path)}" for path in broken[:10])
        raise FileNotFoundError(f"{len(broken)} broken links in {os.fspath(root)!r} (first "
                                f"{min(len(broken), 10)} below); fix or remove them:\n{listing}")
    return classes, samples, skipped


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
