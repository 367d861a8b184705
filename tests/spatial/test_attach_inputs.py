"""Hostile inputs to attach and attached ViTs: odd image sizes, memory formats, refused
encodings, encodings that do not fit, and timm versions without optional attributes."""

from __future__ import annotations

import pytest
import torch
from posenc.core import MultiheadAttention, Rotation
from posenc.spatial import (
    ENCODINGS,
    LieRE,
    RelativeBias2D,
    RoPE2D,
    attach,
    encoding_from_name,
    patch_coords,
)
from posenc.spatial.coords import GridPositions
from spatial_models import make_vit
from timm.models.vision_transformer import VisionTransformer


@pytest.mark.parametrize("name", list(ENCODINGS))
def test_dynamic_img_pad_sizes_down_to_one_patch_and_channels_last(name):
    model = attach(make_vit("vit_reg4", dynamic_img_size=True, dynamic_img_pad=True), name).eval()
    with torch.no_grad():
        for size, grid in (((36, 44), (5, 6)), ((8, 8), (1, 1)), ((3, 5), (1, 1)),
                           ((8, 56), (1, 7))):
            (maps,) = model.forward_intermediates(torch.randn(2, 3, *size), indices=1,
                                                  intermediates_only=True)
            assert maps.shape == (2, 192, *grid) and torch.isfinite(maps).all()
        x = torch.randn(2, 3, 40, 24)
        torch.testing.assert_close(model(x.contiguous(memory_format=torch.channels_last)),
                                   model(x), rtol=1e-5, atol=1e-5)


def test_bad_image_shapes_raise_naming_the_size():
    model = attach(make_vit("vit", dynamic_img_pad=True), "rope_axial")
    with pytest.raises(ValueError, match=r"x must be a \(B, C, H, W\) image tensor, got \(3, 32"):
        model(torch.randn(3, 32, 32))
    with pytest.raises(ValueError, match=r"image size \(0, 16\) holds no patch of size \(8, 8\)"):
        model(torch.randn(1, 3, 0, 16))
    with pytest.raises(ValueError, match=r"\(4, 4\) is not divisible by the patch size"):
        attach(make_vit("vit"), "relbias")(torch.randn(1, 3, 4, 4))


def test_a_refused_encoding_leaves_the_model_as_it_was():
    model = make_vit("vit")
    with pytest.raises(ValueError, match="RelativeBias2D has num_heads=4, the model's attention "
                                         "has num_heads=3"):
        attach(model, RelativeBias2D(4, 4))
    assert type(model) is VisionTransformer and model.pos_embed is not None
    attach(model, "rope_axial")(torch.randn(1, 3, 32, 32))


class _FourHeadBias(torch.nn.Module):
    """A bias encoding without a num_heads attribute whose bias has the wrong head count."""

    kind = "bias"

    def forward(self, query_positions, key_positions):
        tokens = query_positions.num_prefix_tokens + query_positions.coords.shape[-2]
        return torch.zeros(1, 4, tokens, tokens)


def test_an_encoding_output_that_does_not_fit_raises_naming_the_encoding():
    model = attach(make_vit("vit"), _FourHeadBias())
    with pytest.raises(ValueError, match=r"_FourHeadBias gave a bias of shape \(1, 4, 17, 17\) "
                                         r"for 1 images of 17 tokens .* and 3 heads"):
        model(torch.randn(1, 3, 32, 32))


class _ShortRoPE2D(RoPE2D):
    """A RoPE2D whose rotation leaves out the last token."""

    def rotation(self, positions, *, augment=True):
        cos, sin, layout = super().rotation(positions, augment=augment)
        return Rotation(cos[:, :, :-1], sin[:, :, :-1], layout)


class _ShortLieRE(LieRE):
    """A LieRE whose rotation leaves out the last token."""

    def rotation(self, positions, *, augment=True):
        rotation = super().rotation(positions, augment=augment)
        return rotation._replace(turns=rotation.turns[:, :, :-1])


@pytest.mark.parametrize("short", [_ShortRoPE2D(64, 3), _ShortLieRE(64, 3)],
                         ids=["rope2d", "liere"])
def test_a_rotation_that_does_not_fit_raises_naming_the_encoding(short):
    model = attach(make_vit("vit"), short)
    name = type(short).__name__
    with pytest.raises(ValueError, match=rf"{name} gave a rotation over \(samples, heads, "
                                         rf"tokens\) \(1, [13], 16\) for 2 images of 17 tokens "
                                         rf".* expected \(1 or 2, 1 or 3, 17\)"):
        model(torch.randn(2, 3, 32, 32))


def test_attach_reads_attributes_older_timm_attention_lacks():
    # timm 1.0.20 - 1.0.22 Attention has no attn_dim, and before 1.0.28 no gate.
    reference = make_vit("vit").eval()
    model = make_vit("vit").eval()
    model.load_state_dict(reference.state_dict())
    for block in model.blocks:
        del block.attn.attn_dim, block.attn.gate
    model = attach(model, "rope_axial")
    reference = attach(reference, "rope_axial")
    x = torch.randn(2, 3, 32, 48)
    with torch.no_grad():
        torch.testing.assert_close(model(x), reference(x), rtol=0, atol=0)


def test_nchw_intermediates_with_patch_dropout_raise():
    model = attach(make_vit("vit", patch_drop_rate=0.5), "rope_axial").train()
    with pytest.raises(ValueError, match="output_fmt='NCHW' needs every patch"):
        model.forward_intermediates(torch.randn(1, 3, 32, 32))
    tokens = model.forward_intermediates(torch.randn(1, 3, 32, 32), output_fmt="NLC",
                                         intermediates_only=True)
    assert [t.shape for t in tokens] == [(1, 8, 192)] * 2


@pytest.mark.parametrize("name", ["rope_axial", "alibi2d"])
def test_grid_positions_for_the_wrong_token_count_raise_naming_their_shape(name):
    if name == "rope_axial":
        attn = MultiheadAttention(16, 2, rotary=encoding_from_name(name, head_dim=8, num_heads=2))
    else:
        attn = MultiheadAttention(16, 2, bias=encoding_from_name(name, num_heads=2))
    positions = GridPositions(patch_coords((3, 3)), (3, 3), num_prefix_tokens=1)
    with pytest.raises(ValueError, match=r"query_positions of shape \(9, 2\) give 10 positions "
                                         r"for 7 tokens"):
        attn(torch.randn(2, 7, 16), query_positions=positions)
