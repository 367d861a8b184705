"""RoPE2D's DINOv3 options (normalize_coords, min/max periods, coordinate augmentation) and
pixel frequencies, value by value against timm 1.0.31's RotaryEmbeddingDinoV3 and
RotaryEmbedding(in_pixels=True), and rotary-embedding-torch's freqs_for="pixel" (stored)."""

from __future__ import annotations

import math

import pytest
import torch
from posenc.core import MultiheadAttention, apply_rotation
from posenc.spatial import RoPE2D, attach, patch_coords
from posenc.spatial.coords import CoordAugment, GridPositions
from spatial_models import make_vit
from timm.layers import RotaryEmbedding, RotaryEmbeddingDinoV3
from timm.layers.pos_embed_sincos import _build_grid, apply_rot_embed, apply_rot_embed_cat

HEAD_DIM, HEADS = 32, 2
GRIDS = [(3, 5), (6, 4), (4, 4)]
NORMALIZE_COORDS = ["separate", "min", "max"]


def _positions(enc: RoPE2D, grid: tuple[int, int]) -> GridPositions:
    """A full grid in ``enc``'s coordinate system."""
    return GridPositions(patch_coords(grid, enc.normalize), grid, 0)


def _rotate(enc: RoPE2D, x: torch.Tensor, grid: tuple[int, int]) -> torch.Tensor:
    return apply_rotation(x, enc.rotation(_positions(enc, grid)))


def _timm_dinov3(x: torch.Tensor, ref: RotaryEmbeddingDinoV3, grid) -> torch.Tensor:
    """timm's rotation of ``(B, H, N, D)`` x: get_embed + apply_rot_embed_cat, as its ViT."""
    return apply_rot_embed_cat(x, ref.get_embed(list(grid)), half=ref.rotate_half)


@pytest.mark.parametrize("grid", GRIDS)
@pytest.mark.parametrize("normalize_coords", NORMALIZE_COORDS)
def test_normalize_coords_equal_timm_dinov3(grid, normalize_coords):
    enc = RoPE2D(HEAD_DIM, HEADS, normalize="unit", normalize_coords=normalize_coords,
                 layout="half")
    ref = RotaryEmbeddingDinoV3(HEAD_DIM, temperature=100.0, normalize_coords=normalize_coords)
    x = torch.randn(2, HEADS, grid[0] * grid[1], HEAD_DIM)
    torch.testing.assert_close(_rotate(enc, x, grid), _timm_dinov3(x, ref, grid),
                               rtol=0, atol=1e-5)
    # The angles themselves: timm's embed is [sin(D) | cos(D)], each [f.., f..] ("half").
    emb = ref.get_embed(list(grid))
    rot = enc.rotation(_positions(enc, grid))
    torch.testing.assert_close(rot.sin[0, 0], emb[:, :HEAD_DIM // 2], rtol=0, atol=2e-6)
    torch.testing.assert_close(rot.cos[0, 0], emb[:, HEAD_DIM:HEAD_DIM * 3 // 2],
                               rtol=0, atol=2e-6)


@pytest.mark.parametrize("normalize_coords", NORMALIZE_COORDS)
def test_unit_coordinate_systems_equal_timm_centered_grid(normalize_coords):
    grid = (3, 7)
    enc = RoPE2D(8, 1, normalize="unit", normalize_coords=normalize_coords)
    assert enc.normalize == {"separate": "unit", "min": "unit_min", "max": "unit_max"}[
        normalize_coords] and enc.normalize_coords == normalize_coords
    expected = _build_grid(list(grid), grid_type="centered",
                           normalize_coords=normalize_coords).flatten(0, 1)
    torch.testing.assert_close(patch_coords(grid, enc.normalize), expected, rtol=0, atol=1e-6)


def test_min_and_max_keep_the_aspect_ratio():
    # 2 x 4 patches: "min" divides by 2 (columns reach 2.5), "max" by 4 (rows stay in +-0.25).
    assert patch_coords((2, 4), "unit_min")[:4, 1].tolist() == [-0.5, 0.5, 1.5, 2.5]
    assert patch_coords((2, 4), "unit_max")[::4, 0].tolist() == [-0.75, -0.25]


@pytest.mark.parametrize("layout,rotate_half", [("half", True), ("interleaved", False)])
def test_min_max_periods_equal_timm_dinov3(layout, rotate_half):
    grid = (5, 3)
    enc = RoPE2D(HEAD_DIM, HEADS, normalize="unit", min_period=0.5, max_period=40.0,
                 layout=layout)
    ref = RotaryEmbeddingDinoV3(HEAD_DIM, temperature=None, min_period=0.5, max_period=40.0,
                                rotate_half=rotate_half)
    x = torch.randn(1, HEADS, 15, HEAD_DIM)
    torch.testing.assert_close(_rotate(enc, x, grid), _timm_dinov3(x, ref, grid),
                               rtol=0, atol=1e-5)
    assert enc.base is None
    periods = 0.5 * 80.0 ** (torch.arange(8, dtype=torch.float64) / 7)
    torch.testing.assert_close(enc.inv_freq64, 2 * math.pi / periods, rtol=1e-15, atol=0)


def test_base_schedule_is_dinov3_periods_in_float64():
    enc = RoPE2D(HEAD_DIM, HEADS, normalize="unit")
    periods = 100.0 ** (2 * torch.arange(8, dtype=torch.float64) / 16)
    torch.testing.assert_close(enc.inv_freq64, 2 * math.pi / periods, rtol=1e-15, atol=0)


AUGMENTS = [
    {"shift_coords": 0.3},
    {"jitter_coords": 1.5},
    {"rescale_coords": 2.0},
    {"shift_coords": 0.2, "jitter_coords": 1.3, "rescale_coords": 1.7},
]


@pytest.mark.parametrize("augment", AUGMENTS)
@pytest.mark.parametrize("normalize_coords", ["separate", "max"])
def test_training_augmentation_equals_timm_dinov3_with_the_same_seed(augment, normalize_coords):
    grid = (4, 6)
    enc = RoPE2D(HEAD_DIM, HEADS, normalize="unit", normalize_coords=normalize_coords,
                 layout="half", **augment).train()
    ref = RotaryEmbeddingDinoV3(HEAD_DIM, normalize_coords=normalize_coords, **augment).train()
    x = torch.randn(2, HEADS, 24, HEAD_DIM)
    for seed in (0, 1, 2):
        torch.manual_seed(seed)
        expected = _timm_dinov3(x, ref, grid)
        torch.manual_seed(seed)
        got = _rotate(enc, x, grid)
        torch.testing.assert_close(got, expected, rtol=0, atol=1e-5)
    # The draw moved the coordinates: a plain rotation is far from it.
    assert (got - _rotate(RoPE2D(HEAD_DIM, HEADS, normalize="unit", layout="half",
                                 normalize_coords=normalize_coords), x, grid)).abs().max() > 1e-2


def test_augmentation_is_random_in_training_and_off_in_eval():
    grid = (4, 4)
    aug = RoPE2D(HEAD_DIM, HEADS, normalize="unit", shift_coords=0.5, jitter_coords=1.5,
                 rescale_coords=2.0)
    plain = RoPE2D(HEAD_DIM, HEADS, normalize="unit")
    x = torch.randn(1, HEADS, 16, HEAD_DIM)
    first, second = _rotate(aug, x, grid), _rotate(aug, x, grid)
    assert aug.training and (first - second).abs().max() > 1e-2
    aug.eval()
    assert not aug.coord_augment.training
    for _ in range(2):
        torch.testing.assert_close(_rotate(aug, x, grid), _rotate(plain, x, grid), rtol=0, atol=0)


def test_one_draw_per_forward_shared_by_every_block_with_that_augmentation():
    """attach gives each block its own mixed RoPE; in training every block rotates by one draw
    of the coordinate augmentation per forward (as DINOv3's one RoPE module per model), and
    the next forward draws again; a direct call draws on every call."""
    kwargs = {"normalize": "unit", "shift_coords": 0.5, "rescale_coords": 2.0}
    model = attach(make_vit(), "rope_mixed", **kwargs).train()
    first, second = (block.attn.rotary for block in model.blocks)
    with torch.no_grad():  # equal frequencies: equal rotations exactly when the draws are equal
        second.freqs.copy_(first.freqs)
    ropes = []
    for block in model.blocks:
        block.register_forward_pre_hook(lambda module, args: ropes.append(args[1]))
    images = torch.randn(1, 3, 32, 32)  # a 4 x 4 grid
    torch.manual_seed(3)
    with torch.no_grad():
        model(images)
        model(images)
    block0, block1, next_forward, _ = (rope.cos for rope in ropes)
    torch.testing.assert_close(block1, block0, rtol=0, atol=0)
    assert (next_forward - block0).abs().max() > 1e-3
    # The draw is CoordAugment's, on the grid the model made (the forward's first draw).
    torch.manual_seed(3)
    moved = CoordAugment(0.5, None, 2.0)(patch_coords(4, "unit"))
    expected = first.eval().rotation(GridPositions(moved, None, 1)).cos
    torch.testing.assert_close(block0, expected, rtol=0, atol=0)
    bare = patch_coords(3, "unit")
    first.train()
    assert (first.rotation(bare).cos - first.rotation(bare).cos).abs().max() > 1e-3


def test_augmented_self_attention_keeps_the_relative_property():
    # q and k get the same transform, so a common shift of every position cancels.
    enc = RoPE2D(16, 2, normalize="unit", jitter_coords=1.5, rescale_coords=1.5)
    attn = MultiheadAttention(32, 2, rotary=enc).eval()
    x = torch.randn(1, 9, 32)
    coords = patch_coords(3, "unit")
    torch.manual_seed(5)
    out = attn.train()(x, query_positions=GridPositions(coords))
    torch.manual_seed(5)
    # Shifted coordinates before the (multiplicative) draws: shift * scale cancels as well.
    moved = attn(x, query_positions=GridPositions(coords + 0.75))
    torch.testing.assert_close(moved, out, rtol=1e-4, atol=1e-5)


@pytest.mark.slow  # builds a timm ViT and runs 4 forwards: ~2-4 s on a loaded 2-core machine
def test_attach_by_existing_name_trains_with_augmentation_and_evaluates_without():
    model = attach(make_vit(), "rope_axial", normalize="unit", normalize_coords="min",
                   layout="half", shift_coords=0.5, jitter_coords=1.5, rescale_coords=2.0)
    assert model.coord_normalize == "unit_min"
    images = torch.randn(1, 3, 16, 32)
    with torch.no_grad():
        evaluated = model.eval()(images)
        model.train()
        assert (model(images) - model(images)).abs().max() > 1e-4
        model.blocks[0].attn.rotary.coord_augment = None  # the one module all blocks share
        torch.testing.assert_close(model.eval()(images), evaluated, rtol=0, atol=0)


# rotary-embedding-torch 0.9.1 (installed with pip --target outside the project, once):
#   RotaryEmbedding(dim=8, freqs_for="pixel", max_freq=10).get_axial_freqs(3, 4)[..., ::2]
# i.e. the angles of a head_dim 16 axial RoPE on a 3 x 4 grid, rows' 4 angles then columns'
# (the library repeats each angle for its interleaved pair).
REF_PIXEL_FREQS_MAXFREQ10_DIM8 = [3.14159274, 7.33038378, 11.51917267, 15.70796394]
REF_PIXEL_ROW_COORDS, REF_PIXEL_COL_COORDS = [-1.0, 0.0, 1.0], [-1.0, -1 / 3, 1 / 3, 1.0]


def test_pixel_frequencies_equal_rotary_embedding_torch():
    enc = RoPE2D(16, 1, freqs_for="pixel", normalize="pixel", max_freq=10.0)
    torch.testing.assert_close(enc.inv_freq64, torch.tensor(REF_PIXEL_FREQS_MAXFREQ10_DIM8,
                                                            dtype=torch.float64),
                               rtol=3e-7, atol=0)  # the stored values are float32
    coords = patch_coords((3, 4), enc.normalize)
    torch.testing.assert_close(coords[::4, 0], torch.tensor(REF_PIXEL_ROW_COORDS))
    torch.testing.assert_close(coords[:4, 1], torch.tensor(REF_PIXEL_COL_COORDS))
    rows = torch.tensor(REF_PIXEL_ROW_COORDS).repeat_interleave(4)
    cols = torch.tensor(REF_PIXEL_COL_COORDS).repeat(3)
    f = torch.tensor(REF_PIXEL_FREQS_MAXFREQ10_DIM8)
    theta = torch.cat([rows[:, None] * f, cols[:, None] * f], dim=-1)  # the library's table
    rot = enc.rotation(coords)
    torch.testing.assert_close(rot.cos[0, 0], theta.cos(), rtol=0, atol=1e-6)
    torch.testing.assert_close(rot.sin[0, 0], theta.sin(), rtol=0, atol=1e-6)


@pytest.mark.parametrize("linear_bands", [True, False])
@pytest.mark.parametrize("max_freq,atol", [(10.0, 1e-5), (64.0, 5e-5)])
def test_pixel_rope_equals_timm_in_pixels(linear_bands, max_freq, atol):
    grid = (5, 7)
    enc = RoPE2D(HEAD_DIM, HEADS, freqs_for="pixel", normalize="pixel", max_freq=max_freq,
                 linear_bands=linear_bands)
    ref = RotaryEmbedding(HEAD_DIM, max_res=int(max_freq), in_pixels=True,
                          linear_bands=linear_bands)
    sin, cos = ref.get_embed(list(grid))  # (N, D), interleaved [f0, f0, f1, f1, ..]
    x = torch.randn(2, HEADS, 35, HEAD_DIM)
    torch.testing.assert_close(_rotate(enc, x, grid), apply_rot_embed(x, sin, cos),
                               rtol=0, atol=atol)
    rot = enc.rotation(patch_coords(grid, "pixel"))
    torch.testing.assert_close(rot.cos[0, 0], cos[:, ::2], rtol=0, atol=atol)
    # float64 bands: timm's formula evaluated in float64.
    count = HEAD_DIM // 4
    bands = torch.linspace(1, max_freq / 2, count, dtype=torch.float64) if linear_bands else \
        2 ** torch.linspace(0, math.log2(max_freq) - 1, count, dtype=torch.float64)
    torch.testing.assert_close(enc.inv_freq64, bands * math.pi, rtol=1e-15, atol=0)


def test_pixel_rope_with_augmentation_equals_timm_in_pixels():
    grid = (4, 5)
    kwargs = {"shift_coords": 0.1, "jitter_coords": 1.2, "rescale_coords": 1.5}
    enc = RoPE2D(16, 1, freqs_for="pixel", normalize="pixel", max_freq=16.0, **kwargs).train()
    ref = RotaryEmbedding(16, max_res=16, in_pixels=True, linear_bands=True, **kwargs).train()
    x = torch.randn(1, 1, 20, 16)
    torch.manual_seed(3)
    sin, cos = ref.get_embed(list(grid))
    torch.manual_seed(3)
    torch.testing.assert_close(_rotate(enc, x, grid), apply_rot_embed(x, sin, cos),
                               rtol=0, atol=1e-5)


def test_options_stay_float64_and_out_of_the_state_dict():
    enc = RoPE2D(16, 2, freqs_for="pixel", normalize="pixel", shift_coords=0.1)
    enc = enc.to(torch.bfloat16)
    assert enc.inv_freq64.dtype == torch.float64 and not enc.state_dict()
    x = torch.randn(1, 2, 9, 16, dtype=torch.bfloat16)
    assert _rotate(enc, x, (3, 3)).dtype == torch.bfloat16
    assert "freqs_for='pixel'" in repr(enc) and "shift_coords=0.1" in repr(enc)


@pytest.mark.parametrize("kwargs,error,match", [
    ({"normalize_coords": "min"}, ValueError, r"normalize_coords='min' refines unit coordinates"
                                              r".*got normalize=None"),
    ({"normalize": "unit_max", "normalize_coords": "min"}, ValueError, "normalize='unit_min'"),
    ({"normalize": "unit", "normalize_coords": "minimum"}, ValueError,
     r"normalize_coords must be one of \['separate', 'min', 'max'\]"),
    ({"min_period": 1.0}, ValueError, "max_period is None"),
    ({"min_period": 4.0, "max_period": 2.0}, ValueError, "max_period must be a finite number >= 4"),
    ({"min_period": 0.0, "max_period": 2.0}, ValueError, "min_period must be a positive number"),
    ({"min_period": 1.0, "max_period": 2.0, "base": 100.0}, ValueError, "base or min_period"),
    ({"variant": "mixed", "min_period": 1.0, "max_period": 2.0}, ValueError,
     "variant='mixed'"),
    ({"freqs_for": "pixel"}, ValueError, "needs coordinates in \\[-1, 1\\].*normalize=None"),
    ({"freqs_for": "pixel", "normalize": "pixel", "base": 10.0}, ValueError, "not base"),
    ({"freqs_for": "pixel", "normalize": "pixel", "variant": "mixed"}, ValueError,
     "freqs_for='pixel' is axial"),
    ({"freqs_for": "pixel", "normalize": "pixel", "max_freq": -1.0}, ValueError, "max_freq"),
    ({"freqs_for": "pixel", "normalize": "pixel", "linear_bands": 1}, TypeError,
     "linear_bands must be a bool"),
    ({"max_freq": 10.0}, ValueError, "max_freq sets the pixel frequencies"),
    ({"normalize": "pixel"}, ValueError, "goes with freqs_for='pixel'"),
    ({"freqs_for": "pixels"}, ValueError, r"freqs_for must be one of \['lang', 'pixel'\]"),
    ({"jitter_coords": 0.5}, ValueError, "jitter_coords must be a finite number >= 1"),
    ({"shift_coords": True}, TypeError, "shift_coords must be a number, got bool"),
])
def test_bad_options_name_the_argument(kwargs, error, match):
    with pytest.raises(error, match=match):
        RoPE2D(16, 2, **kwargs)


def test_coord_augment_module_is_the_one_used():
    enc = RoPE2D(16, 2, normalize="unit", jitter_coords=1.5)
    assert isinstance(enc.coord_augment, CoordAugment)
    assert enc.coord_augment.config == (None, 1.5, None)
    assert RoPE2D(16, 2).coord_augment is None
