"""build_vit places every spatial encoding as attach does: a name and the class path it stands
for give the same modules, shared or one per block by the same rule."""

from __future__ import annotations

import pytest
import torch
from posenc.spatial import ENCODINGS
from posenc.spatial.factory import one_module_per_block
from posenc.tasks import register_module
from posenc.tasks.vision.classifier import build_vit

SIZES = dict(num_classes=3, in_chans=1, img_size=8, patch_size=4, embed_dim=16, depth=2,
             num_heads=2, mlp_ratio=2.0, class_token=True, global_pool="token",
             drop_path_rate=0.0)


def _position_modules(model) -> list:
    """The additive encoding, or each block's rotary/bias module (None where it has none)."""
    if model.patch_embed.pos_encoding is not None:
        return [model.patch_embed.pos_encoding]
    return [getattr(block.attn, "rotary", None) or getattr(block.attn, "bias", None)
            for block in model.blocks]


def _build(encoding):
    torch.manual_seed(0)
    return build_vit("vit_tiny_patch16_224", encoding, **SIZES)


@pytest.mark.parametrize("name", list(ENCODINGS))
def test_a_name_and_its_class_path_build_the_same_model(name):
    spec = ENCODINGS[name]
    by_name = _build(name)
    by_class = _build({"class_path": f"{spec.cls.__module__}.{spec.cls.__name__}",
                       "init_args": dict(spec.fixed)})
    named, classed = _position_modules(by_name), _position_modules(by_class)
    assert [type(m) for m in named] == [type(m) for m in classed]
    # Shared or one per block, the same way on both paths, and as the registry says.
    distinct = len({id(m) for m in named})
    assert distinct == len({id(m) for m in classed})
    assert distinct == (SIZES["depth"] if spec.per_block else 1)
    assert spec.per_block == any(one_module_per_block(m) for m in named if m is not None)
    named_state, classed_state = by_name.state_dict(), by_class.state_dict()
    assert {k: v.shape for k, v in named_state.items()} \
        == {k: v.shape for k, v in classed_state.items()}
    if name != "learned":  # "learned" by name starts from timm's pos_embed (folded into cls)
        for key, value in named_state.items():
            torch.testing.assert_close(classed_state[key], value, rtol=0, atol=0, msg=key)


def test_a_class_path_without_a_kind_is_refused_naming_it():
    register_module(torch.nn.Identity)  # a class path builds only posenc's or registered ones
    with pytest.raises(TypeError, match=r"^Identity does not declare how it enters"):
        _build({"class_path": "torch.nn.Identity"})


def test_plots_offer_the_registry_additive_names():
    from posenc.tasks.plots.spatial import GRID_ENCODINGS

    assert set(GRID_ENCODINGS) == {"learned", "sincos2d", "factorized"}
    assert all(ENCODINGS[name].kind == "additive" for name in GRID_ENCODINGS)
