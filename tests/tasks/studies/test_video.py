"""The video study: its runs, a tiny run through ``posenc study video``, and the shipped config
and published table."""

from __future__ import annotations

from pathlib import Path

import yaml
from posenc.spatial import VIDEO_ENCODINGS
from posenc.tasks import VideoClassifier
from posenc.tasks.studies import STUDIES, VideoStudy, _load_config
from posenc.tasks.studies.runs import read_rows

from ..conftest import CONFIGS, run_cli

PNG_MAGIC = b"\x89PNG\r\n\x1a\n"
DOCS = Path(__file__).resolve().parents[3] / "docs" / "studies"
TINY = {
    "seeds": [0], "threads": 1, "frame_times": ["real", "index"],
    "encodings": {"none": {}, "mrope": {}},
    "trainer": {"max_epochs": 1},
    "model": {"img_size": 12, "patch_size": 4, "embed_dim": 16, "depth": 1, "num_heads": 2,
              "time_scale": 8.0},
    "data": {"source": "digits", "num_frames": 4, "image_size": 12, "digit_size": 6,
             "train_clips": 16, "eval_clips": 8, "batch_size": 8,
             "eval_variants": [[1, 1], [2, 1], [1, 2]]},
}


def test_runs_are_seed_major_and_an_encoding_without_time_runs_once():
    study = VideoStudy({**TINY, "seeds": [0, 1]})
    assert study.runs() == [
        {"encoding": e, "frame_time": f, "seed": s} for s in (0, 1)
        for e, f in (("none", "-"), ("mrope", "real"), ("mrope", "index"))]
    assert study.model_args("mrope")["encoding"] == "mrope"
    assert study.variants() == ["1x", "rate2x", "len2x"]


def test_video_study_through_the_posenc_cli(tmp_path):
    config = tmp_path / "study.yaml"
    config.write_text(yaml.safe_dump(TINY, sort_keys=False))
    out = tmp_path / "out"
    run_cli(["study", "video", "--config", str(config), "--out", str(out)], cwd=tmp_path)
    rows = read_rows(out / "results.csv")
    assert [(r["encoding"], r["frame_time"]) for r in rows] == [
        ("none", "-"), ("mrope", "real"), ("mrope", "index")]
    assert all(0 <= float(r[f"acc_{v}"]) <= 1 for r in rows for v in ("1x", "rate2x", "len2x"))
    table = (out / "table.md").read_text().splitlines()
    assert table[0] == "| encoding | t from | seeds | 1x (train) | rate2x | len2x |"
    assert len(table[2:5]) == 3 and table[5] == ""
    assert (out / "plot.png").read_bytes()[:8] == PNG_MAGIC


def test_shipped_config_runs_every_video_encoding_both_ways_on_three_seeds():
    config = _load_config(str(CONFIGS / "study_video.yaml"))
    study = STUDIES["video"](config)
    assert set(config["encodings"]) == set(VIDEO_ENCODINGS)
    assert config["seeds"] == [0, 1, 2] and config["frame_times"] == ["real", "index"]
    assert len(study.runs()) == 3 * (2 * (len(VIDEO_ENCODINGS) - 1) + 1)
    for encoding in study.encodings():
        model = VideoClassifier(**study.model_args(encoding))
        assert sum(p.numel() for p in model.parameters()) > 0, encoding


def test_the_published_table_is_rebuilt_from_its_csv_exactly():
    study = STUDIES["video"](_load_config(str(CONFIGS / "study_video.yaml")))
    rows = read_rows(DOCS / "video_results.csv")
    assert len(rows) == len(study.runs())
    assert study.table(rows) == (DOCS / "video_table.md").read_text()
