"""The forecasting contract end to end: one YAML over a long-format CSV of many series with
covariates; ``posenc fit`` reports the model's error next to seasonal naive; ``posenc predict``
writes a forecasts file from the checkpoint alone."""

from __future__ import annotations

import re
import sys

import numpy as np
import pandas as pd
import pytest
import torch
import yaml
from posenc.tasks.cli import posenc_cli

from ..conftest import CONFIGS, ONE_EPOCH, TINY_FORECASTER, synthetic_series


@pytest.fixture(autouse=True)
def _argv(monkeypatch):
    monkeypatch.setattr(sys, "argv", ["posenc"])


def _panel_csv(path) -> pd.DataFrame:
    """3 series of different lengths and starts; a past and a future covariate, a static
    category; local times in New York across the autumn DST change."""
    rng = np.random.default_rng(0)
    parts = []
    for k, (start, n) in enumerate([("2023-10-20", 500), ("2023-10-22", 420),
                                    ("2023-10-21", 460)]):
        t = pd.date_range(start, periods=n, freq="1h", tz="America/New_York")
        hour = t.hour.to_numpy()
        parts.append(pd.DataFrame({
            "site": f"site{k}", "when": t.strftime("%Y-%m-%d %H:%M:%S%z"),
            "load": 10 * k + np.sin(2 * np.pi * hour / 24) + rng.normal(0, 0.1, n),
            "temp": rng.normal(size=n), "open": ((hour >= 8) & (hour < 18)).astype(int),
            "kind": "north" if k else "south"}))
    frame = pd.concat(parts, ignore_index=True).sample(frac=1.0, random_state=0)
    frame.to_csv(path, index=False)
    return frame


def test_fit_then_predict_a_forecasts_file_from_a_panel_csv(tmp_path, monkeypatch, capsys):
    monkeypatch.chdir(tmp_path)
    frame = _panel_csv(tmp_path / "panel.csv")
    config = ["--config", str(CONFIGS / "forecast_csv.yaml"), *TINY_FORECASTER,
              "--data.init_args.data=panel.csv", "--data.init_args.timestamp_column=when",
              "--data.init_args.series_column=site", "--data.init_args.target_columns=load",
              "--data.init_args.past_covariates=[temp]",
              "--data.init_args.future_covariates=[open]",
              "--data.init_args.static_columns=[kind]", "--data.init_args.context_length=48",
              "--data.init_args.horizon=12"]
    cli = posenc_cli(["fit", *config, *ONE_EPOCH])
    # The sizes came from the data: the config names none of them.
    hp = cli.model.hparams
    assert (hp.num_targets, hp.num_past_covariates, hp.num_future_covariates) == (1, 1, 1)
    assert hp.static_cardinalities == [3] and cli.datamodule.mase_season == 24
    assert hp.naive_seasons == ["1 days 00:00:00"]
    out = capsys.readouterr().out
    reported = dict(re.findall(r"^\s+(test/\S+)\s+([0-9.]+)$", out, re.M))
    assert {"test/mae", "test/mase", "test/mae_naive", "test/mase_naive", "test/wql",
            "test/wql_naive"} <= set(reported)
    per_series = cli.model.test_per_series
    assert list(per_series["site"]) == ["site0", "site1", "site2"]
    # ... and beside the logged metrics, for command-line users
    [written] = (tmp_path / "lightning_logs").rglob("test_per_series.csv")
    table = pd.read_csv(written)
    assert list(table["site"]) == ["site0", "site1", "site2"]
    assert {"mae", "mase", "wql", "mae_naive", "windows"} <= set(table)
    np.testing.assert_allclose(table["mae"], per_series["mae"])
    # predict: the checkpoint alone plus the table; the future covariate is known at the
    # times to predict, so they come as a table.
    last = frame.assign(t=pd.to_datetime(frame["when"], utc=True)).groupby("site")["t"].max()
    future = pd.DataFrame({"site": np.repeat(last.index, 3),
                           "when": [(t + pd.Timedelta(hours=h + 1)).isoformat()
                                    for t in last for h in range(3)], "open": 1})
    future.to_csv(tmp_path / "future.csv", index=False)
    posenc_cli(["predict", *config, "--data.init_args.future_data=future.csv",
                "--ckpt_path=checkpoints/forecast_csv/last.ckpt",
                "--trainer.enable_progress_bar=false"])
    written = pd.read_csv(tmp_path / "forecasts.csv")
    assert len(written) == 9
    assert list(written["site"]) == ["site0"] * 3 + ["site1"] * 3 + ["site2"] * 3
    assert {"load", "load_q0.1", "load_q0.5", "load_q0.9", "forecast_origin"} <= set(written)
    stamps = pd.to_datetime(written["when"], utc=True)
    expected = pd.to_datetime(future["when"], utc=True).sort_values(kind="stable")
    assert sorted(stamps) == sorted(expected)
    assert written["when"].str.endswith(("-05:00", "-04:00")).all()  # the data's zone
    assert np.isfinite(written["load"]).all()
    # the series' levels (0, 10, 20) are in the forecasts: the scaling was the training one
    means = written.groupby("site")["load"].mean().to_numpy()
    assert (np.diff(means) > 5).all()
    # The backtest with the same config would write the same path: refused, naming it, before
    # predicting; another path, or overwrite, is an option on the command line.
    first = (tmp_path / "forecasts.csv").read_bytes()
    backtest = ["predict", *config, "--data.init_args.predict_split=test",
                "--ckpt_path=checkpoints/forecast_csv/last.ckpt",
                "--trainer.enable_progress_bar=false"]
    with pytest.raises(ValueError, match=r"path='forecasts\.csv' already holds forecasts"):
        posenc_cli(backtest)
    assert (tmp_path / "forecasts.csv").read_bytes() == first
    posenc_cli([*backtest, "--trainer.callbacks.init_args.path=backtest.csv"])
    assert (tmp_path / "forecasts.csv").read_bytes() == first
    windows = pd.read_csv(tmp_path / "backtest.csv")
    assert windows["forecast_origin"].nunique() > 1 and len(windows) > len(written)
    posenc_cli([*backtest, "--trainer.callbacks.init_args.overwrite=true"])
    assert (tmp_path / "forecasts.csv").read_bytes() == (tmp_path / "backtest.csv").read_bytes()


def test_evaluating_a_checkpoint_reads_other_data_once_with_its_fitted_state(tmp_path,
                                                                          monkeypatch,
                                                                          table_reads):
    """``posenc test``/``predict --ckpt_path`` give the data module the checkpoint
    (``fitted``): other data is read once, before the trainer runs, with the training's state
    (Lightning restores the checkpoint only after the data's setup), and the run's config
    records it."""
    from posenc.tasks import Forecaster, TimeSeriesDataModule

    monkeypatch.chdir(tmp_path)
    a = synthetic_series(300)
    a.to_csv("a.csv", index=False)
    a.assign(value=a["value"] * 10 + 50).to_csv("b.csv", index=False)  # other scaling
    config = ["--config", str(CONFIGS / "forecast_csv.yaml"), *TINY_FORECASTER,
              "--data.init_args.timestamp_column=timestamp", "--data.init_args.series_column=null",
              "--data.init_args.target_columns=value", "--data.init_args.past_covariates=[]",
              "--data.init_args.context_length=24", "--data.init_args.horizon=6"]
    posenc_cli(["fit", *config, "--data.init_args.data=a.csv", *ONE_EPOCH,
                "--test_after_fit=false"])
    ckpt = "checkpoints/forecast_csv/last.ckpt"
    trained = Forecaster.load_from_checkpoint(ckpt, weights_only=True).fitted
    own = TimeSeriesDataModule("b.csv", context_length=24, horizon=6).fitted
    assert own.loc != trained.loc
    reads = table_reads
    for run in ("test", "predict"):
        reads.clear()
        cli = posenc_cli([run, *config, "--data.init_args.data=b.csv", f"--ckpt_path={ckpt}",
                          "--trainer.enable_progress_bar=false", "--trainer.logger=false"])
        assert reads == [trained]
        assert cli.datamodule.fitted == trained and cli.model.fitted == trained
        assert cli.config[run].data.init_args.fitted == ckpt
    assert len(pd.read_csv("forecasts.csv")) == 6


def test_holiday_features_from_a_yaml_config(tmp_path, monkeypatch, capsys):
    """HolidayFeatures needs a country, so it has no bare name: a config gives it as a
    class_path; it fits, tests and reloads from a weights-only checkpoint."""
    pytest.importorskip("holidays")
    from posenc.tasks import Forecaster
    from posenc.temporal import HolidayFeatures

    monkeypatch.chdir(tmp_path)
    encodings = ["calendar", {"class_path": "posenc.temporal.HolidayFeatures",
                              "init_args": {"country": "US"}}]
    (tmp_path / "holidays.yaml").write_text(yaml.safe_dump(
        {"model": {"init_args": {"encodings": encodings, "relative": None}},
         "data": {"init_args": {"states": ["CA"], "start": 1987, "context_length": 28,
                                "horizon": 7, "stride": 7, "batch_size": 16}}}))
    cli = posenc_cli(["fit", "--config", str(CONFIGS / "forecast_birthdays.yaml"),
                      "--config", "holidays.yaml", *TINY_FORECASTER, *ONE_EPOCH])
    holiday = cli.model.model.time_features.encodings[1]
    assert isinstance(holiday, HolidayFeatures) and holiday.country == "US"
    assert cli.model.model.time_features.reads == ["fields", "timestamps"]
    assert re.search(r"^\s+test/mae\s+[0-9.]+$", capsys.readouterr().out, re.M)
    [ckpt] = tmp_path.rglob("*.ckpt")
    loaded = Forecaster.load_from_checkpoint(ckpt, weights_only=True)
    assert loaded.hparams.encodings == encodings
    batch = next(iter(cli.datamodule.test_dataloader()))
    torch.testing.assert_close(loaded.eval()(batch), cli.model.eval()(batch))


def test_the_birthdays_config_encodes_one_indicator_per_us_holiday(tmp_path, monkeypatch):
    """configs/forecast_birthdays.yaml adds US holiday indicators (the holidays extra) to the
    calendar: one per holiday, the form that helped in the holidays study."""
    pytest.importorskip("holidays")
    from posenc.temporal import HolidayFeatures

    monkeypatch.chdir(tmp_path)
    cli = posenc_cli(["--config", str(CONFIGS / "forecast_birthdays.yaml"),
                      "--trainer.logger=false", "--data.init_args.states=[CA]"], run=False)
    holiday = cli.model.model.time_features.encodings[-1]
    assert isinstance(holiday, HolidayFeatures) and holiday.country == "US"
    assert len(holiday.groups) == 13 and "Thanksgiving Day" in holiday.groups
