"""Every spatial constructor rejects a bad argument by name: TypeError for the wrong type,
ValueError for a bad value of the right type."""

from __future__ import annotations

import math

import pytest
import torch
from posenc.spatial import (
    ALiBi2D,
    ContinuousBias2D,
    Factorized2D,
    Learned2D,
    RelativeBias2D,
    RoPE2D,
    SinCos2D,
    encoding_from_name,
)
from posenc.spatial.rope import init_mixed_freqs

WRONG_TYPE = [
    ("RoPE2D base str", lambda: RoPE2D(8, 2, base="x"), "base"),
    ("RoPE2D base bool", lambda: RoPE2D(8, 2, base=True), "base"),
    ("RoPE2D base tensor", lambda: RoPE2D(8, 2, base=torch.tensor(100.0)), "base"),
    ("RoPE2D head_dim float", lambda: RoPE2D(8.0, 2), "head_dim"),
    ("RoPE2D num_heads float", lambda: RoPE2D(8, 2.0), "num_heads"),
    ("RoPE2D num_heads str", lambda: RoPE2D(8, "2"), "num_heads"),
    ("init_mixed_freqs base str", lambda: init_mixed_freqs(8, 2, "x"), "base"),
    ("SinCos2D dim float", lambda: SinCos2D(8.0), "dim"),
    ("SinCos2D dim bool", lambda: SinCos2D(True), "dim"),
    ("SinCos2D base str", lambda: SinCos2D(8, "x"), "base"),
    ("SinCos2D base bool", lambda: SinCos2D(8, True), "base"),
    ("Learned2D grid_size float", lambda: Learned2D(3.0, 8), "grid_size"),
    ("Learned2D dim float", lambda: Learned2D(3, 8.0), "dim"),
    ("Learned2D antialias str", lambda: Learned2D(3, 8, antialias="no"), "antialias"),
    ("RelativeBias2D grid_size str", lambda: RelativeBias2D(2, "3"), "grid_size"),
    ("RelativeBias2D num_heads float", lambda: RelativeBias2D(2.0, 3), "num_heads"),
    ("ContinuousBias2D hidden float", lambda: ContinuousBias2D(2, 2.5), "hidden"),
    ("ContinuousBias2D ref_grid_size float",
     lambda: ContinuousBias2D(2, ref_grid_size=3.0), "ref_grid_size"),
    ("ALiBi2D num_heads None", lambda: ALiBi2D(None), "num_heads"),
    ("ALiBi2D num_heads bool", lambda: ALiBi2D(True), "num_heads"),
    ("Factorized2D max_grid_size str", lambda: Factorized2D("x", 8), "max_grid_size"),
    ("Factorized2D dim float", lambda: Factorized2D(3, 2.0), "dim"),
    ("encoding_from_name name int", lambda: encoding_from_name(3), "name"),
]

BAD_VALUE = [
    ("RoPE2D base inf", lambda: RoPE2D(8, 2, base=math.inf), "base"),
    ("RoPE2D base nan", lambda: RoPE2D(8, 2, base=math.nan), "base"),
    ("RoPE2D base 0", lambda: RoPE2D(8, 2, base=0), "base"),
    ("RoPE2D base negative", lambda: RoPE2D(8, 2, base=-2.0), "base"),
    ("RoPE2D base 1", lambda: RoPE2D(8, 2, base=1), "base"),
    ("RoPE2D head_dim odd", lambda: RoPE2D(7, 2), "head_dim"),
    ("RoPE2D head_dim not /4", lambda: RoPE2D(6, 2), "head_dim"),
    ("RoPE2D num_heads 0", lambda: RoPE2D(8, 0), "num_heads"),
    ("RoPE2D variant", lambda: RoPE2D(8, 2, "diagonal"), "variant"),
    ("RoPE2D normalize", lambda: RoPE2D(8, 2, normalize="pixel"), "normalize"),
    ("RoPE2D layout", lambda: RoPE2D(8, 2, layout="concat"), "layout"),
    ("init_mixed_freqs base < 1", lambda: init_mixed_freqs(8, 2, 0.5), "base"),
    ("init_mixed_freqs base inf", lambda: init_mixed_freqs(8, 2, math.inf), "base"),
    ("SinCos2D base inf", lambda: SinCos2D(8, math.inf), "base"),
    ("SinCos2D base nan", lambda: SinCos2D(8, math.nan), "base"),
    ("SinCos2D base 1", lambda: SinCos2D(8, 1.0), "base"),
    ("SinCos2D dim not /4", lambda: SinCos2D(6), "dim"),
    ("SinCos2D dim 0", lambda: SinCos2D(0), "dim"),
    ("SinCos2D layout", lambda: SinCos2D(8, layout="mae"), "layout"),
    ("SinCos2D normalize", lambda: SinCos2D(8, normalize="pixel"), "normalize"),
    ("Learned2D grid_size 0", lambda: Learned2D(0, 8), "grid_size"),
    ("Learned2D dim 0", lambda: Learned2D(3, 0), "dim"),
    ("Learned2D interpolation", lambda: Learned2D(3, 8, interpolation="area"), "interpolation"),
    ("RelativeBias2D grid_size 0", lambda: RelativeBias2D(2, (3, 0)), "grid_size"),
    ("RelativeBias2D num_heads 0", lambda: RelativeBias2D(0, 3), "num_heads"),
    ("ContinuousBias2D hidden 0", lambda: ContinuousBias2D(2, 0), "hidden"),
    ("ContinuousBias2D ref_grid_size 1", lambda: ContinuousBias2D(2, ref_grid_size=(3, 1)),
     "ref_grid_size"),
    ("ALiBi2D num_heads 0", lambda: ALiBi2D(0), "num_heads"),
    ("Factorized2D max_grid_size 0", lambda: Factorized2D((0, 3), 8), "max_grid_size"),
    ("Factorized2D dim 0", lambda: Factorized2D(3, 0), "dim"),
    ("encoding_from_name unknown", lambda: encoding_from_name("bogus"), "bogus"),
]


@pytest.mark.parametrize(("case", "build", "name"), WRONG_TYPE, ids=[c[0] for c in WRONG_TYPE])
def test_wrong_type_raises_type_error_naming_the_argument(case, build, name):
    with pytest.raises(TypeError, match=name):
        build()


@pytest.mark.parametrize(("case", "build", "name"), BAD_VALUE, ids=[c[0] for c in BAD_VALUE])
def test_bad_value_raises_value_error_naming_the_argument(case, build, name):
    with pytest.raises(ValueError, match=name):
        build()


def test_base_error_says_what_was_expected():
    with pytest.raises(ValueError, match=r"base must be a finite number > 1, got inf"):
        RoPE2D(8, 2, base=math.inf)
    with pytest.raises(ValueError, match=r"base must be a finite number > 1, got 1.0"):
        SinCos2D(8, 1.0)
    with pytest.raises(TypeError, match=r"antialias must be a bool \(True or False\), got str"):
        Learned2D(3, 8, antialias="no")
    with pytest.raises(TypeError, match=r"base must be a number, got str \('x'\)"):
        init_mixed_freqs(8, 2, "x")


def test_integral_numbers_are_accepted_as_base():
    assert RoPE2D(8, 2, base=100).base == 100.0
    assert SinCos2D(8, base=10000).base == 10000.0
