"""``posenc export``: a checkpoint fitted one step by the CLI becomes an ONNX graph whose
onnxruntime outputs equal the eager model's (float32, within 1e-4) at other batch sizes, image
sizes and window lengths than it was traced with; bad input is refused by name."""

from __future__ import annotations

import warnings
from pathlib import Path

import numpy as np
import onnxruntime
import pytest
import torch
import yaml
from posenc.tasks import Forecaster, ImageClassifier, TimeSeriesDataModule
from posenc.tasks.cli import main, posenc_cli
from posenc.tasks.export import export_onnx, forecast_input_names

from .conftest import CONFIGS, TINY_VIT, synthetic_series

TOL = 1e-4
STEP = ["--trainer.max_steps=1", "--trainer.limit_val_batches=0", "--trainer.logger=false",
        "--trainer.enable_progress_bar=false", "--trainer.enable_model_summary=false",
        "--test_after_fit=false"]
TIME_ENCODINGS = ["calendar", "calendar_embedding", "fourier", "continuous", "time2vec",
                  "timedelta", "index_sinusoidal", "age"]


@pytest.fixture(autouse=True)
def _quiet():
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # the exporter's and Lightning's notes
        yield


def _session(path: Path) -> onnxruntime.InferenceSession:
    return onnxruntime.InferenceSession(path, providers=["CPUExecutionProvider"])


def _fit_one_step(config: list[str], tmp_path: Path) -> Path:
    """``posenc fit`` for one optimizer step -> its last checkpoint."""
    main(["fit", *config, *STEP, f"--trainer.default_root_dir={tmp_path}"])
    saved = sorted(tmp_path.rglob("*.ckpt"))  # last.ckpt where the config's callback saves one
    return next((path for path in saved if path.name == "last.ckpt"), saved[0])


@pytest.mark.slow  # a fit step and an export: about 15 s
def test_image_classifier_fit_export_and_onnxruntime_equals_eager(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    config = ["--config", str(CONFIGS / "vit_mnist.yaml"), "--data=posenc.tasks.DigitsDataModule",
              "--data.batch_size=16", *TINY_VIT, "--model.init_args.encoding=cpb"]
    ckpt = _fit_one_step(config, tmp_path)
    main(["export", *config, f"--ckpt_path={ckpt}", f"--out={tmp_path / 'onnx' / 'vit.onnx'}"])
    session = _session(tmp_path / "onnx" / "vit.onnx")
    assert [(i.name, i.shape) for i in session.get_inputs()] == [
        ("images", ["batch", 1, "4*rows", "4*cols"])]
    assert [o.name for o in session.get_outputs()] == ["logits"]
    model = ImageClassifier.load_from_checkpoint(ckpt, weights_only=True).eval()
    # the config alone builds the weights before the step (seed 0): the graph holds the step's
    untrained = posenc_cli([*config, *STEP], run=False).model.eval()
    for batch, height, width in ((1, 8, 8), (5, 12, 20), (3, 24, 16)):
        x = torch.randn(batch, 1, height, width)
        [logits] = session.run(None, {"images": x.numpy()})
        with torch.no_grad():
            want = model(x)
            assert (untrained(x) - want).abs().max() > 1e-3
        assert logits.shape == (batch, 10)
        torch.testing.assert_close(torch.from_numpy(logits), want, rtol=TOL, atol=TOL)


def _forecast_config(tmp_path: Path, relative: str) -> list[str]:
    synthetic_series(300).to_csv(tmp_path / "series.csv", index=False)
    config = {"model": {"class_path": "posenc.tasks.Forecaster", "init_args": {
        "dim": 16, "depth": 1, "num_heads": 2, "loss": "quantile", "relative": relative,
        "encodings": TIME_ENCODINGS}},
        "data": {"class_path": "posenc.tasks.TimeSeriesDataModule", "init_args": {
            "data": str(tmp_path / "series.csv"), "context_length": 24, "horizon": 6,
            "batch_size": 8}}}
    (tmp_path / "forecast.yaml").write_text(yaml.safe_dump(config))
    return ["--config", str(tmp_path / "forecast.yaml")]


def _cut(batch: dict, size: int, context: int, horizon: int) -> dict:
    """The first ``size`` windows, their last ``context`` context and first ``horizon``
    target steps (other lengths than the traced ones)."""
    out = {}
    for key, value in batch.items():
        value = value[:size]
        if key.startswith("context_"):
            value = value[:, -context:]
        elif key.startswith("target_"):
            value = value[:, :horizon]
        out[key] = value
    return out


@pytest.mark.slow  # a fit step and an export: about 25 s
def test_forecaster_fit_export_and_onnxruntime_equals_eager(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    config = _forecast_config(tmp_path, "rope")
    ckpt = _fit_one_step(config, tmp_path)
    main(["export", *config, f"--ckpt_path={ckpt}", "--out=forecaster.onnx"])
    session = _session(tmp_path / "forecaster.onnx")
    model = Forecaster.load_from_checkpoint(ckpt, weights_only=True).eval()
    names = forecast_input_names(model)
    assert [i.name for i in session.get_inputs()] == names
    assert {"context_fields", "series_start_local", "loc", "scale"} <= set(names)
    assert [o.name for o in session.get_outputs()] == ["quantiles"]
    data = TimeSeriesDataModule(str(tmp_path / "series.csv"), context_length=24, horizon=6,
                                batch_size=8, fitted=model.fitted)
    data.setup("test")
    batch = next(iter(data.test_dataloader()))
    for size, context, horizon in ((1, 24, 6), (3, 20, 4), (len(batch["loc"]), 24, 6)):
        cut = _cut(batch, size, context, horizon)
        [got] = session.run(None, {name: cut[name].numpy() for name in names})
        with torch.no_grad():
            want = model.predict_step(cut)["quantiles"]
        assert got.shape == (size, horizon, 1, 3)
        torch.testing.assert_close(torch.from_numpy(got), want, rtol=TOL, atol=TOL)
    # data units: the forecasts sit around the series' level (10), not the scaled 0
    assert abs(float(np.median(got)) - 10) < 5


@pytest.mark.slow  # an export: about 10 s
@pytest.mark.parametrize("options", [
    {"relative": "fire"},  # an MLP bias of the time gaps (a bias that needs a gradient in eager)
    {"patch_size": 4, "patch_stride": 2, "origin_tokens": 2},  # token counts from the shapes
])
def test_a_forecaster_exports_from_python(tmp_path, options):
    torch.manual_seed(0)
    model = Forecaster(dim=16, depth=1, num_heads=2, encodings=["calendar"], **options)
    data = TimeSeriesDataModule(synthetic_series(200), context_length=12, horizon=3,
                                batch_size=4)
    path = export_onnx(model, tmp_path / "fire.onnx", datamodule=data)
    names = forecast_input_names(model)
    batch = _cut(next(iter(data.val_dataloader())), 3, 10, 2)
    [got] = _session(path).run(None, {name: batch[name].numpy() for name in names})
    with torch.no_grad():
        want = model.predict_step(batch)["quantiles"]
    torch.testing.assert_close(torch.from_numpy(got), want, rtol=TOL, atol=TOL)


def test_export_refuses_what_it_cannot_write(tmp_path):
    model = ImageClassifier(img_size=8, patch_size=4, embed_dim=16, depth=1, num_heads=2)
    geometric = ImageClassifier(img_size=8, patch_size=4, embed_dim=16, depth=1, num_heads=2,
                                encoding={"class_path": "posenc.spatial.RelativeBias2D",
                                          "init_args": {"resize": "geometric"}})
    with pytest.raises(ValueError, match=r"blocks\.0\..*RelativeBias2D\(resize='geometric'\)"):
        export_onnx(geometric, tmp_path / "g.onnx")
    assert not (tmp_path / "g.onnx").exists()
    with pytest.raises(TypeError, match="ImageClassifier or a Forecaster, got Linear"):
        export_onnx(torch.nn.Linear(2, 2), tmp_path / "x.onnx")
    with pytest.raises(ValueError, match="out is an empty path"):
        export_onnx(model, "")
    with pytest.raises(ValueError, match="is a directory"):
        export_onnx(model, tmp_path)
    with pytest.raises(ValueError, match="needs its data module"):
        export_onnx(Forecaster(dim=16, depth=1, num_heads=2), tmp_path / "f.onnx")
    other = tmp_path / "other.ckpt"
    torch.save({"state_dict": Forecaster(dim=16, depth=1, num_heads=2).state_dict()}, other)
    with pytest.raises(ValueError, match="does not hold this ImageClassifier's weights"):
        export_onnx(model, tmp_path / "x.onnx", ckpt_path=other)
    torch.save({"hyper_parameters": {}}, other)
    with pytest.raises(ValueError, match="holds no state_dict"):
        export_onnx(model, tmp_path / "x.onnx", ckpt_path=other)
    assert not (tmp_path / "x.onnx").exists()


def test_the_export_subcommand_checks_the_checkpoint_as_test_does(tmp_path, monkeypatch,
                                                                   capsys):
    """A checkpoint naming a class that is not imported is refused before anything is built
    (the rule of ``posenc test --ckpt_path``), and ``--out`` is required."""
    monkeypatch.chdir(tmp_path)
    (tmp_path / "evil_export.py").write_text(
        f"import pathlib\npathlib.Path({str(tmp_path / 'pwned')!r}).touch()\n")
    monkeypatch.syspath_prepend(str(tmp_path))
    model = ImageClassifier(img_size=8, patch_size=4, embed_dim=16, depth=1, num_heads=2)
    ckpt = tmp_path / "evil.ckpt"
    torch.save({"state_dict": model.state_dict(),
                "hyper_parameters": {**dict(model.hparams), "_class_path": "evil_export.Model",
                                     "_instantiator": "lightning.pytorch.cli.instantiate_module"},
                "pytorch-lightning_version": "2.6.0"}, ckpt)
    config = ["--config", str(CONFIGS / "quickstart.yaml"), "--trainer.logger=false"]
    with pytest.raises(SystemExit) as exit_info:
        main(["export", *config, f"--ckpt_path={ckpt}", "--out=m.onnx"])
    assert exit_info.value.code == 2
    assert "names the model class 'evil_export.Model'" in capsys.readouterr().err
    assert not (tmp_path / "pwned").exists() and not (tmp_path / "m.onnx").exists()
    with pytest.raises(SystemExit):
        main(["export", *config, f"--ckpt_path={ckpt}"])
    err = capsys.readouterr().err  # jsonargparse words a missing argument by version
    assert "export.out" in err and "required" in err
