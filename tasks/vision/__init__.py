"""posenc.tasks.vision: a timm ViT with a posenc spatial encoding
([`classifier`][posenc.tasks.vision.classifier]), and its image data
([`data`][posenc.tasks.vision.data]); the same over clips with a 3D encoding
([`video`][posenc.tasks.vision.video]) and moving-digit clips at irregular frame times
([`clips`][posenc.tasks.vision.clips]); scenes of placed digits where position matters
([`scenes`][posenc.tasks.vision.scenes]); the predicted classes written to a table
([`predictions`][posenc.tasks.vision.predictions]). ``__all__`` is re-exported by
[`posenc.tasks`][posenc.tasks]."""

from .classifier import ImageClassifier
from .clips import MovingDigitsDataModule
from .data import DigitsDataModule, ImageFolderDataModule, MNISTDataModule
from .predictions import ClassPredictionWriter
from .scenes import PlacedScenesDataModule, RelationScenesDataModule
from .video import VideoClassifier

__all__ = ["ClassPredictionWriter", "DigitsDataModule", "ImageClassifier",
           "ImageFolderDataModule", "MNISTDataModule", "MovingDigitsDataModule",
           "PlacedScenesDataModule", "RelationScenesDataModule", "VideoClassifier"]
