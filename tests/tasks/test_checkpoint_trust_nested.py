"""A checkpoint's hyperparameters are untrusted at every depth: a class_path slot builds only
the kind it holds (an encoding slot: posenc's encodings and registered classes, never a
LightningModule nor a class that loads weights), and a weight source (``pretrained``,
``checkpoint_path``, ``pretrained_cfg_overlay``) set anywhere in them is refused before anything
is built or any file but the checkpoint is opened: through ``load_from_checkpoint``,
``posenc test``/``posenc export --ckpt_path`` and ``posenc plot``."""

from __future__ import annotations

import json
import os
import re
import socket
import subprocess
import sys

import lightning
import pytest
import torch
from posenc.tasks import Forecaster, ImageClassifier, register_module
from posenc.tasks.cli import main, posenc_cli
from posenc.tasks.config import instantiate
from torch import nn

from .conftest import CONFIGS, ONE_EPOCH

TINY_FORECASTER = {"dim": 16, "depth": 1, "num_heads": 2}
TINY_VIT = {"img_size": 8, "patch_size": 4, "embed_dim": 16, "depth": 1, "num_heads": 2}
CLI_MODEL = {"_class_path": "posenc.tasks.vision.ImageClassifier",
             "_instantiator": "lightning.pytorch.cli.instantiate_module"}
# Aliases of the same class: the rule is about the class, not how it is spelled.
CLASSIFIER_PATHS = ["posenc.tasks.ImageClassifier", "posenc.tasks.vision.ImageClassifier",
                    "posenc.tasks.vision.classifier.ImageClassifier"]


def _save(model, path, **hparams):
    """The checkpoint Lightning writes for ``model``, with ``hparams`` overriding its own."""
    torch.save({"state_dict": model.state_dict(),
                "hyper_parameters": {**dict(model.hparams), **hparams},
                "pytorch-lightning_version": lightning.__version__}, path)
    return path


def _nested_classifier(class_path="posenc.tasks.ImageClassifier", **init_args):
    return {"class_path": class_path, "init_args": {**TINY_VIT, **init_args}}


@pytest.fixture
def weights(tmp_path):
    """A timm weights file that an ImageClassifier(checkpoint_path=...) would read."""
    from posenc.spatial import timm_state_dict

    path = tmp_path / "weights.pth"
    torch.save(timm_state_dict(ImageClassifier(**TINY_VIT).model), path)
    return str(path)


@pytest.fixture
def guard(monkeypatch):
    """Records the files torch.load opens and the models built; a network connection or timm's
    weight reader fails the test (nothing here may reach them)."""
    import timm.models

    seen = {"loads": [], "built": []}
    real_load = torch.load

    def load(f, *args, **kwargs):
        seen["loads"].append(str(getattr(f, "path", f)))  # Lightning opens through fsspec
        return real_load(f, *args, **kwargs)

    def refuse(*args, **kwargs):
        pytest.fail(f"reached the network or a weights file: {args!r}")

    monkeypatch.setattr(torch, "load", load)
    monkeypatch.setattr(timm.models, "load_state_dict", refuse)
    monkeypatch.setattr(socket.socket, "connect", refuse)
    monkeypatch.setattr(socket, "getaddrinfo", refuse)
    real_init = lightning.pytorch.LightningModule.__init__

    def init(self, *args, **kwargs):  # every posenc model calls it first
        seen["built"].append(type(self).__name__)
        real_init(self, *args, **kwargs)

    monkeypatch.setattr(lightning.pytorch.LightningModule, "__init__", init)
    return seen


def _weight_source(kind, weights):
    return {"checkpoint_path": {"checkpoint_path": weights},
            "pretrained": {"pretrained": True},
            "overlay": {"pretrained": True, "pretrained_cfg_overlay": {"file": weights}}}[kind]


# -- Forecaster.load_from_checkpoint -------------------------------------------------------------
@pytest.mark.parametrize("kind", ["checkpoint_path", "pretrained", "overlay"])
@pytest.mark.parametrize("slot", ["encodings", "relative"])
def test_forecaster_checkpoint_nesting_a_weight_source_is_refused_unbuilt(tmp_path, weights,
                                                                          guard, slot, kind):
    spec = _nested_classifier(**_weight_source(kind, weights))
    path = _save(Forecaster(**TINY_FORECASTER), tmp_path / "f.ckpt",
                 **{slot: ["calendar", spec] if slot == "encodings" else spec})
    guard["built"].clear()
    where = f"{slot}[1].init_args" if slot == "encodings" else f"{slot}.init_args"
    named = sorted(f"{where}.{key}" for key in _weight_source(kind, weights))
    with pytest.raises(ValueError, match=rf"^Forecaster.load_from_checkpoint: the checkpoint's "
                                         rf"hyperparameters set {re.escape(str(named))}, "
                                         r"which load weights"):
        Forecaster.load_from_checkpoint(path, weights_only=True)
    assert guard["built"] == [] and weights not in guard["loads"]


@pytest.mark.parametrize("class_path", CLASSIFIER_PATHS)
@pytest.mark.parametrize("slot", ["encodings", "relative"])
def test_forecaster_checkpoint_cannot_build_a_model_in_an_encoding_slot(tmp_path, guard, slot,
                                                                        class_path):
    spec = _nested_classifier(class_path)
    path = _save(Forecaster(**TINY_FORECASTER), tmp_path / "f.ckpt",
                 **{slot: [spec] if slot == "encodings" else spec})
    guard["built"].clear()
    argument = re.escape("encodings[0]" if slot == "encodings" else "relative")
    with pytest.raises(ValueError, match=rf"^Forecaster.load_from_checkpoint: {argument}: "
                                         rf"class_path '{re.escape(class_path)}': "
                                         rf"posenc\.tasks\.vision\.classifier\.ImageClassifier "
                                         rf"is a LightningModule, not an encoding"):
        Forecaster.load_from_checkpoint(path, weights_only=True)
    assert guard["built"] == []


def test_an_image_classifier_checkpoint_cannot_nest_a_classifier(tmp_path, weights, guard):
    spec = _nested_classifier(checkpoint_path=weights)
    path = _save(ImageClassifier(**TINY_VIT), tmp_path / "v.ckpt", encoding=spec)
    guard["built"].clear()
    with pytest.raises(ValueError, match=r"hyperparameters set \['encoding\.init_args\."
                                         r"checkpoint_path'\]"):
        ImageClassifier.load_from_checkpoint(path, weights_only=True)
    assert guard["built"] == [] and weights not in guard["loads"]


@pytest.mark.parametrize("nesting", [
    lambda source: {"init_args": {"x": [source]}},  # in a list inside init_args
    lambda source: {"init_args": {"x": {"y": source}}},  # a dict inside a dict
    lambda source: {"init_args": [source]},  # init_args not a dict
])
def test_a_weight_source_at_any_depth_is_refused(tmp_path, weights, guard, nesting):
    spec = {"class_path": "posenc.temporal.Time2Vec", **nesting({"checkpoint_path": weights})}
    path = _save(Forecaster(**TINY_FORECASTER), tmp_path / "f.ckpt", encodings=[spec])
    guard["built"].clear()
    with pytest.raises(ValueError, match=r"hyperparameters set \['encodings\[0\]\.init_args.*"
                                         r"checkpoint_path'\]"):
        Forecaster.load_from_checkpoint(path, weights_only=True)
    assert guard["built"] == []


def test_a_weight_source_under_lightning_s_legacy_hparams_key_is_refused(tmp_path, weights,
                                                                         guard):
    """Lightning also builds a model from a checkpoint's ``hparams``/``module_arguments`` (its
    old keys); they are the checkpoint's hyperparameters too."""
    from posenc.tasks import plots

    model = ImageClassifier(**TINY_VIT)
    path = tmp_path / "old.ckpt"
    torch.save({"state_dict": model.state_dict(),
                "hparams": {"checkpoint_path": weights},
                "hyper_parameters": {**dict(model.hparams), **CLI_MODEL},
                "pytorch-lightning_version": lightning.__version__}, path)
    guard["built"].clear()
    with pytest.raises(ValueError, match=r"hyperparameters set \['checkpoint_path'\]"):
        plots.load_checkpoint_module(path)
    assert guard["built"] == [] and weights not in guard["loads"]


# -- the slot rule, whoever gives the config ------------------------------------------------------
class UserModel(ImageClassifier):
    """A user's LightningModule, registered (the CLI registers the classes its config names)."""


class UserLoader(nn.Module):
    """A user's registered module whose constructor reads weights."""

    def __init__(self, dim: int, checkpoint_path: str | None = None) -> None:
        super().__init__()
        self.dim = dim


@pytest.mark.parametrize("cls, match", [
    (UserModel, "is a LightningModule, not an encoding"),
    (UserLoader, r"takes \['checkpoint_path'\], which load weights"),
])
def test_an_encoding_slot_refuses_registered_models_and_weight_loaders(cls, match):
    register_module(cls)
    spec = {"class_path": f"{__name__}.{cls.__name__}"}
    with pytest.raises(ValueError, match=rf"^encoding: class_path '{__name__}\.{cls.__name__}':"
                                         rf" .*{match}"):
        instantiate(spec, {}, "encoding", {"dim": 8})


@pytest.mark.parametrize("class_path", ["posenc.core.MultiheadAttention",
                                        "posenc.tasks.forecasting.metrics.ForecastMetrics",
                                        "posenc.spatial.vit.GridVisionTransformer"])
def test_an_encoding_slot_refuses_posenc_s_modules_that_are_not_encodings(class_path):
    with pytest.raises(ValueError, match=rf"^relative: class_path '{class_path}': .* is not an "
                                         r"encoding \(a posenc\.core\.PositionEncoding\)"):
        instantiate({"class_path": class_path}, {}, "relative")


@pytest.mark.parametrize("slot, class_path, kind", [
    ("relative", "posenc.temporal.Time2Vec", "additive"),
    ("relative", "posenc.spatial.SinCos2D", "additive"),
    ("encodings", "posenc.core.RotaryEncoding", "rotary"),
    ("encodings", "posenc.core.ALiBi", "bias"),
    ("relative", "posenc.core.PositionEncoding", None),  # a base, of no kind
])
def test_a_forecaster_slot_builds_only_the_kind_of_encoding_it_holds(slot, class_path, kind):
    spec = {"class_path": class_path}
    argument = re.escape("encodings[0]" if slot == "encodings" else "relative")
    with pytest.raises(ValueError, match=rf"^{argument}: class_path '{class_path}': .* is of "
                                         rf"kind {kind!r}: the {slot} slot holds"):
        Forecaster(**{slot: [spec] if slot == "encodings" else spec}, **TINY_FORECASTER)


def test_a_config_in_python_cannot_nest_a_model_either():
    with pytest.raises(ValueError, match=r"encodings\[0\]: .*is a LightningModule, not an "
                                         r"encoding"):
        Forecaster(encodings=[_nested_classifier()], **TINY_FORECASTER)


def test_encoding_slots_still_build_posenc_s_and_registered_encodings(tmp_path):
    """The rule keeps what the slots are for: every encoding a checkpoint names reloads."""
    from posenc.core import T5RelativeBias
    from posenc.temporal import Time2Vec

    register_module(UserRelative)
    for relative, cls in (({"class_path": "posenc.core.T5RelativeBias"}, T5RelativeBias),
                          ({"class_path": f"{__name__}.UserRelative"}, UserRelative)):
        model = Forecaster(encodings=[{"class_path": "posenc.temporal.Time2Vec"}],
                           relative=relative, **TINY_FORECASTER)
        again = Forecaster.load_from_checkpoint(_save(model, tmp_path / "ok.ckpt"),
                                                weights_only=True)
        assert isinstance(again.model.blocks[0].attn.bias, cls)
        assert any(isinstance(m, Time2Vec) for m in again.modules())
        torch.testing.assert_close(again.state_dict(), model.state_dict(), rtol=0, atol=0)


class UserRelative(nn.Module):
    """A user's relative encoding (registered in the test that uses it)."""

    def __init__(self, num_heads: int) -> None:
        super().__init__()
        self.num_heads = num_heads

    def forward(self, q_pos, k_pos):
        return -(q_pos[..., :, None] - k_pos[..., None, :]).abs()[:, None].expand(
            -1, self.num_heads, -1, -1)


# -- posenc test / export --ckpt_path, posenc plot --checkpoint ------------------------------------
def _cli_args(path):
    return ["--config", str(CONFIGS / "quickstart.yaml"), "--trainer.logger=false",
            "--data=posenc.tasks.DigitsDataModule", "--data.eval_image_sizes=[8]",
            "--data.batch_size=8", *ONE_EPOCH, f"--ckpt_path={path}"]


@pytest.mark.parametrize("subcommand", ["test", "export"])
def test_ckpt_path_nesting_a_classifier_with_weights_is_refused_unread(tmp_path, capsys,
                                                                       monkeypatch, weights,
                                                                       guard, subcommand):
    monkeypatch.setattr(sys, "argv", ["posenc"])
    monkeypatch.chdir(tmp_path)
    path = _save(ImageClassifier(**TINY_VIT), tmp_path / "m.ckpt", **CLI_MODEL,
                 encoding=_nested_classifier(checkpoint_path=weights))
    extra = [f"--out={tmp_path / 'm.onnx'}"] if subcommand == "export" else []
    with pytest.raises(SystemExit) as exit_info:
        posenc_cli([subcommand, *_cli_args(path), *extra])
    assert exit_info.value.code == 2
    err = " ".join(capsys.readouterr().err.split())
    assert (f"--ckpt_path='{path}': the checkpoint's hyperparameters set "
            f"['encoding.init_args.checkpoint_path']" in err)
    assert weights not in guard["loads"] and not (tmp_path / "m.onnx").exists()


def test_ckpt_path_nesting_a_classifier_without_weights_is_refused(tmp_path, capsys,
                                                                   monkeypatch):
    monkeypatch.setattr(sys, "argv", ["posenc"])
    monkeypatch.chdir(tmp_path)
    path = _save(ImageClassifier(**TINY_VIT), tmp_path / "m.ckpt", **CLI_MODEL,
                 encoding=_nested_classifier())
    with pytest.raises(SystemExit):
        main(["test", *_cli_args(path)])
    err = " ".join(capsys.readouterr().err.split())
    assert (f"--ckpt_path='{path}': encoding: class_path 'posenc.tasks.ImageClassifier': "
            f"posenc.tasks.vision.classifier.ImageClassifier is a LightningModule, not an "
            f"encoding" in err)


@pytest.mark.parametrize("slot", ["relative", "encodings"])
def test_plot_checkpoint_nesting_a_classifier_in_a_forecaster_is_refused(tmp_path, weights,
                                                                         guard, slot):
    from posenc.tasks import plots

    spec = _nested_classifier(checkpoint_path=weights)
    path = _save(Forecaster(**TINY_FORECASTER), tmp_path / "f.ckpt",
                 _class_path="posenc.tasks.Forecaster",
                 _instantiator="lightning.pytorch.cli.instantiate_module",
                 **{slot: [spec] if slot == "encodings" else spec})
    guard["built"].clear()
    with pytest.raises(ValueError, match=rf"^checkpoint='{path}': the checkpoint's "
                                         r"hyperparameters set \[.*checkpoint_path'\]"):
        plots.load_checkpoint_module(path)
    assert guard["built"] == [] and weights not in guard["loads"]


# -- sizes: a forged size is refused before it is allocated -----------------------------------
B, T = 10**9, 10**12


def _rel(class_path, **init_args):
    return {"relative": {"class_path": class_path, "init_args": init_args}}


def _enc(class_path, **init_args):
    return {"encodings": [{"class_path": class_path, "init_args": init_args}]}


# (model, hyperparameters forged into its checkpoint, the argument the refusal names)
FORGED = [
    ("Forecaster", {"dim": B, "num_heads": 1}, "dim=1000000000"),
    ("Forecaster", {"dim": T, "num_heads": 1}, "dim=1000000000000"),
    ("Forecaster", {"depth": B, "relative": None, "encodings": []}, "depth=1000000000"),
    ("Forecaster", {"depth": T}, "depth=1000000000000"),
    ("Forecaster", {"num_heads": B, "dim": B}, "num_heads=1000000000"),
    ("Forecaster", {"num_targets": T}, "num_targets=1000000000000"),
    ("Forecaster", {"static_cardinalities": [B]}, "static_cardinalities[0]=1000000000"),
    ("Forecaster", {"patch_size": B}, "patch_size=1000000000"),
    ("Forecaster", {"origin_tokens": B}, "origin_tokens=1000000000"),
    ("Forecaster", {"mlp_ratio": 1e12}, "mlp_ratio=1000000000000.0"),
    ("Forecaster", _rel("posenc.core.ALiBi", num_heads=B), "relative.init_args.num_heads="),
    ("Forecaster", _rel("posenc.core.T5RelativeBias", num_buckets=T, max_distance=T),
     "relative.init_args.num_buckets=1000000000000"),
    ("Forecaster", _rel("posenc.core.ClippedRelativeBias", max_distance=B),
     "relative.init_args.max_distance=1000000000"),
    ("Forecaster", _rel("posenc.core.FIRE", mlp_width=T), "relative.init_args.mlp_width="),
    ("Forecaster", _rel("posenc.core.RotaryEncoding", head_dim=B),
     "relative.init_args.head_dim=1000000000"),
    ("Forecaster", _enc("posenc.temporal.ContinuousSinusoidal", dim=B, min_period=1.0,
                        max_period=10.0), "encodings[0].init_args.dim=1000000000"),
    ("Forecaster", _enc("posenc.temporal.CalendarEmbedding", dim=T),
     "encodings[0].init_args.dim=1000000000000"),
    ("ImageClassifier", {"embed_dim": B, "num_heads": 1}, "embed_dim=1000000000"),
    ("ImageClassifier", {"depth": B}, "depth=1000000000"),
    ("ImageClassifier", {"num_classes": T}, "num_classes=1000000000000"),
    ("ImageClassifier", {"in_chans": B}, "in_chans=1000000000"),
    ("ImageClassifier", {"img_size": 4 * B}, "img_size=4000000000"),
    ("ImageClassifier", {"model_kwargs": {"reg_tokens": B}}, "model_kwargs.reg_tokens="),
    ("ImageClassifier", {"encoding": {"class_path": "posenc.spatial.Learned2D",
                                      "init_args": {"grid_size": B}}},
     "encoding.init_args.grid_size=1000000000"),
    ("ImageClassifier", {"encoding": {"class_path": "posenc.spatial.RelativeBias2D",
                                      "init_args": {"grid_size": B}}},
     "encoding.init_args.grid_size=1000000000"),
    ("ImageClassifier", {"encoding": {"class_path": "posenc.spatial.ContinuousBias2D",
                                      "init_args": {"hidden": B}}},
     "encoding.init_args.hidden=1000000000"),
]

# Loads each forged checkpoint in a child process whose address space is capped at 2 GiB above
# what it holds after its imports: a size that reached an allocation would fail (or, before
# the bound existed, kill or hang) the child, not the test run.
CHILD = r"""
import json, resource, sys, warnings
warnings.filterwarnings("ignore")
import lightning, torch
from posenc.tasks import Forecaster, ImageClassifier
models = {"Forecaster": (Forecaster, {"dim": 16, "depth": 1, "num_heads": 2}),
          "ImageClassifier": (ImageClassifier, {"img_size": 8, "patch_size": 4,
                                                "embed_dim": 16, "depth": 1, "num_heads": 2})}
folder, cases = sys.argv[1], json.loads(sys.argv[2])
saved = {}
for name, (cls, sizes) in models.items():
    model = cls(**sizes)
    saved[name] = (model.state_dict(), dict(model.hparams))
size = int(open("/proc/self/statm").read().split()[0]) * resource.getpagesize()
resource.setrlimit(resource.RLIMIT_AS, (size + (2 << 30), resource.RLIM_INFINITY))
for i, (name, forged) in enumerate(cases):
    state, hparams = saved[name]
    path = f"{folder}/{i}.ckpt"
    torch.save({"state_dict": state, "hyper_parameters": {**hparams, **forged},
                "pytorch-lightning_version": lightning.__version__}, path)
    try:
        models[name][0].load_from_checkpoint(path, weights_only=True)
        result = ["loaded", ""]
    except BaseException as err:
        result = [type(err).__name__, " ".join(str(err).split())]
    print(json.dumps(result), flush=True)
"""


@pytest.mark.slow  # one child process loading 25 checkpoints: about 20 s
def test_forged_sizes_are_refused_before_allocating_and_the_process_survives(tmp_path):
    cases = [[model, forged] for model, forged, _ in FORGED]
    proc = subprocess.run([sys.executable, "-c", CHILD, str(tmp_path), json.dumps(cases)],
                          capture_output=True, text=True, timeout=600,
                          env={**os.environ, "OMP_NUM_THREADS": "1"})
    assert proc.returncode == 0, proc.stderr[-3000:]
    results = [json.loads(line) for line in proc.stdout.splitlines()]
    assert len(results) == len(FORGED)
    for (model, forged, named), (kind, message) in zip(FORGED, results, strict=True):
        assert kind == "ValueError", (model, forged, kind, message[:500])
        assert message.startswith(f"{model}.load_from_checkpoint: "), message[:500]
        assert named in message, (named, message[:800])


def test_ckpt_path_with_a_forged_size_is_refused_before_allocating(tmp_path, monkeypatch):
    monkeypatch.setattr(sys, "argv", ["posenc"])
    monkeypatch.chdir(tmp_path)
    path = _save(ImageClassifier(**TINY_VIT), tmp_path / "m.ckpt", **CLI_MODEL, num_classes=T)
    # jsonargparse, which builds the model, lists the ValueError among its own
    with pytest.raises(ValueError, match=rf"--ckpt_path='{re.escape(str(path))}': the "
                                         rf"checkpoint's hyperparameters ask for more memory.*"
                                         rf"largest numbers: num_classes={T}"):
        posenc_cli(["test", *_cli_args(path)])


def test_plot_checkpoint_with_a_forged_size_is_refused_before_allocating(tmp_path):
    from posenc.tasks import plots

    path = _save(Forecaster(**TINY_FORECASTER), tmp_path / "f.ckpt",
                 _class_path="posenc.tasks.Forecaster",
                 _instantiator="lightning.pytorch.cli.instantiate_module", num_targets=T)
    with pytest.raises(ValueError, match=rf"checkpoint='{re.escape(str(path))}': the "
                                         rf"checkpoint's hyperparameters ask for more memory.*"
                                         rf"largest numbers: num_targets={T}"):
        plots.load_checkpoint_module(path)


@pytest.fixture(scope="module")
def fitted_forecaster():
    """A Forecaster holding the state fitted on a small hourly series (no training)."""
    import numpy as np
    import pandas as pd
    from posenc.tasks import TimeSeriesDataModule

    stamps = pd.date_range("2021-01-01", periods=200, freq="1h")
    frame = pd.DataFrame({"ts": stamps, "load": np.sin(np.arange(200))})
    dm = TimeSeriesDataModule(frame, timestamp_column="ts", target_columns="load",
                              context_length=24, horizon=3)
    dm.setup("fit")
    model = Forecaster(**TINY_FORECASTER)
    model.fitted = dm.fitted
    return model


@pytest.mark.parametrize("forged, match", [
    ({"horizon": B}, rf"context_length \+ horizon = {B + 24} rows per window"),
    ({"context_length": T}, rf"context_length \+ horizon = {T + 3} rows per window"),
    # 5000 days of hourly steps: the forecast() of its horizon would make 120000 rows a series
    ({"horizon": "5000D", "context_length": "1D"},
     r"horizon=5000 days 00:00:00 in steps of 0 days 01:00:00 = 120000 rows"),
    ({"step_ns": -1}, r"step_ns must be >= 0, got -1"),
])
def test_a_checkpoint_s_fitted_lengths_are_checked_as_the_data_module_checks_them(
        tmp_path, fitted_forecaster, forged, match):
    """The fitted state's lengths size forecast() (its horizon is the default number of future
    steps): a forged one is refused on loading, before any forecast allocates it."""
    model = fitted_forecaster
    path = tmp_path / "f.ckpt"
    torch.save({"state_dict": model.state_dict(), "hyper_parameters": dict(model.hparams),
                "fitted": {**model.fitted.to_dict(), **forged},
                "pytorch-lightning_version": lightning.__version__}, path)
    with pytest.raises(ValueError, match=rf"^the checkpoint's fitted state: {match}"):
        Forecaster.load_from_checkpoint(path, weights_only=True)


def test_a_checkpoint_s_fitted_state_within_the_limits_still_loads(tmp_path, fitted_forecaster):
    model = fitted_forecaster
    path = tmp_path / "f.ckpt"
    torch.save({"state_dict": model.state_dict(), "hyper_parameters": dict(model.hparams),
                "fitted": model.fitted.to_dict(),
                "pytorch-lightning_version": lightning.__version__}, path)
    assert Forecaster.load_from_checkpoint(path, weights_only=True).fitted == model.fitted


def test_the_allocation_bound_counts_the_storage_a_checkpoint_holds_not_the_sizes_it_claims():
    """A saved view or a meta tensor claims sizes it holds no bytes for: they cannot raise the
    bound (the bytes held once per storage; every tensor counts one)."""
    from posenc.tasks.config import (
        ALLOCATION_FACTOR,
        ALLOCATION_FLOOR,
        checkpoint_allocation_bound,
    )

    held = torch.zeros(10)  # 40 bytes
    ckpt = {"state_dict": {"held": held, "view": held[:5],
                           "expanded": torch.zeros(1).expand(T),  # 4 bytes held
                           "meta": torch.empty(T, device="meta")}}  # none held
    assert checkpoint_allocation_bound(ckpt) == (ALLOCATION_FACTOR * (40 + 4) + ALLOCATION_FLOOR[0],
                                                 ALLOCATION_FACTOR * 4 + ALLOCATION_FLOOR[1])
