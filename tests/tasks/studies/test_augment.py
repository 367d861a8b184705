"""The resolution study's ``augment`` axis (with / without scale augmentation): runs, data
arguments, the table and plot from a results.csv, resume, and the shipped config."""

from __future__ import annotations

import csv
import math
from pathlib import Path

import pytest
from posenc.tasks import ImageClassifier
from posenc.tasks.studies import ResolutionStudy, run_study

CONFIGS = Path(__file__).resolve().parents[3] / "configs"
PNG_MAGIC = b"\x89PNG\r\n\x1a\n"
RATIO = (3 / 4, 4 / 3)


# -- the study's augment axis --------------------------------------------------------------
def _config(**overrides) -> dict:
    return {
        "seeds": [0, 1],
        "encodings": {"learned": "learned", "rope_axial": "rope_axial"},
        "augment": {"none": {}, "scale": {"train_scale": [0.35, 1.0]}},
        "eval_image_sizes": [28, 56],
        "trainer": {"max_epochs": 1},
        "model": {"img_size": 28, "patch_size": 4, "embed_dim": 16, "depth": 1,
                  "num_heads": 2},
        "data": {"batch_size": 32, "seed": 0},
        **overrides,
    }


def test_runs_cover_every_encoding_setting_and_seed_seed_major():
    study = ResolutionStudy(_config())
    assert study.key_columns == ("encoding", "augment", "seed")
    assert study.runs() == [
        {"encoding": e, "augment": a, "seed": s} for s in (0, 1) for a in ("none", "scale")
        for e in ("learned", "rope_axial")]
    assert study.data_args("scale") == {"batch_size": 32, "seed": 0,
                                        "train_scale": [0.35, 1.0],
                                        "eval_image_sizes": [28, 56]}
    assert study.data_args("none") == {"batch_size": 32, "seed": 0,
                                       "eval_image_sizes": [28, 56]}
    without = ResolutionStudy({k: v for k, v in _config().items() if k != "augment"})
    assert without.key_columns == ("encoding", "seed") and len(without.runs()) == 4
    assert without.data_args() == {"batch_size": 32, "seed": 0, "eval_image_sizes": [28, 56]}


@pytest.mark.parametrize(("augment", "error", "match"), [
    ([{"train_scale": [0.35, 1.0]}], ValueError, "augment must be a non-empty mapping"),
    ({}, ValueError, "augment must be a non-empty mapping"),
    ({"scale": [0.35, 1.0]}, TypeError, r"augment.scale must be a mapping of data module "
                                        r"arguments \(or empty\), got list"),
    ({"big": {"eval_image_sizes": [56]}}, ValueError, "augment.big may not set "
                                                      "eval_image_sizes"),
])
def test_bad_augment_settings_name_the_setting(augment, error, match):
    with pytest.raises(error, match=match):
        ResolutionStudy(_config(augment=augment)).runs()


def test_unknown_augment_setting_lists_the_known_ones():
    with pytest.raises(ValueError, match=r"augment='crop' is not a setting of the config's "
                                         r"augment \['none', 'scale'\]"):
        ResolutionStudy(_config()).data_args("crop")


def test_each_run_trains_on_its_settings_data(monkeypatch):
    import lightning.pytorch

    seen = []

    class FakeTrainer:
        def __init__(self, **kwargs):
            pass

        def fit(self, model, datamodule):
            seen.append((datamodule.train_scale, datamodule.eval_image_sizes))

        def test(self, model, datamodule, verbose):
            return [{"test/acc_28": 0.9, "test/acc_56": 0.5}]

    monkeypatch.setattr(lightning.pytorch, "Trainer", FakeTrainer)
    study = ResolutionStudy(_config())
    for augment in ("none", "scale"):
        assert study.run({"encoding": "learned", "augment": augment, "seed": 0}) == {
            "acc_28": 0.9, "acc_56": 0.5}
    assert seen == [(None, [28, 56]), ((0.35, 1.0), [28, 56])]


def _fake_rows() -> list[dict[str, str]]:
    accuracy = {("learned", "none"): (0.9, 0.5), ("rope_axial", "none"): (0.95, 0.2),
                ("learned", "scale"): (0.8, 0.7), ("rope_axial", "scale"): (0.85, 0.8)}
    return [{"encoding": e, "augment": a, "seed": str(s), "acc_28": str(acc28 + 0.01 * s),
             "acc_56": str(acc56 - 0.01 * s), "seconds": "1.0"}
            for s in (0, 1) for (e, a), (acc28, acc56) in accuracy.items()]


def test_table_has_a_block_per_setting_from_a_results_csv(tmp_path):
    from posenc.tasks.studies.runs import read_rows

    path = tmp_path / "results.csv"
    rows = _fake_rows()
    with path.open("w", newline="") as handle:
        writer = csv.DictWriter(handle, fieldnames=list(rows[0]))
        writer.writeheader()
        writer.writerows(rows)
    study = ResolutionStudy(_config())
    assert study.table(read_rows(path)).splitlines() == [
        "| encoding | augment | seeds | 28 (train) | 56 |",
        "|---|---|---|---|---|",
        "| learned | none | 2 | 90.5 ± 0.7 | 49.5 ± 0.7 |",
        "| rope_axial | none | 2 | 95.5 ± 0.7 | 19.5 ± 0.7 |",
        "| learned | scale | 2 | 80.5 ± 0.7 | 69.5 ± 0.7 |",
        "| rope_axial | scale | 2 | 85.5 ± 0.7 | 79.5 ± 0.7 |",
        "",
        "Test accuracy (%), mean ± std over seeds. Training-data augmentation (none: none; "
        "scale: train_scale=[0.35, 1.0]).",
    ]
    study.plot(read_rows(path), tmp_path / "plot.png")
    png = (tmp_path / "plot.png").read_bytes()
    assert png[:8] == PNG_MAGIC
    width, height = (int.from_bytes(png[16 + 4 * i:20 + 4 * i], "big") for i in range(2))
    assert (width, height) == (1400, 450)  # two panels of 7 x 4.5 inches at 100 dpi


def test_study_with_the_axis_resumes_and_refuses_rows_without_it(tmp_path, monkeypatch):
    ran = []
    monkeypatch.setattr(ResolutionStudy, "run", lambda self, key: ran.append(key) or {
        "acc_28": 0.9, "acc_56": 0.5})
    config = _config(seeds=[0])
    run_study("resolution", config, tmp_path / "axis", log=lambda _: None, plot=False)
    with (tmp_path / "axis" / "results.csv").open(newline="") as handle:
        rows = list(csv.DictReader(handle))
    assert [(r["encoding"], r["augment"], r["seed"]) for r in rows] == [
        ("learned", "none", "0"), ("rope_axial", "none", "0"), ("learned", "scale", "0"),
        ("rope_axial", "scale", "0")]
    ran.clear()
    run_study("resolution", config, tmp_path / "axis", log=lambda _: None, plot=False)
    assert ran == []
    # Rows of the study without the axis (or other settings) are another configuration.
    without = {k: v for k, v in config.items() if k != "augment"}
    run_study("resolution", without, tmp_path / "plain", log=lambda _: None, plot=False)
    with pytest.raises(ValueError, match="another configuration"):
        run_study("resolution", config, tmp_path / "plain", log=lambda _: None, plot=False)
    with pytest.raises(ValueError, match="another configuration"):
        run_study("resolution", _config(seeds=[0], augment={"none": {}}), tmp_path / "axis",
                  log=lambda _: None, plot=False)


def test_shipped_scale_config_builds_every_encoding_and_setting():
    from posenc.tasks import MNISTDataModule
    from posenc.tasks.studies import _load_config

    config = _load_config(str(CONFIGS / "study_resolution_scale.yaml"))
    study = ResolutionStudy(config)
    assert len(study.runs()) == 3 * 7 * 2
    assert list(study.augments()) == ["none", "scale"]
    for augment in study.augments():
        data = MNISTDataModule(**study.data_args(augment))
        assert (data.train_scale is None) == (augment == "none")
    assert data.train_scale == (0.35, 1.0) and data.train_ratio == pytest.approx(RATIO)
    for encoding in study.encodings():
        model = ImageClassifier(**study.model_args(encoding))
        jitter = [m for m in model.modules() if type(m).__name__ == "CoordAugment"]
        assert bool(jitter) == encoding.endswith("_jitter"), encoding
    assert math.isclose(config["augment"]["scale"]["train_ratio"][1], 4 / 3)
