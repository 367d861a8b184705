"""The GPU check (benchmarks/gpu_check.sh, its steps in benchmarks/gpu_check.py, the table of
benchmarks/gpu.py) runs to completion on the CPU (``--device cpu --dry-run``), so it is known
to work when a GPU is there to run it; a failing or hanging step is reported and the run goes
on."""

from __future__ import annotations

import os
import re
import subprocess
import sys
import time
import warnings
from pathlib import Path

import pytest
import torch
from benchmark_scripts import BENCHMARKS, load
from posenc.spatial import ENCODINGS
from posenc.tasks.forecasting.network import RELATIVE_ENCODINGS, TIME_ENCODINGS

CHECK = BENCHMARKS / "gpu_check.sh"
# What issue 34 asks the check to run, in its order (written out: a step dropped from the
# script must fail here).
STEPS = ["wheels", "install", "environment", "vit_encodings", "forecaster_encodings",
         "fit_quickstart", "fit_forecast", "compile_vit", "compile_forecaster", "gpu_benchmark"]


def _check(out: Path, *args: str, **env: str) -> tuple[subprocess.CompletedProcess, str]:
    """Run gpu_check.sh with this Python; (the process, the report's text or "")."""
    proc = subprocess.run(["bash", str(CHECK), str(out), *args], capture_output=True,
                          text=True, env={**os.environ, "PYTHON": sys.executable, **env})
    report = out / "gpu_check.md"
    return proc, report.read_text() if report.exists() else ""


def _statuses(report: str) -> dict[str, str]:
    """step -> status, from the report's step table (in its order; before the sections)."""
    steps = report.split("\n## ")[0]
    rows = re.findall(r"^\| (\w+) \| (PASS|FAIL|SKIP|NOT RUN) \| [\d.]+ \|", steps, re.M)
    return dict(rows)


def _summary(report: str, step: str) -> str:
    return re.search(rf"^\| {step} \| \w+ \| [\d.]+ \| (.*) \|$", report, re.M).group(1)


def _section(report: str, step: str) -> str:
    """The report's section of ``step`` (its details and a failed step's output)."""
    match = re.search(rf"^## {step}: \w+\n(.*?)(?=^## |\Z)", report, re.M | re.S)
    assert match, f"no section for {step}"
    return match.group(1)


def _table(section: str) -> dict[str, str]:
    """First column -> second, of a section's table rows."""
    return {cells[0]: cells[1] for cells in
            ([cell.strip() for cell in line.strip("|").split("|")]
             for line in section.splitlines()
             if line.startswith("| ") and not line.startswith("| case "))}


@pytest.fixture(scope="module")
def dry_run(tmp_path_factory) -> tuple[subprocess.CompletedProcess, str]:
    return _check(tmp_path_factory.mktemp("gpu_check"), "--device", "cpu", "--dry-run")


@pytest.mark.slow  # every step once, tiny, each in its own process: about 50 s of CPU
def test_dry_run_reports_every_step_with_its_status(dry_run):
    proc, report = dry_run
    assert list(_statuses(report)) == STEPS
    # no --wheels folder: nothing to install; everything else runs on the CPU
    assert _statuses(report) == {**dict.fromkeys(STEPS, "PASS"), "wheels": "SKIP"}, report
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert "result: 9 PASS, 0 FAIL, 1 SKIP" in report
    assert re.search(r"^- machine: no GPU; torch \d", report, re.M)  # the header names it
    assert "no sync check on cpu" in _summary(report, "vit_encodings")
    assert "--dry-run" in _summary(report, "install")  # the CI's environment stays as it is
    for step in ("fit_quickstart", "fit_forecast"):
        assert "Using bfloat16 Automatic Mixed Precision" in _section(report, step)
        assert "test/loss" in _section(report, step)


@pytest.mark.slow
def test_dry_run_checks_every_encoding(dry_run):
    _, report = dry_run
    assert _table(_section(report, "vit_encodings")) == dict.fromkeys(ENCODINGS, "PASS")
    expected = [f"time {name}, relative rope" for name in TIME_ENCODINGS]
    expected += [f"time continuous, relative {name}" for name in [*RELATIVE_ENCODINGS, None]]
    assert _table(_section(report, "forecaster_encodings")) == dict.fromkeys(expected, "PASS")


@pytest.mark.slow
def test_dry_run_prints_a_row_for_every_case(dry_run):
    """benchmarks/gpu.py's table, as the check's report holds it."""
    _, report = dry_run
    out = _section(report, "gpu_benchmark")
    rows = [line for line in out.splitlines() if line.startswith("| rope") or
            line.startswith("| vit") or line.startswith("| flex")]
    for layout in ("half", "interleaved"):
        assert sum(f"apply_rotation ({layout})" in row and "HBM floor" in row
                   for row in rows) == 1
    for name in ENCODINGS:
        assert sum(f"train step: {name} (" in row for row in rows) == 1, name
    # the flex-capable biases also get a row forced onto SDPA; cpb has no score_mod
    assert [name for name in ENCODINGS if any(f": {name} [sdpa]" in row for row in rows)] \
        == ["relbias", "alibi2d"]
    # ... and a row of the two against each other
    flex = [row for row in rows if row.startswith("| flex")]
    assert [name for name in ENCODINGS if any(f": {name}, backend auto" in row and
                                              f"| {name} [sdpa]: SDPA" in row for row in flex)] \
        == ["relbias", "alibi2d"] and len(flex) == 2
    assert sum("timm eva02 RoPE (peer)" in row for row in rows) == 1
    assert "FAILED" not in out


@pytest.mark.slow  # three steps that fail at once or are cut off: about 10 s
def test_a_failing_or_hanging_step_is_reported_and_the_next_runs(tmp_path):
    """``--device cuda`` where torch sees no GPU: each step fails with its own error, one
    that runs past its limit is killed, and the report holds all three with their output."""
    proc, report = _check(tmp_path, "--device", "cuda", "--dry-run", "--steps", "environment",
                          "vit_encodings", "gpu_benchmark", "--timeout", "gpu_benchmark=1",
                          CUDA_VISIBLE_DEVICES="")
    assert proc.returncode == 1
    assert _statuses(report) == dict.fromkeys(["environment", "vit_encodings", "gpu_benchmark"],
                                              "FAIL")
    assert "sees no CUDA device" in _summary(report, "environment")
    assert "- GPU: no GPU" in _section(report, "environment")  # the details still come
    assert "Traceback" in _section(report, "vit_encodings")  # its last lines
    assert _summary(report, "vit_encodings") == "exit status 1"
    assert _summary(report, "gpu_benchmark") == "timed out after 1 s"
    assert "Last 20 lines of its output" in _section(report, "gpu_benchmark")


def test_a_stopped_run_reports_the_step_it_stopped_and_ends_it(tmp_path):
    """SIGTERM (whoever runs the check timing it out) while a step runs: that step is FAIL,
    the next NOT RUN, the report written, and the step's process is gone with the run."""
    proc = subprocess.Popen([sys.executable, str(BENCHMARKS / "gpu_check.py"), "--out",
                             str(tmp_path), "--device", "cpu", "--dry-run", "--steps",
                             "environment", "vit_encodings"], stdout=subprocess.PIPE, text=True)
    log = tmp_path / "gpu_check.log"
    for _ in range(200):  # until the step's process has started
        if log.exists() and "===== environment" in log.read_text():
            break
        time.sleep(0.05)
    child = re.search(r"--work (\S+)", log.read_text()).group(1)  # in the step's command line
    time.sleep(0.5)
    proc.terminate()
    assert proc.wait(timeout=30) == 1
    report = (tmp_path / "gpu_check.md").read_text()
    assert _statuses(report) == {"environment": "FAIL", "vit_encodings": "NOT RUN"}
    assert _summary(report, "environment").startswith("stopped by a signal while it ran")
    assert not any(child in _cmdline(path) for path in Path("/proc").glob("[0-9]*/cmdline"))


def _cmdline(path: Path) -> str:
    try:
        return path.read_bytes().decode(errors="replace")
    except OSError:  # the process ended meanwhile
        return ""


def test_a_step_missing_a_package_or_time_is_skipped_with_the_reason(tmp_path, monkeypatch):
    check = load("gpu_check")
    quickstart = check.STEPS["fit_quickstart"]
    monkeypatch.setitem(check.STEPS, "fit_quickstart", check.Step(
        quickstart.function, quickstart.timeout_s, ("torch", "posenc_no_such_package")))
    assert check.main(["--out", str(tmp_path), "--steps", "fit_quickstart"]) == 0
    report = (tmp_path / "gpu_check.md").read_text()
    assert _statuses(report) == {"fit_quickstart": "SKIP"}
    assert _summary(report, "fit_quickstart").startswith(
        "missing posenc_no_such_package: carry wheels: run `benchmarks/gpu_check.sh "
        "--fetch-wheels .whl`")
    # 5 s of budget less the 10 s kept for the report: no step starts
    assert check.main(["--out", str(tmp_path), "--steps", "environment", "--budget", "5"]) == 0
    report = (tmp_path / "gpu_check.md").read_text()
    assert _summary(report, "environment") == "the 5 s budget is spent (-5 s left)"


@pytest.mark.slow  # pip builds posenc's metadata: about 10 s
def test_a_read_only_environment_gets_posenc_in_a_target_folder(tmp_path, monkeypatch):
    """Where this Python's site folder is not writable, posenc goes (as a copy: an editable
    install needs that folder) into a folder on the steps' PYTHONPATH."""
    check = load("gpu_check")
    monkeypatch.setattr(check.os, "access", lambda path, mode: False)
    monkeypatch.setattr(sys, "path", list(sys.path))  # the driver looks there too
    assert check.main(["--out", str(tmp_path), "--device", "cpu", "--dry-run", "--steps",
                       "install"]) == 0
    report = (tmp_path / "gpu_check.md").read_text()
    target = Path(check.tempfile.gettempdir()) / "posenc-gpu-check-site"
    assert f"installs into {target} (on PYTHONPATH)" in report
    assert _statuses(report) == {"install": "PASS"}
    summary = _summary(report, "install")
    assert f"--dry-run --target {target} --upgrade ." in summary and " -e " not in summary


def test_wheels_install_only_packages_missing_or_older_here():
    check = load("gpu_check")
    paths = [Path(name) for name in (
        "jsonargparse-4.53.0-py3-none-any.whl", "timm-1.0.31-py3-none-any.whl",
        "vega_datasets-0.9.0-py3-none-any.whl", "mlxtend-0.25.0-1-py3-none-any.whl")]
    have = {"timm": "1.0.40", "vega-datasets": "0.8.0", "mlxtend": "0.25.0"}
    assert check.wheels_to_install(paths, have.get) == [paths[0], paths[2]]
    with pytest.raises(ValueError, match=r"^wheels: 'timm-1.0.31.tar.gz' is not a wheel"):
        check.wheel_name_version(Path("timm-1.0.31.tar.gz"))


def test_a_failed_case_names_the_posenc_line_it_came_from():
    """The report points at the code to fix: the innermost posenc line of the traceback."""
    check = load("gpu_check")
    with pytest.raises(ValueError) as info:
        check.small_vit(check.DRY_RUN, "no_such_encoding")
    text = check.last_line(info.value)
    where = re.fullmatch(r"ValueError: .*no_such_encoding.* \(at ([\w/]+\.py):(\d+) in \w+\)",
                         text)
    assert where, text
    path, line = where.groups()
    assert not path.startswith("benchmarks/")  # posenc's line, not the check's
    source = (BENCHMARKS.parent / path).read_text().splitlines()[int(line) - 1]
    assert "raise" in source or "check_" in source, source


def test_every_sync_of_a_pass_is_listed_where_it_was_called(monkeypatch):
    """What the report lists after a pass fails on a sync: each calling line with its count
    (CUDA's warn mode is stood in for by the warning it gives)."""
    check = load("gpu_check")
    modes = []
    monkeypatch.setattr(torch.cuda, "get_sync_debug_mode", lambda: 0)
    monkeypatch.setattr(torch.cuda, "set_sync_debug_mode", modes.append)

    def loss_of(output):
        for _ in range(2):
            warnings.warn("called a synchronizing CUDA operation", stacklevel=1)
        warnings.warn("an unrelated warning", stacklevel=1)
        return output.sum()

    line = loss_of.__code__.co_firstlineno + 2
    sites = check.sync_sites(torch.nn.Linear(2, 1), torch.zeros(1, 2), loss_of)
    assert sites == f"tests/test_gpu_benchmark.py:{line} x2"
    assert modes == ["warn", 0]  # restored


def test_check_arguments_are_refused_by_name(tmp_path, capsys):
    check = load("gpu_check")
    for argv, message in (
            (["--out", str(tmp_path), "--device", "cpu"], "--device cpu needs --dry-run"),
            (["--out", str(tmp_path), "--timeout", "fit=3"], "--timeout takes STEP=SECONDS"),
            (["--out", str(tmp_path), "--budget", "0"], "--budget must be > 0 seconds, got 0"),
            (["--out", str(tmp_path), "--wheels", str(tmp_path / "none")], "--wheels must be"),
            (["--dry-run"], "--out is required")):
        with pytest.raises(SystemExit):
            check.main(argv)
        assert message in capsys.readouterr().err


def test_the_script_writes_a_report_even_without_a_python(tmp_path):
    env = {key: value for key, value in os.environ.items() if key != "OUT"}
    proc = subprocess.run(["bash", str(CHECK)], capture_output=True, text=True, env=env)
    assert proc.returncode == 2 and "give the report's folder (OUT_DIR) or set OUT" in proc.stderr
    proc, report = _check(tmp_path, PYTHON=str(tmp_path / "no-python"))
    assert proc.returncode == 1
    assert "| python | FAIL |" in report and "No Python 3.11+" in report


def test_without_cuda_it_refuses_to_time_the_cpu(capsys, monkeypatch):
    module = load("gpu")
    monkeypatch.setattr(module.torch.cuda, "is_available", lambda: False)
    with pytest.raises(SystemExit) as exit_info:
        module.main(["--suites", "rope"])
    assert exit_info.value.code == 2
    assert "no CUDA device" in capsys.readouterr().err


def test_rounds_must_be_positive(capsys):
    with pytest.raises(SystemExit):
        load("gpu").main(["--dry-run", "--rounds", "0"])
    assert "--rounds must be >= 1, got 0" in capsys.readouterr().err
