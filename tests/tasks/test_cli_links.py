"""``posenc`` links the model's sizes from the panel data module (``LINKED_SIZES``): a config
that names none of them builds a Forecaster of exactly the data's sizes."""

from __future__ import annotations

import sys

import numpy as np
import pandas as pd
import pytest
import yaml
from posenc.tasks import Forecaster, TimeSeriesDataModule
from posenc.tasks.cli import LINKED_SIZES, posenc_cli


@pytest.fixture(autouse=True)
def _argv(monkeypatch):
    monkeypatch.setattr(sys, "argv", ["posenc"])


def _write_panel(path) -> None:
    """3 series, 30-minute steps, 2 targets, 2 past and 1 future covariate, a categorical
    static column with 2 values and 2 numeric ones."""
    parts = []
    for k in range(3):
        stamps = pd.date_range("2022-03-01", periods=300, freq="30min")
        n = len(stamps)
        parts.append(pd.DataFrame({
            "meter": f"m{k}", "time": stamps.strftime("%Y-%m-%d %H:%M"),
            "kwh": np.sin(np.arange(n) / 7.0) + k, "kvar": np.cos(np.arange(n) / 5.0),
            "temp": np.arange(n) % 13, "humid": np.arange(n) % 7,
            "tariff": (stamps.hour >= 7).astype(int), "region": "east" if k else "west",
            "floor_area": 100.0 * (k + 1), "floors": k + 1}))
    pd.concat(parts, ignore_index=True).to_csv(path, index=False)


def test_the_cli_links_every_data_size_into_the_model(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    _write_panel(tmp_path / "meters.csv")
    data_args = {"data": "meters.csv", "timestamp_column": "time", "series_column": "meter",
                 "target_columns": ["kwh", "kvar"], "past_covariates": ["temp", "humid"],
                 "future_covariates": ["tariff"],
                 "static_columns": ["region", "floor_area", "floors"], "tz": "Europe/Berlin",
                 "context_length": 48, "horizon": 12, "season": "7D"}
    config = {"trainer": {"logger": False, "enable_checkpointing": False},
              "model": {"class_path": "posenc.tasks.Forecaster",
                        "init_args": {"dim": 16, "depth": 1, "num_heads": 2}},
              "data": {"class_path": "posenc.tasks.TimeSeriesDataModule",
                       "init_args": data_args}}
    path = tmp_path / "config.yaml"
    path.write_text(yaml.safe_dump(config))
    cli = posenc_cli(["--config", str(path)], run=False)
    assert isinstance(cli.model, Forecaster)
    dm = cli.datamodule
    hp = cli.model.hparams
    for name in LINKED_SIZES:
        assert hp[name] == getattr(dm, name), name
    assert (hp.num_targets, hp.num_past_covariates, hp.num_future_covariates) == (2, 2, 1)
    assert hp.static_cardinalities == [3] and hp.num_static_real == 2
    assert hp.naive_seasons == ["7 days 00:00:00"] and dm.mase_season == 48
    # the same sizes as the data module built directly in Python
    direct = TimeSeriesDataModule(**{**data_args, "data": str(tmp_path / "meters.csv")})
    assert direct.model_sizes() == {name: hp[name] for name in direct.model_sizes()}
