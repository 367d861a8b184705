"""benchmarks/gpu.py runs to completion on the CPU (``--dry-run``), so it is known to work
when a CUDA device is there to time it."""

from __future__ import annotations

import importlib.util
import sys
from pathlib import Path

import pytest
from posenc.spatial import ENCODINGS

SCRIPT = Path(__file__).resolve().parents[1] / "benchmarks" / "gpu.py"


def _load():
    spec = importlib.util.spec_from_file_location("posenc_benchmarks_gpu", SCRIPT)
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module  # its dataclass looks its module up there
    spec.loader.exec_module(module)
    return module


@pytest.mark.slow  # a ViT training step per encoding, tiny: about 10 s of CPU
def test_dry_run_prints_a_row_for_every_case(capsys):
    assert _load().main(["--dry-run"]) == 0
    out = capsys.readouterr().out
    rows = [line for line in out.splitlines() if line.startswith("| rope") or
            line.startswith("| vit")]
    for layout in ("half", "interleaved"):
        assert sum(f"apply_rotation ({layout})" in row and "HBM floor" in row
                   for row in rows) == 1
    for name in ENCODINGS:
        assert sum(f"train step: {name} (" in row for row in rows) == 1, name
    # the flex-capable biases also get a row forced onto SDPA; cpb has no score_mod
    assert [name for name in ENCODINGS if any(f": {name} [sdpa]" in row for row in rows)] \
        == ["relbias", "alibi2d"]
    assert sum("timm eva02 RoPE (peer)" in row for row in rows) == 1
    assert "FAILED" not in out


def test_without_cuda_it_refuses_to_time_the_cpu(capsys, monkeypatch):
    module = _load()
    monkeypatch.setattr(module.torch.cuda, "is_available", lambda: False)
    with pytest.raises(SystemExit) as exit_info:
        module.main(["--suites", "rope"])
    assert exit_info.value.code == 2
    assert "no CUDA device" in capsys.readouterr().err


def test_rounds_must_be_positive(capsys):
    with pytest.raises(SystemExit):
        _load().main(["--dry-run", "--rounds", "0"])
    assert "--rounds must be >= 1, got 0" in capsys.readouterr().err
