"""Scale augmentation for the resolution study: the random resized crop (torchvision's boxes),
its data-module option (training split only) and DINOv3 coordinate jitter through
ImageClassifier."""

from __future__ import annotations

import pytest
import torch
import torch.nn.functional as F
from posenc.tasks import DigitsDataModule, ImageClassifier, ImageFolderDataModule
from posenc.tasks.vision.data import (
    RandomResizedCropCollate,
    ResizeCollate,
    random_resized_crop,
    random_resized_crop_box,
)
from torch.utils.data import DataLoader, TensorDataset

RATIO = (3 / 4, 4 / 3)

# torchvision 0.29.1 RandomResizedCrop.get_params(torch.zeros(1, H, W), scale, ratio), six
# calls after torch.manual_seed(7), stored when posenc drew them with its own copy of that
# sampler: a seed keeps giving these boxes (a study's crops stay reproducible across versions):
#   torch.manual_seed(7)
#   [RandomResizedCrop.get_params(torch.zeros(1, h, w), list(scale), list(ratio))
#    for _ in range(6)]
TORCHVISION_BOXES = [
    ((28, 28), (0.35, 1.0), RATIO,
     [(1, 6, 26, 21), (8, 9, 20, 19), (8, 1, 19, 24), (2, 0, 22, 19), (0, 0, 28, 26),
      (5, 2, 23, 24)]),
    ((28, 44), (0.08, 1.0), RATIO,
     [(0, 12, 28, 30), (4, 9, 18, 19), (2, 20, 22, 19), (2, 1, 26, 27), (0, 8, 28, 29),
      (1, 8, 25, 21)]),
    # No try fits (a 4:1 image, ratio <= 4/3, >= 90% of the area): the central crop at 4/3.
    ((10, 40), (0.9, 1.0), RATIO, [(0, 13, 10, 13)] * 6),
    ((40, 10), (0.5, 1.0), (1.0, 2.0), [(15, 0, 10, 10)] * 6),
]


# -- the crop ------------------------------------------------------------------------------
@pytest.mark.parametrize(("hw", "scale", "ratio", "boxes"), TORCHVISION_BOXES)
def test_boxes_are_torchvision_random_resized_crop_boxes(hw, scale, ratio, boxes):
    torch.manual_seed(7)
    assert [random_resized_crop_box(*hw, scale, ratio) for _ in boxes] == boxes
    generator = torch.Generator().manual_seed(7)  # the same stream, not the global one
    torch.manual_seed(0)
    assert [random_resized_crop_box(*hw, scale, ratio, generator) for _ in boxes] == boxes
    untouched = torch.rand(3)
    torch.manual_seed(0)
    assert torch.rand(3).equal(untouched)  # the global stream did not move


@pytest.mark.parametrize(("hw", "size", "scale", "ratio", "dtype"), [
    ((28, 28), 28, (0.35, 1.0), RATIO, torch.float32),
    ((28, 44), (14, 20), (0.08, 1.0), RATIO, torch.float64),
    ((10, 40), 8, (0.9, 1.0), RATIO, torch.float32),  # the central-crop fallback
    ((40, 10), (12, 6), (0.5, 1.0), (1.0, 2.0), torch.float32),
])
def test_crops_are_torchvision_random_resized_crops_pixel_for_pixel(hw, size, scale, ratio,
                                                                    dtype):
    from torchvision.transforms import v2

    images = torch.rand(6, 3, *hw, dtype=dtype)
    transform = v2.RandomResizedCrop(size, scale, ratio, antialias=True)
    torch.manual_seed(11)
    expected = torch.stack([transform(image) for image in images])
    torch.manual_seed(11)
    torch.testing.assert_close(random_resized_crop(images, size, scale, ratio), expected,
                               rtol=0, atol=0)
    torch.manual_seed(0)
    crops = random_resized_crop(images, size, scale, ratio, torch.Generator().manual_seed(11))
    torch.testing.assert_close(crops, expected, rtol=0, atol=0)


@pytest.mark.parametrize(("height", "width"), [(28, 28), (28, 44), (9, 7)])
def test_boxes_lie_inside_the_image_with_area_and_ratio_in_range(height, width):
    scale, area = (0.35, 1.0), height * width
    generator = torch.Generator().manual_seed(0)
    fractions = []
    for _ in range(300):
        top, left, h, w = random_resized_crop_box(height, width, scale, RATIO, generator)
        assert 0 <= top and top + h <= height and 0 <= left and left + w <= width
        assert h >= 1 and w >= 1
        # Sides are sqrt(area * ratio) and sqrt(area / ratio) rounded: within half a pixel.
        assert (h - 0.5) * (w - 0.5) <= scale[1] * area
        assert (h + 0.5) * (w + 0.5) >= scale[0] * area
        assert (w - 0.5) / (h + 0.5) <= RATIO[1] and (w + 0.5) / (h - 0.5) >= RATIO[0]
        fractions.append(h * w / area)
    if height == width == 28:  # a digit fills very different fractions of the frame
        assert min(fractions) < 0.42 and max(fractions) > 0.9


def test_crop_is_the_box_resized_to_the_output_size():
    images = torch.rand(3, 2, 28, 28, dtype=torch.float64)
    out = random_resized_crop(images, (14, 20), (0.35, 1.0),
                              generator=torch.Generator().manual_seed(1))
    assert out.shape == (3, 2, 14, 20) and out.dtype == torch.float64
    generator = torch.Generator().manual_seed(1)
    for image, crop in zip(images, out, strict=True):
        top, left, h, w = random_resized_crop_box(28, 28, (0.35, 1.0), RATIO, generator)
        expected = F.interpolate(image[None, :, top:top + h, left:left + w], size=(14, 20),
                                 mode="bilinear", align_corners=False, antialias=True)[0]
        torch.testing.assert_close(crop, expected, rtol=0, atol=0)
    assert random_resized_crop(images, 28, (1.0, 1.0), (1.0, 1.0)).equal(images)  # whole image


def test_crop_is_deterministic_with_a_seed_and_differs_without():
    images = torch.rand(8, 1, 28, 28)
    first = random_resized_crop(images, 28, (0.35, 1.0), generator=torch.Generator().manual_seed(3))
    again = random_resized_crop(images, 28, (0.35, 1.0), generator=torch.Generator().manual_seed(3))
    other = random_resized_crop(images, 28, (0.35, 1.0), generator=torch.Generator().manual_seed(4))
    assert first.equal(again) and not first.equal(other)
    items = [(image, 1) for image in images]
    torch.manual_seed(5)
    a, labels = RandomResizedCropCollate(28, (0.35, 1.0))(items)
    torch.manual_seed(5)
    b, _ = RandomResizedCropCollate(28, (0.35, 1.0))(items)
    assert a.equal(b) and labels.tolist() == [1] * 8 and a.shape == (8, 1, 28, 28)


@pytest.mark.parametrize(("kwargs", "error", "match"), [
    ({"scale": (0.0, 1.0)}, ValueError, r"scale\[0\] must be a positive number"),
    ({"scale": (0.8, 0.3)}, ValueError, r"scale must be \[low, high\] with low <= high"),
    ({"scale": (0.5, 1.5)}, ValueError, r"scale holds fractions of the image's area, in \(0, 1\]"),
    ({"scale": 0.5}, TypeError, r"scale must be a \[low, high\] pair"),
    ({"scale": (0.5, 0.7, 1.0)}, ValueError, r"scale must be a \[low, high\] pair"),
    ({"ratio": (0.75, float("nan"))}, ValueError, r"ratio\[1\]"),
    ({"ratio": (2.0, 0.5)}, ValueError, "ratio must be"),
])
def test_bad_crop_ranges_name_the_argument(kwargs, error, match):
    args = {"scale": (0.35, 1.0), "ratio": RATIO, **kwargs}
    with pytest.raises(error, match=match):
        random_resized_crop(torch.rand(1, 1, 8, 8), 8, args["scale"], args["ratio"])
    with pytest.raises(error, match=match):
        RandomResizedCropCollate(8, args["scale"], args["ratio"])


def test_bad_generators_are_refused_naming_the_argument():
    class CudaGenerator(torch.Generator):  # no GPU here: a generator that says it is on one
        device = torch.device("cuda", 0)

    images = torch.rand(1, 1, 8, 8)
    with pytest.raises(TypeError, match="generator must be a torch.Generator or None, got int"):
        random_resized_crop(images, 8, (0.5, 1.0), generator=7)
    with pytest.raises(ValueError, match="generator must be a CPU torch.Generator .* on cuda:0"):
        random_resized_crop(images, 8, (0.5, 1.0), generator=CudaGenerator())
    with pytest.raises(ValueError, match="generator must be a CPU torch.Generator"):
        random_resized_crop_box(8, 8, (0.5, 1.0), generator=CudaGenerator())


def test_crop_refuses_images_it_cannot_crop():
    with pytest.raises(ValueError, match=r"floating \(B, C, H, W\) tensor, got shape \(8, 8\)"):
        random_resized_crop(torch.rand(8, 8), 8, (0.5, 1.0))
    with pytest.raises(ValueError, match="torch.uint8"):
        random_resized_crop(torch.zeros(1, 1, 8, 8, dtype=torch.uint8), 8, (0.5, 1.0))
    with pytest.raises(ValueError, match=r"pixels to crop, got shape \(1, 1, 0, 8\)"):
        random_resized_crop(torch.zeros(1, 1, 0, 8), 8, (0.5, 1.0))
    with pytest.raises(ValueError, match="size"):
        random_resized_crop(torch.rand(1, 1, 8, 8), 0, (0.5, 1.0))


# -- the data module option ----------------------------------------------------------------
def _digits(**kwargs) -> DigitsDataModule:
    data = DigitsDataModule(batch_size=64, eval_image_sizes=[8, 16], **kwargs)
    data.setup()
    return data


def test_train_scale_crops_the_training_split_only():
    plain, cropped = _digits(), _digits(train_scale=[0.35, 1.0])
    assert cropped.train_scale == (0.35, 1.0) and cropped.train_ratio == RATIO
    assert type(plain.train_collate()) is ResizeCollate
    torch.manual_seed(0)
    crop_batch = next(iter(cropped.train_dataloader()))
    torch.manual_seed(0)
    plain_batch = next(iter(plain.train_dataloader()))
    # Same shuffle, same labels; cropped images at the training size, not the originals.
    assert crop_batch[1].equal(plain_batch[1]) and crop_batch[0].shape == (64, 1, 8, 8)
    assert not crop_batch[0].equal(plain_batch[0])
    for mine, theirs in ((cropped.val_dataloader(), plain.val_dataloader()),
                         (cropped.test_dataloader(), plain.test_dataloader()),
                         ([cropped.predict_dataloader()], [plain.predict_dataloader()])):
        for loader, reference in zip(mine, theirs, strict=True):
            assert type(loader.collate_fn) is ResizeCollate
            assert all(a[0].equal(b[0]) for a, b in zip(loader, reference, strict=True))


def test_train_scale_is_reproducible_per_seed_and_differs_between_workers():
    """The collate draws from torch's global generator, which the DataLoader seeds per worker
    from the main one: the same seed, the same crops; two workers, different crops."""
    same = torch.ones(4, 1, 16, 16).cumsum(-1)  # identical images: only the crop differs
    dataset = TensorDataset(same, torch.zeros(4, dtype=torch.long))

    def batches(seed):
        torch.manual_seed(seed)
        loader = DataLoader(dataset, batch_size=2, num_workers=2,
                            collate_fn=RandomResizedCropCollate(16, (0.35, 1.0)))
        return [images for images, _ in loader]

    first = batches(0)
    assert all(a.equal(b) for a, b in zip(first, batches(0), strict=True))
    assert not first[0].equal(first[1])  # worker 0's batch vs worker 1's


def test_train_scale_and_ratio_arguments_are_checked_and_saved(tmp_path):
    data = DigitsDataModule(train_scale=(0.5, 1.0), train_ratio=[0.5, 2.0])
    assert data.train_ratio == (0.5, 2.0)
    assert data.hparams.train_scale == (0.5, 1.0) and data.hparams.train_ratio == [0.5, 2.0]
    with pytest.raises(ValueError, match=r"train_ratio=\[0.5, 2.0\] shapes the random resized "
                                         r"crop, which is off: give train_scale"):
        DigitsDataModule(train_ratio=[0.5, 2.0])
    with pytest.raises(ValueError, match=r"train_scale holds fractions"):
        DigitsDataModule(train_scale=[0.5, 2.0])
    with pytest.raises(ValueError, match=r"train_ratio\[0\]"):
        DigitsDataModule(train_scale=[0.5, 1.0], train_ratio=[-1, 2.0])
    folder = ImageFolderDataModule(tmp_path, image_size=16, train_scale=[0.35, 1.0])
    assert isinstance(folder.train_collate(), RandomResizedCropCollate)
    assert folder.train_collate().size == 16


def test_train_scale_from_a_config_reaches_the_data_module():
    from jsonargparse import ArgumentParser

    parser = ArgumentParser()
    parser.add_class_arguments(DigitsDataModule, "data")
    config = parser.parse_args(["--data.train_scale=[0.35, 1.0]",
                                "--data.train_ratio=[0.75, 1.3333333333333333]"])
    data = DigitsDataModule(**config.data.as_dict())  # what instantiating the group calls
    assert data.train_scale == (0.35, 1.0) and data.train_ratio == (0.75, 4 / 3)


# -- DINOv3 coordinate jitter through ImageClassifier --------------------------------------
def _vit(**init_args) -> ImageClassifier:
    torch.manual_seed(0)
    spec = {"class_path": "posenc.spatial.RoPE2D",
            "init_args": {"variant": "axial", "normalize": "unit", **init_args}}
    model = ImageClassifier(encoding=spec, img_size=16, patch_size=4, embed_dim=16, depth=2,
                            num_heads=2, class_token=False, global_pool="avg")
    with torch.no_grad():  # large weights, so a changed rotation visibly changes the logits
        for parameter in model.parameters():
            parameter.mul_(5)
    return model


def test_coordinate_jitter_rows_augment_in_training_only():
    plain, jittered = _vit(), _vit(rescale_coords=2.0)
    augments = [m for m in jittered.modules() if type(m).__name__ == "CoordAugment"]
    assert augments and all(a.config == (None, None, 2.0) for a in augments)
    assert jittered.hparams.encoding["init_args"]["rescale_coords"] == 2.0
    images = torch.randn(2, 1, 16, 16)
    jittered.train()
    torch.manual_seed(1)
    first, second = jittered(images), jittered(images)
    assert (first - second).abs().max() > 1e-2  # a new scale each step
    jittered.eval(), plain.eval()
    torch.testing.assert_close(jittered(images), plain(images), rtol=0, atol=0)
