"""VideoVisionTransformer: a timm ViT (pretrained=False) fed clips (B, T, C, H, W) with 3D
positions: shapes, gradients, frame times, patch dropout, checkpointing, refusals."""

from __future__ import annotations

import copy
import functools

import pandas as pd
import pytest
import timm
import torch
from posenc.spatial import ALiBi2D, RoPE2D, SinCos2D, attach
from posenc.spatial.additive import SinCos3D
from posenc.spatial.coords import VideoPositions, video_coords
from posenc.spatial.rope import MRoPE, RoPE3D
from posenc.spatial.video import VIDEO_ENCODINGS, VideoVisionTransformer
from posenc.temporal import time_positions
from spatial_models import make_vit

NAMES = list(VIDEO_ENCODINGS)
CLIP = (2, 3, 3, 16, 24)  # B, T, C, H, W: 3 frames of 2 x 3 patches of 8 pixels


@functools.cache
def _cached_vit(family: str, kwargs: tuple) -> torch.nn.Module:
    return make_vit(family, **dict(kwargs))


def _vit(family: str = "vit", **kwargs) -> torch.nn.Module:
    """A fresh copy of a small timm ViT (deep copies are faster than timm.create_model)."""
    return copy.deepcopy(_cached_vit(family, tuple(sorted(kwargs.items()))))


def _video(seed: int = 0) -> torch.Tensor:
    return torch.randn(*CLIP, generator=torch.Generator().manual_seed(seed))


@pytest.mark.parametrize("name", NAMES)
@pytest.mark.parametrize("family", ["vit", "vit_reg4"])
def test_forward_shapes_and_gradients(family, name):
    model = VideoVisionTransformer(_vit(family), name)
    prefix = model.vit.num_prefix_tokens
    video = _video()
    features = model.forward_features(video, torch.tensor([0.0, 0.5, 2.0]))
    assert features.shape == (2, prefix + 3 * 2 * 3, 192)
    out = model.vit.forward_head(features)
    assert out.shape == (2, 5) and torch.isfinite(out).all()
    out.square().mean().backward()
    assert model.vit.patch_embed.proj.weight.grad.abs().sum() > 0
    if name == "rope3d_mixed":
        freqs = model.vit.blocks[0].attn.rotary.freqs
        assert freqs.grad is not None and freqs.grad.abs().sum() > 0


def test_without_encoding_one_frame_is_the_timm_vit_without_pos_embed():
    vit = _vit("vit_reg4").eval()
    reference = copy.deepcopy(vit)
    reference.pos_embed = None
    model = VideoVisionTransformer(vit, None)
    frames = torch.randn(2, 3, 32, 32)
    torch.testing.assert_close(model(frames[:, None]), reference(frames))


def test_rotary_output_depends_on_time_gaps_only_sincos_on_absolute_time():
    video = _video()
    times = torch.tensor([0.0, 1.0, 2.5], dtype=torch.float64)
    # Prefix tokens are unrotated (they sit at (0, 0, 0)), so a cls token would see absolute
    # time: average-pool a ViT without one.
    vit = _vit("vit", class_token=False, global_pool="avg")
    rotary = VideoVisionTransformer(vit, "rope3d_axial").eval()
    out = rotary.forward_features(video, times)
    torch.testing.assert_close(rotary.forward_features(video, times + 1000.0), out,
                               rtol=0, atol=1e-5)
    # Near-uniform attention at timm's init (std 0.02 weights) keeps position effects small,
    # but 100x above the float noise of the shift above.
    other = rotary.forward_features(video, torch.tensor([0.0, 1.0, 6.0]))
    assert (other - out).abs().max() > 1e-3
    additive = VideoVisionTransformer(_vit("vit"), "sincos3d").eval()
    assert (additive(video, times + 1000.0) - additive(video, times)).abs().max() > 1e-2


def test_irregular_frame_times_from_timestamps_per_clip():
    # Clip 0 at 25 fps with a dropped frame, clip 1 at regular 0.5 s: per-clip (B, T) times.
    start = pd.Timestamp("2024-05-01 12:00", tz="UTC")
    clip0 = pd.DatetimeIndex([start + pd.Timedelta(milliseconds=m) for m in (0, 40, 120)])
    clip1 = pd.date_range(start, periods=3, freq="500ms")
    times = torch.stack([time_positions(c, start, unit="s") for c in (clip0, clip1)])
    model = VideoVisionTransformer(_vit("vit"), "mrope", time_scale=25.0).eval()
    video = _video()
    out = model(video, times)
    for b in range(2):  # each clip is encoded at its own times
        torch.testing.assert_close(out[b:b + 1], model(video[b:b + 1], times[b]),
                                   rtol=1e-5, atol=1e-5)
    assert (model(video, torch.arange(3.0)) - out).abs().max() > 1e-3  # indices differ


def test_patch_dropout_gives_the_blocks_the_rotation_of_the_kept_patches():
    model = VideoVisionTransformer(_vit("vit_reg4", patch_drop_rate=0.5),
                                   "rope3d_axial").train()
    seen = {}
    model.vit.blocks[0].register_forward_pre_hook(
        lambda block, args: seen.update(x=args[0], rope=args[1]))
    video = _video()
    times = torch.tensor([0.0, 0.7, 3.0])
    features = model.forward_features(video, times)
    kept = (3 * 6) // 2
    assert features.shape == (2, 5 + kept, 192)
    # Find each kept token among all patch tokens (patch embedding is deterministic).
    with torch.no_grad():
        tokens = model.vit.patch_embed(video.flatten(0, 1)).reshape(2, 18, 192)
        index = torch.cdist(seen["x"][:, 5:], tokens).argmin(-1)  # (2, kept)
    expected = model.vit.blocks[0].attn.rotary.rotation(
        VideoPositions(video_coords((2, 3), times)[index], 5))
    assert seen["rope"].cos.shape == (2, 1, 5 + kept, 32)
    torch.testing.assert_close(seen["rope"].cos, expected.cos, rtol=0, atol=0)
    torch.testing.assert_close(seen["rope"].sin, expected.sin, rtol=0, atol=0)


@pytest.mark.slow  # two forward-backward passes of a ViT
def test_gradient_checkpointing_gives_the_same_loss_and_gradients():
    model = VideoVisionTransformer(_vit("vit"), "rope3d_mixed").train()
    video = _video()
    results = []
    for checkpointing in (False, True):
        model.zero_grad()
        model.vit.set_grad_checkpointing(checkpointing)
        loss = model(video).square().mean()
        loss.backward()
        results.append((loss.detach(), {k: p.grad.clone() for k, p in model.named_parameters()
                                        if p.grad is not None}))
    (loss0, grads0), (loss1, grads1) = results
    torch.testing.assert_close(loss1, loss0)
    assert grads1.keys() == grads0.keys() and "vit.blocks.0.attn.rotary.freqs" in grads0
    for key in grads0:
        torch.testing.assert_close(grads1[key], grads0[key], rtol=1e-5, atol=1e-6)


def test_names_infer_sizes_share_or_copy_per_block_and_take_overrides():
    axial = VideoVisionTransformer(_vit("vit"), "rope3d_axial")
    encs = [b.attn.rotary for b in axial.vit.blocks]
    assert encs[0] is encs[1] and encs[0].head_dim == 64 and encs[0].sections == (8, 12, 12)
    mixed = VideoVisionTransformer(_vit("vit"), "rope3d_mixed")
    encs = [b.attn.rotary for b in mixed.vit.blocks]
    assert encs[0] is not encs[1] and encs[0].freqs.shape == (3, 3, 32)
    mrope = VideoVisionTransformer(_vit("vit"), "mrope", sections=(16, 8, 8), base=1e6)
    assert mrope.vit.blocks[1].attn.rotary.sections == (16, 8, 8)
    sincos = VideoVisionTransformer(_vit("vit"), "sincos3d", layout="t_cols_rows")
    assert sincos.pos_encoding.dim == 192 and sincos.pos_encoding.layout == "t_cols_rows"


def test_timm_checkpoint_loads_reporting_only_pos_embed():
    state = _vit("vit").state_dict()
    model = VideoVisionTransformer(_vit("vit"), RoPE3D(64, 3, "mixed"))
    result = model.vit.load_state_dict(state, strict=False)
    assert result.unexpected_keys == ["pos_embed"]
    assert all(".attn.rotary." in key for key in result.missing_keys) and result.missing_keys


def test_dynamic_img_pad_takes_any_frame_size():
    model = VideoVisionTransformer(_vit("vit", dynamic_img_pad=True), "rope3d_axial")
    assert model.forward_features(torch.randn(1, 2, 3, 20, 14)).shape == (1, 1 + 2 * 3 * 2, 192)


def test_bad_inputs():
    model = VideoVisionTransformer(_vit("vit"), "rope3d_axial")
    with pytest.raises(ValueError, match=r"video must be a \(B, T, C, H, W\) tensor"):
        model(torch.randn(2, 3, 32, 32))
    with pytest.raises(ValueError, match="not divisible by the patch size"):
        model(torch.randn(1, 2, 3, 16, 20))
    with pytest.raises(ValueError, match=r"frame_times of shape \(2,\) do not match .* T=3"):
        model(_video(), torch.tensor([0.0, 1.0]))
    with pytest.raises(ValueError, match=r"frame_times of shape \(3, 3\) .* B=2"):
        model(_video(), torch.zeros(3, 3))
    with pytest.raises(ValueError, match="frame_times must be finite"):
        model(_video(), torch.tensor([0.0, float("nan"), 1.0]))
    with pytest.raises(TypeError, match="frame_times must be an integer, float32 or float64"):
        model(_video(), torch.tensor([0.0, 1.0, 2.0], dtype=torch.bfloat16))
    with pytest.raises(ValueError, match="at least one clip of one frame"):
        model(torch.randn(1, 0, 3, 32, 32))


def test_bad_construction_leaves_the_vit_unchanged():
    vit = _vit("vit")
    with pytest.raises(ValueError, match=r"unknown video encoding 'rope_axial'; valid names: "
                                         r"\['none', 'sincos3d'"):
        VideoVisionTransformer(vit, "rope_axial")
    with pytest.raises(TypeError, match="a rotary video encoding must be a 3D one"):
        VideoVisionTransformer(vit, RoPE2D(64, 3))
    with pytest.raises(TypeError, match="an additive video encoding must be a SinCos3D"):
        VideoVisionTransformer(vit, SinCos2D(192))
    with pytest.raises(TypeError, match="got a bias encoding ALiBi2D"):
        VideoVisionTransformer(vit, ALiBi2D(3))
    with pytest.raises(ValueError, match="encoding dim=96 does not match the ViT's embed_dim=192"):
        VideoVisionTransformer(vit, SinCos3D(96))
    with pytest.raises(ValueError, match="rotary.head_dim=32 does not match"):
        VideoVisionTransformer(vit, MRoPE(32))
    with pytest.raises(ValueError, match=r"one rotary encoding per block \(2\), got 3"):
        VideoVisionTransformer(vit, [MRoPE(64)] * 3)
    with pytest.raises(ValueError, match="must not be an empty sequence"):
        VideoVisionTransformer(vit, [])
    with pytest.raises(TypeError, match="only accepted with an encoding name"):
        VideoVisionTransformer(vit, MRoPE(64), base=10.0)
    with pytest.raises(ValueError, match="time_scale must be a positive number"):
        VideoVisionTransformer(vit, "mrope", time_scale=0.0)
    assert vit.pos_embed is not None and type(vit.blocks[0].attn) is timm.layers.Attention
    with pytest.raises(TypeError, match="vit must be a timm"):
        VideoVisionTransformer(torch.nn.Linear(2, 2), "mrope")
    with pytest.raises(ValueError, match="already has a posenc 2D encoding"):
        VideoVisionTransformer(attach(_vit("vit"), "rope_axial"), "mrope")


# Tensor methods through which values reach the host (a synchronisation on a GPU).
READS = ("item", "__bool__", "__int__", "__float__", "__index__", "tolist", "cpu", "numpy")


@pytest.mark.parametrize("name", ["rope3d_mixed", "mrope", "sincos3d"])
def test_blocks_read_no_values_even_when_recomputed(name, monkeypatch):
    model = VideoVisionTransformer(_vit("vit_reg4"), name).train()
    model.vit.set_grad_checkpointing(True)
    depth, reads = [0], []
    for block in model.vit.blocks:
        block.register_forward_pre_hook(lambda m, a: depth.__setitem__(0, depth[0] + 1))
        block.register_forward_hook(lambda m, a, o: depth.__setitem__(0, depth[0] - 1))
    for read_name in READS:
        original = getattr(torch.Tensor, read_name)

        def read(tensor, *args, _name=read_name, _original=original, **kwargs):
            if depth[0]:
                reads.append(_name)
            return _original(tensor, *args, **kwargs)

        monkeypatch.setattr(torch.Tensor, read_name, read)
    model(_video(), torch.tensor([0.0, 0.4, 1.0])).square().sum().backward()
    assert reads == []
