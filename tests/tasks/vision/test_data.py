"""Image data: every PIL mode scaled by its real maximum into the model's channels, unreadable
files named at setup (or when loaded), the folder layout's odd entries, plain-value
hyperparameters, and hostile arguments of every public class and function."""

from __future__ import annotations

import math
import re
import struct
import zlib
from pathlib import Path

import numpy as np
import pytest
import torch
import torch.nn.functional as F
from lightning.pytorch import Trainer
from PIL import Image
from posenc.tasks import DigitsDataModule, ImageClassifier, ImageFolderDataModule, MNISTDataModule
from posenc.tasks.vision.data import ResizeCollate, load_image, stratified_split

LUMA = np.array([0.299, 0.587, 0.114])  # ITU-R 601-2, the weights PIL's convert("L") uses


def _save(image: Image.Image, path: Path) -> Path:
    image.save(path)
    return path


def _png16_rgb(path: Path, pixels: np.ndarray) -> Path:
    """A 48-bit RGB PNG written by hand: PIL can read these but not write them."""
    height, width, _ = pixels.shape
    rows = b"".join(b"\x00" + pixels[r].astype(">u2").tobytes() for r in range(height))

    def chunk(kind: bytes, data: bytes) -> bytes:
        return (struct.pack(">I", len(data)) + kind + data
                + struct.pack(">I", zlib.crc32(kind + data) & 0xFFFFFFFF))

    header = struct.pack(">IIBBBBB", width, height, 16, 2, 0, 0, 0)
    path.write_bytes(b"\x89PNG\r\n\x1a\n" + chunk(b"IHDR", header)
                     + chunk(b"IDAT", zlib.compress(rows)) + chunk(b"IEND", b""))
    return path


def _gray(values: np.ndarray) -> torch.Tensor:
    return torch.as_tensor(values, dtype=torch.float32)[None]


def _rgb_to(channels: int, rgb: np.ndarray) -> torch.Tensor:
    """``(H, W, 3)`` in [0, 1] -> the expected ``(channels, H, W)`` tensor."""
    if channels == 1:
        return torch.as_tensor(rgb @ LUMA, dtype=torch.float32)[None]
    return torch.as_tensor(rgb, dtype=torch.float32).permute(2, 0, 1)


U16 = np.array([[0, 1, 257, 1000], [32768, 40000, 65534, 65535]], dtype=np.uint16)
U8 = np.array([[0, 1, 128, 255], [7, 200, 254, 3]], dtype=np.uint8)
SQUARE16 = np.vstack([U16, U16[::-1]])  # 4x4


# -- item 1: modes and bit depths -----------------------------------------------------------
@pytest.mark.parametrize("channels", [1, 3])
def test_16bit_gray_png_is_scaled_by_65535_not_clipped(tmp_path, channels):
    path = _save(Image.fromarray(U16), tmp_path / "g16.png")
    assert Image.open(path).mode == "I;16"
    expected = _gray(U16 / 65535)
    torch.testing.assert_close(load_image(path, channels), expected.expand(channels, -1, -1),
                               rtol=0, atol=1e-7)


def test_16bit_big_endian_tiff_and_int32_tiff(tmp_path):
    big = Image.frombytes("I;16B", (4, 2), U16.astype(">u2").tobytes())
    path = _save(big, tmp_path / "b.tif")
    assert Image.open(path).mode == "I;16B"
    torch.testing.assert_close(load_image(path, 1), _gray(U16 / 65535), rtol=0, atol=1e-7)
    # mode "I" (32-bit) is how some readers hand over 16-bit data: scaled by 65535 as well
    wide = _save(Image.fromarray(U16.astype(np.int32)), tmp_path / "i.tif")
    assert Image.open(wide).mode == "I"
    torch.testing.assert_close(load_image(wide, 1), _gray(U16 / 65535), rtol=0, atol=1e-7)


@pytest.mark.parametrize("values, match", [
    (np.array([[0, 70000]], np.int32), r"mode 'I'\) holds values in \[0, 70000\]"),
    (np.array([[-1, 5]], np.int32), r"mode 'I'\) holds values in \[-1, 5\]"),
    (np.array([[0.0, 1.5]], np.float32), r"mode 'F'\) holds values in \[0, 1.5\]"),
    (np.array([[0.0, np.nan]], np.float32), r"mode 'F'\) holds non-finite"),
])
def test_values_outside_the_mode_range_raise_naming_the_file(tmp_path, values, match):
    path = _save(Image.fromarray(values), tmp_path / "odd.tif")
    with pytest.raises(ValueError, match=match) as info:
        load_image(path, 1)
    assert "odd.tif" in str(info.value)


def test_float_tiff_in_unit_range_is_taken_as_is(tmp_path):
    values = np.array([[0.0, 0.25], [0.5, 1.0]], np.float32)
    path = _save(Image.fromarray(values), tmp_path / "f.tif")
    assert torch.equal(load_image(path, 1), _gray(values))


def test_48bit_rgb_png_is_not_saturated(tmp_path):
    pixels = np.array([[[0, 255, 256], [32768, 65535, 1000]]], dtype=np.uint16)
    path = _png16_rgb(tmp_path / "rgb48.png", pixels)
    # PIL keeps the high byte of each 16-bit sample: 8 bits of precision, the full range
    expected = (pixels >> 8) / 255
    torch.testing.assert_close(load_image(path, 3), _rgb_to(3, expected), rtol=0, atol=1e-7)
    torch.testing.assert_close(load_image(path, 1), _rgb_to(1, expected), rtol=0, atol=1e-6)


@pytest.mark.parametrize("channels", [1, 3])
def test_8bit_modes_map_to_the_model_channels(tmp_path, channels):
    rgb = np.stack([U8, U8[::-1], 255 - U8], -1)
    alpha = np.full_like(U8, 9)  # alpha is dropped, never multiplied in
    cases = {
        "L": (Image.fromarray(U8), np.repeat((U8 / 255)[..., None], 3, -1)),
        "LA": (Image.fromarray(np.stack([U8, alpha], -1)), np.repeat((U8 / 255)[..., None], 3, -1)),
        "RGB": (Image.fromarray(rgb), rgb / 255),
        "RGBA": (Image.fromarray(np.concatenate([rgb, alpha[..., None]], -1)), rgb / 255),
        "1": (Image.fromarray(U8 > 100), np.repeat((U8 > 100)[..., None], 3, -1).astype(float)),
    }
    palette = np.array([[10, 20, 30], [200, 100, 50], [255, 255, 255]], np.uint8)
    index = np.array([[0, 1, 2, 1], [2, 2, 0, 0]], np.uint8)
    indexed = Image.fromarray(index, mode="L").convert("P")
    indexed.putpalette(palette.ravel().tolist())
    indexed.info["transparency"] = 0
    cases["P"] = (indexed, palette[index] / 255)
    cmyk = np.array([[[0, 0, 0, 0], [10, 100, 200, 50]]], np.uint8)
    cases["CMYK"] = (Image.frombytes("CMYK", (2, 1), cmyk.tobytes()),
                     np.round((255.0 - cmyk[..., :3]) * (255.0 - cmyk[..., 3:]) / 255) / 255)
    for mode, (image, expected_rgb) in cases.items():
        suffix = "tif" if mode == "CMYK" else "png"
        path = _save(image, tmp_path / f"{mode}.{suffix}")
        assert Image.open(path).mode == mode
        # PIL rounds CMYK -> RGB to 8 bits; the gray of RGB is computed in float
        torch.testing.assert_close(load_image(path, channels), _rgb_to(channels, expected_rgb),
                                   rtol=0, atol=1e-6, msg=mode)


def test_exif_orientation_is_applied(tmp_path):
    exif = Image.Exif()
    exif[0x0112] = 6  # "rotate 90 degrees clockwise to display"
    path = tmp_path / "phone.png"
    Image.fromarray(U8).save(path, exif=exif)
    torch.testing.assert_close(load_image(path, 1), _gray(np.rot90(U8, -1) / 255),
                               rtol=0, atol=1e-7)


def test_unsupported_mode_raises_naming_the_file(tmp_path):
    path = tmp_path / "weird.png"
    path.write_bytes(b"not an image at all")
    with pytest.raises(ValueError, match=r"weird\.png.*cannot be read"):
        load_image(path, 1)
    with pytest.raises(ValueError, match="channels must be 1 .* or 3"):
        load_image(path, 2)


def _folder(root: Path, per_class: int = 3, classes=("a", "b"), pixels=SQUARE16) -> Path:
    for c, name in enumerate(classes):
        (root / name).mkdir(parents=True, exist_ok=True)
        for i in range(per_class):
            Image.fromarray(np.roll(pixels, c * 3 + i)).save(root / name / f"{i}.png")
    return root


def _all_items(dm: ImageFolderDataModule) -> dict[str, tuple[torch.Tensor, int]]:
    items = {}
    for subset in (dm.train_set, dm.val_set, dm.test_set):
        for i, (path, _) in enumerate(subset.samples):
            items[Path(path).name + Path(path).parent.name] = subset[i]
    return items


def test_folder_of_16bit_pngs_reaches_the_model_unsaturated_and_resized(tmp_path):
    root = _folder(tmp_path / "data")
    common = dict(channels=1, mean=[0.25], std=[0.5], val_fraction=0.34, test_fraction=0.34)
    dm = ImageFolderDataModule(root, image_size=4, eval_image_sizes=[4], **common)
    dm.setup()
    items = _all_items(dm)
    assert len(items) == 6
    for c, name in enumerate(("a", "b")):
        for i in range(3):
            image, label = items[f"{i}.png{name}"]
            expected = (np.roll(SQUARE16, c * 3 + i) / 65535 - 0.25) / 0.5
            assert label == c
            torch.testing.assert_close(image, _gray(expected), rtol=0, atol=1e-6)
    # another training size: the unit-range image is resized (bilinear, antialiased)
    small = ImageFolderDataModule(root, image_size=2, **common)
    small.setup()
    image, _ = _all_items(small)["0.pnga"]
    expected = F.interpolate(_gray(SQUARE16 / 65535)[None], size=(2, 2), mode="bilinear",
                             align_corners=False, antialias=True)[0]
    torch.testing.assert_close(image, (expected - 0.25) / 0.5, rtol=0, atol=1e-6)


# -- item 2: unreadable files, odd folder entries --------------------------------------------
def _truncate(path: Path) -> None:
    data = path.read_bytes()
    path.write_bytes(data[: len(data) // 2])


def test_setup_names_every_truncated_file(tmp_path):
    root = _folder(tmp_path / "data", pixels=np.random.default_rng(0).integers(
        0, 255, (32, 32, 3), dtype=np.uint8))
    _truncate(root / "a" / "1.png")
    Image.open(root / "b" / "0.png").save(root / "b" / "photo.jpg", quality=90)
    _truncate(root / "b" / "photo.jpg")  # JPEG's verify() passes: only a decode sees this
    with pytest.raises(ValueError, match=r"2 of 7 image files cannot be read") as info:
        ImageFolderDataModule(root, image_size=8).setup()
    message = str(info.value)
    assert str(root / "a" / "1.png") in message and str(root / "b" / "photo.jpg") in message
    assert "verify_images=False" in message


def _corrupt_png_stream(path: Path) -> None:
    """Overwrite the middle of a PNG's compressed pixel data and recompute the chunk CRCs, so
    every chunk checks out (PIL's verify() passes) but the pixels do not decode."""
    data, pos, out = path.read_bytes(), 8, bytearray(path.read_bytes()[:8])
    while pos < len(data):
        (size,), kind = struct.unpack(">I", data[pos:pos + 4]), data[pos + 4:pos + 8]
        body = bytearray(data[pos + 8:pos + 8 + size])
        if kind == b"IDAT":
            body[2:size // 2] = b"\xff" * (size // 2 - 2)  # after the 2-byte zlib header
        out += (struct.pack(">I", size) + kind + body
                + struct.pack(">I", zlib.crc32(kind + body) & 0xFFFFFFFF))
        pos += 12 + size
    path.write_bytes(bytes(out))


def test_setup_names_a_png_whose_pixels_do_not_decode(tmp_path):
    root = _folder(tmp_path / "data", pixels=np.random.default_rng(0).integers(
        0, 255, (32, 32, 3), dtype=np.uint8))
    bad = root / "b" / "2.png"
    _corrupt_png_stream(bad)
    with Image.open(bad) as image:
        image.verify()  # the chunks and their CRCs are fine: only a decode sees the damage
    # decodes, but the loader refuses its values: setup sees what the loader will
    wide = _save(Image.fromarray(np.array([[0, 70000]], np.int32)), root / "a" / "wide.tif")
    with pytest.raises(ValueError, match=r"2 of 7 image files cannot be read") as info:
        ImageFolderDataModule(root, image_size=8, val_fraction=0.34, test_fraction=0.34).setup()
    assert f"{bad}: OSError: broken data stream" in str(info.value)
    assert re.search(rf"{re.escape(str(wide))}: .*holds values in \[0, 70000\]", str(info.value))


def test_unverified_truncated_file_fails_naming_it_when_loaded(tmp_path):
    root = _folder(tmp_path / "data", per_class=4, pixels=np.random.default_rng(0).integers(
        0, 255, (32, 32, 3), dtype=np.uint8))
    _truncate(root / "a" / "2.png")
    dm = ImageFolderDataModule(root, image_size=8, verify_images=False, val_fraction=0.25,
                               test_fraction=0.25)
    dm.setup()
    with pytest.raises(ValueError, match=r"a/2\.png.*cannot be read.*truncated"):
        for subset in (dm.train_set, dm.val_set, dm.test_set):
            for i in range(len(subset)):
                subset[i]


def test_hidden_and_non_image_entries_are_skipped(tmp_path):
    root = _folder(tmp_path / "data")
    (root / "a" / ".DS_Store").write_bytes(b"\x00\x00\x00\x01Bud1")
    (root / "a" / "._0.png").write_bytes(b"\x00\x05\x16\x07 AppleDouble")  # macOS metadata
    (root / ".ipynb_checkpoints" / "x").mkdir(parents=True)
    (root / "__MACOSX" / "a").mkdir(parents=True)
    (root / "a" / "nested").mkdir()
    Image.fromarray(U8).save(root / "a" / "nested" / "deep.PNG")  # upper-case suffix counts
    (root / "b" / "notes.txt").write_text("labels were checked twice")
    (root / "README.md").write_text("my data")
    with pytest.warns(UserWarning, match=r"skipped 2 files that are not images.*notes\.txt"):
        dm = ImageFolderDataModule(root, image_size=4, val_fraction=0.25, test_fraction=0.25)
        dm.setup()
    assert dm.classes == ["a", "b"]
    counts = np.bincount([label for s in (dm.train_set, dm.val_set, dm.test_set)
                          for _, label in s.samples])
    assert counts.tolist() == [4, 3]


def test_folder_layout_errors_name_the_path(tmp_path):
    with pytest.raises(FileNotFoundError, match=r"root='.*missing' is not a folder"):
        ImageFolderDataModule(tmp_path / "missing").setup()
    _folder(tmp_path / "data")
    (tmp_path / "data" / "empty").mkdir()
    (tmp_path / "data" / "empty" / "notes.txt").write_text("")
    with pytest.raises(ValueError, match=r"class folder .*empty' holds no image files"):
        ImageFolderDataModule(tmp_path / "data").setup()
    for name in ("x", "y"):
        (tmp_path / "hollow" / name).mkdir(parents=True)
    with pytest.raises(ValueError, match=r"class folder .*hollow/x' holds no image files"):
        ImageFolderDataModule(tmp_path / "hollow").setup()
    (tmp_path / "flat").mkdir()
    Image.fromarray(U8).save(tmp_path / "flat" / "x.png")
    with pytest.raises(ValueError, match=r"flat' must hold one sub-folder per class"):
        ImageFolderDataModule(tmp_path / "flat").setup()


def test_class_with_too_few_images_is_named(tmp_path):
    root = _folder(tmp_path / "data", classes=("a",), per_class=6)
    _folder(root, classes=("tiny",), per_class=2)
    with pytest.raises(ValueError, match=r"class 'tiny' has 2 samples"):
        ImageFolderDataModule(root, image_size=4).setup()


# -- item 3: hyperparameters are plain values ------------------------------------------------
def test_path_root_is_stored_as_str_and_loads_with_weights_only(tmp_path):
    root = _folder(tmp_path / "data")
    dm = ImageFolderDataModule(root, image_size=4, mean=[np.float64(0.5)] * 3,
                               eval_image_sizes=[4, (4, 8)])
    assert dm.hparams["root"] == str(root) and type(dm.hparams["root"]) is str
    assert all(type(v) is float for v in dm.hparams["mean"])
    torch.save(dict(dm.hparams), tmp_path / "hp.pt")
    assert torch.load(tmp_path / "hp.pt", weights_only=True) == dict(dm.hparams)
    assert DigitsDataModule(batch_size=3).hparams["batch_size"] == 3


def test_folder_checkpoint_rebuilds_the_data_module_with_weights_only(tmp_path):
    root = _folder(tmp_path / "data", pixels=np.zeros((8, 8), np.uint8))
    dm = ImageFolderDataModule(root, image_size=8, channels=1, batch_size=2,
                               val_fraction=0.34, test_fraction=0.34)
    model = ImageClassifier(num_classes=2, img_size=8, patch_size=4, embed_dim=16, depth=1,
                            num_heads=2)
    trainer = Trainer(accelerator="cpu", max_epochs=1, limit_train_batches=1,
                      limit_val_batches=1, logger=False, enable_progress_bar=False,
                      enable_model_summary=False, enable_checkpointing=False,
                      default_root_dir=tmp_path)
    trainer.fit(model, dm)
    trainer.save_checkpoint(tmp_path / "run.ckpt")
    loaded = ImageFolderDataModule.load_from_checkpoint(tmp_path / "run.ckpt", weights_only=True)
    assert loaded.root == root and loaded.in_chans == 1 and loaded.image_size == 8


# -- item 4: hostile arguments ----------------------------------------------------------------
@pytest.mark.parametrize("kwargs, error, match", [
    ({"eval_batch_size": 0}, ValueError, "eval_batch_size must be >= 1, got 0"),
    ({"num_workers": -1}, ValueError, "num_workers must be >= 0, got -1"),
    ({"num_workers": 1.5}, TypeError, "num_workers must be an int"),
    ({"num_workers": True}, TypeError, "num_workers must be an int"),
    ({"val_fraction": 1.5}, ValueError,
     r"val_fraction must be a finite number > 0 and < 1, got 1.5"),
    ({"val_fraction": 0}, ValueError, r"val_fraction must be a finite number > 0 and < 1, got 0"),
    ({"test_fraction": math.nan}, ValueError,
     r"test_fraction must be a finite number > 0 and < 1, got nan"),
    ({"val_fraction": "0.1"}, TypeError, "val_fraction must be a number"),
    ({"val_fraction": 0.5, "test_fraction": 0.5}, ValueError,
     r"val_fraction \+ test_fraction must be < 1, got 0.5 \+ 0.5"),
    ({"seed": -1}, ValueError, r"seed must be in \[0, 2\*\*32\), got -1"),
    ({"seed": 2**32}, ValueError, r"seed must be in \[0, 2\*\*32\)"),
    ({"seed": 1.0}, TypeError, "seed must be an int"),
    ({"image_size": 0}, ValueError, "image_size must be >= 1, got 0"),
    ({"eval_image_sizes": [8, 8]}, ValueError, r"eval_image_sizes holds 8 twice"),
    ({"eval_image_sizes": [8, [8, 8]]}, ValueError, r"eval_image_sizes holds 8 twice"),
    ({"eval_image_sizes": [-8]}, ValueError, r"eval_image_sizes\[0\] must be >= 1, got -8"),
    ({"eval_image_sizes": [8, 12.0]}, TypeError, r"eval_image_sizes\[1\] must be an int"),
    ({"eval_image_sizes": [[8]]}, ValueError, r"eval_image_sizes\[0\] must be an int or "
                                              r"\[height, width\], got \[8\]"),
    ({"eval_image_sizes": []}, ValueError, "eval_image_sizes must be a non-empty list"),
    ({"eval_image_sizes": 8}, TypeError,
     r"eval_image_sizes must be a list of sizes .*, got int \(8\)"),
    ({"eval_image_sizes": "8,12"}, TypeError, "eval_image_sizes must be a list of sizes"),
    ({"eval_image_sizes": {8: 1}}, TypeError, "eval_image_sizes must be a list of sizes"),
])
def test_bad_data_module_arguments_name_the_argument(kwargs, error, match):
    with pytest.raises(error, match=match):
        DigitsDataModule(**kwargs)


def test_largest_seed_splits():
    dm = DigitsDataModule(seed=2**32 - 1)
    dm.setup()
    assert sum(len(v) for v in dm.split_indices.values()) == 1797


@pytest.mark.parametrize("kwargs, error, match", [
    ({"root": ""}, ValueError, "root must name a folder, got ''"),
    ({"root": None}, TypeError, "root must be a str or os.PathLike, got NoneType"),
    ({"channels": True}, TypeError, "channels must be an int"),
    ({"channels": 3.0}, TypeError, "channels must be an int"),
    ({"channels": 2}, ValueError, r"channels must be 1 \(grayscale\) or 3 \(RGB\), got 2"),
    ({"image_size": None}, TypeError, "image_size must be an int"),
    ({"mean": [0.5]}, ValueError, r"mean needs one value per channel \(3\), got \[0.5\]"),
    ({"mean": 0.5}, TypeError, "mean must be a list of numbers"),
    ({"mean": [0.5, math.nan, 0.5]}, ValueError, r"mean\[1\] must be a finite number, got nan"),
    ({"std": [0.5, 0.0, 0.5]}, ValueError, r"std\[1\] must be a positive number"),
    ({"std": [0.5, -1, 0.5]}, ValueError, r"std\[1\] must be a positive number"),
    ({"verify_images": "no"}, TypeError, "verify_images must be a bool"),
])
def test_bad_image_folder_arguments_name_the_argument(tmp_path, kwargs, error, match):
    with pytest.raises(error, match=match):
        ImageFolderDataModule(**{"root": tmp_path, **kwargs})


@pytest.mark.parametrize("kwargs, match", [
    ({"test_fraction": 0.01}, r"test_fraction=0.01 gives 0 of 30 samples, fewer than the 3 "
                              "classes"),
    ({"val_fraction": 0.05}, r"val_fraction=0.05 gives 2 of 30 samples, fewer than the 3 "
                             "classes"),
])
def test_stratified_split_needs_one_sample_per_class_in_each_part(kwargs, match):
    labels = np.repeat([0, 1, 2], 10)
    with pytest.raises(ValueError, match=match):
        stratified_split(labels, **{"val_fraction": 0.2, "test_fraction": 0.2, "seed": 0,
                                    **kwargs})


def test_stratified_split_names_a_class_that_is_too_small():
    with pytest.raises(ValueError, match=r"class 7 has 2 samples; a stratified .* >= 3"):
        stratified_split(np.array([0] * 10 + [7] * 2), 0.2, 0.2, 0)
    with pytest.raises(ValueError, match="labels is empty"):
        stratified_split(np.array([], dtype=int), 0.2, 0.2, 0)


def test_resize_collate_refuses_fractional_labels():
    image = torch.zeros(1, 4, 4)
    with pytest.raises(ValueError, match=r"labels must be integers, got 1.5"):
        ResizeCollate(4)([(image, 0), (image, 1.5)])
    _, labels = ResizeCollate(4)([(image, torch.tensor(2)), (image, 3.0), (image, np.int64(1))])
    assert labels.tolist() == [2, 3, 1]


def test_numpy_numbers_become_plain_hparams(tmp_path):
    dm = MNISTDataModule(val_fraction=np.float64(0.2), eval_image_sizes=[28, [28, 44]])
    assert type(dm.hparams["val_fraction"]) is float and dm.val_fraction == 0.2
    assert dm.hparams["eval_image_sizes"] == [28, [28, 44]]
    torch.save(dict(dm.hparams), tmp_path / "hp.pt")
    assert torch.load(tmp_path / "hp.pt", weights_only=True)["val_fraction"] == 0.2


# -- stratified split: every part holds every class --------------------------------------------
def _split_counts(labels: np.ndarray, parts) -> list[list[int]]:
    classes = np.unique(labels)
    return [[int((labels[part] == c).sum()) for c in classes] for part in parts]


def test_stratified_split_puts_a_small_class_in_every_part():
    labels = np.repeat(["few", "many", "most"], [3, 100, 100])
    parts = stratified_split(labels, 0.1, 0.1, seed=0)
    # 20 of 203 go to test and to val (round(20.3)); by quota 0.3 / 9.85 / 9.85 per class, the
    # small class is lifted to 1 and the 19 left go to the big classes, 9 + 10 or 10 + 9
    for part in parts[1:]:
        counts = _split_counts(labels, [part])[0]
        assert counts[0] == 1 and sorted(counts[1:]) == [9, 10]
    assert _split_counts(labels, parts[:1])[0][0] == 1
    assert sorted(np.concatenate(parts).tolist()) == list(range(203))  # disjoint, complete
    again = stratified_split(labels, 0.1, 0.1, seed=0)
    assert all(np.array_equal(a, b) for a, b in zip(parts, again, strict=True))
    other = stratified_split(labels, 0.1, 0.1, seed=1)
    assert not all(np.array_equal(a, b) for a, b in zip(parts, other, strict=True))


def test_stratified_split_keeps_the_proportions_of_large_classes():
    labels = np.repeat([0, 1, 2, 3], [400, 300, 200, 100])
    train, val, test = stratified_split(labels, 0.2, 0.1, seed=3)
    assert _split_counts(labels, [train, val, test]) == [[280, 210, 140, 70], [80, 60, 40, 20],
                                                         [40, 30, 20, 10]]
    assert sorted(np.concatenate([train, val, test]).tolist()) == list(range(1000))


@pytest.mark.parametrize("count", [1, 2])
def test_stratified_split_refuses_a_class_too_small_for_three_parts(count):
    labels = np.array(["cat"] * 50 + ["dog"] * 50 + ["owl"] * count)
    with pytest.raises(ValueError, match=rf"class 'owl' has {count} samples"):
        stratified_split(labels, 0.1, 0.1, seed=0)


# -- links in an image folder: followed as torchvision's ImageFolder does, never dropped ------
def _linked_folder(tmp_path: Path) -> Path:
    """``data/a`` (3 images), ``data/b`` a link to ``elsewhere/b`` (3 images), and in ``a`` a
    link to the folder ``elsewhere/more`` (2 images) and a link to the image ``elsewhere/x.png``."""
    root = _folder(tmp_path / "data", classes=("a",))
    _folder(tmp_path / "elsewhere", classes=("b", "more"), per_class=3)
    (tmp_path / "elsewhere" / "more" / "2.png").unlink()
    Image.fromarray(U8).save(tmp_path / "elsewhere" / "x.png")
    (root / "b").symlink_to(tmp_path / "elsewhere" / "b", target_is_directory=True)
    (root / "a" / "more").symlink_to(tmp_path / "elsewhere" / "more", target_is_directory=True)
    (root / "a" / "x.png").symlink_to(tmp_path / "elsewhere" / "x.png")
    return root


def test_linked_class_folder_sub_folder_and_file_are_read(tmp_path):
    root = _linked_folder(tmp_path)
    dm = ImageFolderDataModule(root, image_size=4, val_fraction=0.25, test_fraction=0.25)
    dm.setup()
    assert dm.classes == ["a", "b"]
    read = sorted(Path(path).relative_to(root).as_posix() for s in (dm.train_set, dm.val_set,
                                                                     dm.test_set)
                  for path, _ in s.samples)
    assert read == ["a/0.png", "a/1.png", "a/2.png", "a/more/0.png", "a/more/1.png", "a/x.png",
                    "b/0.png", "b/1.png", "b/2.png"]


def test_broken_links_are_named(tmp_path):
    root = _linked_folder(tmp_path)
    (root / "a" / "gone.png").symlink_to(tmp_path / "nowhere.png")
    (root / "a" / "lost").symlink_to(tmp_path / "nowhere", target_is_directory=True)
    (root / "c").symlink_to(tmp_path / "no_class", target_is_directory=True)
    for verify in (True, False):
        with pytest.raises(FileNotFoundError, match=r"3 broken links") as info:
            ImageFolderDataModule(root, image_size=4, verify_images=verify).setup()
        for link, target in (("a/gone.png", "nowhere.png"), ("a/lost", "nowhere"),
                             ("c", "no_class")):
            assert f"{root / link} -> {tmp_path / target}" in str(info.value)


def test_links_that_point_at_each_other_are_named_as_broken(tmp_path):
    # is_dir() of such a link raises ELOOP: it was a raw OSError from the folder listing
    root = _folder(tmp_path / "data")
    (root / "loop").symlink_to(root / "a" / "x.png")
    (root / "a" / "x.png").symlink_to(root / "loop")
    with pytest.raises(FileNotFoundError, match=r"2 broken links") as info:
        ImageFolderDataModule(root, image_size=4).setup()
    assert f"{root / 'loop'} -> {root / 'a' / 'x.png'}" in str(info.value)


def test_a_fifo_named_like_an_image_is_reported_not_opened(tmp_path):
    # opening a FIFO blocks until something writes to it: setup hung, so did the loader
    import os

    from posenc.tasks.vision.data import load_image

    root = _folder(tmp_path / "data")
    fifo = root / "b" / "pipe.png"
    os.mkfifo(fifo)
    with pytest.raises(ValueError, match=r"1 of 7 image files cannot be read") as info:
        ImageFolderDataModule(root, image_size=8, val_fraction=0.34, test_fraction=0.34).setup()
    assert f"{fifo}: ValueError: {str(fifo)!r} is not a regular file" in str(info.value)
    with pytest.raises(ValueError, match=r"pipe\.png.*is not a regular file"):
        load_image(fifo, 1)


@pytest.mark.parametrize("link, target", [("a/up", "a"), ("a/more/loop", "a/more"),
                                          ("a/top", "."), ("b/twin", "a")])
def test_a_folder_reached_twice_through_a_link_raises(tmp_path, link, target):
    root = _folder(tmp_path / "data")
    (root / "a" / "more").mkdir()
    (root / link).symlink_to((root / target).resolve(), target_is_directory=True)
    with pytest.raises(ValueError, match=r"is .* again \(through a link\)") as info:
        ImageFolderDataModule(root, image_size=4).setup()
    assert str(root / link) in str(info.value)


def test_a_folder_that_cannot_be_listed_raises_naming_it(tmp_path, monkeypatch):
    import os

    root = _folder(tmp_path / "data")
    (root / "b" / "locked").mkdir()
    scandir = os.scandir

    def refuse_locked(path="."):
        if Path(path).name == "locked":
            raise PermissionError(13, "Permission denied", str(path))
        return scandir(path)

    monkeypatch.setattr(os, "scandir", refuse_locked)
    with pytest.raises(PermissionError, match=r"b/locked"):
        ImageFolderDataModule(root, image_size=4).setup()
