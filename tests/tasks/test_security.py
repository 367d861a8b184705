"""A checkpoint or config is untrusted input: its ``class_path`` values may only build
``torch.nn.Module`` classes defined by posenc or registered with ``register_module``, never call
a function, build another kind of class, build a third-party class merely because its library
is imported, or import a module (whose top-level code would run) that is not posenc's."""

from __future__ import annotations

import argparse
import pickle
import sys

import lightning
import pytest
import torch
from posenc.tasks import Forecaster, ImageClassifier, register_module
from posenc.tasks.cli import posenc_cli
from posenc.tasks.config import import_class, instantiate
from torch import nn

TINY_FORECASTER = {"dim": 16, "depth": 1, "num_heads": 2}
TINY_VIT = {"img_size": 8, "patch_size": 4, "embed_dim": 16, "depth": 1, "num_heads": 2}


def _save(model, path, **hparams):
    """The checkpoint Lightning writes for ``model``, with ``hparams`` overriding its own."""
    torch.save({"state_dict": model.state_dict(),
                "hyper_parameters": {**dict(model.hparams), **hparams},
                "pytorch-lightning_version": lightning.__version__}, path)
    return path


def _shell(tmp_path):
    marker = tmp_path / "pwned"
    return marker, {"class_path": "os.system", "init_args": {"command": f"touch '{marker}'"}}


def test_forecaster_checkpoint_cannot_run_a_command(tmp_path):
    marker, evil = _shell(tmp_path)
    path = _save(Forecaster(**TINY_FORECASTER), tmp_path / "f.ckpt",
                 encodings=["calendar", evil])
    with pytest.raises(ValueError, match=r"encodings\[1\].*class_path 'os.system'.*not a class"):
        Forecaster.load_from_checkpoint(path, weights_only=True)
    assert not marker.exists()


def test_forecaster_relative_from_a_checkpoint_is_checked(tmp_path):
    marker, evil = _shell(tmp_path)
    path = _save(Forecaster(**TINY_FORECASTER), tmp_path / "f.ckpt", relative=evil)
    with pytest.raises(ValueError, match="relative.*class_path 'os.system'"):
        Forecaster.load_from_checkpoint(path, weights_only=True)
    assert not marker.exists()


def test_image_classifier_checkpoint_cannot_run_a_command(tmp_path):
    marker, evil = _shell(tmp_path)
    path = _save(ImageClassifier(**TINY_VIT), tmp_path / "v.ckpt", encoding=evil)
    with pytest.raises(ValueError, match="encoding.*class_path 'os.system'.*not a class"):
        ImageClassifier.load_from_checkpoint(path, weights_only=True)
    assert not marker.exists()


@pytest.mark.parametrize("class_path, init_args, match", [
    ("builtins.eval", {"source": "1"}, "builtin_function_or_method, not a class"),
    ("subprocess.run", {"args": ["true"]}, "function, not a class"),
    ("subprocess.Popen", {"args": ["true"]}, "Popen is not a torch.nn.Module subclass"),
    ("collections.OrderedDict", {}, "OrderedDict is not a torch.nn.Module subclass"),
    ("builtins.type", {}, "type is not a torch.nn.Module subclass"),
    ("torch.nn.functional.relu", {}, "function, not a class"),
    ("torch.nn", {}, "names a module, not a class"),
    ("posenc.spatial.Nope2D", {}, "module 'posenc.spatial' has no 'Nope2D' class"),
    ("posenc.spatial.__loader__", {}, "not a class"),
])
def test_only_module_classes_are_built(class_path, init_args, match):
    spec = {"class_path": class_path, "init_args": init_args}
    with pytest.raises(ValueError, match=rf"^encoding: class_path '{class_path}'.*{match}"):
        instantiate(spec, {}, "encoding")


def test_a_module_that_is_not_imported_is_not_imported(tmp_path, monkeypatch):
    """Importing runs the module's top-level code: only posenc's own modules are imported."""
    (tmp_path / "evil_module.py").write_text(
        "import pathlib\n"
        f"pathlib.Path({str(tmp_path / 'pwned')!r}).touch()\n"
        "import torch\n"
        "class Thing(torch.nn.Module):\n"
        "    pass\n")
    monkeypatch.syspath_prepend(str(tmp_path))
    monkeypatch.delitem(sys.modules, "evil_module", raising=False)
    with pytest.raises(ValueError, match=r"class_path 'evil_module.Thing': module 'evil_module' "
                                         r"is not imported.*import evil_module"):
        instantiate({"class_path": "evil_module.Thing"}, {}, "encoding")
    assert not (tmp_path / "pwned").exists() and "evil_module" not in sys.modules
    # Once the user imports and registers it, the class is theirs to name.
    import evil_module

    register_module(evil_module.Thing)
    assert type(instantiate({"class_path": "evil_module.Thing"}, {}, "encoding")).__name__ == (
        "Thing")
    monkeypatch.delitem(sys.modules, "evil_module")


def test_posenc_modules_are_imported_on_demand(monkeypatch):
    module = "posenc.tasks.forecasting.metrics"
    monkeypatch.delitem(sys.modules, module)
    cls = import_class(f"{module}.ForecastMetrics", "encoding")
    assert cls.__name__ == "ForecastMetrics" and module in sys.modules


@pytest.mark.parametrize("class_path", ["os..system", " posenc.spatial.RoPE2D", "a.b-c.D",
                                        "posenc.", ".RoPE2D"])
def test_malformed_class_paths(class_path):
    with pytest.raises(ValueError, match="must be a dotted path"):
        instantiate({"class_path": class_path}, {}, "encoding")


def test_unknown_init_args_name_the_class_path():
    spec = {"class_path": "posenc.core.RotaryEncoding", "init_args": {"nope": 1}}
    with pytest.raises(TypeError, match=r"relative: class_path 'posenc.core.RotaryEncoding' "
                                        r"does not take init_args \{'nope': 1\}"):
        instantiate(spec, {}, "relative", {"head_dim": 8})


class UserRelative(nn.Module):
    """A user's own relative encoding: a module of theirs, already imported."""

    def __init__(self, num_heads: int, scale: float = 1.0) -> None:
        super().__init__()
        self.num_heads, self.scale = num_heads, scale

    def forward(self, q_pos, k_pos):
        return self.scale * -(q_pos[..., :, None] - k_pos[..., None, :]).abs()[:, None].expand(
            -1, self.num_heads, -1, -1)


def test_a_registered_user_module_class_builds_and_reloads(tmp_path):
    register_module(UserRelative)
    spec = {"class_path": f"{__name__}.UserRelative", "init_args": {"scale": 0.5}}
    model = Forecaster(relative=spec, **TINY_FORECASTER)
    [block] = model.model.blocks
    assert isinstance(block.attn.bias, UserRelative) and block.attn.bias.num_heads == 2
    path = tmp_path / "user.ckpt"
    _save(model, path)
    again = Forecaster.load_from_checkpoint(path, weights_only=True)
    assert again.model.blocks[0].attn.bias.scale == 0.5


# Constructors of imported third-party modules that read a path or reach the network.
IO_MODULES = {"torchmetrics.functional.image.lpips._LPIPS": {"model_path": "/etc/passwd"},
              "torchmetrics.text.bert.BERTScore": {"model_name_or_path": "evil/repo"}}


@pytest.fixture
def io_modules_must_not_be_built(monkeypatch):
    """The I/O classes of :data:`IO_MODULES`, imported, with constructors that fail the test."""
    import torchmetrics.functional.image.lpips
    import torchmetrics.text.bert

    def built(self, *args, **kwargs):
        pytest.fail(f"{type(self).__name__} was built from a checkpoint")

    for cls in (torchmetrics.functional.image.lpips._LPIPS, torchmetrics.text.bert.BERTScore):
        monkeypatch.setattr(cls, "__init__", built)


@pytest.mark.usefixtures("io_modules_must_not_be_built")
@pytest.mark.parametrize("class_path", IO_MODULES)
@pytest.mark.parametrize("model, argument", [(Forecaster, "relative"),
                                             (Forecaster, "encodings"),
                                             (ImageClassifier, "encoding")])
def test_a_checkpoint_cannot_build_an_imported_third_party_module(tmp_path, model, argument,
                                                                  class_path):
    spec = {"class_path": class_path, "init_args": IO_MODULES[class_path]}
    sizes = TINY_FORECASTER if model is Forecaster else TINY_VIT
    value = ["calendar", spec] if argument == "encodings" else spec
    path = _save(model(**sizes), tmp_path / "m.ckpt", **{argument: value})
    with pytest.raises(ValueError, match=rf"class_path '{class_path}'.*is not defined by "
                                         r"posenc.*posenc\.tasks\.register_module"):
        model.load_from_checkpoint(path, weights_only=True)


def _posenc_test(path, *args):
    """``posenc test --ckpt_path=path`` in-process on a tiny Digits run."""
    from .conftest import CONFIGS, ONE_EPOCH

    return posenc_cli(["test", "--config", str(CONFIGS / "quickstart.yaml"),
                       "--trainer.logger=false", "--data=posenc.tasks.DigitsDataModule",
                       "--data.eval_image_sizes=[8]", "--data.batch_size=8", *ONE_EPOCH,
                       *args, f"--ckpt_path={path}"])


def _refused_by_posenc_test(path, capsys) -> str:
    """Asserts ``posenc test --ckpt_path=path`` exits with a usage error; its stderr."""
    with pytest.raises(SystemExit) as exit_info:
        _posenc_test(path)
    assert exit_info.value.code == 2
    return " ".join(capsys.readouterr().err.split())


@pytest.mark.usefixtures("io_modules_must_not_be_built")
@pytest.mark.parametrize("class_path", IO_MODULES)
def test_ckpt_path_cannot_build_an_imported_third_party_module(tmp_path, capsys, monkeypatch,
                                                               class_path):
    """``posenc test --ckpt_path``: checked before Lightning merges the hyperparameters."""
    monkeypatch.setattr(sys, "argv", ["posenc"])
    monkeypatch.chdir(tmp_path)
    spec = {"class_path": class_path, "init_args": IO_MODULES[class_path]}
    path = _save(ImageClassifier(**TINY_VIT), tmp_path / "m.ckpt", encoding=spec,
                 _class_path="posenc.tasks.vision.ImageClassifier",
                 _instantiator="lightning.pytorch.cli.instantiate_module")
    err = _refused_by_posenc_test(path, capsys)
    assert (f"--ckpt_path='{path}': encoding: class_path '{class_path}'" in err
            and "is not defined by posenc and was not registered" in err
            and "call posenc.tasks.register_module(cls)" in err)


class UserClassifier(ImageClassifier):
    """A user's own LightningModule: imported (this module), not registered."""


def test_ckpt_path_builds_an_imported_model_class_only_if_the_config_names_it(
        tmp_path, capsys, monkeypatch):
    """The command-line config is trusted (the classes it names are registered); the same
    class named only by the checkpoint is refused."""
    monkeypatch.setattr(sys, "argv", ["posenc"])
    monkeypatch.chdir(tmp_path)
    path = _save(ImageClassifier(**TINY_VIT), tmp_path / "m.ckpt",
                 _class_path=f"{__name__}.UserClassifier",
                 _instantiator="lightning.pytorch.cli.instantiate_module")
    err = _refused_by_posenc_test(path, capsys)
    assert (f"--ckpt_path='{path}': _class_path: class_path '{__name__}.UserClassifier'" in err
            and "call posenc.tasks.register_module(cls)" in err)
    cli = _posenc_test(path, f"--model={__name__}.UserClassifier")
    assert type(cli.model) is UserClassifier and "test/acc_8" in cli.trainer.callback_metrics


def test_plot_checkpoint_cannot_name_an_imported_third_party_model(tmp_path,
                                                                   io_modules_must_not_be_built):
    from posenc.tasks import plots

    path = _save(ImageClassifier(**TINY_VIT), tmp_path / "v.ckpt",
                 _class_path="torchmetrics.text.bert.BERTScore",
                 _instantiator="lightning.pytorch.cli.instantiate_module")
    with pytest.raises(ValueError, match=r"_class_path: class_path "
                                         r"'torchmetrics.text.bert.BERTScore'.*not a "
                                         r"LightningModule subclass"):
        plots.load_checkpoint_module(path)


def test_a_registered_class_is_named_by_any_path_that_reaches_it():
    """Registration is of the class object: a re-export finds it too; its subclasses are not
    registered with it."""
    register_module(nn.Identity)
    assert import_class("torch.nn.Identity") is nn.Identity
    assert import_class("torch.nn.modules.linear.Identity") is nn.Identity
    with pytest.raises(ValueError, match="torch.nn.modules.linear.Linear is not defined by "
                                         "posenc"):
        import_class("torch.nn.Linear")


def test_the_classes_posenc_defines_need_no_registration():
    from posenc.spatial import RoPE2D

    assert import_class("posenc.spatial.RoPE2D") is RoPE2D


@pytest.mark.parametrize("module", ["posenc.evil", "posenc.core"])
def test_a_class_whose_module_string_claims_posenc_is_not_posenc_s(module, monkeypatch):
    # __module__ is a string any code can set; posenc's classes are the ones its modules hold
    class Spoof(nn.Identity):
        pass

    Spoof.__module__ = module
    monkeypatch.setattr(sys.modules[__name__], "Spoof", Spoof, raising=False)
    with pytest.raises(ValueError, match=r"is not defined by posenc and was not registered"):
        import_class(f"{__name__}.Spoof")


@pytest.mark.parametrize("cls, match", [(len, "a class"), (dict, "torch.nn.Module subclass"),
                                        ("torch.nn.Identity", "a class")])
def test_register_module_takes_module_classes_only(cls, match):
    with pytest.raises(TypeError, match=rf"register_module\(cls\).*{match}"):
        register_module(cls)


def test_register_module_returns_the_class_so_it_decorates(monkeypatch):
    @register_module
    class Mine(nn.Identity):
        pass

    monkeypatch.setattr(sys.modules[__name__], "Mine", Mine, raising=False)
    assert import_class(f"{__name__}.Mine") is Mine


def test_weights_only_refuses_pickled_objects(tmp_path):
    """What torch refuses to unpickle never reaches ``instantiate`` (the first gate)."""
    path = tmp_path / "obj.ckpt"
    torch.save({"state_dict": {}, "hyper_parameters": {"encoding": argparse.Namespace(a=1)}},
               path)
    with pytest.raises(pickle.UnpicklingError, match="Weights only load failed"):
        ImageClassifier.load_from_checkpoint(path, weights_only=True)


# -- posenc plot --checkpoint ------------------------------------------------------------------
def test_plot_checkpoint_loading_refuses_pickled_objects(tmp_path):
    from posenc.tasks import plots

    path = _save(ImageClassifier(encoding="learned", **TINY_VIT), tmp_path / "obj.ckpt",
                 extra=argparse.Namespace(a=1))
    with pytest.raises(ValueError, match=r"holds objects other than tensors and plain values"
                                         r".*Unsupported global: GLOBAL argparse.Namespace"):
        plots.load_checkpoint_module(path)


def test_plot_checkpoint_loading_checks_class_paths(tmp_path):
    from posenc.tasks import plots

    marker, evil = _shell(tmp_path)
    path = _save(ImageClassifier(**TINY_VIT), tmp_path / "v.ckpt", encoding=evil,
                 _class_path="posenc.tasks.vision.ImageClassifier",
                 _instantiator="lightning.pytorch.cli.instantiate_module")
    with pytest.raises(ValueError, match="encoding: class_path 'os.system'"):
        plots.load_checkpoint_module(path)
    assert not marker.exists()


@pytest.mark.parametrize("content, match", [
    (b"", "is not a readable torch checkpoint"),
    (b"hello", "is not a readable torch checkpoint"),
])
def test_plot_checkpoint_that_is_not_a_checkpoint(tmp_path, content, match):
    from posenc.tasks import plots

    path = tmp_path / "x.ckpt"
    path.write_bytes(content)
    with pytest.raises(ValueError, match=f"checkpoint='{path}' {match}"):
        plots.load_checkpoint_module(path)
    torch.save([1, 2], path)
    with pytest.raises(ValueError, match="is not a Lightning checkpoint"):
        plots.load_checkpoint_module(path)


def test_plot_checkpoint_of_another_model_without_its_class_is_refused_naming_it(tmp_path):
    from posenc.tasks import plots

    path = _save(Forecaster(dim=16, depth=1, num_heads=2), tmp_path / "f.ckpt")
    with pytest.raises(ValueError, match=rf"checkpoint='{path}' does not hold ImageClassifier "
                                         r"weights \(Error\(s\) in loading state_dict"):
        plots.load_checkpoint_module(path)
    path = _save(Forecaster(dim=16, depth=1, num_heads=2), tmp_path / "g.ckpt",
                 _instantiator="lightning.pytorch.cli.instantiate_module")
    with pytest.raises(ValueError, match=r"has an _instantiator but names no model class"):
        plots.load_checkpoint_module(path)


@pytest.mark.parametrize("hparams", [[1], "x"])
def test_checkpoint_hyper_parameters_that_are_not_a_dict_are_refused(tmp_path, hparams):
    from posenc.tasks import plots

    path = tmp_path / "h.ckpt"
    torch.save({"state_dict": {}, "hyper_parameters": hparams}, path)
    with pytest.raises(ValueError, match=rf"checkpoint='{path}' is not a Lightning checkpoint: "
                                         rf"its hyper_parameters are a {type(hparams).__name__}"):
        plots.load_checkpoint_module(path)


def test_an_empty_checkpoint_path_is_named_as_empty():
    from posenc.tasks.config import read_checkpoint

    with pytest.raises(ValueError, match=r"^--checkpoint='' is an empty path"):
        read_checkpoint("", "--checkpoint")


def test_plot_checkpoint_loading_still_loads_plain_checkpoints(tmp_path):
    from posenc.tasks import plots

    from posenc import spatial

    model = ImageClassifier(encoding="learned", **TINY_VIT)
    path = _save(model, tmp_path / "ok.ckpt")
    loaded = plots.load_checkpoint_module(path)
    saved = next(m for m in model.modules() if isinstance(m, spatial.Learned2D))
    found = next(m for m in loaded.modules() if isinstance(m, spatial.Learned2D))
    torch.testing.assert_close(found.weight, saved.weight, rtol=0, atol=0)


# -- weight sources (pretrained, pretrained_cfg_overlay, checkpoint_path) ----------------------
def _weights_file(tmp_path):
    """A timm weights file of TINY_VIT's architecture, and a guard recording torch.load's files."""
    from posenc.spatial import timm_state_dict

    path = tmp_path / "weights.pth"
    torch.save(timm_state_dict(ImageClassifier(**TINY_VIT).model), path)
    return path


@pytest.fixture
def loads(monkeypatch):
    """The files torch.load opens, as strings; timm's weights reader fails the test."""
    import timm.models

    opened = []
    real = torch.load

    def load(f, *args, **kwargs):
        opened.append(str(getattr(f, "path", f)))  # Lightning opens through fsspec
        return real(f, *args, **kwargs)

    def read_weights(*args, **kwargs):
        pytest.fail("a weights file named by a checkpoint was read")

    monkeypatch.setattr(torch, "load", load)
    monkeypatch.setattr(timm.models, "load_state_dict", read_weights)
    return opened


def test_weight_sources_are_not_saved_in_the_hyperparameters(tmp_path):
    model = ImageClassifier(encoding="rope_mixed", checkpoint_path=str(_weights_file(tmp_path)),
                            **TINY_VIT)
    assert {"pretrained", "pretrained_cfg_overlay", "checkpoint_path"}.isdisjoint(model.hparams)
    path = _save(model, tmp_path / "m.ckpt")
    again = ImageClassifier.load_from_checkpoint(path, weights_only=True)
    torch.testing.assert_close(again.state_dict(), model.state_dict(), rtol=0, atol=0)


@pytest.mark.parametrize("hparams", [{"checkpoint_path": "WEIGHTS"}, {"pretrained": True},
                                     {"pretrained": True,
                                      "pretrained_cfg_overlay": {"file": "WEIGHTS"}}])
def test_a_checkpoint_naming_a_weight_source_is_refused_unread(tmp_path, loads, hparams):
    weights = str(_weights_file(tmp_path))
    hparams = {k: {"file": weights} if isinstance(v, dict) else weights if v == "WEIGHTS" else v
               for k, v in hparams.items()}
    path = _save(ImageClassifier(**TINY_VIT), tmp_path / "m.ckpt", **hparams)
    with pytest.raises(ValueError, match=rf"ImageClassifier.load_from_checkpoint: the "
                                         rf"checkpoint's hyperparameters set "
                                         rf"\[{', '.join(map(repr, sorted(hparams)))}\], which "
                                         rf"load weights"):
        ImageClassifier.load_from_checkpoint(path, weights_only=True)
    assert weights not in loads and str(path) in loads


def test_a_weight_source_of_a_checkpoint_set_to_none_or_false_is_harmless(tmp_path):
    path = _save(ImageClassifier(**TINY_VIT), tmp_path / "m.ckpt", pretrained=False,
                 checkpoint_path=None, pretrained_cfg_overlay=None)
    assert isinstance(ImageClassifier.load_from_checkpoint(path, weights_only=True),
                      ImageClassifier)


def test_ckpt_path_naming_a_weight_source_is_refused_unread(tmp_path, capsys, monkeypatch,
                                                            loads):
    monkeypatch.setattr(sys, "argv", ["posenc"])
    monkeypatch.chdir(tmp_path)
    weights = str(_weights_file(tmp_path))
    path = _save(ImageClassifier(**TINY_VIT), tmp_path / "m.ckpt", checkpoint_path=weights,
                 _class_path="posenc.tasks.vision.ImageClassifier",
                 _instantiator="lightning.pytorch.cli.instantiate_module")
    err = _refused_by_posenc_test(path, capsys)
    assert (f"--ckpt_path='{path}': the checkpoint's hyperparameters set ['checkpoint_path']"
            in err and "a checkpoint is untrusted" in err)
    assert weights not in loads


def test_plot_checkpoint_naming_a_weight_source_is_refused(tmp_path, loads):
    from posenc.tasks import plots

    weights = str(_weights_file(tmp_path))
    path = _save(ImageClassifier(**TINY_VIT), tmp_path / "v.ckpt", checkpoint_path=weights,
                 _class_path="posenc.tasks.vision.ImageClassifier",
                 _instantiator="lightning.pytorch.cli.instantiate_module")
    with pytest.raises(ValueError, match=r"hyperparameters set \['checkpoint_path'\]"):
        plots.load_checkpoint_module(path)
    assert weights not in loads
