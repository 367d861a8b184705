from __future__ import annotations

import copy
import io

import pytest
import timm
import torch
from posenc.core import MultiheadAttention
from posenc.spatial import (
    ENCODINGS,
    ALiBi2D,
    GridVisionTransformer,
    RelativeBias2D,
    RoPE2D,
    SinCos2D,
    attach,
    patch_coords,
)
from posenc.spatial.blocks import GridAttention, grid_blocks
from posenc.spatial.coords import GridPositions
from spatial_models import OTHER_SIZES, TRAIN_SIZE, make_vit
from timm.models.vision_transformer import Block, ResPostBlock, VisionTransformer

NAMES = list(ENCODINGS)
POSITION_KEYS = ("pos_encoding", "attn.rotary.", "attn.bias.")


def _is_position_key(key: str) -> bool:
    return any(part in key for part in POSITION_KEYS)


@pytest.mark.parametrize("name", NAMES)
def test_an_empty_batch_goes_forward_and_backward(name):
    """No image: empty logits and zero gradients, not a reshape of 0 elements with a -1."""
    model = attach(make_vit("vit_reg4"), name)
    out = model(torch.randn(0, 3, *TRAIN_SIZE))
    assert out.shape == (0, 5)
    out.sum().backward()
    assert all(p.grad is None or not p.grad.any() for p in model.parameters())


@pytest.mark.parametrize("name", NAMES)
@pytest.mark.parametrize("family", ["vit", "deit", "vit_reg4"])
def test_forward_backward_at_training_and_other_sizes(family, name):
    model = attach(make_vit(family), name)
    for size in (TRAIN_SIZE, *OTHER_SIZES):
        model.zero_grad()
        out = model(torch.randn(1, 3, *size))
        assert out.shape == (1, 5) and torch.isfinite(out).all()
        out.square().mean().backward()
        position_grads = {key: param.grad for key, param in model.named_parameters()
                          if _is_position_key(key)}
        # Every position parameter is reached; the last block's can be exactly zero when only
        # the class token (which carries no position) is pooled, so check the first block's.
        assert all(g is not None and torch.isfinite(g).all() for g in position_grads.values())
        assert all(g.abs().sum() > 0 for k, g in position_grads.items()
                   if not k.startswith("blocks.1."))


@pytest.mark.parametrize("name", ["sincos2d", "rope_mixed", "relbias", "alibi2d"])
def test_model_without_prefix_tokens_and_with_dynamic_img_size(name):
    model = attach(make_vit("vit", class_token=False, global_pool="avg", no_embed_class=True,
                            dynamic_img_size=True), name)
    assert model.num_prefix_tokens == 0
    for size in (TRAIN_SIZE, OTHER_SIZES[1]):
        out = model(torch.randn(1, 3, *size))
        out.sum().backward()
        assert torch.isfinite(out).all()


@pytest.mark.parametrize("kwargs", [{}, {"reg_tokens": 4}, {"no_embed_class": True},
                                    {"class_token": False, "global_pool": "avg"}])
def test_learned_keeps_the_model_and_resamples_like_timm_dynamic_img_size(kwargs):
    reference = make_vit("vit", dynamic_img_size=True, **kwargs).eval()
    with torch.no_grad():
        reference.pos_embed.normal_(std=1.0)  # make a wrong position handling visible
    model = attach(copy.deepcopy(reference), "learned")
    for size in (TRAIN_SIZE, *OTHER_SIZES, (16, 40)):
        x = torch.randn(2, 3, *size)
        with torch.no_grad():
            torch.testing.assert_close(model(x), reference(x), rtol=1e-5, atol=1e-5)


@pytest.mark.parametrize("name", NAMES)
def test_unmodified_timm_checkpoint_loads_reporting_only_position_params(name):
    checkpoint = make_vit("vit_reg4").state_dict()
    model = attach(make_vit("vit_reg4"), name)
    result = model.load_state_dict(checkpoint, strict=False)
    assert result.unexpected_keys == ["pos_embed"]
    assert all(_is_position_key(key) for key in result.missing_keys), result.missing_keys
    depth = len(model.blocks)
    expected_missing = {"none": 0, "sincos2d": 0, "rope_axial": 0, "alibi2d": 0, "learned": 1,
                        "factorized": 2, "rope_mixed": depth, "relbias": depth, "cpb": 3 * depth,
                        "rope_dinov3": 0, "rope_pixel": 0, "liere": depth,
                        "comrope": 2 * depth}
    assert len(result.missing_keys) == expected_missing[name]
    state = model.state_dict()
    for key, value in checkpoint.items():
        if key != "pos_embed":
            torch.testing.assert_close(state[key], value, rtol=0, atol=0)


def test_grid_attention_without_encoding_equals_timm_attention():
    attn = make_vit("vit", qk_norm=True).blocks[0].attn.eval()
    x = torch.randn(2, 17, 192)
    expected = attn(x)
    wrapped = GridAttention.from_timm(attn, None, None).eval()
    assert wrapped.qkv is attn.qkv and wrapped.proj is attn.proj and wrapped.q_norm is attn.q_norm
    torch.testing.assert_close(wrapped(x), expected, rtol=1e-5, atol=1e-5)
    with_rope = GridAttention.from_timm(attn, RoPE2D(64, 3), None)
    with pytest.raises(TypeError, match="takes rope computed by its model for this forward"):
        with_rope(x)


def test_grid_attention_with_a_learned_bias_is_the_biased_softmax_without_sdpa_on_the_cpu(
        monkeypatch):
    """A learned bias (with a gradient) on the CPU: the attention and its gradients are
    softmax(q k^T / sqrt(d) + bias) v, computed directly, not by SDPA (whose math kernel,
    the only one taking a mask gradient there, guards all-masked rows: passes a finite
    bias never needs)."""
    torch.manual_seed(0)
    attn = make_vit("vit").blocks[0].attn.train()
    bias = torch.randn(1, 3, 17, 17, requires_grad=True)
    x = torch.randn(2, 17, 192, requires_grad=True)

    def reference(x, bias):
        q, k, v = attn.qkv(x).unflatten(-1, (3, 3, 64)).permute(2, 0, 3, 1, 4)
        weights = ((q @ k.mT) / 8 + bias).softmax(-1)
        return attn.proj((weights @ v).transpose(1, 2).flatten(2))

    expected = reference(x, bias)
    grads = torch.autograd.grad(expected.square().sum(), (x, bias))
    wrapped = GridAttention.from_timm(attn, None, RelativeBias2D(3, 4))
    monkeypatch.setattr(torch.nn.functional, "scaled_dot_product_attention",
                        lambda *a, **k: pytest.fail("SDPA called for a learned bias"))
    out = wrapped(x, bias=bias)
    torch.testing.assert_close(out, expected, rtol=1e-5, atol=1e-5)
    for got, want in zip(torch.autograd.grad(out.square().sum(), (x, bias)), grads, strict=True):
        torch.testing.assert_close(got, want, rtol=1e-4, atol=1e-5)


@pytest.mark.parametrize("block_fn", [Block, ResPostBlock])
def test_grid_blocks_compute_what_timms_blocks_compute(block_fn):
    """timm's blocks as grid blocks (attention without an encoding) give timm's own blocks'
    outputs and keep their parameter names and order; the rotation and bias reach them as
    arguments, as timm's EvaBlock takes rope=."""
    vit = make_vit("vit", block_fn=block_fn).eval()
    x = torch.randn(2, 17, 192)
    expected, names = vit.blocks[0](x), list(vit.blocks.state_dict())
    blocks = grid_blocks(vit.blocks, rotary=[None] * len(vit.blocks))
    assert type(blocks[0]).__name__ == f"Grid{block_fn.__name__}"
    assert list(blocks.state_dict()) == names
    torch.testing.assert_close(blocks[0](x), expected, rtol=1e-5, atol=1e-5)


@pytest.mark.parametrize("name", ["learned", "rope_mixed", "relbias"])
def test_attach_returns_a_grid_model_and_leaves_the_timm_model_as_it_was(name):
    model = make_vit("vit_reg4").eval()
    x = torch.randn(2, 3, *TRAIN_SIZE)
    with torch.no_grad():
        expected = model(x)
    state = {k: v.clone() for k, v in model.state_dict().items()}
    grid = attach(model, name)
    assert type(grid) is GridVisionTransformer and isinstance(grid, VisionTransformer)
    assert type(model) is VisionTransformer and type(model.blocks[0]) is Block
    assert model.state_dict().keys() == state.keys()
    assert all(torch.equal(model.state_dict()[k], v) for k, v in state.items())
    with torch.no_grad():
        torch.testing.assert_close(model(x), expected, rtol=0, atol=0)
    # The weights are shared: the grid model trains the timm model's patch embedding.
    assert grid.patch_embed.proj.weight is model.patch_embed.proj.weight


@pytest.mark.parametrize("kwargs", [{}, {"dynamic_img_size": True}])
def test_size_not_divisible_by_patch_raises(kwargs):
    model = attach(make_vit("vit", **kwargs), "rope_axial")
    with pytest.raises(ValueError, match=r"\(36, 32\) is not divisible by the patch size"):
        model(torch.randn(1, 3, 36, 32))


def test_unsupported_models_name_what_is_supported():
    eva = timm.create_model("eva02_tiny_patch14_224", pretrained=False, img_size=28, depth=1)
    distilled = timm.create_model("deit_tiny_distilled_patch16_224", pretrained=False,
                                  img_size=32, depth=1)
    for model in (eva, distilled, torch.nn.Linear(2, 2)):
        with pytest.raises(TypeError, match="supported: timm.models.vision_transformer"):
            attach(model, "rope_axial")


def test_attaching_twice_raises():
    model = attach(make_vit(), "sincos2d")
    with pytest.raises(ValueError, match="already"):
        attach(model, "rope_axial")


def test_names_infer_dims_and_kwargs_override():
    model = attach(make_vit(), "rope_axial", base=10000.0)
    first, second = (block.attn.rotary for block in model.blocks)
    assert first is second and first.base == 10000.0
    assert (first.head_dim, first.num_heads) == (64, 3)
    model = attach(make_vit(), "rope_mixed")
    first, second = (block.attn.rotary for block in model.blocks)
    assert first is not second and not torch.equal(first.freqs, second.freqs)
    model = attach(make_vit(), "relbias")
    assert model.blocks[0].attn.bias.grid_size == (4, 4)


def test_instances_and_per_block_lists():
    model = attach(make_vit(), RoPE2D(64, 3, "mixed"))
    assert model.blocks[0].attn.rotary is model.blocks[1].attn.rotary
    encs = [RoPE2D(64, 3, "mixed") for _ in range(2)]
    model = attach(make_vit(), encs)
    assert [b.attn.rotary for b in model.blocks] == encs
    with pytest.raises(ValueError, match="one rotary encoding per block"):
        attach(make_vit(), encs[:1])
    with pytest.raises(ValueError, match="embed_dim=192"):
        attach(make_vit(), SinCos2D(64))
    with pytest.raises(TypeError, match="only accepted with an encoding name"):
        attach(make_vit(), SinCos2D(192), base=100.0)
    with pytest.raises(ValueError, match="head_dim"):
        attach(make_vit(), "rope_axial", head_dim=32)
    with pytest.raises(ValueError, match="num_heads"):
        attach(make_vit(), "rope_mixed", num_heads=4)
    with pytest.raises(ValueError, match="unknown spatial encoding"):
        attach(make_vit(), "rope")


@pytest.mark.parametrize("name", ["rope_mixed", "relbias"])
def test_torch_compile_traces_the_shared_positions(name):
    model = attach(make_vit("vit", depth=1), name).eval()
    compiled = torch.compile(model, backend="eager", dynamic=True, fullgraph=True)
    for size in (TRAIN_SIZE, OTHER_SIZES[1]):
        x = torch.randn(2, 3, *size)
        with torch.no_grad():
            torch.testing.assert_close(compiled(x), model(x), rtol=1e-5, atol=1e-5)


@pytest.mark.parametrize("name", NAMES)
def test_bf16_autocast_forward_backward_is_finite(name):
    model = attach(make_vit("vit_reg4"), name)
    with torch.autocast("cpu", dtype=torch.bfloat16):
        out = model(torch.randn(2, 3, *OTHER_SIZES[1]))
    assert out.dtype == torch.bfloat16
    out.float().square().mean().backward()
    grads = [p.grad for p in model.parameters() if p.grad is not None]
    assert grads and all(torch.isfinite(g).all() for g in grads)


@pytest.mark.parametrize("name", ["rope_mixed", "cpb"])
def test_model_with_patch_dropout_trains(name):
    model = attach(make_vit("vit_reg4", patch_drop_rate=0.5), name).train()
    model(torch.randn(2, 3, *OTHER_SIZES[1])).sum().backward()
    assert all(p.grad is not None for p in model.blocks[0].attn.parameters())


def test_forward_intermediates_at_a_non_square_size():
    model = attach(make_vit("vit_reg4"), "rope_axial")
    features = model.forward_intermediates(torch.randn(2, 3, *OTHER_SIZES[1]),
                                           intermediates_only=True)
    assert [f.shape for f in features] == [(2, 192, 4, 7)] * 2


def test_attached_model_survives_save_and_load():
    model = attach(make_vit("vit"), "rope_mixed").eval()
    buffer = io.BytesIO()
    torch.save(model, buffer)
    buffer.seek(0)
    loaded = torch.load(buffer, weights_only=False)
    assert type(loaded) is GridVisionTransformer and loaded.coord_normalize is None
    x = torch.randn(1, 3, *OTHER_SIZES[0])
    with torch.no_grad():
        torch.testing.assert_close(loaded(x), model(x))


def test_core_attention_is_the_one_used():
    model = attach(make_vit("deit"), "alibi2d")
    assert all(isinstance(b.attn, MultiheadAttention) for b in model.blocks)


def test_blocks_sharing_an_encoding_compute_it_once_per_forward():
    model = attach(make_vit("vit", depth=3), "rope_axial")
    calls = []
    rotary = model.blocks[0].attn.rotary
    original = rotary.angles
    rotary.angles = lambda coords: calls.append(1) or original(coords)
    model(torch.randn(1, 3, *TRAIN_SIZE))
    model(torch.randn(1, 3, *OTHER_SIZES[1]))
    assert len(calls) == 2  # once per forward, not once per block


@pytest.mark.parametrize("mask", [None, "bool", "float"])
@pytest.mark.parametrize("is_causal", [False, True])
def test_grid_attention_given_rotation_and_bias_equals_core_attention(mask, is_causal):
    """What a block computes from the rotation and bias its model passes equals
    posenc.core.MultiheadAttention computing them itself from the same positions, masks and
    causality included."""
    attn = GridAttention.from_timm(make_vit("vit").blocks[0].attn, RoPE2D(64, 3, "mixed"),
                                   ALiBi2D(3)).eval()
    positions = GridPositions(patch_coords((3, 4)), (3, 4), num_prefix_tokens=1)
    x = torch.randn(2, 13, 192)
    masks = {None: None, "bool": torch.rand(2, 1, 13, 13) > 0.3,
             "float": torch.randn(1, 3, 13, 13)}
    attn_mask = masks[mask]
    if mask == "bool":
        attn_mask[..., 0] = True  # every query keeps a key (the class token)
    rope, bias = attn.rotary.rotation(positions), attn.bias(positions, positions)
    got = attn(x, rope, bias, attn_mask=attn_mask, is_causal=is_causal)
    expected = MultiheadAttention.forward(attn, x, query_positions=positions,
                                          attn_mask=attn_mask, is_causal=is_causal)
    torch.testing.assert_close(got, expected, rtol=1e-5, atol=1e-5)


def test_grid_model_built_directly_checks_one_encoding_per_block():
    with pytest.raises(ValueError, match=r"rotary must hold one encoding \(or None\) per block "
                                         r"\(2\), got 1"):
        GridVisionTransformer(make_vit(), rotary=[RoPE2D(64, 3)])
    model = GridVisionTransformer(make_vit(), bias=[ALiBi2D(3)] * 2, coord_normalize=None)
    assert model(torch.randn(1, 3, 32, 40)).shape == (1, 5)
