"""Small timm ViTs for tests/spatial (a uniquely named module: tests/core has a conftest too)."""

from __future__ import annotations

import timm
import torch

PATCH = 8
TRAIN_SIZE = (32, 32)  # 4 x 4 patches
OTHER_SIZES = ((48, 48), (32, 56))  # 6 x 6, and a non-square 4 x 7

# The three model families the issue names, shrunk: 2 blocks, 8-pixel patches, 32-pixel images.
MODELS = {
    "vit": ("vit_tiny_patch16_224", {}),
    "deit": ("deit_tiny_patch16_224", {}),
    "vit_reg4": ("vit_tiny_patch16_224", {"reg_tokens": 4}),
}


def make_vit(family: str = "vit", **kwargs) -> torch.nn.Module:
    """A small timm ViT of ``family`` (see MODELS); ``kwargs`` override create_model args."""
    name, extra = MODELS[family]
    args = dict(pretrained=False, img_size=TRAIN_SIZE[0], patch_size=PATCH, depth=2,
                num_classes=5, **extra)
    args.update(kwargs)
    return timm.create_model(name, **args)
