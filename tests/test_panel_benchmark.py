"""benchmarks/panel_scale.py: its synthetic panel is what the benchmark says it measures, its
memory probe sees a known allocation, and the whole script runs on a tiny panel
(``--dry-run``)."""

from __future__ import annotations

import mmap
import re

import numpy as np
import pandas as pd
import pytest
from benchmark_scripts import load


def test_synthetic_panel_is_ragged_gappy_and_ordered_by_time(tmp_path):
    bench = load("panel_scale")
    path = tmp_path / "panel.parquet"
    bench.write_panel(path, 40_000, 30)
    frame = pd.read_parquet(path)
    assert len(frame) == 40_000 and frame[bench.SERIES].nunique() == 30
    assert list(frame.columns) == [bench.TIMESTAMP, bench.SERIES, bench.TARGET, bench.PAST,
                                   bench.FUTURE]
    assert str(frame[bench.TIMESTAMP].dt.tz) == "UTC"
    assert frame[bench.TIMESTAMP].is_monotonic_increasing  # set-up must sort by series
    by_series = frame.groupby(bench.SERIES)[bench.TIMESTAMP]
    assert by_series.size().nunique() > 20  # lengths differ
    assert by_series.min().nunique() > 20  # so do start times
    steps = frame.sort_values([bench.SERIES, bench.TIMESTAMP]).groupby(bench.SERIES)[
        bench.TIMESTAMP].diff().dropna()
    assert steps.min() == pd.Timedelta("1h") and steps.max() > pd.Timedelta("1h")  # gaps
    assert frame[bench.FUTURE].notna().all()
    assert 0 < frame[bench.PAST].isna().mean() < 0.1


def test_panel_needs_two_rows_a_series(tmp_path):
    with pytest.raises(ValueError, match=r"rows=10 must be at least 2 \* series=6"):
        load("panel_scale").write_panel(tmp_path / "p.parquet", 10, 6)


@pytest.mark.parametrize("use_tracemalloc", [False, True])
def test_peak_memory_sees_a_known_allocation(use_tracemalloc):
    bench = load("panel_scale")
    size = 64 * bench.MB
    with bench.PeakMemory(use_tracemalloc) as memory:
        if use_tracemalloc:
            block = np.ones(size, np.uint8)  # numpy reports its buffers to tracemalloc
            del block
        else:
            # A fresh anonymous mapping, every page written: late in a test session the heap
            # holds freed pages that are still resident, and an array could be served from
            # them without the resident set growing (CI measured 18 of 64 MB that way).
            with mmap.mmap(-1, size) as block:
                for offset in range(0, size, mmap.PAGESIZE):
                    block[offset] = 1
    assert memory.method == ("tracemalloc" if use_tracemalloc else "RSS")
    # the resident set moves by a few pages of its own (the interpreter, the counters' lag)
    assert abs(memory.peak - size) < 4 * bench.MB
    assert abs(memory.kept) < 4 * bench.MB


def test_memory_rows_print_their_unit_and_ratio():
    run_all = load("run_all")
    row = {"suite": "panel", "case": "c", "baseline": "frame", "posenc_amount": 300.0,
           "baseline_amount": 100.0, "unit": "MB", "target": "<= 3"}
    assert run_all.table([row]).splitlines()[-1] == \
        "| panel | c | frame | 300.0 MB | 100.0 MB | 3.000 | <= 3 |"


def test_table_cells_render_in_markdown_as_written():
    """docs/benchmarks.md pastes this table: a ``*`` in a name must not turn into emphasis
    (``floor q*2; k*2`` read "floor q2; k2") nor a ``|`` into a new cell."""
    markdown = pytest.importorskip("markdown", reason="the docs extra renders Markdown")
    run_all = load("run_all")
    row = {"suite": "core", "case": "a | b", "baseline": "floor q*2; k*2", "posenc_s": 2.0,
           "baseline_s": 1.0, "target": "<= 2"}
    html = markdown.markdown(run_all.table([row]), extensions=["tables"])
    cells = [re.sub(r"<[^>]+>", "", cell) for cell in re.findall(r"<td>(.*?)</td>", html)]
    assert cells == ["core", "a | b", "floor q*2; k*2", "2000.00", "1000.00", "2.000", "&lt;= 2"]


def test_arguments_are_checked(capsys):
    bench = load("panel_scale")
    with pytest.raises(SystemExit):
        bench.main(["--rounds", "0"])
    assert "--rounds must be >= 1, got 0" in capsys.readouterr().err
    with pytest.raises(SystemExit):
        bench.main(["--rows", "100", "--series", "60"])
    assert "--rows=100 must be at least 2 * --series=60" in capsys.readouterr().err


@pytest.mark.slow  # a tiny panel set up twice and four training steps: about 5 s of CPU
def test_dry_run_prints_every_row(capsys):
    assert load("panel_scale").main(["--dry-run"]) == 0
    out = capsys.readouterr().out
    rows = [line for line in out.splitlines() if line.startswith("| panel |")]
    assert len(rows) == 5
    times = [r for r in rows if "s per M rows) |" in r]
    assert [("file read included" in r, "frame given" in r) for r in times] == [
        (True, False), (False, True)]
    assert "| pd.read_parquet (the read alone) |" in times[0]
    assert "| frame.sort_values([series, time]) |" in times[1]
    memory = [r for r in rows if r.startswith("| panel | set-up memory")]
    assert [r.endswith(" | <= 5 |") for r in memory] == [True, False]
    assert "file read included" in memory[0] and memory[1].endswith(" | <= 3 |")
    assert all(r.count(" MB | ") == 2 and "| the frame's own memory |" in r for r in memory)
    assert sum("loader: draw a train batch of 16" in r and "train step" in r for r in rows) == 1
    assert "FAILED" not in out


def test_dataset_is_written_by_series_in_files_of_whole_series(tmp_path):
    bench = load("panel_scale")
    bench.write_dataset(tmp_path / "d", 6_000, 3_000 // 1000 * 2)
    files = sorted((tmp_path / "d").glob("part-*.parquet"))
    frame = pd.concat([pd.read_parquet(f) for f in files])
    assert len(frame) == 6_000 and frame[bench.SERIES].nunique() == 6
    assert all(pd.read_parquet(f)[bench.SERIES].is_monotonic_increasing for f in files)
    assert frame.groupby(bench.SERIES)[bench.TIMESTAMP].is_monotonic_increasing.all()


@pytest.mark.slow  # the tiny panel, then a 20,000-row dataset read lazily: about 10 s of CPU
def test_dry_run_with_a_dataset_prints_its_rows(capsys):
    assert load("panel_scale").main(["--dry-run", "--dataset", "20000"]) == 0
    out = capsys.readouterr().out
    rows = [line for line in out.splitlines() if line.startswith("| panel |")]
    assert len(rows) == 10
    lazy = rows[5:]
    assert "training starts, 0.02M rows, 20 series (Parquet dataset)" in lazy[0]
    assert "peak RSS per process, set-up and loader" in lazy[1]
    assert lazy[1].endswith(" | < 1 |") and "with the training steps" in lazy[2]
    assert "loader throughput" in lazy[3] and lazy[3].endswith(" | <= 1 |")
    assert "Forecaster train step" in lazy[4] and lazy[4].endswith(" | < 0.1 |")
    assert "Dataset: 20,000 rows, 20 series" in out and "FAILED" not in out


def test_set_up_peak_of_a_given_frame_is_within_the_memory_target():
    """The frame-given set-up's own peak (numpy's and Python's allocations, tracemalloc: the
    same on every machine) is at most the benchmark's target times the frame's memory, at
    every stage; the windows' stage builds one seasonal-error table for the three splits."""
    bench = load("panel_scale")
    frame, order = bench.panel_frame(200_000, 200)
    frame = frame.iloc[order].reset_index(drop=True)  # by time, as the benchmark's file
    frame_bytes = int(frame.memory_usage(deep=True).sum())
    dm = bench.datamodule(frame)
    with bench.PeakMemory(use_tracemalloc=True) as memory, bench.staged(memory):
        dm.setup("fit")
    limit = float(bench.MEMORY_TARGET.removeprefix("<="))
    assert list(memory.stages) == ["sort", "fit", "scale", "seasonal error", "windows"]
    assert memory.peak == max(memory.stages.values())
    assert memory.peak <= limit * frame_bytes, bench.stage_peaks(
        {"stages": memory.stages}, frame_bytes)


@pytest.mark.slow  # a 1M-row panel written, then set up from the file in a fresh process: ~10 s
def test_set_up_peak_from_a_file_is_within_the_file_memory_target(tmp_path):
    """The file's set-up (the read included) peaks at most the benchmark's target times the
    frame's memory in the resident set: Arrow's pool returns the reader's scratch buffers
    and, once the panel is read, the table's own columns."""
    bench = load("panel_scale")
    path = tmp_path / "panel.parquet"
    bench.write_panel(path, 1_000_000, 1_000)
    frame_bytes = int(pd.read_parquet(path).memory_usage(deep=True).sum())
    measured = bench._child("file", str(path), 1, bench.BATCH, False)
    limit = float(bench.FILE_MEMORY_TARGET.removeprefix("<="))
    assert measured["peak"] <= limit * frame_bytes, bench.stage_peaks(measured, frame_bytes)
