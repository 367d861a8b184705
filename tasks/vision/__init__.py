"""posenc.tasks.vision: a timm ViT with a posenc spatial encoding
([`classifier`][posenc.tasks.vision.classifier]), and its image data
([`data`][posenc.tasks.vision.data]). ``__all__`` is re-exported by
[`posenc.tasks`][posenc.tasks]."""

from .classifier import ImageClassifier
from .data import DigitsDataModule, ImageFolderDataModule, MNISTDataModule

__all__ = ["DigitsDataModule", "ImageClassifier", "ImageFolderDataModule", "MNISTDataModule"]
