"""``posenc study forecast``: its runs, its data-module names, its table from results rows."""

from __future__ import annotations

import pytest
from posenc.tasks.datasets import BirthdaysDataModule
from posenc.tasks.studies.forecast import METRICS, ForecastStudy, data_module

CONFIG = {
    "seeds": [0, 1],
    "datasets": {"births": {"data": {"class": "BirthdaysDataModule",
                                     "init_args": {"states": ["CA"], "start": 1988}},
                            "model": {"time_unit": "1D"},
                            "trainer": {"limit_train_batches": 5}},
                 "cgm": {"data": {"class": "GlucoseDataModule"}, "baseline": "naive"}},
    "encodings": {"none": {"encodings": [], "relative": None},
                  "rope": {"encodings": [], "relative": "rope"}},
    "model": {"dim": 16},
    "trainer": {"max_epochs": 3, "limit_train_batches": 9},
}


def test_runs_are_seed_major_over_datasets_and_encodings():
    runs = ForecastStudy(CONFIG).runs()
    assert len(runs) == 2 * 2 * 2
    assert runs[:4] == [{"dataset": d, "encoding": e, "seed": 0}
                        for d in ("births", "cgm") for e in ("none", "rope")]


def test_model_arguments_layer_study_dataset_and_encoding():
    args = ForecastStudy(CONFIG).model_args("rope", "births")
    assert args == {"dim": 16, "time_unit": "1D", "encodings": [], "relative": "rope"}


def test_trainer_arguments_layer_study_and_dataset():
    study = ForecastStudy(CONFIG)
    assert study.trainer_args("births") == {"max_epochs": 3, "limit_train_batches": 5}
    assert study.trainer_args("cgm") == {"max_epochs": 3, "limit_train_batches": 9}
    bad = {**CONFIG, "datasets": {"cgm": {**CONFIG["datasets"]["cgm"], "trainer": [8]}}}
    with pytest.raises(ValueError, match=r"datasets.cgm.trainer must be a mapping of Trainer "
                                         r"arguments .*, got \[8\]"):
        ForecastStudy(bad).trainer_args("cgm")


def test_a_run_trains_with_its_datasets_trainer_arguments(monkeypatch):
    from posenc.tasks.studies import forecast

    seen = {}

    def fake_fit_and_test(config, seed, build, metrics):
        seen.update(trainer=config["trainer"], seed=seed, metrics=metrics)
        return {}

    monkeypatch.setattr(forecast, "fit_and_test", fake_fit_and_test)
    ForecastStudy(CONFIG).run({"dataset": "births", "encoding": "none", "seed": 1})
    assert seen == {"trainer": {"max_epochs": 3, "limit_train_batches": 5}, "seed": 1,
                    "metrics": {m: f"test/{m}" for m in METRICS}}


def test_data_modules_are_named_not_imported():
    dm = data_module(CONFIG["datasets"]["births"]["data"], "datasets.births.data")
    assert isinstance(dm, BirthdaysDataModule) and dm.states == ["CA"]
    with pytest.raises(ValueError, match=r"datasets.x.data.class='os.system' is not a "
                                         r"time-series data module of posenc.tasks"):
        data_module({"class": "os.system"}, "datasets.x.data")
    with pytest.raises(ValueError, match=r"datasets.x.data must be a mapping with 'class'"):
        data_module("BirthdaysDataModule", "datasets.x.data")


def _row(dataset, encoding, seed, mae, mae_naive):
    row = {"dataset": dataset, "encoding": encoding, "seed": str(seed)}
    row.update({m: "1.0" for m in METRICS})
    row.update({"mae": str(mae), "mae_naive": str(mae_naive)})
    return row


def test_table_reports_skill_against_the_baseline_on_the_same_windows():
    rows = [_row("births", "none", 0, 12.0, 10.0), _row("births", "none", 1, 8.0, 10.0),
            _row("births", "rope", 0, 5.0, 10.0), _row("cgm", "rope", 0, 3.0, 2.0)]
    table = ForecastStudy(CONFIG).table(rows)
    # skill = 1 - MAE / MAE_naive: -20 % and +20 % average to 0 % (sample std 28.3 %);
    # 1 - 5/10 = 50 %
    assert "| none | 2 | 10.000 ± 2.828 | 1.000 ± 0.000 | 0.0 ± 28.3 % |" in table
    assert "| rope | 1 | 5.000 | 1.000 | 50.0 % |" in table
    assert "| *seasonal naive* | - | 10.000" in table
    assert "**cgm**" in table and "| *naive* | - | 2.000" in table
    assert "skill vs seasonal naive |" in table and "skill vs naive |" in table
    assert "| rope | 1 | 3.000 | 1.000 | -50.0 % |" in table


def test_plot_writes_one_panel_per_dataset(tmp_path):
    pytest.importorskip("matplotlib")
    rows = [_row("births", "none", 0, 12.0, 10.0), _row("cgm", "rope", 0, 3.0, 2.0)]
    ForecastStudy(CONFIG).plot(rows, tmp_path / "forecast.png")
    assert (tmp_path / "forecast.png").stat().st_size > 10_000


def test_the_holidays_study_reruns_the_birthdays_setting_and_its_table_is_its_csv():
    """configs/study_forecast_holidays.yaml: the forecast study's birthdays data, model and
    trainer (so its calendar row is comparable, seed for seed), every encoding builds, and
    docs/studies/forecast_holidays_table.md is its results.csv summarized."""
    pytest.importorskip("holidays")
    from pathlib import Path

    from posenc.tasks import Forecaster
    from posenc.tasks.studies import _load_config
    from posenc.tasks.studies.runs import read_rows

    root = Path(__file__).resolve().parents[3]
    config = _load_config(str(root / "configs" / "study_forecast_holidays.yaml"))
    shipped = _load_config(str(root / "configs" / "study_forecast.yaml"))
    assert list(config["datasets"]) == ["birthdays"]
    assert config["datasets"]["birthdays"] == shipped["datasets"]["birthdays"]
    assert (config["model"], config["trainer"]) == (shipped["model"], shipped["trainer"])
    assert config["encodings"]["calendar"] == shipped["encodings"]["calendar"]
    study = ForecastStudy(config)
    for encoding in study.encodings():
        assert Forecaster(**study.model_args(encoding, "birthdays")).model.time_proj
    rows = read_rows(root / "docs" / "studies" / "forecast_holidays_results.csv")
    assert {r["encoding"] for r in rows} == set(study.encodings())
    text = (root / "docs" / "studies" / "forecast_holidays_table.md").read_text()
    assert study.table(rows) == text
    published = read_rows(root / "docs" / "studies" / "forecast_results.csv")
    assert ({(r["seed"], r["mae"]) for r in published
             if (r["dataset"], r["encoding"]) == ("birthdays", "calendar")}
            == {(r["seed"], r["mae"]) for r in rows if r["encoding"] == "calendar"})
