"""attach(..., ref_grid_size=...): EVA's ref_feat_shape, value by value against timm 1.0.31
(``_build_grid``, ``RotaryEmbeddingCat(in_pixels=False, ref_feat_shape=...)``,
``build_fourier_pos_embed``), and its refusals."""

from __future__ import annotations

import copy

import pytest
import torch
from posenc.core import apply_rotation
from posenc.spatial import ALiBi2D, ContinuousBias2D, RoPE2D, SinCos2D, attach, patch_coords
from spatial_models import PATCH, TRAIN_SIZE, make_vit
from timm.layers.pos_embed_sincos import (
    RotaryEmbeddingCat,
    _build_grid,
    apply_rot_embed_cat,
    build_fourier_pos_embed,
    freq_bands,
)
from timm.models.vision_transformer import VisionTransformer
from torch.export import Dim, export

HEAD_DIM = 192 // 3  # vit_tiny: embed_dim 192, 3 heads
REF = (4, 4)  # the tiny ViT's training grid (32 px / 8 px patches)
# Larger, non-square, smaller on one axis than the reference.
GRIDS = ((6, 6), (4, 7), (9, 2))


class RecordingRoPE(RoPE2D):
    """RoPE2D that keeps the positions and rotation of each call (what the model feeds it: its
    positions made from the image shape)."""

    def rotation(self, positions, **kwargs):
        rotation = super().rotation(positions, **kwargs)
        self.calls = [*getattr(self, "calls", []), (positions, rotation)]
        return rotation


class RecordingSinCos(SinCos2D):
    """SinCos2D that keeps each table it returns (what the model adds to the tokens, through
    its forward: coordinates made from the image shape)."""

    def forward(self, coords, *, dtype=torch.float32):
        out = super().forward(coords, dtype=dtype)
        self.outputs = [*getattr(self, "outputs", []), out]
        return out


def _image(grid):
    return torch.randn(2, 3, grid[0] * PATCH, grid[1] * PATCH)


@pytest.mark.parametrize("ref", [REF, (3, 5)])
@pytest.mark.parametrize("grid", [*GRIDS, REF])
def test_grid_coords_equal_timm_build_grid_with_ref_feat_shape(grid, ref):
    model = attach(make_vit(), "rope_axial", ref_grid_size=ref)
    expected = _build_grid(list(grid), "index", ref_feat_shape=list(ref)).reshape(-1, 2)
    # timm's order of operations (x / grid * ref in float32): bit for bit.
    torch.testing.assert_close(model.grid_coords(grid), expected, rtol=0, atol=0)


@pytest.mark.parametrize("grid", GRIDS)
def test_rope_axial_rotation_in_the_model_equals_timm_rotary_embedding_cat(grid):
    rope = RecordingRoPE(HEAD_DIM, 3, "axial", base=10000.0)
    model = attach(make_vit(), rope, ref_grid_size=REF).eval()
    model(_image(grid))
    [(positions, rotation)] = rope.calls  # computed once, passed to every block
    timm_rope = RotaryEmbeddingCat(HEAD_DIM, temperature=10000, in_pixels=False,
                                   ref_feat_shape=list(REF))
    emb = timm_rope.get_embed(list(grid))  # (N, 2 * head_dim): [sin | cos], interleaved
    prefix = positions.num_prefix_tokens
    assert prefix == 1 and positions.grid_size is None  # rescaled: not integer grid positions
    cos = rotation.cos[0, 0, prefix:].repeat_interleave(2, -1)
    sin = rotation.sin[0, 0, prefix:].repeat_interleave(2, -1)
    # float64 angles (posenc) against timm's float32 ones: about 1e-7 at these angles.
    torch.testing.assert_close(torch.cat((sin, cos), -1), emb, rtol=0, atol=1e-6)
    q = torch.randn(2, 3, grid[0] * grid[1], HEAD_DIM)
    patches = rotation._replace(cos=rotation.cos[:, :, prefix:], sin=rotation.sin[:, :, prefix:])
    torch.testing.assert_close(apply_rotation(q, patches), apply_rot_embed_cat(q, emb),
                               rtol=1e-5, atol=1e-5)


def test_rope_at_the_reference_grid_is_the_model_without_ref_grid_size():
    model = make_vit()
    with_ref = attach(copy.deepcopy(model), "rope_axial", ref_grid_size=REF).eval()
    plain = attach(model, "rope_axial").eval()
    x = _image(REF)
    # i / 4 * 4 == i in float32 for these i; at the reference grid nothing changes.
    torch.testing.assert_close(with_ref(x), plain(x), rtol=0, atol=0)
    x = _image((8, 8))  # twice the reference: half-patch steps, another function
    assert (with_ref(x) - plain(x)).abs().max() > 1e-4


def test_rope_mixed_trains_with_ref_grid_patch_dropout_and_checkpointing():
    ropes = [RecordingRoPE(HEAD_DIM, 3, "mixed") for _ in range(2)]
    model = attach(make_vit(patch_drop_rate=0.5), ropes, ref_grid_size=REF).train()
    model.set_grad_checkpointing(True)
    model(_image((8, 6))).sum().backward()
    assert all(r.freqs.grad is not None and r.freqs.grad.abs().sum() > 0 for r in ropes)
    positions = ropes[0].calls[0][0]
    kept = positions.coords  # (B, kept, 2): a subset of the rescaled grid
    grid = model.grid_coords((8, 6))
    assert kept.ndim == 3 and kept.shape[1] == 24
    assert all(any(torch.equal(c, g) for g in grid) for c in kept.reshape(-1, 2))
    assert torch.equal(kept[..., 0].amax(), torch.tensor(7 / 8 * 4))


@pytest.mark.parametrize("grid", GRIDS)
def test_sincos2d_table_in_the_model_equals_timm_fourier_embed_with_ref_feat_shape(grid):
    dim = 192
    sincos = RecordingSinCos(dim, layout="half")  # half: [sin rows, sin cols, cos rows, ...]
    model = attach(make_vit(), sincos, ref_grid_size=REF).eval()
    model(_image(grid))
    table, = sincos.outputs
    sin, cos = build_fourier_pos_embed(list(grid), bands=freq_bands(dim // 4, 10000.0, step=1),
                                       in_pixels=False, ref_feat_shape=list(REF))
    expected = torch.cat((sin.flatten(-2), cos.flatten(-2)), -1).reshape(-1, dim)
    torch.testing.assert_close(table, expected, rtol=0, atol=2e-6)


def test_sincos2d_by_name_at_the_reference_grid_equals_its_plain_table():
    model = attach(make_vit(), "sincos2d", ref_grid_size=(4, 4))
    coords = model.grid_coords((4, 4))
    torch.testing.assert_close(coords, patch_coords((4, 4)), rtol=0, atol=0)
    assert model(_image((6, 5))).shape == (2, 5)


@pytest.mark.parametrize(("encoding", "match"), [
    ("learned", "not defined for encoding 'learned' \\(Learned2D\\)"),
    ("factorized", "not defined for encoding 'factorized' \\(Factorized2D\\)"),
    ("relbias", "not defined for encoding 'relbias' \\(RelativeBias2D\\).*resize="),
    ("alibi2d", "not defined for encoding 'alibi2d' \\(ALiBi2D\\)"),
    ("none", "not defined for encoding 'none' \\(NoPE\\)"),
    (None, "not defined for encoding None"),
    (lambda: ALiBi2D(3), "not defined for encoding ALiBi2D"),
    (lambda: ContinuousBias2D(3, 16), "ContinuousBias2D\\(\\.\\.\\., ref_grid_size=\\.\\.\\.\\)"),
    (lambda: RoPE2D(HEAD_DIM, 3, normalize="unit"), "RoPE2D\\) uses normalize='unit'"),
    (lambda: SinCos2D(192, normalize="unit"), "SinCos2D\\) uses normalize='unit'"),
])
def test_ref_grid_size_is_refused_where_it_means_nothing(encoding, match):
    model = make_vit()
    before = copy.deepcopy(model.state_dict())
    encoding = encoding() if callable(encoding) else encoding
    with pytest.raises(ValueError, match=match):
        attach(model, encoding, ref_grid_size=REF)
    # Left as it was ("learned" would have folded pos_embed into the class token).
    assert type(model) is VisionTransformer and model.pos_embed is not None
    after = model.state_dict()
    assert before.keys() == after.keys() and all(torch.equal(before[k], after[k]) for k in before)


@pytest.mark.parametrize(("ref", "error", "match"), [
    (3.0, TypeError, "ref_grid_size must be an int or a \\(rows, cols\\) pair"),
    ((4, 0), ValueError, "ref_grid_size must hold positive ints"),
    ((4, 4, 4), TypeError, "ref_grid_size must be an int or a \\(rows, cols\\) pair"),
])
def test_bad_ref_grid_size_names_the_argument(ref, error, match):
    with pytest.raises(error, match=match):
        attach(make_vit(), "rope_axial", ref_grid_size=ref)


def test_cpb_takes_ref_grid_size_as_its_swinv2_window_and_rescales_no_coordinate():
    model = attach(make_vit(), "cpb", ref_grid_size=(8, 8))
    assert model.blocks[0].attn.bias.ref_grid_size == (8, 8) and model.ref_grid_size is None
    assert attach(make_vit(), "cpb").blocks[0].attn.bias.ref_grid_size == REF  # the model's
    assert attach(make_vit(), "cpb", ref_grid_size=None).blocks[0].attn.bias.ref_grid_size \
        is None


def test_ref_grid_size_survives_a_copy_and_an_int_means_square():
    model = attach(make_vit(), "rope_axial", ref_grid_size=5)
    assert model.ref_grid_size == (5, 5) and copy.deepcopy(model).ref_grid_size == (5, 5)
    assert attach(make_vit(), "rope_axial").ref_grid_size is None


@pytest.mark.slow  # about 4 s each (tracing)
@pytest.mark.parametrize("name", ["rope_axial", "sincos2d"])
def test_exported_with_ref_grid_and_dynamic_sizes_matches_eager(name):
    model = attach(make_vit("vit_reg4", embed_dim=32, num_heads=2, depth=1), name,
                   ref_grid_size=REF).eval()
    rows, cols = Dim("rows", min=2, max=16), Dim("cols", min=2, max=16)
    program = export(model, (torch.randn(2, 3, *TRAIN_SIZE),),
                     dynamic_shapes={"x": {2: PATCH * rows, 3: PATCH * cols}}).module()
    for size in ((48, 48), (32, 72), (80, 16)):
        x = torch.randn(2, 3, *size)
        with torch.no_grad():
            torch.testing.assert_close(program(x), model(x), rtol=1e-5, atol=1e-5)
