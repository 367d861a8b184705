"""``Forecaster(keep_best=...)``: a fit ends with the weights of its best validation run, kept
in memory, not the last step's (issue 31: the seed spread of the last epoch's weights)."""

from __future__ import annotations

import copy
import re
import sys

import pytest
import torch
from lightning.pytorch import Callback, Trainer, seed_everything
from posenc.tasks import Forecaster
from posenc.tasks.cli import posenc_cli

from .test_module import TINY
from .test_refit_cli import _config, _reported

# A learning rate high enough that validation MAE goes up and down between epochs.
NOISY = {"lr": 0.05, "scheduler": "constant", "warmup": 0.0}


class EveryEpoch(Callback):
    """Each epoch's validation metrics (as Lightning reduced them) and the weights after it."""

    def __init__(self) -> None:
        self.metrics: list[dict[str, float]] = []
        self.states: list[dict[str, torch.Tensor]] = []

    def on_train_epoch_end(self, trainer, module) -> None:  # after the epoch's validation
        self.metrics.append({k: float(v) for k, v in trainer.callback_metrics.items()
                             if k.startswith("val/")})
        self.states.append(copy.deepcopy(module.state_dict()))


def _fit(datamodule, tmp_path, epochs: int = 6, **kwargs) -> tuple[Forecaster, EveryEpoch,
                                                                    Trainer]:
    seed_everything(0)
    model = Forecaster(encodings=["calendar"], **TINY, **NOISY, **kwargs)
    seen = EveryEpoch()
    trainer = Trainer(accelerator="cpu", devices=1, logger=False, enable_progress_bar=False,
                      enable_model_summary=False, enable_checkpointing=False,
                      default_root_dir=tmp_path, num_sanity_val_steps=0, max_epochs=epochs,
                      limit_train_batches=4, callbacks=[seen])
    trainer.fit(model, datamodule)
    return model, seen, trainer


def _same_weights(a: dict[str, torch.Tensor], b: dict[str, torch.Tensor]) -> bool:
    return a.keys() == b.keys() and all(torch.equal(a[k], b[k]) for k in a)


@pytest.mark.parametrize("metric", ["mae", "loss"])
def test_fit_ends_with_the_weights_of_the_lowest_validation_metric(datamodule, tmp_path,
                                                                   metric):
    model, seen, trainer = _fit(datamodule, tmp_path, keep_best=metric)
    values = [m[f"val/{metric}"] for m in seen.metrics]
    best = min(range(len(values)), key=values.__getitem__)
    assert best < len(values) - 1, f"the last epoch is the best ({values}): nothing to test"
    assert _same_weights(model.state_dict(), seen.states[best])
    assert not _same_weights(model.state_dict(), seen.states[-1])
    assert model.kept_best == {"epoch": best, "step": 4 * (best + 1),
                               "metric": f"val/{metric}", "value": pytest.approx(values[best])}
    # Validating the weights fit ended with gives that epoch's number again.
    [result] = trainer.validate(model, datamodule, verbose=False)
    assert result[f"val/{metric}"] == pytest.approx(values[best], rel=1e-5)


def test_without_keep_best_or_without_validation_fit_ends_with_the_last_weights(datamodule,
                                                                               tmp_path):
    model, seen, _ = _fit(datamodule, tmp_path)
    assert model.kept_best is None and _same_weights(model.state_dict(), seen.states[-1])
    seed_everything(0)
    model = Forecaster(encodings=["calendar"], **TINY, **NOISY, keep_best="mae")
    last = EveryEpoch()
    Trainer(accelerator="cpu", devices=1, logger=False, enable_progress_bar=False,
            enable_model_summary=False, enable_checkpointing=False, default_root_dir=tmp_path,
            max_epochs=2, limit_train_batches=2, limit_val_batches=0,
            callbacks=[last]).fit(model, datamodule)
    assert model.kept_best is None and _same_weights(model.state_dict(), last.states[-1])


def test_a_second_fit_selects_among_its_own_validation_runs(datamodule, tmp_path):
    model, _, trainer = _fit(datamodule, tmp_path, epochs=3, keep_best="mae")
    first = model.kept_best
    seen = EveryEpoch()
    Trainer(accelerator="cpu", devices=1, logger=False, enable_progress_bar=False,
            enable_model_summary=False, enable_checkpointing=False, default_root_dir=tmp_path,
            num_sanity_val_steps=0, max_epochs=2, limit_train_batches=4,
            callbacks=[seen]).fit(model, datamodule)
    values = [m["val/mae"] for m in seen.metrics]
    best = min(range(len(values)), key=values.__getitem__)
    assert model.kept_best["value"] == pytest.approx(values[best]) != first["value"]
    assert _same_weights(model.state_dict(), seen.states[best])


@pytest.mark.parametrize(("kwargs", "error", "match"), [
    ({"keep_best": 1}, TypeError, r"keep_best must be one of .*'mae'.*got int \(1\)"),
    ({"keep_best": True}, TypeError, r"keep_best must be one of .*got bool"),
    ({"keep_best": "val/mae"}, ValueError, r"keep_best must be one of .*got 'val/mae'"),
    ({"keep_best": "coverage_80"}, ValueError, r"keep_best must be one of .*'coverage_80'"),
    ({"keep_best": "wql"}, ValueError, r"keep_best='wql' needs loss='quantile'.*'mae'"),
])
def test_bad_keep_best_is_refused_naming_it(kwargs, error, match):
    with pytest.raises(error, match=match):
        Forecaster(**TINY, loss="mae", **kwargs)


def test_keep_best_wql_is_accepted_with_the_quantile_loss():
    assert Forecaster(**TINY, loss="quantile", keep_best="wql").hparams.keep_best == "wql"


def test_test_after_fit_tests_and_names_the_kept_weights(tmp_path, monkeypatch, capsys):
    monkeypatch.setattr(sys, "argv", ["posenc"])
    monkeypatch.chdir(tmp_path)
    cli = posenc_cli(["fit", *_config(tmp_path), "--trainer.max_epochs=3",
                      "--trainer.logger=false", "--trainer.callbacks=[]",
                      "--model.init_args.lr=0.05", "--model.init_args.keep_best=mae",
                      "--test_after_fit=true"])
    out = capsys.readouterr().out
    kept = cli.model.kept_best
    assert kept is not None
    header = re.search(r"^Test results \((.*)\):$", out, re.M).group(1)
    assert header == (f"best validation weights: epoch {kept['epoch']}, step {kept['step']}, "
                      f"val/mae {kept['value']:.4f}")
    [again] = cli.trainer.test(cli.model, datamodule=cli.datamodule, verbose=False)
    assert _reported(out)["test/mae"] == pytest.approx(again["test/mae"], abs=1e-4)
