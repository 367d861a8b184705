"""``posenc fit --refit_epochs N``: after the fit, a fresh model of the same config and seed
is trained on train + validation (its state refitted there) and is what is tested and
checkpointed."""

from __future__ import annotations

import re
import sys

import numpy as np
import pandas as pd
import pytest
import torch
import yaml
from posenc.tasks.cli import posenc_cli

from ..conftest import CONFIGS, TINY_FORECASTER

QUIET = ["--trainer.limit_train_batches=3", "--trainer.limit_val_batches=1",
         "--trainer.limit_test_batches=2", "--trainer.enable_progress_bar=false",
         "--trainer.enable_model_summary=false", "--trainer.num_sanity_val_steps=0"]


@pytest.fixture(autouse=True)
def _argv(monkeypatch):
    monkeypatch.setattr(sys, "argv", ["posenc"])


def _config(tmp_path) -> list[str]:
    rng = np.random.default_rng(1)
    stamps = pd.date_range("2023-03-01", periods=300, freq="h")
    frame = pd.concat([pd.DataFrame({"site": name, "when": stamps.astype(str),
                                     "load": level + np.sin(np.arange(300) / 3.8)
                                     + np.arange(300) / 50 + rng.normal(0, 0.1, 300)})
                       for name, level in (("a", 0.0), ("b", 5.0))], ignore_index=True)
    frame.to_csv(tmp_path / "load.csv", index=False)
    return ["--config", str(CONFIGS / "forecast_csv.yaml"), *TINY_FORECASTER,
            "--model.init_args.loss=mae", "--model.init_args.quantiles=null",
            "--data.init_args.data=load.csv", "--data.init_args.timestamp_column=when",
            "--data.init_args.series_column=site", "--data.init_args.target_columns=load",
            "--data.init_args.past_covariates=[]", "--data.init_args.tz=null",
            "--data.init_args.context_length=24", "--data.init_args.horizon=6",
            "--data.init_args.stride=6", *QUIET]


def _reported(out: str) -> dict[str, float]:
    return {k: float(v) for k, v in re.findall(r"^\s+(test/\S+)\s+([0-9.]+)$", out, re.M)}


@pytest.mark.slow
def test_refit_trains_a_fresh_model_on_train_and_validation_and_tests_and_saves_it(
        tmp_path, monkeypatch, capsys):
    monkeypatch.chdir(tmp_path)
    config = _config(tmp_path)
    cli = posenc_cli(["fit", *config, "--trainer.max_epochs=1", "--refit_epochs=2"])
    out = capsys.readouterr().out
    assert "Test results (refit on train + validation for 2 epochs):" in out
    # what fit names last is the refit's checkpoint, the model it keeps
    assert out.endswith("Checkpoints (--ckpt_path):\n  last: "
                        "checkpoints/forecast_csv/refit/last.ckpt\n")
    dm, model = cli.datamodule, cli.model
    assert dm.train_on_val and cli.trainer.current_epoch == 2
    # The refit state is fitted on every row before test_start (train + validation).
    frame = pd.read_csv(tmp_path / "load.csv")
    stamps = pd.DatetimeIndex(pd.to_datetime(frame["when"])).as_unit("ns").asi8
    t_val, t_test = dm.split_times["val"], dm.split_times["test"]
    seen = frame[stamps < t_test].groupby("site")["load"]
    loc, scale = (np.asarray(v)[:, 0] for v in (model.fitted.loc, model.fitted.scale))
    np.testing.assert_allclose(loc, seen.mean().to_numpy(), rtol=1e-9)
    np.testing.assert_allclose(scale, seen.std(ddof=0).to_numpy(), rtol=1e-9)
    # The fit's checkpoint keeps the training span's state; the refit's is under refit/.
    first = torch.load(tmp_path / "checkpoints/forecast_csv/last.ckpt", weights_only=True)
    before_val = frame[stamps < t_val].groupby("site")["load"].mean().to_numpy()
    np.testing.assert_allclose(np.asarray(first["fitted"]["loc"])[:, 0], before_val,
                               rtol=1e-9)
    refit = torch.load(tmp_path / "checkpoints/forecast_csv/refit/last.ckpt",
                       weights_only=True)
    assert np.array_equal(refit["fitted"]["loc"], model.fitted.loc)
    assert refit["epoch"] == 1
    state = model.state_dict()
    assert all(torch.equal(refit["state_dict"][k], state[k]) for k in state)
    assert not all(torch.equal(first["state_dict"][k], state[k]) for k in state)
    # The refit's saved config reproduces it directly.
    [saved] = (tmp_path / "lightning_logs/forecast_csv/version_1").glob("config.yaml")
    saved = yaml.safe_load(saved.read_text())
    assert saved["data"]["init_args"]["train_on_val"] is True
    assert saved["trainer"]["max_epochs"] == 2 and saved["refit_epochs"] is None
    # A direct fit of that config, same seed: the same weights and the same test metrics.
    direct = posenc_cli(["fit", *config, "--data.init_args.train_on_val=true",
                         "--trainer.max_epochs=2", "--trainer.limit_val_batches=0",
                         "--trainer.callbacks=[]", "--trainer.enable_checkpointing=false"])
    direct_state = direct.model.state_dict()
    assert all(torch.equal(direct_state[k], state[k]) for k in state)
    reported, again = _reported(out), _reported(capsys.readouterr().out)
    assert reported["test/mae"] > 0 and reported == again


@pytest.mark.parametrize(("extra", "match"), [
    (["--refit_epochs=0"], "--refit_epochs=0 must be a positive number of epochs"),
])
def test_bad_refit_epochs_are_usage_errors(tmp_path, monkeypatch, capsys, extra, match):
    monkeypatch.chdir(tmp_path)
    with pytest.raises(SystemExit):
        posenc_cli(["fit", *_config(tmp_path), *extra])
    assert match in capsys.readouterr().err


@pytest.mark.slow  # parsing a vision config imports timm
def test_refit_needs_a_time_series_data_module(tmp_path, monkeypatch, capsys):
    monkeypatch.chdir(tmp_path)
    with pytest.raises(SystemExit):
        posenc_cli(["fit", "--config", str(CONFIGS / "quickstart.yaml"), "--refit_epochs=1"])
    assert "--refit_epochs needs a data module with a train_on_val" in capsys.readouterr().err
