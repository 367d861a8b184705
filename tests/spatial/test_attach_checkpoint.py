"""Gradient checkpointing, multi-crop steps and patch dropout of attached ViTs.

A checkpointed block recomputes its forward during backward; its positions must be those of
its own forward, even when another forward (a second crop size) ran in between.
"""

from __future__ import annotations

import pytest
import torch
from posenc.spatial import ENCODINGS, RelativeBias2D, RoPE2D, attach, patch_coords
from posenc.spatial.coords import GridPositions
from spatial_models import make_vit

CROPS = ((32, 32), (48, 40))  # DINO-style: a global and a local crop of other sizes, one step


def _tiny(**kwargs):
    return make_vit("vit_reg4", embed_dim=32, num_heads=2, dynamic_img_size=True, **kwargs)


def _multi_crop_grads(model, checkpointing: bool) -> dict[str, torch.Tensor]:
    model.train().set_grad_checkpointing(checkpointing)
    model.zero_grad()
    torch.manual_seed(1)  # the same crops and patch-dropout draws with and without
    loss = sum(model(torch.randn(2, 3, *size)).square().mean() for size in CROPS)
    loss.backward()
    return {k: p.grad.clone() for k, p in model.named_parameters() if p.grad is not None}


def _assert_same_grads(model):
    expected = _multi_crop_grads(model, checkpointing=False)
    got = _multi_crop_grads(model, checkpointing=True)
    assert got.keys() == expected.keys()
    for key, grad in expected.items():
        torch.testing.assert_close(got[key], grad, rtol=1e-5, atol=1e-6, msg=key)


@pytest.mark.parametrize("patch_drop_rate", [0.0, 0.5])
@pytest.mark.parametrize("name", list(ENCODINGS))
def test_multi_crop_checkpointing_gives_the_gradients_of_a_plain_step(name, patch_drop_rate):
    # drop_path: the recompute must also redraw the blocks' own randomness identically.
    _assert_same_grads(attach(_tiny(patch_drop_rate=patch_drop_rate, drop_path_rate=0.1), name))


@pytest.mark.parametrize("encoding", [lambda: RoPE2D(16, 2, "mixed"),
                                      lambda: RelativeBias2D(2, 4)])
def test_one_learnable_module_shared_by_all_blocks_checkpoints(encoding):
    # A shared learnable encoding is computed once per forward, outside the checkpointed
    # blocks; its gradient collects every block's share.
    _assert_same_grads(attach(_tiny(patch_drop_rate=0.5), encoding()))


def test_forward_intermediates_with_checkpointing():
    model = attach(_tiny(), "rope_mixed").train()
    results = []
    for checkpointing in (False, True):
        model.set_grad_checkpointing(checkpointing)
        model.zero_grad()
        torch.manual_seed(1)
        for size in CROPS:
            final, maps = model.forward_intermediates(torch.randn(2, 3, *size))
            (final.sum() + sum(m.square().sum() for m in maps)).backward()
        results.append(model.blocks[0].attn.rotary.freqs.grad.clone())
    torch.testing.assert_close(results[1], results[0], rtol=1e-5, atol=1e-6)


def test_patch_dropout_gives_the_blocks_the_rotation_of_the_kept_patches():
    model = attach(make_vit("vit_reg4", patch_drop_rate=0.5), "rope_axial").train()
    seen = {}
    model.patch_embed.register_forward_hook(lambda m, a, out: seen.update(patches=out))
    model.norm_pre.register_forward_hook(lambda m, a, out: seen.update(kept=out))
    model.blocks[0].register_forward_pre_hook(lambda m, args: seen.update(rope=args[1]))
    model(torch.randn(2, 3, 32, 56))  # 4 x 7 patches, 14 kept
    kept = seen["kept"][:, model.num_prefix_tokens:]
    # Where each kept token was on the grid, found by matching it to the patch tokens.
    index = (kept[:, :, None] == seen["patches"][:, None]).all(-1).float().argmax(-1)
    assert kept.shape[1] == 14
    expected = model.blocks[0].attn.rotary.rotation(
        GridPositions(patch_coords((4, 7))[index], (4, 7), num_prefix_tokens=5))
    assert seen["rope"].cos.shape == (2, 1, 5 + 14, 32)
    torch.testing.assert_close(seen["rope"].cos, expected.cos, rtol=0, atol=0)
    torch.testing.assert_close(seen["rope"].sin, expected.sin, rtol=0, atol=0)
