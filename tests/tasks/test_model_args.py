"""Every numeric (and boolean) constructor argument of the task models is checked up front:
a bad value raises naming the argument instead of building a broken model (``mlp_ratio=0``
made zero-width MLPs; NaN dropout trained on NaN), and nothing from a config or checkpoint
makes timm download or read files."""

from __future__ import annotations

import math

import pytest
from posenc.tasks import Forecaster, ImageClassifier

TINY_FORECASTER = {"dim": 16, "depth": 1, "num_heads": 2}
TINY_VIT = {"img_size": 8, "patch_size": 4, "embed_dim": 16, "depth": 1, "num_heads": 2}

RATIO = [
    (0, ValueError, "mlp_ratio must be a positive number"),
    (-1.0, ValueError, "mlp_ratio must be a positive number"),
    (math.nan, ValueError, "mlp_ratio must be a positive number"),
    (math.inf, ValueError, "mlp_ratio must be a positive number"),
    ("2", TypeError, "mlp_ratio must be a number"),
    (0.01, ValueError, r"mlp_ratio=0.01 gives a hidden width of 0 \(dim=16\)"),
]
FRACTION = [
    (-0.1, ValueError, r"must be a finite number >= 0 and < 1, got -0.1"),
    (1.0, ValueError, r"must be a finite number >= 0 and < 1, got 1.0"),
    (math.nan, ValueError, r"must be a finite number >= 0 and < 1, got nan"),
    (True, TypeError, "must be a number, got bool"),
    ("0.1", TypeError, "must be a number, got str"),
]


@pytest.mark.parametrize("value, error, match", RATIO)
def test_forecaster_mlp_ratio(value, error, match):
    with pytest.raises(error, match=match):
        Forecaster(mlp_ratio=value, **TINY_FORECASTER)


@pytest.mark.parametrize("value, error, match", FRACTION)
def test_forecaster_dropout(value, error, match):
    with pytest.raises(error, match="dropout " + match):
        Forecaster(dropout=value, **TINY_FORECASTER)


@pytest.mark.parametrize("kwargs, error, match", [
    ({"instance_norm": "no"}, TypeError, r"instance_norm must be a bool.*got str"),
    ({"encodings": "calendar"}, TypeError, "encodings must be a list of encodings, got str"),
    ({"loss": "quantile", "quantiles": []}, ValueError, r"quantiles must be increasing levels "
                                                        r"in \(0, 1\), got \[\]"),
    ({"loss": "quantile", "quantiles": [0.1, math.nan]}, ValueError, "increasing levels"),
    ({"loss": "quantile", "quantiles": ["0.5"]}, TypeError, "quantiles must be numbers"),
    ({"time_unit": "NaT"}, ValueError, "time_unit must be a positive duration"),
    ({"num_targets": True}, TypeError, "num_targets must be an int"),
])
def test_forecaster_other_arguments(kwargs, error, match):
    with pytest.raises(error, match=match):
        Forecaster(**{**TINY_FORECASTER, **kwargs})


def test_forecaster_edges_that_are_legal():
    model = Forecaster(mlp_ratio=0.0625, dropout=0.0, **TINY_FORECASTER)  # hidden width 1
    assert model.model.blocks[0].mlp[0].out_features == 1
    assert Forecaster(dropout=0.99, **TINY_FORECASTER).hparams.dropout == 0.99


@pytest.mark.parametrize("value, error, match", RATIO[:5])
def test_image_classifier_mlp_ratio(value, error, match):
    with pytest.raises(error, match=match):
        ImageClassifier(mlp_ratio=value, **TINY_VIT)


@pytest.mark.parametrize("name", ["drop_path_rate", "label_smoothing"])
@pytest.mark.parametrize("value, error, match", FRACTION)
def test_image_classifier_fractions(name, value, error, match):
    with pytest.raises(error, match=f"{name} " + match):
        ImageClassifier(**{name: value}, **TINY_VIT)


@pytest.mark.parametrize("kwargs, error, match", [
    ({"class_token": "yes"}, TypeError, r"class_token must be a bool.*got str"),
    ({"global_pool": "mean"}, ValueError, "global_pool must be one of"),
    ({"class_token": False, "global_pool": "token"}, ValueError,
     "global_pool='token' needs class_token=True"),
    ({"model_kwargs": {"pretrained": True}}, ValueError,
     r"model_kwargs may not set \['pretrained'\]"),
    ({"model_kwargs": {"pretrained_cfg_overlay": {"file": "/etc/passwd"}}}, ValueError,
     "may not set"),
    ({"model_kwargs": {"checkpoint_path": "x.pth"}}, ValueError, "may not set"),
    ({"model_kwargs": {"img_size": 32}}, ValueError, r"\['img_size'\].*ImageClassifier's own"),
    ({"model_kwargs": {"dynamic_img_size": False}}, ValueError, "may not set"),
    ({"model_kwargs": ["reg_tokens"]}, TypeError, "model_kwargs must be a dict"),
    ({"model_name": "hf-hub:someone/vit"}, ValueError,
     "model_name='hf-hub:someone/vit'.*architecture name"),
])
def test_image_classifier_other_arguments(kwargs, error, match):
    with pytest.raises(error, match=match):
        ImageClassifier(**{**TINY_VIT, **kwargs})


def test_image_classifier_legal_model_kwargs_and_pool():
    model = ImageClassifier(class_token=False, global_pool="avg", model_kwargs={"reg_tokens": 2},
                            **TINY_VIT)
    assert model.model.num_prefix_tokens == 2
