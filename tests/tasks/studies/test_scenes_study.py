"""posenc study scenes: a tiny end-to-end run writes one accuracy per resized size and per
larger canvas, the table names each column's axis, and a bad task is named."""

from __future__ import annotations

import csv
from pathlib import Path

import pytest
from posenc.tasks.studies import ScenesStudy, run_study

pytest.importorskip("matplotlib")

CONFIGS = Path(__file__).resolve().parents[3] / "configs"


def _config(task: str = "relation") -> dict:
    return {
        "task": task,
        "seeds": [0],
        "encodings": {"learned": "learned", "rope_axial": "rope_axial"},
        "eval_image_sizes": [32, 44],
        "eval_canvases": [48],
        "trainer": {"max_epochs": 1, "limit_train_batches": 2},
        "model": {"img_size": 32, "patch_size": 4, "embed_dim": 16, "depth": 1,
                  "num_heads": 2},
        "data": {"train_scenes": 40, "val_scenes": 10, "test_scenes": 30,
                 "eval_batch_size": 30},
    }


@pytest.mark.slow
def test_scenes_study_writes_an_accuracy_per_resized_size_and_canvas(tmp_path):
    out = run_study("scenes", _config(), tmp_path, log=lambda _: None)
    with (out / "results.csv").open(newline="") as handle:
        rows = list(csv.DictReader(handle))
    assert [(r["encoding"], r["seed"]) for r in rows] == [("learned", "0"), ("rope_axial", "0")]
    assert list(rows[0])[:5] == ["encoding", "seed", "acc_32", "acc_44", "acc_48"]
    for row in rows:  # 30 test scenes: every accuracy is a multiple of 1/30
        for size in ("32", "44", "48"):
            assert round(float(row[f"acc_{size}"]) * 30, 4) % 1 == 0
    table = (out / "table.md").read_text().splitlines()
    assert table[0] == "| encoding | seeds | 32 (train) | 44 (resized) | 48 (canvas) |"
    assert (out / "plot.png").read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"


def test_the_task_picks_the_data_module_and_a_bad_one_is_named():
    from posenc.tasks import PlacedScenesDataModule, RelationScenesDataModule

    for task, cls in (("placed", PlacedScenesDataModule), ("relation", RelationScenesDataModule)):
        study = ScenesStudy(_config(task))
        data = study.data_module(study.data_args())
        assert type(data) is cls and data.eval_image_sizes == [32, 44, 48]
    with pytest.raises(ValueError, match="task"):
        ScenesStudy(_config("mosaic")).data_module({})


@pytest.mark.slow
def test_pretraining_short_of_min_accuracy_is_refused_and_saves_nothing(tmp_path):
    config = {**_config("placed"),
              "encodings": {"learned": {"encoding": "learned", "from_pretrain": True}},
              "pretrain": {"trainer": {"max_epochs": 1, "limit_train_batches": 1},
                           "min_accuracy": 0.99, "dir": str(tmp_path / "pretrain")}}
    with pytest.raises(ValueError, match=r"pretrain\.min_accuracy=0\.99"):
        run_study("scenes", config, tmp_path / "out", log=lambda _: None, plot=False)
    assert not (tmp_path / "pretrain").exists()
    # The scenes' task is part of the pretrained file's name: placed and relation differ.
    relation = ScenesStudy({**config, "task": "relation"})
    assert relation.pretrained_path() != ScenesStudy(config).pretrained_path()


@pytest.mark.slow
def test_fine_tunes_at_another_training_size_start_from_one_pretraining(tmp_path):
    """The converged fine-tune study's shape: an augment axis (training size 28 or 56) over
    from_pretrain runs; the pretraining reads ``data`` alone, once."""
    config = {
        "seeds": [0],
        "encodings": {"learned": {"encoding": "learned", "from_pretrain": True}},
        "augment": {"train28": {}, "train56": {"image_size": 56}},
        "pretrain": {"trainer": {"max_epochs": 1, "limit_train_batches": 2},
                     "min_accuracy": 0.0, "dir": str(tmp_path / "pretrain")},
        "eval_image_sizes": [28, 56],
        "trainer": {"max_epochs": 1, "limit_train_batches": 2, "limit_test_batches": 1},
        "model": {"img_size": 28, "patch_size": 4, "embed_dim": 16, "depth": 1,
                  "num_heads": 2},
        "data": {"batch_size": 32, "eval_batch_size": 100},
    }
    logged = []
    out = run_study("resolution", config, tmp_path / "out", log=logged.append, plot=False)
    with (out / "results.csv").open(newline="") as handle:
        rows = list(csv.DictReader(handle))
    assert [r["augment"] for r in rows] == ["train28", "train56"]
    assert len(list((tmp_path / "pretrain").glob("*.pth"))) == 1
    assert sum("pretrained weights" in line for line in logged) == 1


@pytest.mark.parametrize("name", ["study_scenes_placed", "study_scenes_finetune",
                                  "study_finetune_converged"])
def test_shipped_configs_build_every_run_model(name):
    """The configs as docs/studies runs them: every entry builds its model, and the scenes
    study covers every name of posenc.spatial.ENCODINGS."""
    from posenc.spatial import ENCODINGS
    from posenc.tasks import ImageClassifier
    from posenc.tasks.studies import STUDIES, _load_config

    config = _load_config(str(CONFIGS / f"{name}.yaml"))
    study = STUDIES["scenes" if "scenes" in name else "resolution"](config)
    if name == "study_scenes_placed":
        assert set(ENCODINGS) <= set(study.encodings())
    if "scenes" in name:
        assert study.data_module(study.data_args()).eval_image_sizes == [32, 44, 60, 48, 64]
    for encoding in study.encodings():
        args = study.model_args(encoding)
        args.pop("checkpoint_path", None)  # the pretrained file: made by the study
        assert sum(p.numel() for p in ImageClassifier(**args).parameters()) > 0, encoding


@pytest.mark.parametrize("name", ["scenes_placed", "scenes_finetune"])
def test_the_published_scenes_tables_are_rebuilt_from_their_csv_exactly(name):
    """docs/studies/scenes_* came out of the studies: their rows, every encoding at every
    seed of the config, give the published table."""
    from posenc.tasks.studies import _load_config
    from posenc.tasks.studies.runs import read_rows

    docs = CONFIGS.parent / "docs" / "studies"
    study = ScenesStudy(_load_config(str(CONFIGS / f"study_{name}.yaml")))
    rows = read_rows(docs / f"{name}_results.csv")
    assert sorted((r["encoding"], int(r["seed"])) for r in rows) == sorted(
        (e, s) for e in study.encodings() for s in study.config["seeds"])
    assert study.table(rows) == (docs / f"{name}_table.md").read_text()
    assert (docs / f"{name}.png").read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"


@pytest.mark.parametrize(("heading", "name"), [
    ("## Scenes study", "scenes_placed"),
    ("### Fine-tuning a converged model on the scenes", "scenes_finetune"),
    ("### Fine-tuning a converged MNIST model (issue 32)", "finetune_converged")])
def test_the_scenes_sections_quote_their_tables(heading, name):
    """Every decimal number in the prose of a docs/studies scenes section is a cell of its
    published table (rebuilt from its CSV above)."""
    import re

    docs = CONFIGS.parent / "docs" / "studies"
    section = re.split(r"\n##+ ", (docs / "README.md").read_text().split(heading, 1)[1])[0]
    prose = "\n".join(line for line in section.splitlines() if not line.startswith("|"))
    cells = set(re.findall(r"\d+\.\d", (docs / f"{name}_table.md").read_text()))
    quoted = re.findall(r"\d+\.\d", prose)
    assert len(quoted) >= 8
    assert [q for q in quoted if q not in cells] == []


def test_the_published_converged_fine_tune_table_is_rebuilt_from_its_csv_exactly():
    """docs/studies/finetune_converged_*: every entry at every seed and training size."""
    from posenc.tasks.studies import ResolutionStudy, _load_config
    from posenc.tasks.studies.runs import read_rows

    docs = CONFIGS.parent / "docs" / "studies"
    study = ResolutionStudy(_load_config(str(CONFIGS / "study_finetune_converged.yaml")))
    rows = read_rows(docs / "finetune_converged_results.csv")
    assert sorted((r["encoding"], r["augment"], int(r["seed"])) for r in rows) == sorted(
        (k["encoding"], k["augment"], k["seed"]) for k in study.runs())
    assert study.table(rows) == (docs / "finetune_converged_table.md").read_text()
    assert (docs / "finetune_converged.png").read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
