"""The peer comparison (benchmarks/peers/): its scoring, and every number the README, the docs
and the shipped configs quote from it, read from the committed ``docs/peers_results.csv``."""

from __future__ import annotations

import importlib.util
import json
from pathlib import Path

import numpy as np
import pandas as pd
import pytest

ROOT = Path(__file__).resolve().parents[3]
RESULTS = ROOT / "docs" / "peers_results.csv"
DATASETS = ("birthdays", "elecdemand", "glucose", "nycweather")  # the four shipped data sets
METHODS = {"posenc", "NHITS", "PatchTST", "TFT", "MSTL", "AutoETS", "naive_last"}


def _score_module():
    spec = importlib.util.spec_from_file_location("peers_score",
                                                  ROOT / "benchmarks" / "peers" / "score.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


score = _score_module()


def _squash(text: str) -> str:
    return " ".join(text.split())


def _write_run(out: Path) -> None:
    """One hourly series ``y = [0, 1, 3, 6, 10, 15, 21, 28, 36, 45]`` (steps 1..9), MASE
    season 2, two windows: origin 5 h (points 6, 7 h) and origin 7 h (points 8, 9 h)."""
    out.mkdir()
    times = pd.date_range("2024-01-01", periods=10, freq="h")
    y = np.array([0, 1, 3, 6, 10, 15, 21, 28, 36, 45], float)
    pd.DataFrame({"unique_id": "a", "ds": times, "y": y}).to_csv(out / "data.csv", index=False)
    origin = times[[5, 5, 7, 7]]
    ds = times[[6, 7, 8, 9]]
    truth = y[[6, 7, 8, 9]]
    pd.DataFrame({"unique_id": "a", "origin": origin, "ds": ds, "y": truth,
                  "posenc": truth + [1, -2, 0, 8]}).to_csv(out / "points.csv", index=False)
    pd.DataFrame({"unique_id": "a", "origin": origin, "ds": ds,
                  "NHITS": truth}).to_csv(out / "peers.csv", index=False)
    (out / "meta.json").write_text(json.dumps(
        {"context_length": 3, "mase_season": 2, "cpu_seconds": {"posenc": 4.0},
         "max_epochs": 1, "config": "configs/x.yaml"}))
    (out / "peers_cpu.json").write_text(json.dumps(
        {"cpu_seconds": {"NHITS": 2.0}, "max_steps": 10}))


def test_score_scales_each_window_by_its_series_history_up_to_the_origin(tmp_path):
    # Window 1: |errors| 1, 2 (MAE 1.5); history rows 0-5 at lag 2: |3-0|, |6-1|, |10-3|,
    # |15-6| = 3, 5, 7, 9 (mean 6) -> 0.25. Window 2: |errors| 0, 8 (MAE 4); rows 0-7:
    # 3, 5, 7, 9, 11, 13 (mean 8) -> 0.5. MASE is their mean, 0.375 (the origin's own row in
    # the history: without it the first window would be 1.5 / 5).
    _write_run(tmp_path / "toy")
    rows = score.score(tmp_path / "toy").set_index("method")
    assert rows.loc["posenc", "mae"] == pytest.approx(2.75)
    assert rows.loc["posenc", "rmse"] == pytest.approx(np.sqrt((1 + 4 + 0 + 64) / 4))
    assert rows.loc["posenc", "mase"] == pytest.approx(0.375)
    # RMSSE: window 1 sqrt(2.5 / mean(9, 25, 49, 81)), window 2 sqrt(32 / mean(9..169))
    rmsse = [np.sqrt(2.5 / np.mean([9, 25, 49, 81])),
             np.sqrt(32 / np.mean([9, 25, 49, 81, 121, 169]))]
    assert rows.loc["posenc", "rmsse"] == pytest.approx(np.mean(rmsse))
    assert rows.loc["NHITS", "mae"] == 0 and rows.loc["NHITS", "mase"] == 0
    assert rows.loc["NHITS", "cpu_seconds"] == 2.0
    assert (rows["windows"] == 2).all() and (rows["points"] == 4).all()


def test_score_refuses_a_method_without_a_forecast_at_a_point(tmp_path):
    _write_run(tmp_path / "toy")
    peers = pd.read_csv(tmp_path / "toy" / "peers.csv")
    peers.loc[2, "NHITS"] = np.nan
    peers.to_csv(tmp_path / "toy" / "peers.csv", index=False)
    with pytest.raises(ValueError, match="NHITS has no forecast at 1 points"):
        score.score(tmp_path / "toy")


def _wql(y: np.ndarray, quantiles: dict[float, np.ndarray]) -> float:
    """GluonTS's mean_wQuantileLoss: per level 2 * sum |(y - q) * ((y <= q) - tau)| / sum |y|,
    averaged over the levels."""
    return float(np.mean([2 * np.abs((y - q) * ((y <= q) - tau)).sum() / np.abs(y).sum()
                          for tau, q in quantiles.items()]))


def test_score_averages_the_seeds_and_scores_quantile_forecasts(tmp_path):
    _write_run(tmp_path / "toy")
    points = pd.read_csv(tmp_path / "toy" / "points.csv")
    y = points["y"].to_numpy()
    errors = {0: np.array([1, -2, 0, 8.0]), 1: np.array([1, 0, 0, 0.0])}
    spread = {0: 1.0, 1: 3.0}                        # seed 1's 80% interval holds every point
    points = points.drop(columns="posenc")
    for seed, error in errors.items():
        points[f"posenc@{seed}"] = y + error
        for level, sign in ((0.1, -1), (0.5, 0), (0.9, 1)):
            points[f"posenc@{seed}_q{level}"] = y + error + sign * spread[seed]
    points.to_csv(tmp_path / "toy" / "points.csv", index=False)
    meta = json.loads((tmp_path / "toy" / "meta.json").read_text())
    meta["cpu_seconds"] = {"posenc@0": 4.0, "posenc@1": 6.0}
    (tmp_path / "toy" / "meta.json").write_text(json.dumps(meta))
    rows = score.score(tmp_path / "toy").set_index("method")
    maes = [np.abs(e).mean() for e in errors.values()]          # 2.75, 0.25
    assert rows.loc["posenc", "mae"] == pytest.approx(np.mean(maes))
    assert rows.loc["posenc", "mae_std"] == pytest.approx(np.std(maes, ddof=1))
    assert rows.loc["posenc", "seeds"] == 2 and rows.loc["posenc", "cpu_seconds"] == 5.0
    wqls = [_wql(y, {tau: y + errors[s] + sign * spread[s]
                     for tau, sign in ((0.1, -1), (0.5, 0), (0.9, 1))}) for s in (0, 1)]
    assert rows.loc["posenc", "wql"] == pytest.approx(np.mean(wqls))
    coverage = [np.mean(np.abs(errors[s]) <= spread[s]) for s in (0, 1)]    # 0.5, 1.0
    assert rows.loc["posenc", "coverage_80"] == pytest.approx(np.mean(coverage))
    # NHITS: one run, points only: no spread, no quantile metrics
    assert rows.loc["NHITS", "seeds"] == 1 and np.isnan(rows.loc["NHITS", "mae_std"])
    assert np.isnan(rows.loc["NHITS", "wql"]) and np.isnan(rows.loc["NHITS", "coverage_80"])


def test_the_table_marks_a_difference_inside_the_seeds_spread():
    base = {"dataset": "d", "rmse": 1.0, "mase": 1.0, "rmsse": 1.0, "smape": 0.1,
            "windows": 2, "points": 4, "mase_season": 1, "budget": "", "config": "c.yaml"}
    results = pd.DataFrame([
        {**base, "method": "posenc", "mae": 1.00, "mae_std": 0.05, "seeds": 3,
         "cpu_seconds": 2.0, "coverage_80": 0.7},
        {**base, "method": "NHITS", "mae": 1.08, "mae_std": 0.04, "seeds": 3,
         "cpu_seconds": 1.0, "coverage_80": 0.78},     # 0.08 <= 0.05 + 0.04: inside
        {**base, "method": "PatchTST", "mae": 1.20, "mae_std": 0.04, "seeds": 3,
         "cpu_seconds": 1.0},                          # 0.20 > 0.09: outside
        {**base, "method": "naive_last", "mae": 1.5, "cpu_seconds": 0.0, "seeds": 1}])
    table = score.markdown(results)
    assert "| NHITS | 1.08 ± 0.04 † |" in table and "| PatchTST | 1.2 ± 0.04 |" in table
    assert "| posenc | 1 ± 0.05 |" in table and "(3 seeds)" in table
    assert "posenc and NHITS differ by less than their seeds' spread." in table
    assert "Best calibrated: NHITS (80% interval coverage 0.78)." in table


def _results() -> pd.DataFrame:
    return pd.read_csv(RESULTS, keep_default_na=False, na_values=[""])


def test_the_comparison_covers_the_four_data_sets_and_every_peer():
    results = _results()
    assert sorted(results["dataset"].unique()) == list(DATASETS)
    for dataset, part in results.groupby("dataset"):
        methods = set(part["method"])
        assert METHODS <= methods, f"{dataset}: no {sorted(METHODS - methods)}"
        # A method without numbers says why (statsforecast over its fit budget: glucose).
        not_run = part["budget"].fillna("").str.startswith("not run: ")
        assert part.loc[not_run, "mae"].isna().all()
        run = part[~not_run]
        assert {"posenc", "NHITS", "PatchTST", "TFT", "naive_last"} <= set(run["method"])
        assert (run["points"] == run["points"].iloc[0]).all()  # the same points for all
        assert run[["mae", "rmse", "mase", "rmsse", "smape"]].notna().all().all()


def test_the_peers_table_is_the_csv():
    assert (ROOT / "docs" / "peers_table.md").read_text() == score.markdown(_results())


def test_the_readme_headline_is_read_from_the_csv():
    readme = (ROOT / "README.md").read_text()
    advice = readme.split("## Which encoding should I use", 1)[1].split("\n## ")[0]
    assert _squash(score.headline(_results())) in _squash(advice)


@pytest.mark.parametrize("dataset", DATASETS)
def test_each_shipped_config_quotes_the_number_it_scored(dataset):
    """The posenc row of each data set is its shipped config's own run (posenc_windows.py
    trains it as ``posenc fit`` does, seeded by the CLI), and the config's header quotes it."""
    results = _results()
    config = results[(results["dataset"] == dataset) & (results["method"] == "posenc")]
    path = ROOT / config["config"].iloc[0]
    assert path.name == f"forecast_{dataset}.yaml"
    header = " ".join(line.lstrip("# ") for line in path.read_text().splitlines()
                      if line.startswith("#"))
    assert _squash(score.config_quote(results, dataset)) in _squash(header)


def test_the_targets_say_met_or_not_with_their_numbers():
    base = {"rmse": 1.0, "mase": 1.0, "rmsse": 1.0, "smape": 0.1, "windows": 2, "points": 4,
            "mase_season": 1, "budget": "", "config": "c.yaml", "mae_std": np.nan, "seeds": 1}
    rows = []
    # (posenc MAE, NHITS MAE, naive MAE, posenc CPU s); NHITS's CPU is 10 s everywhere.
    for name, (own, peer, naive, cpu) in {"a": (1.0, 1.1, 2.0, 15.0), "b": (1.0, 1.0, 2.0, 19.0),
                                          "c": (1.2, 1.0, 1.1, 25.0),
                                          "d": (0.9, 1.0, 2.0, 5.0)}.items():
        rows += [{**base, "dataset": name, "method": "posenc", "mae": own, "cpu_seconds": cpu},
                 {**base, "dataset": name, "method": "NHITS", "mae": peer, "cpu_seconds": 10.0},
                 {**base, "dataset": name, "method": "naive_last", "mae": naive,
                  "cpu_seconds": 0.0}]
    lines = score.targets(pd.DataFrame(rows))
    # a, b (a tie counts) and d are no worse than NHITS: 3 of 4; c is worse than its naive and
    # costs 2.5x NHITS.
    assert lines[0].startswith("- Accuracy: posenc's mean MAE no worse than the best neural "
                               "peer's on at least 3 of 4 data sets: **met**, on 3 (a, b, d;")
    assert "c +20.0% (NHITS)" in lines[0] and "a -9.1% (NHITS)" in lines[0]
    assert lines[1] == "- Never worse than the strongest naive: **not met** (worse on c)."
    assert lines[2] == ("- Cost: posenc's CPU time at most 2x NHITS's on every data set: "
                        "**not met** (a 1.5x; b 1.9x; c 2.5x; d 0.5x).")
