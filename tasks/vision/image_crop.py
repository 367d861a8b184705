"""Training-time scale augmentation: torchvision's ``RandomResizedCrop`` in torch ops.

A crop of a random fraction ``scale`` of the image's area and a random aspect ratio
``ratio`` is cut out and resized back to the training size, so an object fills a different
fraction of the image (and so spans a different number of patches) in every epoch: the
multi-scale training RoPE-ViT's ImageNet results rely on. Without it, MNIST digits always
fill the same 20 of 28 pixels and a test at a larger size is the first time the model sees a
digit spanning more patches.

The boxes are drawn as ``torchvision.transforms.RandomResizedCrop.get_params`` draws them (the
same random calls in the same order, so a seed gives torchvision's boxes; torchvision is not a
dependency) and resized like ``torchvision.transforms.functional.resized_crop`` on tensors
(bilinear, antialiased).
"""

from __future__ import annotations

import functools
import math
from collections.abc import Sequence

import torch
import torch.nn.functional as F
from posenc.core import check_positive_float, check_positive_int
from torch import Tensor

__all__ = ["DEFAULT_RATIO", "check_crop_range", "random_resized_crop", "random_resized_crop_box"]

#: torchvision's default aspect-ratio range of the crop, ``(3/4, 4/3)``.
DEFAULT_RATIO = (3 / 4, 4 / 3)
_ATTEMPTS = 10  # torchvision's, before its central-crop fallback


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
    """A random crop box ``(top, left, box_height, box_width)`` of a ``height x width`` image.

    As torchvision's ``RandomResizedCrop.get_params``: up to 10 tries of an area fraction
    ``~ U[scale]`` and an aspect ratio (width / height) log-uniform in ``ratio``, rounded to
    whole pixels; the first box that fits is placed uniformly at random; if none fits, the
    central crop of the image clamped to ``ratio``. ``generator`` (CPU) makes the draws
    reproducible; None draws from torch's global generator (which the data loader seeds per
    worker).
    """
    return _draw_box(check_positive_int(height, "height"), check_positive_int(width, "width"),
                     check_crop_range(scale, "scale", at_most_one=True),
                     check_crop_range(ratio, "ratio", at_most_one=False), generator)


@functools.lru_cache(maxsize=16)
def _log_ratio(ratio: tuple[float, float]) -> tuple[float, float]:
    # float32 like torchvision, so the same seed gives its aspect ratios bit for bit.
    low, high = torch.log(torch.tensor(ratio)).tolist()
    return low, high


def _draw_box(height: int, width: int, scale: tuple[float, float], ratio: tuple[float, float],
              generator: torch.Generator | None) -> tuple[int, int, int, int]:
    area = height * width
    log_ratio = _log_ratio(ratio)
    for _ in range(_ATTEMPTS):
        target_area = area * torch.empty(1).uniform_(scale[0], scale[1],
                                                     generator=generator).item()
        aspect = torch.exp(torch.empty(1).uniform_(*log_ratio, generator=generator)).item()
        box_w = round(math.sqrt(target_area * aspect))
        box_h = round(math.sqrt(target_area / aspect))
        if 0 < box_w <= width and 0 < box_h <= height:
            top = int(torch.randint(0, height - box_h + 1, (1,), generator=generator))
            left = int(torch.randint(0, width - box_w + 1, (1,), generator=generator))
            return top, left, box_h, box_w
    in_ratio = width / height
    if in_ratio < ratio[0]:
        box_w, box_h = width, round(width / ratio[0])
    elif in_ratio > ratio[1]:
        box_w, box_h = round(height * ratio[1]), height
    else:
        box_w, box_h = width, height
    return (height - box_h) // 2, (width - box_w) // 2, box_h, box_w


def random_resized_crop(images: Tensor, size: int | tuple[int, int], scale: Sequence[float],
                        ratio: Sequence[float] = DEFAULT_RATIO,
                        generator: torch.Generator | None = None) -> Tensor:
    """A random resized crop of each image: ``(B, C, H, W)`` -> ``(B, C, *size)``.

    Every image gets its own box (:func:`random_resized_crop_box`), resized to ``size`` (an int
    for a square, or ``(height, width)``) with bilinear interpolation and antialiasing, in the
    images' dtype.
    """
    if not isinstance(images, Tensor) or images.ndim != 4 or not images.is_floating_point():
        got = (f"shape {tuple(images.shape)}, {images.dtype}" if isinstance(images, Tensor)
               else type(images).__name__)
        raise ValueError(f"images must be a floating (B, C, H, W) tensor, got {got}")
    hw = (size, size) if isinstance(size, int) else tuple(size)
    out_h, out_w = (check_positive_int(side, "size") for side in hw)
    scale = check_crop_range(scale, "scale", at_most_one=True)
    ratio = check_crop_range(ratio, "ratio", at_most_one=False)
    height, width = images.shape[-2:]
    if not height or not width:
        raise ValueError(f"images must have pixels to crop, got shape {tuple(images.shape)}")
    crops = []
    for image in images:
        top, left, box_h, box_w = _draw_box(height, width, scale, ratio, generator)
        crop = image[None, :, top:top + box_h, left:left + box_w]
        crops.append(F.interpolate(crop, size=(out_h, out_w), mode="bilinear",
                                   align_corners=False, antialias=True))
    return torch.cat(crops) if crops else images.new_empty(0, images.shape[1], out_h, out_w)
