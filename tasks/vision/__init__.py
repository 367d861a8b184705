"""posenc.tasks.vision: a timm ViT with a posenc spatial encoding (:mod:`.classifier`), and
its image data (:mod:`.data`). ``__all__`` is re-exported by :mod:`posenc.tasks`."""

from .classifier import ImageClassifier
from .data import DigitsDataModule, ImageFolderDataModule, MNISTDataModule

__all__ = ["DigitsDataModule", "ImageClassifier", "ImageFolderDataModule", "MNISTDataModule"]
