"""posenc study scenes: a tiny end-to-end run writes one accuracy per resized size and per
larger canvas, the table names each column's axis, and a bad task is named."""

from __future__ import annotations

import csv

import pytest
from posenc.tasks.studies import ScenesStudy, run_study

pytest.importorskip("matplotlib")


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
    from posenc.tasks.datasets import PlacedScenesDataModule, RelationScenesDataModule

    for task, cls in (("placed", PlacedScenesDataModule), ("relation", RelationScenesDataModule)):
        study = ScenesStudy(_config(task))
        data = study.data_module(study.data_args())
        assert type(data) is cls and data.eval_image_sizes == [32, 44, 48]
    with pytest.raises(ValueError, match="task"):
        ScenesStudy(_config("mosaic")).data_module({})
