from __future__ import annotations

import pytest
from posenc.core import NoPE
from posenc.spatial import (
    ENCODINGS,
    ALiBi2D,
    ContinuousBias2D,
    Factorized2D,
    Learned2D,
    RelativeBias2D,
    RoPE2D,
    SinCos2D,
    encoding_from_name,
    encoding_kind,
)

NAMES = ["none", "learned", "sincos2d", "factorized", "rope_axial", "rope_mixed", "relbias",
         "cpb", "alibi2d"]


def test_names_are_the_contract():
    assert list(ENCODINGS) == NAMES


@pytest.mark.parametrize("name, kwargs, cls, kind", [
    ("none", {}, NoPE, "none"),
    ("learned", {"grid_size": 4, "dim": 8}, Learned2D, "additive"),
    ("sincos2d", {"dim": 8}, SinCos2D, "additive"),
    ("factorized", {"max_grid_size": 4, "dim": 8}, Factorized2D, "additive"),
    ("rope_axial", {"head_dim": 8, "num_heads": 2}, RoPE2D, "rotary"),
    ("rope_mixed", {"head_dim": 8, "num_heads": 2}, RoPE2D, "rotary"),
    ("relbias", {"num_heads": 2, "grid_size": 3}, RelativeBias2D, "bias"),
    ("cpb", {"num_heads": 2, "hidden": 16}, ContinuousBias2D, "bias"),
    ("alibi2d", {"num_heads": 2}, ALiBi2D, "bias"),
])
def test_encoding_from_name(name, kwargs, cls, kind):
    enc = encoding_from_name(name, **kwargs)
    assert type(enc) is cls
    assert encoding_kind(name) == kind == encoding_kind(enc)
    if name.startswith("rope"):
        assert enc.variant == name.split("_")[1]


def test_unknown_name_lists_valid_ones():
    with pytest.raises(ValueError, match="rope_axial") as info:
        encoding_from_name("rope2d")
    assert "'rope2d'" in str(info.value)
    for name in NAMES:
        assert name in str(info.value)


def test_kind_of_unknown_module_is_an_error():
    import torch

    assert encoding_kind(None) == "none"
    with pytest.raises(TypeError, match="kind"):
        encoding_kind(torch.nn.Linear(2, 2))
