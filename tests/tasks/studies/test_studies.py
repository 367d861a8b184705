"""posenc study: tiny end-to-end runs of both studies, resume, the table/CSV/PNG they write."""

from __future__ import annotations

import csv
import sys
from pathlib import Path

import pytest
import torch
import yaml
from posenc.tasks.cli import main as posenc_main
from posenc.tasks.studies import IrregularStudy, ResolutionStudy, run_study
from posenc.tasks.vision.data import ResizeCollate

pytest.importorskip("matplotlib")

PNG_MAGIC = b"\x89PNG\r\n\x1a\n"
CONFIGS = Path(__file__).resolve().parents[3] / "configs"
TINY_TRAINER = {"max_epochs": 1, "limit_train_batches": 2, "limit_test_batches": 1}


def _rows(path: Path) -> list[dict[str, str]]:
    with path.open(newline="") as handle:
        return list(csv.DictReader(handle))


def _resolution_config() -> dict:
    return {
        "seeds": [0],
        "encodings": {"learned": "learned", "rope_axial": "rope_axial"},
        "eval_image_sizes": [28, 36, [28, 44]],
        "trainer": dict(TINY_TRAINER),
        "model": {"img_size": 28, "patch_size": 4, "embed_dim": 16, "depth": 1,
                  "num_heads": 2},
        "data": {"batch_size": 32, "eval_batch_size": 100},
    }


def test_resolution_study_writes_csv_table_png_per_test_size(tmp_path):
    out = run_study("resolution", _resolution_config(), tmp_path, log=lambda _: None)

    rows = _rows(out / "results.csv")
    assert [(r["encoding"], r["seed"]) for r in rows] == [("learned", "0"), ("rope_axial", "0")]
    assert list(rows[0]) == ["encoding", "seed", "acc_28", "acc_36", "acc_28x44", "seconds",
                             "config", "spec"]
    for row in rows:  # a real accuracy at every size, the non-square one included
        assert all(0 <= float(row[f"acc_{s}"]) <= 1 for s in ("28", "36", "28x44"))
    table = (out / "table.md").read_text().splitlines()
    assert table[0] == "| encoding | seeds | 28 (train) | 36 | 28x44 |"
    assert [line.split("|")[1].strip() for line in table[2:4]] == ["learned", "rope_axial"]
    assert (out / "plot.png").read_bytes()[:8] == PNG_MAGIC


def test_parallel_workers_give_the_serial_results(tmp_path):
    config = _resolution_config()
    serial = run_study("resolution", config, tmp_path / "serial", log=lambda _: None,
                       plot=False, threads=1)
    logged = []
    parallel = run_study("resolution", config, tmp_path / "parallel", log=logged.append,
                         plot=False, workers=2, threads=1)

    def metrics(path):  # run order may differ; the numbers must not
        return {(r["encoding"], r["seed"]): {k: float(v) for k, v in r.items()
                                             if k.startswith("acc_")}
                for r in _rows(path / "results.csv")}

    assert metrics(parallel) == metrics(serial)
    assert len(metrics(parallel)) == 2 and len(logged) == 2
    assert (parallel / "table.md").read_text() == (serial / "table.md").read_text()


def test_rows_of_a_changed_configuration_are_refused_not_reused(tmp_path, monkeypatch):
    monkeypatch.setattr(ResolutionStudy, "run",
                        lambda self, key: {"acc_28": 0.9, "acc_36": 0.8, "acc_28x44": 0.7})
    config = _resolution_config()
    run_study("resolution", config, tmp_path, log=lambda _: None, plot=False)

    # More seeds, a subset of encodings, other worker settings: the same runs, resumed.
    grown = {**config, "seeds": [0, 1], "workers": 1, "threads": 1,
             "encodings": {"learned": "learned"}}
    run_study("resolution", grown, tmp_path, log=lambda _: None, plot=False)
    assert len(_rows(tmp_path / "results.csv")) == 3

    for changed in ({**config, "model": {**config["model"], "depth": 2}},
                    {**config, "trainer": {**config["trainer"], "max_epochs": 2}},
                    {**config, "encodings": {**config["encodings"], "rope_axial": "rope_mixed"}}):
        with pytest.raises(ValueError, match="another configuration"):
            run_study("resolution", changed, tmp_path, log=lambda _: None, plot=False)


def test_missing_matplotlib_fails_before_the_first_run_not_after_the_last(tmp_path,
                                                                          monkeypatch):
    ran = []
    monkeypatch.setattr(ResolutionStudy, "run", lambda self, key: ran.append(key) or {
        "acc_28": 0.9, "acc_36": 0.8, "acc_28x44": 0.7})
    monkeypatch.setitem(sys.modules, "matplotlib", None)  # import matplotlib -> ImportError
    with pytest.raises(ImportError, match=r"posenc\[plot\]"):
        run_study("resolution", _resolution_config(), tmp_path, log=lambda _: None)
    assert ran == []
    run_study("resolution", _resolution_config(), tmp_path, log=lambda _: None, plot=False)
    assert len(ran) == 2


def test_workers_must_be_a_positive_int(tmp_path):
    with pytest.raises(ValueError, match="workers must be >= 1"):
        run_study("resolution", _resolution_config(), tmp_path, workers=0)


def test_resume_skips_finished_runs_and_runs_only_missing_ones(tmp_path, monkeypatch):
    config = _resolution_config()
    config["seeds"] = [0, 1]
    shared, specs = ResolutionStudy(config).fingerprints()
    done = {"encoding": "learned", "seed": "0", "acc_28": "0.5", "acc_36": "0.4",
            "acc_28x44": "0.3", "seconds": "1.0", "config": shared, "spec": specs["learned"]}
    with (tmp_path / "results.csv").open("w", newline="") as handle:
        writer = csv.DictWriter(handle, fieldnames=list(done))
        writer.writeheader()
        writer.writerow(done)
    ran = []

    def fake_run(self, key):
        ran.append((key["encoding"], key["seed"]))
        return {"acc_28": 0.9, "acc_36": 0.8, "acc_28x44": 0.7}

    monkeypatch.setattr(ResolutionStudy, "run", fake_run)
    run_study("resolution", config, tmp_path, log=lambda _: None, plot=False)
    assert ran == [("rope_axial", 0), ("learned", 1), ("rope_axial", 1)]
    rows = _rows(tmp_path / "results.csv")
    assert len(rows) == 4 and rows[0] == done  # the finished run is kept, not redone

    ran.clear()
    run_study("resolution", config, tmp_path, log=lambda _: None, plot=False)
    assert ran == []  # everything is in the CSV now
    table = (tmp_path / "table.md").read_text()
    assert "| learned | 2 | 70.0 ± 28.3 | 60.0 ± 28.3 | 50.0 ± 28.3 |" in table


def test_irregular_study_through_the_posenc_cli(tmp_path):
    config = {
        "seeds": [0, 1, 2],
        "keep": [0.5, 1.0],
        "encodings": {"none": {"encodings": [], "relative": None},
                      "index_sinusoidal": {"encodings": ["index_sinusoidal"],
                                           "relative": None},
                      "rope_time": {"encodings": [], "relative": "rope"}},
        "trainer": {"max_epochs": 3},
        "model": {"dim": 16, "depth": 1, "num_heads": 2},
        "data": {"context_length": "48h", "horizon": "12h", "stride": "24h",
                 "batch_size": 32},
    }
    path = tmp_path / "study.yaml"
    path.write_text(yaml.safe_dump(config))
    out = tmp_path / "out"
    posenc_main(["study", "irregular", "--config", str(path), "--out", str(out),
                 "--seeds", "1", "--keep", "0.5", "--encodings", "none,index_sinusoidal",
                 "--max_epochs", "1", "--limit_train_batches", "2",
                 "--limit_test_batches", "1"])

    rows = _rows(out / "results.csv")
    assert [(r["encoding"], float(r["keep"]), r["seed"]) for r in rows] == [
        ("none", 0.5, "0"), ("index_sinusoidal", 0.5, "0")]
    assert list(rows[0]) == ["encoding", "keep", "seed", "mae", "rmse", "mase", "seconds",
                             "config", "spec"]
    assert all(float(r["mae"]) > 0 and float(r["rmse"]) >= float(r["mae"]) for r in rows)
    table = (out / "table.md").read_text().splitlines()
    assert table[0] == "| encoding | seeds | MAE @ 50% | RMSE @ 50% |"
    assert len(table[2:4]) == 2 and table[4] == ""
    assert (out / "plot.png").read_bytes()[:8] == PNG_MAGIC
    assert IrregularStudy(config).runs()[:2] == [
        {"encoding": "none", "keep": 0.5, "seed": 0},
        {"encoding": "index_sinusoidal", "keep": 0.5, "seed": 0}]


@pytest.mark.parametrize("name", ["resolution", "irregular"])
def test_shipped_study_configs_build_every_encoding(name):
    """configs/study_*.yaml as the README runs them: every encoding spec builds its model."""
    from posenc.tasks import Forecaster, ImageClassifier
    from posenc.tasks.studies import STUDIES, _load_config

    config = _load_config(str(CONFIGS / f"study_{name}.yaml"))
    study = STUDIES[name](config)
    model_class = {"resolution": ImageClassifier, "irregular": Forecaster}[name]
    assert len(study.runs()) == len(config["seeds"]) * len(config["encodings"]) * len(
        config.get("keep", [None]))
    for encoding in study.encodings():
        model = model_class(**study.model_args(encoding))
        assert sum(p.numel() for p in model.parameters()) > 0, encoding


def test_resize_collate_makes_non_square_batches():
    items = [(torch.rand(1, 28, 28), 3), (torch.rand(1, 28, 28), 5)]
    images, labels = ResizeCollate((28, 44))(items)
    assert images.shape == (2, 1, 28, 44) and labels.tolist() == [3, 5]
    assert ResizeCollate([28, 28]).size == 28
    with pytest.raises(ValueError, match="size"):
        ResizeCollate((28, 44, 2))


# -- results: one mean ± std, metrics by name (a missing one is an error) ----------------------
DOCS = Path(__file__).resolve().parents[3] / "docs" / "studies"


@pytest.mark.parametrize(("study_name", "name"), [("resolution", "resolution"),
                                                   ("resolution", "resolution_scale"),
                                                   ("resolution", "finetune"),
                                                   ("irregular", "irregular")])
def test_the_published_tables_are_rebuilt_from_their_csv_exactly(study_name, name):
    """docs/studies/*_table.md came out of the study: the same rows give the same table."""
    from posenc.tasks.studies import STUDIES, _load_config
    from posenc.tasks.studies.runs import read_rows

    study = STUDIES[study_name](_load_config(str(CONFIGS / f"study_{name}.yaml")))
    rows = read_rows(DOCS / f"{name}_results.csv")
    assert study.table(rows) == (DOCS / f"{name}_table.md").read_text()


def test_mean_std_is_the_sample_std_and_one_value_has_none():
    from posenc.tasks.studies.runs import format_mean_std, mean_std

    assert mean_std([0.5, 0.9]) == pytest.approx((0.7, 0.2828427), abs=1e-7)
    assert mean_std([0.5]) == (0.5, 0.0)
    assert format_mean_std([0.5, 0.9], 100, 1) == "70.0 ± 28.3"
    assert format_mean_std([0.5], 100, 1) == "50.0" and format_mean_std([], 100, 1) == "–"
    # A diverged run is shown, not averaged away.
    assert format_mean_std([1.0, float("nan")], 1, 2) == "nan ± nan"


def test_a_metric_missing_from_the_results_is_an_error_naming_it():
    row = {"encoding": "learned", "seed": "0", "acc_28": "0.9", "acc_36": "", "seconds": "1"}
    config = {**_resolution_config(), "eval_image_sizes": [28, 36]}
    with pytest.raises(ValueError, match=r"results row \{'encoding': 'learned', 'seed': '0'\} "
                                         r"has no value for metric 'acc_36'; its columns: "
                                         r"\['acc_28', 'encoding', 'seconds', 'seed'\]"):
        ResolutionStudy(config).table([row])
    with pytest.raises(ValueError, match="no value for metric 'rmse'"):
        IrregularStudy({"keep": [0.5], "encodings": {"none": {}}}).table(
            [{"encoding": "none", "keep": "0.5", "seed": "0", "mae": "1.5"}])


class _FakeTrainer:
    """Stands in for lightning's Trainer: records the weights it is given, logs ``LOGGED``."""

    LOGGED = [{"test/acc_28": 0.9, "test/accuracy_36": 0.8}]
    fitted: list[torch.Tensor] = []

    def __init__(self, **kwargs):
        pass

    def fit(self, model, datamodule):
        self.fitted.append(torch.cat([p.detach().flatten() for p in model.parameters()]))

    def test(self, model, datamodule, verbose):
        return self.LOGGED


def test_a_metric_the_test_run_did_not_log_is_an_error_not_nan(monkeypatch):
    """A renamed metric used to become NaN in every row; now the run stops and says so."""
    import lightning.pytorch

    monkeypatch.setattr(lightning.pytorch, "Trainer", _FakeTrainer)
    config = {**_resolution_config(), "eval_image_sizes": [28, 36]}
    with pytest.raises(ValueError, match=r"the test run logged no metric 'test/acc_36' \(wanted "
                                         r"\['test/acc_28', 'test/acc_36'\]\); it logged "
                                         r"\['test/acc_28', 'test/accuracy_36'\]"):
        ResolutionStudy(config).run({"encoding": "learned", "seed": 0})


def test_the_run_seed_fixes_the_initial_weights(monkeypatch):
    """The model is built after seeding, so a run in a pool worker starts from the weights
    the same run starts from in this process."""
    import lightning.pytorch

    monkeypatch.setattr(lightning.pytorch, "Trainer", _FakeTrainer)
    monkeypatch.setattr(_FakeTrainer, "LOGGED", [{"test/acc_28": 0.5}])
    monkeypatch.setattr(_FakeTrainer, "fitted", [])
    study = ResolutionStudy({**_resolution_config(), "eval_image_sizes": [28]})
    for seed in (0, 0, 1):
        assert study.run({"encoding": "learned", "seed": seed}) == {"acc_28": 0.5}
    first, again, other = _FakeTrainer.fitted
    assert torch.equal(first, again) and not torch.equal(first, other)


def test_configs_naming_index_sinusoidal_in_its_old_module_still_build():
    from posenc.tasks import Forecaster
    from posenc.temporal import IndexSinusoidal

    old = {"class_path": "posenc.tasks.studies.IndexSinusoidal"}
    model = Forecaster(dim=16, depth=1, num_heads=2, encodings=[old], relative=None)
    [encoding] = model.model.time_features.encodings
    assert type(encoding) is IndexSinusoidal and encoding.encoding.dim == 16


def _finetune_config(tmp_path: Path) -> dict:
    config = _resolution_config()
    config["eval_image_sizes"] = [28, 56]
    config["pretrain"] = {"seed": 0, "dir": str(tmp_path / "pretrain"),
                          "trainer": {"max_epochs": 2}}
    config["encodings"] = {
        "learned": {"encoding": "learned", "from_pretrain": True, "lr": 1e-4},
        "rope_axial": {"encoding": "rope_axial", "from_pretrain": True, "freeze_steps": 2},
        "rope_axial_scratch": {"encoding": "rope_axial", "trainer": {"max_epochs": 3}}}
    return config


@pytest.mark.slow
def test_finetune_study_pretrains_once_and_fine_tunes_from_the_timm_file(tmp_path,
                                                                         monkeypatch):
    """from_pretrain runs start from one cached timm file of the pretrained learned-APE model;
    an entry's trainer (a from-scratch run's longer budget) replaces the shared one."""
    from posenc.tasks.vision import ImageClassifier

    config = _finetune_config(tmp_path)
    study = ResolutionStudy(config)
    path = study.pretrained_path()
    assert path.parent == tmp_path / "pretrain" and path.name.startswith("vit_")
    assert study.trainer_args("rope_axial_scratch")["max_epochs"] == 3
    assert study.trainer_args("learned")["max_epochs"] == 1
    assert study.model_args("learned")["checkpoint_path"] == str(path)
    assert "checkpoint_path" not in study.model_args("rope_axial_scratch")
    assert "trainer" not in study.model_args("rope_axial_scratch")

    steps = []
    real_fit = ImageClassifier.on_fit_end

    def record_steps(self):  # global steps of every fit: pretrain, then each run
        steps.append(self.trainer.global_step)
        return real_fit(self)

    monkeypatch.setattr(ImageClassifier, "on_fit_end", record_steps)
    logged = []
    out = run_study("resolution", config, tmp_path / "out", log=logged.append, plot=False)
    # 2 train batches an epoch: pretrain 2 epochs, fine-tunes 1, the scratch run 3.
    assert steps == [4, 2, 2, 6]
    assert logged[0].startswith(f"pretrained weights: {path} (acc_28=")
    saved = torch.load(path, weights_only=True)
    assert saved["pos_embed"].shape == (1, 1 + 49, 16)  # timm: class token + a 7x7 grid
    rows = _rows(out / "results.csv")
    assert [r["encoding"] for r in rows] == ["learned", "rope_axial", "rope_axial_scratch"]

    # A second seed reuses the file; a changed pretraining trains another one.
    logged.clear()
    run_study("resolution", {**config, "seeds": [0, 1]}, tmp_path / "out",
              log=logged.append, plot=False)
    assert f"pretrained weights: {path} (cached)" in logged
    assert torch.equal(torch.load(path, weights_only=True)["pos_embed"], saved["pos_embed"])
    longer = {**config, "pretrain": {**config["pretrain"], "trainer": {"max_epochs": 3}}}
    assert ResolutionStudy(longer).pretrained_path() != path


def test_from_pretrain_without_a_pretrain_section_is_an_error_naming_it():
    config = {**_resolution_config(), "encodings": {"learned": {"from_pretrain": True}}}
    with pytest.raises(ValueError, match="from_pretrain: true needs the config's pretrain"):
        ResolutionStudy(config).model_args("learned")
    config["pretrain"] = {"trainer": {}}
    config["encodings"]["learned"]["trainer"] = 3
    with pytest.raises(TypeError, match=r"encodings.learned.trainer must be a mapping"):
        ResolutionStudy(config).trainer_args("learned")
