"""A checkpoint or config is untrusted input: its ``class_path`` values may only build
``torch.nn.Module`` classes, never call a function, build another kind of class, or import a
module (whose top-level code would run) that is neither posenc nor already imported."""

from __future__ import annotations

import argparse
import pickle
import sys

import lightning
import pytest
import torch
from posenc.tasks import Forecaster, ImageClassifier
from posenc.tasks.specs import import_class, instantiate
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
    # Once the user imports it, the class is theirs to name.
    import evil_module  # noqa: F401

    assert type(instantiate({"class_path": "evil_module.Thing"}, {}, "encoding")).__name__ == (
        "Thing")
    monkeypatch.delitem(sys.modules, "evil_module")


def test_posenc_modules_are_imported_on_demand(monkeypatch):
    monkeypatch.delitem(sys.modules, "posenc.tasks.losses")
    cls = import_class("posenc.tasks.losses.MeanAbsoluteScaledError", "encoding")
    assert cls.__name__ == "MeanAbsoluteScaledError" and "posenc.tasks.losses" in sys.modules


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


def test_a_user_module_class_still_builds_and_reloads(tmp_path):
    spec = {"class_path": f"{__name__}.UserRelative", "init_args": {"scale": 0.5}}
    model = Forecaster(relative=spec, **TINY_FORECASTER)
    [block] = model.model.blocks
    assert isinstance(block.attn.bias, UserRelative) and block.attn.bias.num_heads == 2
    path = tmp_path / "user.ckpt"
    _save(model, path)
    again = Forecaster.load_from_checkpoint(path, weights_only=True)
    assert again.model.blocks[0].attn.bias.scale == 0.5


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


def test_plot_checkpoint_loading_still_loads_plain_checkpoints(tmp_path):
    from posenc import spatial
    from posenc.tasks import plots

    model = ImageClassifier(encoding="learned", **TINY_VIT)
    path = _save(model, tmp_path / "ok.ckpt")
    loaded = plots.load_checkpoint_module(path)
    saved = next(m for m in model.modules() if isinstance(m, spatial.Learned2D))
    found = next(m for m in loaded.modules() if isinstance(m, spatial.Learned2D))
    torch.testing.assert_close(found.weight, saved.weight, rtol=0, atol=0)
