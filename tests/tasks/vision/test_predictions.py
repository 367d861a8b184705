"""Class predictions out: ``posenc predict`` with a ClassPredictionWriter writes each input's name,
its most probable class and every class's probability, equal to the model's own on the same
images, in the loader's order; ImageFolderDataModule predicts a folder of new images."""

from __future__ import annotations

import sys
from pathlib import Path
from types import SimpleNamespace

import numpy as np
import pandas as pd
import pytest
import torch
from PIL import Image
from posenc.tasks import (
    ClassPredictionWriter,
    DigitsDataModule,
    ImageClassifier,
    ImageFolderDataModule,
)
from posenc.tasks.cli import main
from posenc.tasks.vision.data import ResizeCollate, load_image
from posenc.tasks.vision.predictions import prediction_frame

from ..conftest import CONFIGS, ONE_EPOCH, TINY_VIT

DIGITS = ["--config", str(CONFIGS / "vit_mnist.yaml"), *TINY_VIT,
          "--data=posenc.tasks.DigitsDataModule", "--data.eval_image_sizes=[8]",
          "--data.batch_size=32", "--trainer.logger=false"]
WRITER = ["--trainer.callbacks+=posenc.tasks.ClassPredictionWriter"]


@pytest.fixture(autouse=True)
def _argv(monkeypatch):
    monkeypatch.setattr(sys, "argv", ["posenc"])


def _fit(config: list[str], tmp_path: Path) -> Path:
    main(["fit", *config, *ONE_EPOCH, "--trainer.callbacks+=ModelCheckpoint",
          f"--trainer.callbacks.dirpath={tmp_path / 'ckpt'}", "--trainer.callbacks.save_last=true"])
    return tmp_path / "ckpt" / "last.ckpt"


def _probabilities(ckpt: Path, images: torch.Tensor) -> np.ndarray:
    model = ImageClassifier.load_from_checkpoint(ckpt, weights_only=True).eval()
    with torch.no_grad():
        return model(images).softmax(-1).numpy()


def test_the_table_names_each_input_its_class_and_every_probability():
    probabilities = torch.tensor([[0.2, 0.5, 0.3], [0.7, 0.1, 0.2]])
    frame = prediction_frame(probabilities, ["x.png", "sub/y.png"], ["cat", "dog", "eel"])
    assert list(frame.columns) == ["input", "prediction", "probability", "p_cat", "p_dog",
                                   "p_eel"]
    assert frame["input"].tolist() == ["x.png", "sub/y.png"]
    assert frame["prediction"].tolist() == ["dog", "cat"]
    np.testing.assert_array_equal(frame["probability"], np.float32([0.5, 0.7]))
    np.testing.assert_array_equal(frame[["p_cat", "p_dog", "p_eel"]], probabilities.numpy())
    empty = prediction_frame(torch.zeros(0, 3), [], ["cat", "dog", "eel"])
    assert len(empty) == 0 and list(empty.columns) == list(frame.columns)


@pytest.mark.parametrize("probabilities, names, classes, match", [
    (torch.ones(2, 3) / 3, ["a"], ["x", "y", "z"], "1 input names for 2 predictions"),
    (torch.ones(2, 3) / 3, ["a", "b"], ["x", "y"], "the model predicts 3 classes, the data "
                                                   "module names 2"),
    (torch.ones(2, 2) / 2, ["a", "b"], ["x", "x"], "class names must be distinct"),
    (torch.ones(3) / 3, ["a"], ["x", "y", "z"], r"probabilities must be \(N, K\)"),
])
def test_a_table_that_would_mislabel_is_refused(probabilities, names, classes, match):
    with pytest.raises(ValueError, match=match):
        prediction_frame(probabilities, names, classes)


@pytest.mark.parametrize("path, error, match", [
    ("p.txt", ValueError, r"ClassPredictionWriter path='p.txt': expected a .csv or .parquet"),
    (3, TypeError, "ClassPredictionWriter path must be a file path"),
])
def test_the_writer_takes_a_table_file_name(path, error, match):
    with pytest.raises(error, match=match):
        ClassPredictionWriter(path)


def test_predict_writes_the_model_s_probabilities_for_the_test_rows(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    ckpt = _fit(DIGITS, tmp_path)
    main(["predict", *DIGITS, f"--ckpt_path={ckpt}", *WRITER,
          "--trainer.callbacks.path=out/digits.csv"])
    table = pd.read_csv(tmp_path / "out" / "digits.csv")
    data = DigitsDataModule(batch_size=32, eval_image_sizes=[8])
    data.setup()
    rows = data.split_indices["test"]
    assert table["input"].tolist() == rows.tolist()  # the rows of the digits, in order
    images = torch.stack([data.test_set[i][0] for i in range(len(rows))])
    expected = _probabilities(ckpt, images)
    np.testing.assert_allclose(table[[f"p_{k}" for k in range(10)]], expected, atol=1e-6)
    assert table["prediction"].tolist() == expected.argmax(1).tolist()
    np.testing.assert_allclose(table["probability"], expected.max(1), atol=1e-6)
    # Never replaced without a word; a partial predict names the inputs it predicted.
    with pytest.raises(ValueError, match="already holds predictions"):
        main(["predict", *DIGITS, f"--ckpt_path={ckpt}", *WRITER,
              "--trainer.callbacks.path=out/digits.csv"])
    assert pd.read_csv(tmp_path / "out" / "digits.csv").equals(table)
    main(["predict", *DIGITS, f"--ckpt_path={ckpt}", *WRITER,
          "--trainer.callbacks.path=out/digits.csv", "--trainer.callbacks.overwrite=true",
          "--trainer.limit_predict_batches=2"])
    again = pd.read_csv(tmp_path / "out" / "digits.csv")
    assert len(again) == 64 and again.equals(table.iloc[:64])


def test_ranks_parts_are_written_in_the_loader_s_order(tmp_path):
    """Under DDP each rank holds every world_size-th batch: the written table is in the
    loader's order whatever order the parts arrive in."""
    writer = ClassPredictionWriter(tmp_path / "p.parquet")
    probabilities = torch.eye(4)[[2, 0, 3, 1]]
    trainer = SimpleNamespace(
        world_size=1, is_global_zero=True, strategy=SimpleNamespace(barrier=lambda name: None),
        datamodule=SimpleNamespace(predict_names=lambda: ["a", "b", "c", "d"],
                                   class_names=["w", "x", "y", "z"]))
    module = SimpleNamespace(hparams=SimpleNamespace(num_classes=4))
    writer.write_on_epoch_end(trainer, module, [probabilities[:2], probabilities[2:]],
                              [[[2, 0], [3, 1]]])
    table = pd.read_parquet(tmp_path / "p.parquet")
    assert table["input"].tolist() == ["a", "b", "c", "d"]
    # position p holds the one-hot of class p: unsorted, the parts would read y, w, z, x
    assert table["prediction"].tolist() == ["w", "x", "y", "z"]
    with pytest.raises(ValueError, match="2 batches of predictions for 1 batches predicted"):
        writer.write_on_epoch_end(trainer, module, [probabilities[:2], probabilities[2:]],
                                  [[[2, 0, 3, 1]]])
    with pytest.raises(ValueError, match="one predict loader's predictions, got 2 loaders"):
        writer.write_on_epoch_end(trainer, module, [[probabilities]] * 2, [[[0, 1, 2, 3]]] * 2)


def _image(path: Path, value: int) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    pixels = (np.arange(64).reshape(8, 8) * 3 + value * 40) % 256
    Image.fromarray(pixels.astype(np.uint8)).save(path)
    return path


def _labelled_folder(root: Path) -> Path:
    for c, name in enumerate(("cat", "dog")):
        for i in range(4):
            _image(root / name / f"{i}.png", c * 4 + i)
    return root


def test_a_folder_of_new_images_is_classified_by_file(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    root = _labelled_folder(tmp_path / "train")
    new = tmp_path / "new"
    for name, value in (("z.png", 1), ("a.png", 2), ("deep/er/m.png", 5), ("b/c.jpg", 6)):
        _image(new / name, value)
    (new / "notes.txt").write_text("not an image")
    (new / ".hidden.png").write_bytes(b"not even a png")
    folder = ["--config", str(CONFIGS / "vit_mnist.yaml"), *TINY_VIT, "--trainer.logger=false",
              "--data=posenc.tasks.ImageFolderDataModule", f"--data.root={root}",
              "--data.image_size=8", "--data.channels=1", "--data.eval_image_sizes=[8]",
              "--data.batch_size=2", "--data.val_fraction=0.25", "--data.test_fraction=0.25",
              "--model.init_args.num_classes=2", "--model.init_args.in_chans=1"]
    ckpt = _fit(folder, tmp_path)
    with pytest.warns(UserWarning, match=r"skipped 1 files that are not images in predict_root"):
        main(["predict", *folder, f"--data.predict_root={new}", f"--ckpt_path={ckpt}",
              *WRITER, "--trainer.callbacks.path=preds.csv"])
    table = pd.read_csv(tmp_path / "preds.csv")
    files = ["a.png", "b/c.jpg", "deep/er/m.png", "z.png"]  # sorted by path, sub-folders in
    assert table["input"].tolist() == files
    assert list(table.columns[3:]) == ["p_cat", "p_dog"]
    collate = ResizeCollate(8)
    images, _ = collate([((load_image(new / f, 1) - 0.5) / 0.5, -1) for f in files])
    np.testing.assert_allclose(table[["p_cat", "p_dog"]], _probabilities(ckpt, images),
                               atol=1e-6)
    # Without predict_root: the test split's files, relative to root.
    main(["predict", *folder, f"--ckpt_path={ckpt}", *WRITER,
          "--trainer.callbacks.path=test.csv"])
    tested = pd.read_csv(tmp_path / "test.csv")["input"].tolist()
    assert len(tested) == 2 and all((root / name).is_file() for name in tested)
    assert {name.split("/")[0] for name in tested} == {"cat", "dog"}  # stratified


@pytest.mark.parametrize("predict_root, error, match", [
    ("missing", FileNotFoundError, r"predict_root='.*missing' is not a folder"),
    ("empty", ValueError, r"predict_root='.*empty' holds no image files"),
    ("file.png", FileNotFoundError, r"predict_root='.*file.png' is not a folder"),
])
def test_a_predict_root_without_images_is_named(tmp_path, predict_root, error, match):
    root = _labelled_folder(tmp_path / "train")
    (tmp_path / "empty" / "sub").mkdir(parents=True)
    (tmp_path / "empty" / "sub" / "readme.txt").write_text("no images here")
    _image(tmp_path / "file.png", 0)
    data = ImageFolderDataModule(root, image_size=8, predict_root=tmp_path / predict_root,
                                 val_fraction=0.25, test_fraction=0.25)
    with pytest.raises(error, match=match):
        data.setup()


@pytest.mark.parametrize("predict_root, error, match", [
    (3, TypeError, "predict_root must be a str or os.PathLike, got int"),
    ("", ValueError, "predict_root must name a folder, got ''"),
])
def test_bad_predict_root_arguments_name_it(tmp_path, predict_root, error, match):
    with pytest.raises(error, match=match):
        ImageFolderDataModule(tmp_path, predict_root=predict_root)


def test_a_predict_folder_with_an_unreadable_image_names_it(tmp_path):
    root = _labelled_folder(tmp_path / "train")
    (tmp_path / "new").mkdir()
    (tmp_path / "new" / "broken.png").write_bytes(b"\x89PNG\r\n\x1a\n")
    data = ImageFolderDataModule(root, image_size=8, predict_root=tmp_path / "new",
                                 val_fraction=0.25, test_fraction=0.25)
    with pytest.raises(ValueError, match=r"(?s)1 of 1 image files cannot be read.*new/broken.png"):
        data.setup()
    hparams = ImageFolderDataModule(root, predict_root=Path(tmp_path / "new")).hparams
    assert hparams["predict_root"] == str(tmp_path / "new")  # plain, as checkpoints need
