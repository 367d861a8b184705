"""The ``posenc`` command as users run it: every config builds, each config family fits for
one epoch on tiny data in a subprocess, checkpoints reload, fit resumes from a checkpoint."""

from __future__ import annotations

import re
import sys
from types import SimpleNamespace

import numpy as np
import pandas as pd
import pytest
import torch
import yaml
from lightning.pytorch import Trainer
from lightning.pytorch.callbacks import ModelCheckpoint
from posenc.spatial import RoPE2D, SinCos2D, timm_state_dict
from posenc.tasks import DigitsDataModule, Forecaster, ImageClassifier, VideoClassifier
from posenc.tasks.cli import _saved_checkpoints, main, posenc_cli

from .conftest import CONFIGS, ONE_EPOCH, TINY_FORECASTER, TINY_VIT, run_cli

# The Lightning configs (others, such as the study configs, belong to other subcommands).
ALL_CONFIGS = sorted(p for p in CONFIGS.glob("*.yaml")
                     if "class_path" in (yaml.safe_load(p.read_text()).get("model") or {}))
DIGITS = ["--data=posenc.tasks.DigitsDataModule", "--data.eval_image_sizes=[8, 12, 16]",
          "--data.batch_size=32"]


@pytest.fixture(autouse=True)
def _argv(monkeypatch):
    """In-process CLI calls read only the args they are given, not pytest's."""
    monkeypatch.setattr(sys, "argv", ["posenc"])


def _checkpoints(root):
    return sorted(root.rglob("*.ckpt"))


def test_the_required_configs_exist():
    names = {p.stem for p in ALL_CONFIGS}
    assert {"quickstart", "vit_mnist", "forecast_seattle", "forecast_seattle_irregular"} <= names


# configs/vit_mnist.yaml's header: one config, the encoding (and the log folder) overridden.
VIT_MNIST_RELBIAS = ["--config", str(CONFIGS / "vit_mnist.yaml"),
                     "--model.init_args.encoding=relbias",
                     "--trainer.logger.init_args.name=vit_mnist_relbias"]


@pytest.mark.parametrize("encoding", ["learned", "sincos2d", "rope_axial", "rope_mixed",
                                      "relbias"])
def test_vit_mnist_runs_each_encoding_by_one_override(encoding, tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    override = [] if encoding == "learned" else [f"--model.init_args.encoding={encoding}"]
    cli = posenc_cli(["--config", str(CONFIGS / "vit_mnist.yaml"), *override,
                      f"--trainer.logger.init_args.name=vit_mnist_{encoding}"], run=False)
    assert cli.model.hparams.encoding == encoding
    assert cli.trainer.logger.name == f"vit_mnist_{encoding}"


@pytest.mark.parametrize("config", ALL_CONFIGS, ids=lambda p: p.stem)
def test_every_config_builds_its_model_data_and_trainer(config, tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    if config.stem == "forecast_csv":  # its header's first step: export the example table
        from posenc.tasks.datasets import nycweather_frame

        nycweather_frame().to_csv(tmp_path / "weather.csv", index=False)
    if config.stem == "finetune_mnist":  # its header's first step: a pretrained timm file
        args = yaml.safe_load(config.read_text())["model"]["init_args"]
        sizes = {k: args[k] for k in ("img_size", "patch_size", "embed_dim", "depth",
                                      "num_heads", "mlp_ratio")}
        torch.save(timm_state_dict(ImageClassifier(**sizes).model), tmp_path / args[
            "checkpoint_path"])
    cli = posenc_cli(["--config", str(config), "--trainer.logger=false"], run=False)
    expected = {"ImageClassifier": ImageClassifier, "Forecaster": Forecaster,
                "VideoClassifier": VideoClassifier}
    text = yaml.safe_load(config.read_text())
    cls = expected[text["model"]["class_path"].rsplit(".", 1)[1]]
    assert isinstance(cli.model, cls)
    assert cli.datamodule is not None and cli.trainer is not None
    # hyperparameters are plain config values (what weights_only checkpoints can hold)
    for value in dict(cli.model.hparams).values():
        assert isinstance(value, (str, int, float, bool, list, dict, type(None)))


QUICKSTART_ENCODING = {"class_path": "posenc.spatial.RoPE2D",
                       "init_args": {"variant": "mixed", "normalize": "unit"}}


def test_swapping_the_encoding_is_one_argument(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    base = ["--config", str(CONFIGS / "quickstart.yaml"), "--trainer.logger=false"]
    by_name = posenc_cli([*base, "--model.init_args.encoding=sincos2d"], run=False).model
    assert isinstance(by_name.model.patch_embed.pos_encoding, SinCos2D)
    spec = '{"class_path": "posenc.spatial.RoPE2D", "init_args": {"variant": "axial"}}'
    by_dict = posenc_cli([*base, f"--model.init_args.encoding={spec}"], run=False).model
    rotary = by_dict.model.blocks[0].attn.rotary
    assert isinstance(rotary, RoPE2D) and rotary.variant == "axial" and rotary.num_heads == 4
    assert by_dict.hparams.encoding == {"class_path": "posenc.spatial.RoPE2D",
                                        "init_args": {"variant": "axial"}}


def test_print_config_shows_class_paths(capsys):
    with pytest.raises(SystemExit) as exit_info:
        main(["fit", "--config", str(CONFIGS / "quickstart.yaml"), "--print_config"])
    assert exit_info.value.code == 0
    printed = yaml.safe_load(capsys.readouterr().out)
    assert printed["model"]["class_path"] == "posenc.tasks.ImageClassifier"
    assert printed["model"]["init_args"]["encoding"] == QUICKSTART_ENCODING
    assert printed["data"]["class_path"] == "posenc.tasks.MNISTDataModule"


def test_quickstart_fits_on_real_mnist_and_reports_test_accuracy(tmp_path, monkeypatch):
    """The README's main job exactly as users run it (a subprocess), one short epoch; then its
    README lines that resume and export from the checkpoint path it printed."""
    config = ["--config", str(CONFIGS / "quickstart.yaml")]
    proc = run_cli(["fit", *config, *ONE_EPOCH], cwd=tmp_path)
    reported = dict(re.findall(r"^\s+(test/\S+)\s+([0-9.]+)$", proc.stdout, re.M))
    assert {"test/acc_28", "test/acc_44", "test/acc_56", "test/acc"} <= set(reported)
    readme_path = "checkpoints/quickstart/last.ckpt"  # the README's --ckpt_path
    assert proc.stdout.endswith(f"Checkpoints (--ckpt_path):\n  last: {readme_path}\n")
    assert _checkpoints(tmp_path) == [tmp_path / readme_path]  # the last weights only
    checkpoint = torch.load(tmp_path / readme_path, weights_only=True)
    assert checkpoint["hyper_parameters"]["encoding"] == QUICKSTART_ENCODING
    assert checkpoint["global_step"] == 2
    ImageClassifier.load_from_checkpoint(tmp_path / readme_path, weights_only=True)
    monkeypatch.chdir(tmp_path)
    main(["fit", *config, *ONE_EPOCH, "--trainer.max_epochs=2", f"--ckpt_path={readme_path}"])
    # A resume writes its last weights over the file it resumed from (a fresh run beside it
    # would write last-v1.ckpt): one more epoch on top of the first's.
    assert _checkpoints(tmp_path) == [tmp_path / readme_path]
    resumed = torch.load(tmp_path / readme_path, weights_only=True)
    assert resumed["epoch"] == checkpoint["epoch"] + 1 and resumed["global_step"] == 4
    main(["export", *config, f"--ckpt_path={readme_path}", "--out=model.onnx"])
    assert (tmp_path / "model.onnx").stat().st_size > 0
    main(["predict", *config, f"--ckpt_path={readme_path}", "--trainer.enable_progress_bar=false"])
    predicted = pd.read_csv(tmp_path / "predictions" / "quickstart.csv")  # the config's writer
    assert len(predicted) == 500 and list(predicted.columns[:3]) == ["input", "prediction",
                                                                     "probability"]
    np.testing.assert_allclose(predicted.filter(like="p_").sum(1), 1, rtol=1e-5)


def test_fit_names_each_checkpoint_it_kept_by_what_it_holds(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    top_k_only = ModelCheckpoint()  # no monitor, no last: its top-k file is the latest
    top_k_only.best_model_path = str(tmp_path / "a" / "epoch=3-step=8.ckpt")
    both = ModelCheckpoint(save_last=True)  # no monitor: the top-k file repeats last
    both.last_model_path = str(tmp_path / "b" / "last.ckpt")
    both.best_model_path = str(tmp_path / "b" / "epoch=3-step=8.ckpt")
    monitored = ModelCheckpoint(monitor="val/acc", mode="max", save_last=True)
    monitored.last_model_path = "c/last.ckpt"
    monitored.best_model_path = "/elsewhere/epoch=1-step=4.ckpt"  # not under the cwd: absolute
    trainer = SimpleNamespace(checkpoint_callbacks=[top_k_only, both, monitored])
    assert _saved_checkpoints(trainer) == [
        "  latest: a/epoch=3-step=8.ckpt", "  last: b/last.ckpt", "  last: c/last.ckpt",
        "  best val/acc: /elsewhere/epoch=1-step=4.ckpt"]
    assert _saved_checkpoints(SimpleNamespace(checkpoint_callbacks=[ModelCheckpoint()])) == []


def test_vision_config_fits_resumes_and_reloads_identically(tmp_path, monkeypatch, capsys):
    """In-process ``main(["fit", ...])``: the same code path as the console script, without
    paying the interpreter start-up again."""
    monkeypatch.chdir(tmp_path)
    config = [*VIT_MNIST_RELBIAS, *DIGITS, *TINY_VIT]
    assert main(["fit", *config, *ONE_EPOCH]) is None  # the console script exits with 0
    out = capsys.readouterr().out
    reported = dict(re.findall(r"^\s+(test/\S+)\s+([0-9.]+)$", out, re.M))
    runs = tmp_path / "lightning_logs" / "vit_mnist_relbias"
    last = runs / "version_0" / "checkpoints" / "last.ckpt"
    # fit names what it kept: the config's ModelCheckpoint saves the last and the best by val/acc
    [best] = (runs / "version_0" / "checkpoints").glob("epoch=*.ckpt")
    assert out.endswith(f"Checkpoints (--ckpt_path):\n  last: {last.relative_to(tmp_path)}\n"
                        f"  best val/acc: {best.relative_to(tmp_path)}\n")
    # The reloaded weights give the test accuracy the run printed (same batch, same model).
    model = ImageClassifier.load_from_checkpoint(last, weights_only=True)
    data = DigitsDataModule(batch_size=32, eval_image_sizes=[8, 12, 16])
    trainer = Trainer(accelerator="cpu", logger=False, limit_test_batches=1,
                      enable_progress_bar=False, default_root_dir=tmp_path)
    [again] = trainer.test(model, data, verbose=False)[:1]
    for key in ("test/acc_8", "test/acc_12", "test/acc_16"):
        assert again[key] == pytest.approx(float(reported[key]), abs=1e-4)
    # fit resumes from the checkpoint: epoch 1 continues at the saved global step
    main(["fit", *config, *ONE_EPOCH, "--trainer.max_epochs=2", f"--ckpt_path={last}"])
    resumed = torch.load(runs / "version_1" / "checkpoints" / "last.ckpt", weights_only=True)
    assert resumed["epoch"] == 1 and resumed["global_step"] == 4
    # the other subcommands take the same config and a checkpoint
    tested = posenc_cli(["test", *config, *ONE_EPOCH, f"--ckpt_path={last}"])
    assert "test/acc_16" in tested.trainer.callback_metrics
    predicted = posenc_cli(["predict", *config, *ONE_EPOCH, "--trainer.limit_predict_batches=1",
                      f"--ckpt_path={last}"])
    [probs] = predicted.trainer.predict_loop.predictions
    assert probs.shape == (32, 10)
    torch.testing.assert_close(probs.sum(-1), torch.ones(32))


def _check_forecast_run(out: str, root, config: str) -> None:
    reported = dict(re.findall(r"^\s+(test/\S+)\s+([0-9.]+)$", out, re.M))
    assert {"test/mae", "test/rmse", "test/mase", "test/loss"} <= set(reported)
    [ckpt] = _checkpoints(root / "lightning_logs")
    model = Forecaster.load_from_checkpoint(ckpt, weights_only=True)
    expected = yaml.safe_load((CONFIGS / f"{config}.yaml").read_text())["model"]["init_args"]
    assert model.hparams.encodings == expected["encodings"]


@pytest.mark.parametrize("config", ["forecast_seattle", "forecast_seattle_irregular",
                                    "forecast_taylor"])
def test_forecast_configs_fit_one_epoch(config, tmp_path, monkeypatch, capsys):
    """In-process; the forecasting family also runs from the command line in test_ddp."""
    monkeypatch.chdir(tmp_path)
    main(["fit", "--config", str(CONFIGS / f"{config}.yaml"), *TINY_FORECASTER, *ONE_EPOCH,
          "--data.init_args.batch_size=8"])
    _check_forecast_run(capsys.readouterr().out, tmp_path, config)


def test_plot_subcommand_goes_to_the_plots_module(capsys):
    with pytest.raises(SystemExit) as exit_info:
        main(["plot", "--help"])
    assert exit_info.value.code == 0
    assert "posenc plot" in capsys.readouterr().out


def test_unknown_encoding_in_a_config_lists_the_valid_names(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    with pytest.raises(ValueError, match=r"unknown spatial encoding 'rope'; valid names: "
                                         r"\['none', 'learned'"):
        posenc_cli(["--config", str(CONFIGS / "quickstart.yaml"), "--trainer.logger=false",
                    "--model.init_args.encoding=rope"], run=False)


# -- the command line's own errors -------------------------------------------------------------
def test_help_lists_every_subcommand(capsys):
    with pytest.raises(SystemExit) as exit_info:
        main(["--help"])
    assert exit_info.value.code == 0
    out = capsys.readouterr().out
    assert "{fit,validate,test,predict,export,plot,study}" in out
    assert re.search(r"^\s+export\s+Write a trained ImageClassifier or Forecaster as an", out,
                     re.M)
    assert re.search(r"^\s+plot\s+Write PNG plots", out, re.M)
    assert re.search(r"^\s+study\s+Run a study", out, re.M)


def test_an_unknown_subcommand_lists_plot_and_study(capsys):
    with pytest.raises(SystemExit) as exit_info:
        main(["plott"])
    assert exit_info.value.code == 2
    assert ("invalid choice: 'plott' (choose from 'fit', 'validate', 'test', 'predict', "
            "'export', 'plot', 'study')") in capsys.readouterr().err


def test_plot_and_study_must_come_first(capsys, tmp_path):
    (tmp_path / "empty.yaml").write_text("{}\n")
    with pytest.raises(SystemExit) as exit_info:
        main(["--config", str(tmp_path / "empty.yaml"), "study"])
    assert exit_info.value.code == 2
    assert "'study' must come first: posenc study ..." in capsys.readouterr().err


def _one_line_error(capsys, argv) -> str:
    with pytest.raises(SystemExit) as exit_info:
        main(argv)
    assert exit_info.value.code == 1
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "Traceback" not in err, err
    return err


@pytest.mark.parametrize("content, match", [
    (None, "no such file"),
    ("seeds: [0\n", "is not valid YAML: while parsing a flow sequence"),
    ("- 1\n- 2\n", r"must hold a mapping \(seeds, encodings, ...\), got list"),
    ("", "got an empty file"),
    ("seeds: [0]\n", "needs 'encodings': a mapping of names to model arguments, got None"),
    ("seeds: [0]\nencodings: {learned: {encoding: learned}}\n",
     r"lacks \['eval_image_sizes'\] \(a non-empty list each\) for the resolution study"),
])
def test_study_config_errors_are_one_line(tmp_path, capsys, content, match):
    path = tmp_path / "study.yaml"
    if content is not None:
        path.write_text(content)
    err = _one_line_error(capsys, ["study", "resolution", "--config", str(path),
                                   "--out", str(tmp_path / "out")])
    assert re.match(rf"posenc study: error: --config '{re.escape(str(path))}'.*{match}", err)
    assert not (tmp_path / "out").exists()


def test_study_folder_as_config(tmp_path, capsys):
    err = _one_line_error(capsys, ["study", "irregular", "--config", str(tmp_path)])
    assert f"--config '{tmp_path}' cannot be read: [Errno 21] Is a directory" in err


def test_plot_errors_are_one_line(tmp_path, capsys):
    missing = tmp_path / "missing.ckpt"
    err = _one_line_error(capsys, ["plot", "rope-mixed", "--checkpoint", str(missing),
                                   "--out", str(tmp_path)])
    assert err == f"posenc plot: error: checkpoint='{missing}' is not a file\n"
    err = _one_line_error(capsys, ["plot", "rope", "--head-dim", "3", "--out", str(tmp_path)])
    assert err.startswith("posenc plot: error: head_dim must be even")
    with pytest.raises(SystemExit) as exit_info:  # argparse's own usage errors: exit 2
        main(["plot", "rope", "--head-dim", "many"])
    assert exit_info.value.code == 2
    assert "argument --head-dim: invalid int value: 'many'" in capsys.readouterr().err


def _refused_evil_checkpoint(tmp_path, monkeypatch, capsys, module: str,
                             hyper_parameters: dict) -> str:
    """``posenc test --ckpt_path`` on a checkpoint whose hyperparameters name ``module``, a
    module on sys.path whose import would create a file: asserts the CLI refused it (exit 2)
    without importing it, and returns what it printed to stderr."""
    monkeypatch.chdir(tmp_path)
    (tmp_path / f"{module}.py").write_text(
        f"import pathlib\npathlib.Path({str(tmp_path / 'pwned')!r}).touch()\n")
    monkeypatch.syspath_prepend(str(tmp_path))
    model = ImageClassifier(img_size=8, patch_size=4, embed_dim=16, depth=1, num_heads=2)
    ckpt = tmp_path / "evil.ckpt"
    torch.save({"state_dict": model.state_dict(),
                "hyper_parameters": {**dict(model.hparams), **hyper_parameters,
                                     "_instantiator": "lightning.pytorch.cli.instantiate_module"},
                "pytorch-lightning_version": "2.6.0"}, ckpt)
    with pytest.raises(SystemExit) as exit_info:
        main(["test", "--config", str(CONFIGS / "quickstart.yaml"), "--trainer.logger=false",
              f"--ckpt_path={ckpt}"])
    assert exit_info.value.code == 2
    assert not (tmp_path / "pwned").exists()
    assert module not in sys.modules
    return capsys.readouterr().err


def _write_bad_checkpoint(path, kind: str) -> None:
    """A ``--ckpt_path`` that is not a readable Lightning checkpoint, of the given kind."""
    import argparse

    if kind == "directory":
        path.mkdir()
    elif kind == "pickled object":
        torch.save({"state_dict": {}, "hyper_parameters": {"x": argparse.Namespace(a=1)}},
                   path)
    elif kind == "list":
        torch.save([1, 2], path)
    elif kind == "list hyper_parameters":
        torch.save({"state_dict": {}, "hyper_parameters": [1]}, path)
    elif kind != "missing":
        path.write_text({"empty": "", "text": "hello", "json": '{"a": 1}',
                         "csv": "timestamp,value\n2020-01-01,1\n2020-01-02,2\n"}[kind])


@pytest.mark.parametrize("subcommand", ["test", "predict"])
@pytest.mark.parametrize("kind, why", [
    ("missing", "is not a file"), ("directory", "is a directory, not a checkpoint file"),
    ("empty", "is not a readable torch checkpoint"), ("text", "is not a readable torch"),
    ("csv", "is not a readable torch"), ("json", "is not a readable torch"),
    ("pickled object", "holds objects other than tensors and plain values"),
    ("list", "is not a Lightning checkpoint"),
    ("list hyper_parameters", "is not a Lightning checkpoint: its hyper_parameters are a list"),
])
def test_ckpt_path_that_is_not_a_checkpoint_is_a_usage_error(tmp_path, monkeypatch, capsys,
                                                             subcommand, kind, why):
    monkeypatch.chdir(tmp_path)
    path = tmp_path / "model.ckpt"
    _write_bad_checkpoint(path, kind)
    with pytest.raises(SystemExit) as exit_info:
        main([subcommand, "--config", str(CONFIGS / "quickstart.yaml"), "--trainer.logger=false",
              f"--ckpt_path={path}"])
    assert exit_info.value.code == 2
    err = " ".join(capsys.readouterr().err.split())
    assert f"error: --ckpt_path='{path}' {why}" in err


def test_ckpt_path_special_names_are_left_to_lightning(tmp_path, monkeypatch):
    """``last``/``best``/``hpc`` are Lightning's names for checkpoints it finds, not files."""
    monkeypatch.chdir(tmp_path)
    cli = posenc_cli(["fit", *VIT_MNIST_RELBIAS, *DIGITS, *TINY_VIT, *ONE_EPOCH,
                      "--trainer.logger=false", "--ckpt_path=last"])
    assert cli.trainer.current_epoch == 1


def test_ckpt_path_naming_a_class_that_is_not_imported_is_refused(tmp_path, capsys,
                                                                 monkeypatch):
    """Lightning merges the checkpoint's hyperparameters into the config; its _class_path
    would be imported by jsonargparse (running the module's code) before any check."""
    err = _refused_evil_checkpoint(tmp_path, monkeypatch, capsys, "evil_model",
                                   {"_class_path": "evil_model.Model"})
    assert ("names the model class 'evil_model.Model', which is not an imported "
            "LightningModule subclass") in err


def test_a_config_may_name_the_users_own_encoding(tmp_path, monkeypatch):
    """The config is the user's: jsonargparse imports its class paths (a checkpoint's are
    refused unless already imported, see test_security)."""
    monkeypatch.chdir(tmp_path)
    (tmp_path / "my_encodings.py").write_text(
        "from posenc.spatial import SinCos2D\n\nclass MySinCos(SinCos2D):\n    pass\n")
    monkeypatch.syspath_prepend(str(tmp_path))
    monkeypatch.delitem(sys.modules, "my_encodings", raising=False)
    spec = '{"class_path": "my_encodings.MySinCos"}'
    cli = posenc_cli(["--config", str(CONFIGS / "quickstart.yaml"), "--trainer.logger=false",
                      f"--model.init_args.encoding={spec}"], run=False)
    assert type(cli.model.model.patch_embed.pos_encoding).__name__ == "MySinCos"
    monkeypatch.delitem(sys.modules, "my_encodings")



def test_ckpt_path_naming_an_encoding_module_that_is_not_imported_is_refused(
        tmp_path, capsys, monkeypatch):
    """jsonargparse imports the class paths nested in the merged hyperparameters too."""
    err = _refused_evil_checkpoint(
        tmp_path, monkeypatch, capsys, "evil_encoding",
        {"encoding": {"class_path": "evil_encoding.Enc"},
         "_class_path": "posenc.tasks.vision.ImageClassifier"})
    assert "encoding: class_path 'evil_encoding.Enc': module 'evil_encoding' is not imported" in err
