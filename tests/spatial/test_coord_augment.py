"""CoordAugment: DINOv3's shift / jitter / rescale of patch coordinates, against timm 1.0.31's
_apply_coord_augs (same seed, same values) and by the statistics of its draws."""

from __future__ import annotations

import math

import pytest
import torch
from posenc.spatial import attach, patch_coords
from posenc.spatial.coords import CoordAugment
from spatial_models import make_vit
from timm.layers.pos_embed_sincos import _apply_coord_augs

CONFIGS = [
    (0.3, None, None),
    (None, 1.5, None),
    (None, None, 2.0),
    (0.2, 1.3, 1.7),
    (0.0, 1.0, 1.0),
]


@pytest.mark.parametrize("config", CONFIGS)
@pytest.mark.parametrize("normalize", [None, "unit"])
def test_draws_equal_timm_apply_coord_augs_with_the_same_seed(config, normalize):
    coords = patch_coords((3, 5), normalize)
    augment = CoordAugment(*config)
    for seed in (0, 7):
        torch.manual_seed(seed)
        expected, timm_next = _apply_coord_augs(coords, *config), torch.rand(3)
        torch.manual_seed(seed)
        got, next_draw = augment(coords), torch.rand(3)
        torch.testing.assert_close(got, expected, rtol=0, atol=0)
        # Both consumed the same numbers of the stream.
        torch.testing.assert_close(next_draw, timm_next, rtol=0, atol=0)


def test_a_generator_makes_the_draw_reproducible():
    coords = patch_coords(4, "unit")
    augment = CoordAugment(0.5, 1.5, 2.0)
    first = augment(coords, generator=torch.Generator().manual_seed(3))
    again = augment(coords, generator=torch.Generator().manual_seed(3))
    other = augment(coords, generator=torch.Generator().manual_seed(4))
    torch.testing.assert_close(first, again, rtol=0, atol=0)
    assert (first - other).abs().max() > 1e-3


def test_eval_mode_and_no_options_are_the_identity():
    coords = patch_coords(3, "unit")
    assert CoordAugment(0.5, 1.5, 2.0).eval()(coords) is coords
    assert CoordAugment()(coords) is coords
    assert not CoordAugment().active and CoordAugment(rescale_coords=1.1).active


def _draws(augment: CoordAugment, count: int, generator: torch.Generator) -> torch.Tensor:
    """``count`` transforms of the points (0, 0) and (1, 1): (count, 2 points, 2 axes)."""
    points = torch.tensor([[0.0, 0.0], [1.0, 1.0]], dtype=torch.float64)
    return torch.stack([augment(points, generator=generator) for _ in range(count)])


def test_shift_is_uniform_per_axis_within_its_bound():
    out = _draws(CoordAugment(shift_coords=0.4), 4000, torch.Generator().manual_seed(0))
    shift = out[:, 0]  # the image of (0, 0) is the shift
    torch.testing.assert_close(out[:, 1] - shift, torch.ones_like(shift))  # no scale
    assert shift.abs().max() <= 0.4 and shift.abs().max() > 0.39
    # U[-s, s]: mean 0, standard deviation s / sqrt(3); 4000 draws: sd of the mean ~0.004.
    assert shift.mean(0).abs().max() < 0.02
    torch.testing.assert_close(shift.std(0), torch.full((2,), 0.4 / math.sqrt(3),
                                                        dtype=torch.float64), rtol=0.05, atol=0)
    assert abs(torch.corrcoef(shift.T)[0, 1]) < 0.1  # rows and columns drawn independently


@pytest.mark.parametrize("name,shared", [("jitter_coords", False), ("rescale_coords", True)])
def test_scales_are_log_uniform_in_one_over_factor_to_factor(name, shared):
    out = _draws(CoordAugment(**{name: 2.0}), 4000, torch.Generator().manual_seed(1))
    torch.testing.assert_close(out[:, 0], torch.zeros_like(out[:, 0]))  # no shift
    log_scale = out[:, 1].log()  # the image of (1, 1) is the scale per axis
    bound = math.log(2.0)
    assert log_scale.abs().max() <= bound + 1e-12 and log_scale.abs().max() > 0.99 * bound
    assert log_scale.mean(0).abs().max() < 0.03
    torch.testing.assert_close(log_scale.std(0), torch.full((2,), bound / math.sqrt(3),
                                                            dtype=torch.float64),
                               rtol=0.05, atol=0)
    if shared:  # one zoom for both axes
        torch.testing.assert_close(log_scale[:, 0], log_scale[:, 1], rtol=0, atol=0)
    else:
        assert abs(torch.corrcoef(log_scale.T)[0, 1]) < 0.1


def test_order_is_shift_then_jitter_then_rescale():
    gen = torch.Generator().manual_seed(2)
    shift, jitter, rescale = (torch.empty(2, dtype=torch.float64).uniform_(-0.3, 0.3,
                                                                           generator=gen),
                              torch.empty(2, dtype=torch.float64).uniform_(
                                  -math.log(1.5), math.log(1.5), generator=gen).exp(),
                              torch.empty(1, dtype=torch.float64).uniform_(
                                  -math.log(2.0), math.log(2.0), generator=gen).exp())
    coords = patch_coords((2, 3), "unit", dtype=torch.float64)
    got = CoordAugment(0.3, 1.5, 2.0)(coords, generator=torch.Generator().manual_seed(2))
    torch.testing.assert_close(got, (coords + shift) * jitter * rescale, rtol=0, atol=1e-15)


def test_one_transform_for_every_image_of_a_batch():
    coords = torch.stack([patch_coords(3, "unit"), patch_coords(3, "unit").flip(0)])
    out = CoordAugment(0.5, 1.5, 2.0)(coords, generator=torch.Generator().manual_seed(0))
    assert out.shape == (2, 9, 2)
    torch.testing.assert_close(out[1], out[0].flip(0), rtol=0, atol=0)


def test_dtypes_integer_coordinates_become_float32():
    augment = CoordAugment(0.5)
    ints = torch.tensor([[0, 0], [2, 3]], dtype=torch.int32)
    assert augment(ints).dtype == torch.float32
    assert augment(ints.double()).dtype == torch.float64
    assert augment.eval()(ints) is ints


@pytest.mark.parametrize("kwargs,error,match", [
    ({"shift_coords": -0.1}, ValueError, "shift_coords must be a finite number >= 0, got -0.1"),
    ({"shift_coords": float("nan")}, ValueError, "shift_coords must be a finite number"),
    ({"jitter_coords": 0.5}, ValueError, "jitter_coords must be a finite number >= 1, got 0.5"),
    ({"rescale_coords": float("inf")}, ValueError, "rescale_coords must be a finite number"),
    ({"rescale_coords": "2"}, TypeError, "rescale_coords must be a number, got str"),
    ({"jitter_coords": True}, TypeError, "jitter_coords must be a number, got bool"),
])
def test_bad_options_name_the_argument(kwargs, error, match):
    with pytest.raises(error, match=match):
        CoordAugment(**kwargs)


@pytest.mark.parametrize("coords,error,match", [
    ([[0.0, 0.0]], TypeError, "coords must be a torch.Tensor, got list"),
    (torch.zeros(4), ValueError, r"coords must have shape \(N, 2\) or \(B, N, 2\), got \(4,\)"),
    (torch.zeros(4, 3), ValueError, r"got \(4, 3\)"),
    (torch.zeros(4, 2, dtype=torch.bfloat16), TypeError, "half-precision"),
    (torch.zeros(4, 2, dtype=torch.bool), TypeError, "integer or floating tensor, got torch.bool"),
])
def test_bad_coordinates_name_the_argument(coords, error, match):
    with pytest.raises(error, match=match):
        CoordAugment(0.5)(coords)


def test_bad_generator_is_a_type_error():
    with pytest.raises(TypeError, match="generator must be a torch.Generator or None, got int"):
        CoordAugment(0.5)(patch_coords(2), generator=3)


# Every device this machine has (a GPU where lent): draws stay on the coordinates' device,
# and on CUDA nothing waits for the host.
DEVICES = ["cpu"] + (["cuda"] if torch.cuda.is_available() else [])


@pytest.mark.parametrize("device", DEVICES)
def test_draws_on_the_coordinates_device_without_host_sync(device):
    coords = patch_coords(4, "unit", device=device)
    augment = CoordAugment(0.5, 1.5, 2.0)
    # An attached ViT draws the augmentation of the positions it makes from the image shape.
    model = attach(make_vit(embed_dim=32, num_heads=2), "rope_dinov3", shift_coords=0.5,
                   jitter_coords=1.5).to(device).train()
    ropes = []
    model.blocks[0].register_forward_pre_hook(lambda module, args: ropes.append(args[1]))
    images = torch.randn(1, 3, 32, 32, device=device)  # a 4 x 4 grid
    if device == "cuda":
        torch.cuda.set_sync_debug_mode("error")
    try:
        out = augment(coords)
        model(images)
    finally:
        if device == "cuda":
            torch.cuda.set_sync_debug_mode("default")
    assert out.device == coords.device and out.dtype == torch.float32
    [rotation] = ropes
    assert rotation.cos.device == coords.device and rotation.cos.shape == (1, 1, 17, 8)
    gen = torch.Generator(device)
    first = augment(coords, generator=gen.manual_seed(1))
    torch.testing.assert_close(augment(coords, generator=gen.manual_seed(1)), first,
                               rtol=0, atol=0)
