from __future__ import annotations

import pytest
from posenc.core import NoPE
from posenc.spatial import (
    ENCODINGS,
    ALiBi2D,
    ContinuousBias2D,
    Factorized2D,
    Learned2D,
    LieRE,
    RelativeBias2D,
    RoPE2D,
    SinCos2D,
    encoding_from_name,
)
from posenc.spatial.factory import encoding_kind

NAMES = ["none", "learned", "sincos2d", "factorized", "rope_axial", "rope_mixed", "relbias",
         "cpb", "alibi2d", "rope_dinov3", "rope_pixel", "liere", "comrope"]


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
    ("rope_dinov3", {"head_dim": 8, "num_heads": 2}, RoPE2D, "rotary"),
    ("rope_pixel", {"head_dim": 8, "num_heads": 2}, RoPE2D, "rotary"),
    ("liere", {"head_dim": 8, "num_heads": 2}, LieRE, "rotary"),
    ("comrope", {"head_dim": 8, "num_heads": 2}, LieRE, "rotary"),
])
def test_encoding_from_name(name, kwargs, cls, kind):
    enc = encoding_from_name(name, **kwargs)
    assert type(enc) is cls
    assert encoding_kind(name) == kind == encoding_kind(enc)
    if name in ("rope_axial", "rope_mixed"):
        assert enc.variant == name.split("_")[1]
    elif name in ("rope_dinov3", "rope_pixel"):
        assert enc.variant == "axial"


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


# -- the registry: each name's facts said once ----------------------------------------------
def test_a_name_kind_is_its_class_kind():
    for name, spec in ENCODINGS.items():
        assert spec.name == name
        assert encoding_kind(name) == spec.kind == spec.cls.kind


def test_registry_is_read_only():
    import dataclasses

    with pytest.raises(TypeError):
        ENCODINGS["mine"] = ENCODINGS["none"]
    with pytest.raises(dataclasses.FrozenInstanceError):
        ENCODINGS["rope_axial"].cls = RoPE2D
    with pytest.raises(TypeError):
        ENCODINGS["rope_axial"].fixed["variant"] = "mixed"


def test_per_block_follows_the_one_rule():
    # Learnable rotary/bias encodings: one module per block; parameter-free ones are shared.
    assert {n for n, s in ENCODINGS.items() if s.per_block} == {"rope_mixed", "relbias", "cpb",
                                                                 "liere", "comrope"}


def test_a_name_refuses_to_override_what_it_fixes():
    with pytest.raises(TypeError, match=r"'rope_axial' fixes variant='axial', got "
                                        r"variant='mixed'"):
        encoding_from_name("rope_axial", head_dim=8, num_heads=2, variant="mixed")


def test_spec_infers_arguments_from_a_vit():
    from posenc.spatial.factory import size_arguments, vit_size_arguments
    from spatial_models import make_vit

    sizes = vit_size_arguments(make_vit())  # vit_tiny: 192 wide, 3 heads of 64; 4 x 4 patches
    assert sizes == size_arguments(dim=192, num_heads=3, head_dim=64, grid_size=(4, 4))
    expected = {
        "none": {}, "learned": {"grid_size": (4, 4), "dim": 192}, "sincos2d": {"dim": 192},
        "factorized": {"max_grid_size": (4, 4), "dim": 192},
        "rope_axial": {"head_dim": 64, "num_heads": 3},
        "rope_mixed": {"head_dim": 64, "num_heads": 3},
        "relbias": {"num_heads": 3, "grid_size": (4, 4)},
        "cpb": {"num_heads": 3, "ref_grid_size": (4, 4)}, "alibi2d": {"num_heads": 3},
        "rope_dinov3": {"head_dim": 64, "num_heads": 3},
        "rope_pixel": {"head_dim": 64, "num_heads": 3},
        "liere": {"head_dim": 64, "num_heads": 3}, "comrope": {"head_dim": 64, "num_heads": 3},
    }
    assert {name: spec.arguments(sizes) for name, spec in ENCODINGS.items()} == expected


def test_kind_of_classes_and_nope_goes_through_core():
    from posenc import core

    assert encoding_kind(NoPE) == encoding_kind(NoPE()) == "none"
    assert encoding_kind(RoPE2D) == "rotary" and encoding_kind(core.ALiBi(2)) == "bias"


def test_kind_is_declared_not_guessed_from_methods():
    import torch

    class Rotating(torch.nn.Module):  # has rotation() but declares no kind
        def rotation(self, positions):
            return positions

    with pytest.raises(TypeError, match=r"^Rotating does not declare how it enters"):
        encoding_kind(Rotating())


def test_specs_hash_and_compare_as_values():
    assert hash(ENCODINGS["rope_axial"]) == hash(ENCODINGS["rope_axial"])
    assert ENCODINGS["rope_axial"] != ENCODINGS["rope_mixed"]
