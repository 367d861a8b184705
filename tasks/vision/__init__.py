"""posenc.tasks.vision: a timm ViT with a posenc spatial encoding, and its image data.

- :mod:`.classifier`: :class:`ImageClassifier` (multi-size evaluation) and
  :func:`~.classifier.build_vit`;
- :mod:`.data`: :class:`MNISTDataModule`, :class:`DigitsDataModule`,
  :class:`ImageFolderDataModule` (their base :class:`~.data.ImageDataModule`), the resizing
  collate :class:`~.data.ResizeCollate` and :func:`~.data.stratified_split`.

``__all__`` (re-exported by :mod:`posenc.tasks`) is the public API; the rest stays importable
from the modules above.
"""

from .classifier import ImageClassifier
from .data import DigitsDataModule, ImageFolderDataModule, MNISTDataModule

__all__ = [
    "DigitsDataModule",
    "ImageClassifier",
    "ImageFolderDataModule",
    "MNISTDataModule",
]
