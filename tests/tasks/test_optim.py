"""Weight decay: matrices are decayed, position parameters (timm's no_weight_decay) are not."""

from __future__ import annotations

import pytest
import torch
from posenc.core import ClippedRelativeBias, LearnedEncoding, T5RelativeBias
from posenc.core.encoding import no_weight_decay_names
from posenc.tasks import Forecaster, ImageClassifier
from posenc.tasks.config import param_groups
from timm.layers import RotaryEmbeddingMixed
from torch import nn

SPATIAL = ["learned", "sincos2d", "factorized", "rope_axial", "rope_mixed", "relbias", "cpb",
           "alibi2d", "none"]
# Where each encoding's parameters live in an ImageClassifier (depth 2).
POSITION_PARAMS = {
    "learned": {"model.patch_embed.pos_encoding.weight"},
    "factorized": {"model.patch_embed.pos_encoding.rows.weight",
                   "model.patch_embed.pos_encoding.cols.weight"},
    "rope_mixed": {f"model.blocks.{i}.attn.rotary.freqs" for i in range(2)},
    "relbias": {f"model.blocks.{i}.attn.bias.table" for i in range(2)},
    "cpb": {f"model.blocks.{i}.attn.bias.mlp.{p}" for i in range(2)
            for p in ("0.weight", "0.bias", "2.weight")},
}


def decay_of(model: nn.Module, weight_decay: float = 0.05) -> dict[str, float]:
    """Parameter name -> the weight decay its group gets."""
    by_id = {id(p): group["weight_decay"] for group in param_groups(model, weight_decay)
             for p in group["params"]}
    return {name: by_id[id(p)] for name, p in model.named_parameters()}


@pytest.mark.parametrize("encoding", SPATIAL)
def test_vit_position_parameters_get_no_weight_decay(encoding):
    model = ImageClassifier(encoding=encoding, img_size=16, patch_size=4, in_chans=1,
                            num_classes=3, embed_dim=16, depth=2, num_heads=2)
    decay = decay_of(model)
    expected_free = POSITION_PARAMS.get(encoding, set()) | {"model.cls_token"}
    assert expected_free <= set(decay)
    assert {n for n in expected_free if decay[n] != 0.0} == set()
    # Content matrices are still decayed, 1D parameters (biases, norms) are not.
    assert decay["model.blocks.0.attn.qkv.weight"] == 0.05
    assert decay["model.blocks.1.mlp.fc2.weight"] == 0.05
    assert decay["model.blocks.0.norm1.weight"] == 0.0
    decayed = {n for n, wd in decay.items() if wd}
    assert decayed.isdisjoint(POSITION_PARAMS.get(encoding, set()))


def test_forecaster_learned_time_features_get_no_weight_decay():
    model = Forecaster(dim=16, depth=1, num_heads=2,
                       encodings=["calendar_embedding", "time2vec"], relative="rope")
    decay = decay_of(model)
    free = {n for n in decay if ".time_features.encodings." in n}
    assert free and all(decay[n] == 0.0 for n in free)
    assert decay["model.value_embed.weight"] == 0.05
    assert decay["model.time_proj.weight"] == 0.05


def test_core_tables_declare_every_parameter():
    for module in (LearnedEncoding(8, 4), T5RelativeBias(2), ClippedRelativeBias(2, 4)):
        assert module.no_weight_decay() == {n for n, _ in module.named_parameters()}


def test_no_weight_decay_names_prefixes_submodules_and_reads_timm_layers():
    model = nn.ModuleDict({
        "rope": RotaryEmbeddingMixed(32, depth=1, num_heads=2),  # timm: {"freqs"}
        "table": LearnedEncoding(8, 4),
        "proj": nn.Linear(4, 4),
    })
    assert no_weight_decay_names(model) == {"rope.freqs", "table.weight"}


def test_no_weight_decay_names_ignores_names_a_module_does_not_own():
    class Declares(nn.Module):
        def __init__(self):
            super().__init__()
            self.pos = nn.Parameter(torch.zeros(2, 2))

        def no_weight_decay(self):
            return {"pos", "dist_token"}  # timm's ViT lists dist_token on every model

    assert no_weight_decay_names(nn.Sequential(Declares())) == {"0.pos"}
