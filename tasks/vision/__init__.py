"""posenc.tasks.vision: a timm ViT with a posenc spatial encoding, and its image data.

- :mod:`.classifier`: :class:`ImageClassifier` (multi-size evaluation) and :func:`build_vit`;
- :mod:`.data`: :class:`MNISTDataModule`, :class:`DigitsDataModule`,
  :class:`ImageFolderDataModule` (their base :class:`ImageDataModule`), the resizing collate
  :class:`ResizeCollate` and :func:`stratified_split`.
"""

from .classifier import ImageClassifier, build_vit
from .data import (
    DigitsDataModule,
    ImageDataModule,
    ImageFolderDataModule,
    MNISTDataModule,
    ResizeCollate,
    stratified_split,
)

__all__ = [
    "DigitsDataModule",
    "ImageClassifier",
    "ImageDataModule",
    "ImageFolderDataModule",
    "MNISTDataModule",
    "ResizeCollate",
    "build_vit",
    "stratified_split",
]
