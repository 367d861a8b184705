"""One protocol for every encoding class: its kind (and, for time features, what it reads)."""

from __future__ import annotations

import inspect

import pytest
import torch
from posenc.core import PositionEncoding, encoding_kind
from posenc.core.encoding import KINDS

from posenc import core, spatial, temporal

EXPECTED_KINDS = {
    core.SinusoidalEncoding: "additive", core.LearnedEncoding: "additive",
    core.RotaryEncoding: "rotary", core.ALiBi: "bias", core.T5RelativeBias: "bias",
    core.ClippedRelativeBias: "bias", core.NoPE: "none", core.XPos: "rotary",
    core.FIRE: "bias", core.Kerple: "bias",
    spatial.SinCos2D: "additive", spatial.Learned2D: "additive",
    spatial.Factorized2D: "additive", spatial.RoPE2D: "rotary",
    spatial.RelativeBias2D: "bias", spatial.ContinuousBias2D: "bias", spatial.ALiBi2D: "bias",
    spatial.LieRE: "rotary", spatial.SinCos3D: "additive", spatial.RoPE3D: "rotary",
    spatial.MRoPE: "rotary",
    temporal.CalendarFeatures: "additive", temporal.CalendarEmbedding: "additive",
    temporal.FourierSeasonality: "additive", temporal.ContinuousSinusoidal: "additive",
    temporal.Time2Vec: "additive", temporal.TimeDelta: "additive",
    temporal.IndexSinusoidal: "additive", temporal.HolidayFeatures: "additive",
    temporal.AgeFeature: "additive",
}
EXPECTED_READS = {
    temporal.CalendarFeatures: "fields", temporal.CalendarEmbedding: "fields",
    temporal.FourierSeasonality: "timestamps", temporal.ContinuousSinusoidal: "elapsed",
    temporal.Time2Vec: "elapsed", temporal.TimeDelta: "deltas",
    temporal.IndexSinusoidal: "deltas", temporal.HolidayFeatures: "timestamps",
    temporal.AgeFeature: "series_start",
}


def _public_encoding_classes():
    for package in (core, spatial, temporal):
        for name in package.__all__:
            obj = getattr(package, name)
            if inspect.isclass(obj) and issubclass(obj, PositionEncoding) \
                    and obj is not PositionEncoding and name != "Float64Buffers":
                yield obj


def test_every_public_encoding_class_is_listed_here():
    assert set(_public_encoding_classes()) == set(EXPECTED_KINDS)


@pytest.mark.parametrize("cls", list(EXPECTED_KINDS), ids=lambda c: c.__name__)
def test_encoding_kind_reads_the_class_attribute(cls):
    assert encoding_kind(cls) == EXPECTED_KINDS[cls] and cls.kind in KINDS


@pytest.mark.parametrize("cls", list(EXPECTED_READS), ids=lambda c: c.__name__)
def test_time_features_declare_what_they_read(cls):
    assert cls.reads == EXPECTED_READS[cls]


def test_encoding_kind_of_instances_and_none():
    assert encoding_kind(core.ALiBi(4)) == "bias"
    assert encoding_kind(temporal.CalendarEmbedding(8)) == "additive"
    assert encoding_kind(None) == "none"


def test_a_module_without_a_kind_is_refused_naming_its_class():
    with pytest.raises(TypeError, match=r"^Linear does not declare how it enters a transformer"):
        encoding_kind(torch.nn.Linear(2, 2))
