"""ImageClassifier and the image data modules: seeded stratified splits, resizing in the data
path, per-size metrics equal to an independent count, exact checkpoint reload, bad input."""

from __future__ import annotations

import numpy as np
import pytest
import torch
import torch.nn.functional as F
from lightning.pytorch import Trainer, seed_everything
from posenc.spatial import RoPE2D
from posenc.tasks import DigitsDataModule, ImageClassifier, ImageFolderDataModule, MNISTDataModule
from posenc.tasks.vision.data import ResizeCollate

TINY = {"img_size": 8, "patch_size": 4, "embed_dim": 16, "depth": 1, "num_heads": 2}


@pytest.fixture(scope="module")
def digits() -> DigitsDataModule:
    dm = DigitsDataModule(batch_size=64, eval_image_sizes=[8, 12, 16])
    dm.setup("fit")
    return dm


def _trainer(tmp_path, **kwargs) -> Trainer:
    return Trainer(accelerator="cpu", devices=1, logger=False, enable_progress_bar=False,
                   enable_model_summary=False, default_root_dir=tmp_path,
                   num_sanity_val_steps=0, **kwargs)


def _labels(dataset) -> np.ndarray:
    return np.array([int(dataset[i][1]) for i in range(len(dataset))])


def test_digits_split_is_disjoint_complete_stratified_and_seeded(digits):
    idx = digits.split_indices
    train, val, test = idx["train"], idx["val"], idx["test"]
    assert not set(train) & set(val) and not set(train) & set(test) and not set(val) & set(test)
    assert len(train) + len(val) + len(test) == 1797
    labels = np.concatenate([_labels(digits.train_set), _labels(digits.val_set),
                             _labels(digits.test_set)])
    overall = np.bincount(labels) / len(labels)
    for subset in (digits.val_set, digits.test_set):
        share = np.bincount(_labels(subset), minlength=10) / len(subset)
        assert np.abs(share - overall).max() < 0.02  # stratified: same class shares
    again = DigitsDataModule()
    again.setup()
    other = DigitsDataModule(seed=1)
    other.setup()
    assert all(np.array_equal(again.split_indices[k], idx[k]) for k in idx)
    assert not np.array_equal(other.split_indices["test"], idx["test"])


def test_mnist_split_holds_50_of_each_digit_in_test():
    dm = MNISTDataModule()
    dm.setup()
    assert [len(dm.split_indices[k]) for k in ("train", "val", "test")] == [4000, 500, 500]
    assert np.bincount(_labels(dm.test_set)).tolist() == [50] * 10
    image, _ = dm.train_set[0]
    assert image.shape == (1, 28, 28)
    train = torch.stack([dm.train_set[i][0] for i in range(len(dm.train_set))])
    assert abs(train.mean().item()) < 1e-4 and abs(train.std().item() - 1) < 1e-3


def test_eval_loaders_resize_in_the_data_path(digits):
    loaders = digits.val_dataloader()
    assert [next(iter(dl))[0].shape[-1] for dl in loaders] == [8, 12, 16]
    assert next(iter(digits.train_dataloader()))[0].shape[-2:] == (8, 8)
    items = [digits.val_set[i] for i in range(4)]
    native = torch.stack([x for x, _ in items])
    images, labels = ResizeCollate(12)(items)
    expected = F.interpolate(native, size=(12, 12), mode="bilinear", antialias=True)
    torch.testing.assert_close(images, expected)
    assert torch.equal(ResizeCollate(8)(items)[0], native)  # native size: untouched
    assert labels.tolist() == [int(y) for _, y in items]


def test_per_size_metrics_equal_an_independent_count(digits, tmp_path):
    seed_everything(0)
    model = ImageClassifier(encoding="rope_axial", **TINY)
    _trainer(tmp_path, max_epochs=1, limit_train_batches=3).fit(model, digits)
    [result] = _trainer(tmp_path).validate(model, digits, verbose=False)[:1]
    model.eval()
    for size, loader in zip([8, 12, 16], digits.val_dataloader(), strict=True):
        correct = total = 0
        losses = []
        with torch.no_grad():
            for images, labels in loader:
                logits = model(images)
                correct += int((logits.argmax(-1) == labels).sum())
                total += len(labels)
                losses.append(F.cross_entropy(logits, labels, reduction="none"))
        assert result[f"val/acc_{size}"] == pytest.approx(correct / total, abs=1e-6)
        assert result[f"val/loss_{size}"] == pytest.approx(torch.cat(losses).mean().item(),
                                                           rel=1e-5)
    assert result["val/acc"] == result["val/acc_8"]  # the training size is the headline


@pytest.mark.parametrize("encoding", ["learned", "sincos2d", "rope_mixed", "relbias", "cpb",
                                      {"class_path": "posenc.spatial.RoPE2D",
                                       "init_args": {"variant": "mixed"}}])
def test_checkpoint_reloads_with_weights_only_and_predicts_identically(digits, tmp_path,
                                                                       encoding):
    seed_everything(0)
    model = ImageClassifier(encoding=encoding, **TINY)
    trainer = _trainer(tmp_path, max_epochs=1, limit_train_batches=2, limit_val_batches=1)
    trainer.fit(model, digits)
    path = tmp_path / "vit.ckpt"
    trainer.save_checkpoint(path)
    checkpoint = torch.load(path, weights_only=True)  # no pickled objects in it
    assert checkpoint["hyper_parameters"]["encoding"] == encoding
    loaded = ImageClassifier.load_from_checkpoint(path, weights_only=True)
    images = next(iter(digits.test_dataloader()[2]))[0]  # 16 px: a size it did not train at
    model.eval(), loaded.eval()
    assert torch.equal(loaded(images), model(images))


def test_dict_encoding_fills_in_model_sizes_with_one_module_per_learnable_block():
    model = ImageClassifier(encoding={"class_path": "posenc.spatial.RoPE2D",
                                      "init_args": {"variant": "mixed"}},
                            **{**TINY, "depth": 2})
    rotaries = [block.attn.rotary for block in model.model.blocks]
    assert all(isinstance(r, RoPE2D) for r in rotaries)
    assert rotaries[0] is not rotaries[1]
    assert rotaries[0].head_dim == 8 and rotaries[0].num_heads == 2


def test_image_folder_data_module(tmp_path):
    from PIL import Image

    rng = np.random.default_rng(0)
    for name in ("cat", "dog", "owl"):
        (tmp_path / name).mkdir()
        for i in range(10):
            pixels = rng.integers(0, 255, (20 + i, 17, 3), dtype=np.uint8)
            Image.fromarray(pixels).save(tmp_path / name / f"{i}.png")
    dm = ImageFolderDataModule(str(tmp_path), image_size=8, channels=1, batch_size=4,
                               eval_image_sizes=[8, 16], val_fraction=0.2, test_fraction=0.2)
    dm.setup()
    assert dm.classes == ["cat", "dog", "owl"] and dm.num_classes == 3
    assert [len(dm.split_indices[k]) for k in ("train", "val", "test")] == [18, 6, 6]
    assert np.bincount(_labels(dm.test_set)).tolist() == [2, 2, 2]
    images, _ = next(iter(dm.train_dataloader()))
    assert images.shape == (4, 1, 8, 8)
    assert [next(iter(dl))[0].shape[-1] for dl in dm.test_dataloader()] == [8, 16]
    model = ImageClassifier(num_classes=3, **TINY)
    assert model(images).shape == (4, 3)


def test_image_folder_errors(tmp_path):
    with pytest.raises(FileNotFoundError, match="is not a folder"):
        ImageFolderDataModule(str(tmp_path / "missing")).setup()
    (tmp_path / "only").mkdir()
    from PIL import Image

    Image.fromarray(np.zeros((4, 4, 3), np.uint8)).save(tmp_path / "only" / "a.png")
    with pytest.raises(ValueError, match="one sub-folder per class"):
        ImageFolderDataModule(str(tmp_path)).setup()


@pytest.mark.parametrize("kwargs, error, match", [
    ({"encoding": "rope"}, ValueError, "unknown spatial encoding 'rope'; valid names"),
    ({"encoding": {"init_args": {}}}, ValueError, "needs the keys class_path"),
    ({"encoding": {"class_path": "posenc.spatial.Nope2D"}}, ValueError,
     "module 'posenc.spatial' has no 'Nope2D'"),
    ({"encoding": 3}, TypeError, "encoding must be a name"),
    ({"img_size": 30}, ValueError, "img_size=30 must be divisible by patch_size=4"),
    ({"model_name": "vit_nonexistent"}, ValueError, "model_name='vit_nonexistent'"),
    ({"scheduler": "linear"}, ValueError, "scheduler must be one of"),
    ({"depth": 0}, ValueError, "depth must be >= 1"),
    ({"embed_dim": 16.0}, TypeError, "embed_dim must be an int"),
    ({"lr": 0.0}, ValueError, "lr must be a positive number"),
    ({"lr": "fast"}, TypeError, "lr must be a number"),
])
def test_bad_model_arguments(kwargs, error, match):
    with pytest.raises(error, match=match):
        ImageClassifier(**{**TINY, **kwargs})


def test_model_and_data_mismatch_is_reported(digits, tmp_path):
    with pytest.raises(ValueError, match="num_classes=5 does not match the data module's"):
        _trainer(tmp_path, max_epochs=1).fit(ImageClassifier(num_classes=5, **TINY), digits)
    odd = DigitsDataModule(eval_image_sizes=[8, 10])
    with pytest.raises(ValueError, match=r"eval_image_sizes\[1\]=10 is not divisible by the "
                                         "model's patch_size=4"):
        _trainer(tmp_path, max_epochs=1).fit(ImageClassifier(**TINY), odd)
    with pytest.raises(ValueError, match="eval_image_sizes must be a non-empty list"):
        DigitsDataModule(eval_image_sizes=[])


def test_bad_data_sizes_name_the_argument():
    with pytest.raises(ValueError, match="batch_size must be >= 1"):
        DigitsDataModule(batch_size=0)
    with pytest.raises(TypeError, match="image_size must be an int"):
        DigitsDataModule(image_size=8.0)
    with pytest.raises(TypeError, match=r"eval_image_sizes\[0\] must be an int"):
        DigitsDataModule(eval_image_sizes=[[8, "12"]])
