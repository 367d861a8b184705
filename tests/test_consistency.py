"""Facts said once across core, spatial and temporal: the output-dtype rule of every additive
encoding, one ``_apply`` override, one layout vocabulary."""

from __future__ import annotations

import inspect

import pandas as pd
import pytest
import torch
from posenc.core.encoding import LAYOUTS, Float64Buffers

from posenc import core, spatial, temporal

STAMPS = pd.date_range("2021-03-27", periods=6, freq="7h").as_unit("ns")
NS = torch.tensor(STAMPS.asi8).reshape(2, 3)
FIELDS = temporal.calendar_fields(NS)
TIMES = torch.tensor([[0.0, 1.5, 4.0], [2.0, 3.0, 9.0]], dtype=torch.float64)
COORDS = torch.tensor([[0.0, 0.0], [0.0, 1.0], [1.0, 0.0]], dtype=torch.float64)

# (build, input) for every additive encoding with fixed values: float32 unless given dtype=.
FIXED = {
    core.SinusoidalEncoding: (lambda: core.SinusoidalEncoding(8), TIMES),
    spatial.SinCos2D: (lambda: spatial.SinCos2D(8), COORDS),
    temporal.ContinuousSinusoidal: (lambda: temporal.ContinuousSinusoidal(8, 1.0, 10.0), TIMES),
    temporal.CalendarFeatures: (temporal.CalendarFeatures, FIELDS),
    temporal.FourierSeasonality: (temporal.FourierSeasonality, NS),
    temporal.TimeDelta: (temporal.TimeDelta, TIMES),
    temporal.HolidayFeatures: (lambda: temporal.HolidayFeatures("US"), NS),
    temporal.AgeFeature: (temporal.AgeFeature, NS),
    spatial.SinCos3D: (lambda: spatial.SinCos3D(8),
                       torch.tensor([[0., 0., 0.], [1.5, 0., 1.], [3., 1., 0.]],
                                    dtype=torch.float64)),
}
if hasattr(temporal, "IndexSinusoidal"):  # the study's baseline, moving into the library
    FIXED[temporal.IndexSinusoidal] = (lambda: temporal.IndexSinusoidal(8),
                                       (TIMES, TIMES > 2))
# Learned ones return their parameters' dtype, which follows the module's .to(dtype).
LEARNED = {
    core.LearnedEncoding: (lambda: core.LearnedEncoding(16, 8), torch.arange(3)),
    spatial.Learned2D: (lambda: spatial.Learned2D(2, 8), COORDS),
    spatial.Factorized2D: (lambda: spatial.Factorized2D(2, 8), COORDS),
    temporal.CalendarEmbedding: (lambda: temporal.CalendarEmbedding(8), FIELDS),
    temporal.Time2Vec: (lambda: temporal.Time2Vec(8), TIMES),
}


def test_every_additive_encoding_is_covered():
    public = (getattr(package, name) for package in (core, spatial, temporal)
              for name in package.__all__)
    additive = {obj for obj in public if inspect.isclass(obj)
                and issubclass(obj, core.PositionEncoding)
                and getattr(obj, "kind", None) == "additive"}
    assert additive == set(FIXED) | set(LEARNED)


@pytest.mark.parametrize("cls", list(FIXED), ids=lambda c: c.__name__)
def test_fixed_additive_output_is_float32_unless_given_dtype(cls):
    build, inputs = FIXED[cls]
    module = build()
    args = inputs if isinstance(inputs, tuple) else (inputs,)

    def enc(**kwargs):
        return module(*args, **kwargs)

    # float64 positions buy precise angles, not a float64 output; casting the module does
    # not change it either (there is nothing to cast).
    assert enc().dtype == torch.float32
    module.to(torch.float64)
    assert enc().dtype == torch.float32
    exact = enc(dtype=torch.float64)
    assert exact.dtype == torch.float64
    half = enc(dtype=torch.bfloat16)
    # Rounded once, from the float64 values.
    assert half.dtype == torch.bfloat16 and torch.equal(half, exact.to(torch.bfloat16))
    with pytest.raises(TypeError, match="dtype must be a floating torch.dtype"):
        enc(dtype=torch.int64)


@pytest.mark.parametrize("cls", list(LEARNED), ids=lambda c: c.__name__)
def test_learned_additive_output_follows_the_module_dtype(cls):
    build, inputs = LEARNED[cls]
    enc = build()
    assert enc(inputs).dtype == torch.float32
    assert enc.to(torch.bfloat16)(inputs).dtype == torch.bfloat16


def _posenc_classes():
    for package in (core, spatial, temporal):
        for _, module in inspect.getmembers(package, inspect.ismodule):
            if module.__name__.startswith("posenc."):
                for _, obj in inspect.getmembers(module, inspect.isclass):
                    if obj.__module__.startswith("posenc."):
                        yield obj


def test_one_apply_override_keeps_float64_state():
    overrides = {cls for cls in _posenc_classes() if "_apply" in vars(cls)}
    assert overrides == {Float64Buffers}


def test_one_layout_vocabulary():
    from posenc.core import additive, rope
    from posenc.spatial import additive as spatial_additive
    from posenc.spatial import rope as spatial_rope
    from posenc.temporal import continuous

    for module in (rope, additive, spatial_rope, continuous):
        assert module.LAYOUTS is LAYOUTS
    # 2D sin-cos: the order of the axes, then core's words; no layout named after a library.
    assert spatial_additive.LAYOUTS == ("rows_cols", "cols_rows", "half")
