"""One check of posenc on a machine with one GPU: every step in a child process with its own
time limit, and one markdown report.

    benchmarks/gpu_check.sh OUT_DIR                       # one GPU, under 8 minutes in all
    python benchmarks/gpu_check.py --out DIR --device cpu --dry-run   # tiny sizes (CI)

Steps, in order (`STEPS`); each ends PASS, FAIL or SKIP, with its seconds:

- ``wheels``: from ``--wheels DIR`` (no index, no deps), each wheel whose package is missing
  or older here (a machine without internet gets jsonargparse or the data packages this way);
- ``install``: posenc, editable, no deps, into this Python, without build isolation where
  the environment can build it (offline); where its site folder is read-only (or given
  ``--target DIR``), a copy into DIR, on every step's PYTHONPATH, as the wheels;
- ``environment``: the GPU, the versions, and posenc's requirements this environment misses;
- ``vit_encodings``: every ``posenc.spatial.ENCODINGS`` name attached to a small timm ViT,
  forward and backward in bf16 autocast, the second pass under
  ``torch.cuda.set_sync_debug_mode("error")`` (a host synchronisation raises; the first pass
  builds kernels and lazy state);
- ``forecaster_encodings``: each Forecaster time encoding (``TIME_ENCODINGS``, with RoPE) and
  each relative one (``RELATIVE_ENCODINGS`` and none), the same way;
- ``fit_quickstart``, ``fit_forecast``: ``posenc fit`` of configs/quickstart.yaml and
  configs/forecast_seattle.yaml (its data ships inside vega_datasets) in bf16-mixed, one short
  epoch;
- ``compile_vit``, ``compile_forecaster``: ``torch.compile(fullgraph=True)`` (tests/test_compile.py
  holds it for every encoding on the CPU): compiled equals eager in float32, then a bf16
  training pass runs compiled;
- ``gpu_benchmark``: benchmarks/gpu.py's table (RoPE vs the HBM floor, ViT steps vs timm,
  FlexAttention vs SDPA).

The dry run takes the same paths at tiny sizes; on the CPU there is no sync debug mode (the
report says so) and ``torch.compile`` uses the ``eager`` backend (dynamo's tracing, where graph
breaks arise, without code generation). The report (``gpu_check.md`` in ``--out``) is written
again after every step, so a run cut short still leaves one; every child's output goes to
``gpu_check.log`` beside it. A step that fails, hangs past its limit or cannot start is FAIL
with its last output lines, and the next step runs. This file imports only the standard
library at the top: the driver runs before posenc, torch or a GPU are known to work.
"""

from __future__ import annotations

import argparse
import collections
import contextlib
import importlib.util
import json
import os
import platform
import re
import shutil
import signal
import subprocess
import sys
import sysconfig
import tempfile
import time
import traceback
import warnings
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path

HERE = Path(__file__).resolve().parent
REPO = HERE.parent
REPORT, LOG = "gpu_check.md", "gpu_check.log"
BUDGET_S = 450.0  # the whole run: 8 minutes less a margin for the machine's own start-up
RESERVE_S = 10.0  # kept back from the last step to write the report
MIN_STEP_S = 15.0  # a step with less time left is SKIP, not a certain timeout
TAIL_LINES = 20  # of a failed step's output, in the report
STATUSES = ("PASS", "FAIL", "SKIP")
WHEELS_HINT = ("carry wheels: run `benchmarks/gpu_check.sh --fetch-wheels .whl` where pip "
               "reaches PyPI, then run the check with .whl beside it")


@dataclass(frozen=True)
class Sizes:
    """What the steps build: the GPU sizes or the dry run's."""

    img_size: int  # ViT: image side (px), patch side, width, heads, depth, batch
    patch_size: int
    width: int
    heads: int
    depth: int
    batch: int
    periods: int  # Forecaster: hourly rows of the synthetic frame, window lengths, batch, width
    context: str
    horizon: str
    forecast_batch: int
    forecast_dim: int
    train_batches: int  # posenc fit: limit_train_batches, limit_val/test_batches
    eval_batches: int
    benchmark_args: tuple[str, ...]  # benchmarks/gpu.py's


FULL = Sizes(img_size=224, patch_size=16, width=192, heads=3, depth=2, batch=16,
             periods=24 * 90, context="7D", horizon="1D", forecast_batch=32, forecast_dim=64,
             train_batches=20, eval_batches=2, benchmark_args=("--rounds", "10"))
DRY_RUN = Sizes(img_size=16, patch_size=8, width=32, heads=2, depth=1, batch=2, periods=300,
                context="1D", horizon="6h", forecast_batch=4, forecast_dim=16, train_batches=2,
                eval_batches=1, benchmark_args=("--dry-run",))


@dataclass(frozen=True)
class Run:
    """What a step is given: the device, the sizes, the wheel folder and its own work folder."""

    device: str  # "cuda" or "cpu"
    dry_run: bool
    wheels: Path | None
    work: Path  # an empty folder of this step's (fits write their logs and checkpoints here)
    target: Path | None = None  # install here (on every child's PYTHONPATH), not into the env

    @property
    def pip_into(self) -> list[str]:
        """pip install's options that say where to install."""
        return [] if self.target is None else ["--target", str(self.target), "--upgrade"]

    @property
    def sizes(self) -> Sizes:
        return DRY_RUN if self.dry_run else FULL


@dataclass
class Result:
    """A step's outcome: ``status`` (one of `STATUSES`), a one-line ``summary`` and
    ``details`` (markdown) for the report."""

    status: str
    summary: str
    details: str = ""


@dataclass(frozen=True)
class Step:
    function: Callable[[Run], Result]
    timeout_s: float
    needs: tuple[str, ...]  # importable modules; a step missing one is SKIP, naming them


STEPS: dict[str, Step] = {}


def step(timeout_s: float, needs: tuple[str, ...] = ()):
    """Register the decorated function as the next step (the name without ``step_``)."""
    def register(function: Callable[[Run], Result]) -> Callable[[Run], Result]:
        STEPS[function.__name__.removeprefix("step_")] = Step(function, timeout_s, needs)
        return function
    return register


# -- helpers the steps share --------------------------------------------------------------------
def stream(cmd: list[str], *, cwd: Path | None = None, merge: bool = True) -> tuple[int, str]:
    """Run ``cmd``, echoing its stdout (and stderr when ``merge``) into this process's output
    line by line, so that a step killed at its limit leaves what it printed in the log;
    (exit status, stdout)."""
    proc = subprocess.Popen(cmd, cwd=cwd, stdout=subprocess.PIPE,
                            stderr=subprocess.STDOUT if merge else None, text=True)
    lines = []
    for line in proc.stdout:
        print(line, end="", flush=True)
        lines.append(line)
    return proc.wait(), "".join(lines)


def fenced(text: str) -> str:
    return "```text\n" + text.rstrip("\n") + "\n```" if text.strip() else ""


def md_table(head: tuple[str, ...], rows: list[tuple[str, ...]]) -> str:
    lines = ["| " + " | ".join(head) + " |", "|" + "---|" * len(head)]
    lines += ["| " + " | ".join(cell.replace("|", "\\|").replace("\n", " ") for cell in row)
              + " |" for row in rows]
    return "\n".join(lines)


def source_line(filename: str, lineno: int) -> str:
    """``path:line``, the path relative to the repository where it lies inside."""
    path = Path(filename).resolve()
    return f"{path.relative_to(REPO) if path.is_relative_to(REPO) else path.name}:{lineno}"


def last_line(err: BaseException) -> str:
    """The error's last line and the innermost line of posenc it came through (not this
    check's own: the report points at the code to fix)."""
    lines = "".join(traceback.format_exception_only(err)).strip().splitlines()
    text = lines[-1] if lines else type(err).__name__
    ours = [frame for frame in traceback.extract_tb(err.__traceback__)
            if Path(frame.filename).resolve().is_relative_to(REPO)
            and not Path(frame.filename).resolve().is_relative_to(HERE)]
    if ours:
        text += f" (at {source_line(ours[-1].filename, ours[-1].lineno)} in {ours[-1].name})"
    return text


def sync_note(device) -> str:
    """What `sync_guard` checks on ``device``, for the report."""
    if device.type == "cuda":
        return 'the second pass under torch.cuda.set_sync_debug_mode("error")'
    return f"no sync check on {device.type} (set_sync_debug_mode is CUDA's)"


@contextlib.contextmanager
def sync_guard(device) -> Iterator[None]:
    """On CUDA, ``torch.cuda.set_sync_debug_mode("error")`` while the block runs (restored
    after): a host synchronisation inside raises. Elsewhere nothing: the mode is CUDA's."""
    import torch

    if device.type != "cuda":
        yield
        return
    before = torch.cuda.get_sync_debug_mode()
    torch.cuda.set_sync_debug_mode("error")
    try:
        yield
    finally:
        torch.cuda.set_sync_debug_mode(before)


def sync_sites(model, inputs, loss_of) -> str:
    """Every host synchronisation of a `training_pass` on CUDA, found under
    ``set_sync_debug_mode("warn")`` (which warns where "error" stops at the first): the lines
    that called them, with counts."""
    import torch

    before = torch.cuda.get_sync_debug_mode()
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        torch.cuda.set_sync_debug_mode("warn")
        try:
            training_pass(model, inputs, loss_of)
        finally:
            torch.cuda.set_sync_debug_mode(before)
    sites = collections.Counter(source_line(w.filename, w.lineno) for w in caught
                                if "synchronizing" in str(w.message))
    return ", ".join(f"{site} x{count}" for site, count in sites.most_common()) or "none"


def training_pass(model, inputs, loss_of):
    """Forward in bf16 autocast and backward; the loss tensor (not read: no synchronisation)."""
    import torch

    model.zero_grad(set_to_none=True)
    device = next(model.parameters()).device
    with torch.autocast(device.type, dtype=torch.bfloat16):
        loss = loss_of(model(inputs))
    loss.backward()
    return loss


def check_finite(model, loss) -> float:
    """``loss`` as a float; ``FloatingPointError`` if it or a gradient is not finite (reads
    the device: call it outside `sync_guard`)."""
    import torch

    value = loss.item()
    bad = [name for name, p in model.named_parameters()
           if p.grad is not None and not torch.isfinite(p.grad).all()]
    if not torch.isfinite(loss) or bad:
        raise FloatingPointError(f"loss {value}, non-finite gradients in {bad[:3]}")
    return value


def guarded_cases(cases: dict[str, Callable[[], tuple]], device) -> Result:
    """Each case builds ``(model, inputs, loss_of)`` on ``device``: one training pass to warm
    up, one under `sync_guard`; a table row per case; FAIL if any case fails."""
    rows, failed = [], []
    for name, build in cases.items():
        guarded = False
        try:
            model, inputs, loss_of = build()
            training_pass(model, inputs, loss_of)
            with sync_guard(device):
                guarded = True
                loss = training_pass(model, inputs, loss_of)
            rows.append((name, "PASS", f"{check_finite(model, loss):.4f}", ""))
        except Exception as err:  # one case's failure is its row; the others still run
            print(f"--- {name} failed:", flush=True)
            traceback.print_exc()
            failed.append(name)
            error = last_line(err)
            if guarded and device.type == "cuda" and "synchronizing" in str(err):
                try:  # all of them in one run: device time is scarce
                    error += "; every sync of the pass: " + sync_sites(model, inputs, loss_of)
                except Exception as census:
                    error += f"; listing them failed: {last_line(census)}"
            rows.append((name, "FAIL", "", error))
    table = md_table(("case", "status", "loss", "error"), rows)
    what = f"{len(cases)} cases, forward+backward in bf16 autocast, {sync_note(device)}"
    if failed:
        return Result("FAIL", f"{what}; failed: {', '.join(failed)}", table)
    return Result("PASS", what, table)


def small_vit(sizes: Sizes, encoding: str):
    """A ``vit_tiny`` of ``sizes`` with ``encoding`` attached (``posenc.spatial.attach``)."""
    import timm
    import torch
    from posenc.spatial import attach

    torch.manual_seed(0)
    model = timm.create_model("vit_tiny_patch16_224", pretrained=False, img_size=sizes.img_size,
                              patch_size=sizes.patch_size, embed_dim=sizes.width,
                              num_heads=sizes.heads, depth=sizes.depth, num_classes=10)
    return attach(model, encoding)


def images(sizes: Sizes, device):
    """(images (B, 3, H, W), labels (B,)) on ``device``, made before any guarded pass."""
    import torch

    generator = torch.Generator().manual_seed(0)
    x = torch.randn(sizes.batch, 3, sizes.img_size, sizes.img_size, generator=generator)
    y = torch.randint(0, 10, (sizes.batch,), generator=generator)
    return x.to(device), y.to(device)


def forecast_batch(sizes: Sizes, device) -> dict:
    """A training batch of an irregular hourly series (a fifth of the hours missing, local
    time Europe/Berlin across a DST change), every tensor on ``device``."""
    import numpy as np
    import pandas as pd
    from posenc.tasks import TimeSeriesDataModule

    rng = np.random.default_rng(0)
    stamps = pd.date_range("2021-03-20", periods=sizes.periods, freq="1h", tz="UTC")
    frame = pd.DataFrame({"timestamp": stamps, "value": rng.normal(size=sizes.periods)})
    frame = frame[rng.random(sizes.periods) < 0.8].reset_index(drop=True)
    dm = TimeSeriesDataModule(frame, context_length=sizes.context, horizon=sizes.horizon,
                              stride="4h", batch_size=sizes.forecast_batch, tz="Europe/Berlin")
    dm.setup("fit")
    return {key: value.to(device) for key, value in next(iter(dm.train_dataloader())).items()}


def forecaster(sizes: Sizes, encodings: list[str], relative: str | None):
    import torch
    from posenc.tasks import Forecaster

    torch.manual_seed(0)
    return Forecaster(encodings=encodings, relative=relative, dim=sizes.forecast_dim, depth=2,
                      num_heads=2)


def mean_square(output):
    return output.float().square().mean()


def posenc_fit(run: Run, config: str) -> Result:
    """``posenc fit --config config`` on ``run.device`` in bf16-mixed, one epoch of
    ``train_batches`` (validation and test ``eval_batches``); its test results and Lightning's
    device and precision lines are the details."""
    sizes = run.sizes
    cmd = [sys.executable, "-m", "posenc.tasks.cli", "fit", "--config", str(REPO / config),
           "--trainer.accelerator", "gpu" if run.device == "cuda" else "cpu",
           "--trainer.devices", "1", "--trainer.precision", "bf16-mixed",
           "--trainer.max_epochs", "1", "--trainer.check_val_every_n_epoch", "1",
           "--trainer.limit_train_batches", str(sizes.train_batches),
           "--trainer.limit_val_batches", str(sizes.eval_batches),
           "--trainer.limit_test_batches", str(sizes.eval_batches),
           "--trainer.enable_progress_bar", "false"]
    print("$", " ".join(cmd), flush=True)
    code, output = stream(cmd, cwd=run.work)
    lines = output.splitlines()
    keep = [line for line in lines if re.match(r"GPU available:|Using .*Precision", line)]
    if "Test results (final weights):" in lines:
        keep += lines[lines.index("Test results (final weights):"):]
    what = (f"posenc fit --config {config} on {run.device}, bf16-mixed, 1 epoch of "
            f"{sizes.train_batches} batches")
    return Result("PASS" if code == 0 else "FAIL",
                  what + ("" if code == 0 else f"; exit status {code}"), fenced("\n".join(keep)))


def compile_check(run: Run, model, inputs, loss_of, what: str) -> Result:
    """``torch.compile(model, fullgraph=True)``: inductor on CUDA, ``backend="eager"`` on the
    CPU (tracing only: the dry run stays short). Compiled equals eager in float32 (eval, no
    grad), then a compiled training pass in bf16 autocast has finite gradients."""
    import torch

    backend = "inductor" if run.device == "cuda" else "eager"
    compiled = torch.compile(model, backend=backend, fullgraph=True)
    model.eval()
    with torch.no_grad():
        expected = model(inputs)
        begin = time.perf_counter()
        got = compiled(inputs)
    compile_s = time.perf_counter() - begin
    torch.testing.assert_close(got, expected, rtol=1e-3, atol=1e-3)
    model.train()
    begin = time.perf_counter()
    loss = check_finite(model, training_pass(compiled, inputs, loss_of))
    train_s = time.perf_counter() - begin
    return Result("PASS", f"{what}: torch.compile(fullgraph=True, backend={backend!r}) equals "
                          f"eager (float32, 1e-3); bf16 train pass loss {loss:.4f}",
                  f"first compiled call: eval {compile_s:.1f} s, train {train_s:.1f} s")


# -- the steps ------------------------------------------------------------------------------------
def wheel_name_version(path: Path) -> tuple[str, str]:
    """(normalised project name, version) from a wheel's file name (PEP 427), e.g.
    ``jsonargparse-4.53.0-py3-none-any.whl`` -> ("jsonargparse", "4.53.0")."""
    parts = path.name.removesuffix(".whl").split("-")
    if not path.name.endswith(".whl") or len(parts) not in (5, 6):
        raise ValueError(f"wheels: {path.name!r} is not a wheel file name "
                         f"(name-version[-build]-python-abi-platform.whl)")
    return re.sub(r"[-_.]+", "-", parts[0]).lower(), parts[1]


def wheels_to_install(paths: list[Path], installed: Callable[[str], str | None]) -> list[Path]:
    """The wheels whose package is missing (``installed(name)`` is None) or installed at a
    lower version: never a downgrade of what the machine has."""
    from packaging.version import Version

    chosen = []
    for path in paths:
        name, version = wheel_name_version(path)
        have = installed(name)
        if have is None or Version(have) < Version(version):
            chosen.append(path)
    return chosen


def installed_version(name: str) -> str | None:
    from importlib.metadata import PackageNotFoundError, version

    try:
        return version(name)
    except PackageNotFoundError:
        return None


@step(timeout_s=90)
def step_wheels(run: Run) -> Result:
    if run.wheels is None:
        return Result("SKIP", "no --wheels folder: the environment's packages as they are")
    paths = sorted(run.wheels.glob("*.whl"))
    chosen = wheels_to_install(paths, installed_version)
    if not chosen:
        return Result("PASS", f"all {len(paths)} wheels in {run.wheels} already installed "
                              f"at that version or newer")
    options = ["--no-index", "--no-deps", *(["--dry-run"] if run.dry_run else []),
               *run.pip_into]
    cmd = [sys.executable, "-m", "pip", "install", "--no-cache-dir", *options, *map(str, chosen)]
    print("$", " ".join(cmd), flush=True)
    code, _ = stream(cmd)
    names = ", ".join(path.name for path in chosen)
    return Result("PASS" if code == 0 else "FAIL",
                  f"pip install {' '.join(options)}: {names}"
                  + ("" if code == 0 else f"; exit status {code}"))


def unmet_build_requirements() -> list[str]:
    """pyproject.toml's ``[build-system] requires`` that this environment does not meet."""
    import tomllib

    from packaging.requirements import Requirement

    with (REPO / "pyproject.toml").open("rb") as fh:
        requires = tomllib.load(fh)["build-system"]["requires"]
    unmet = []
    for text in requires:
        requirement = Requirement(text)
        have = installed_version(requirement.name)
        if have is None or not requirement.specifier.contains(have, prereleases=True):
            unmet.append(f"{requirement} (have {have or 'none'})")
    return unmet


@step(timeout_s=120)
def step_install(run: Run) -> Result:
    # Without build isolation where the environment can build posenc: isolation has pip fetch
    # setuptools, and the GPU machine may be offline.
    # An editable install needs the environment's own site folder (its .pth); into --target
    # posenc is installed as a copy.
    unmet = unmet_build_requirements()
    options = ["--no-deps", *([] if unmet else ["--no-build-isolation"]),
               *(["--dry-run"] if run.dry_run else []), *run.pip_into,
               *([] if run.target else ["-e"])]
    cmd = [sys.executable, "-m", "pip", "install", "--no-cache-dir", *options, str(REPO)]
    print("$", " ".join(cmd), flush=True)
    code, _ = stream(cmd)
    what = " ".join(["pip install", *options, "."])
    if unmet:
        what += f" (build isolation: this environment lacks {', '.join(unmet)})"
    return Result("PASS" if code == 0 else "FAIL",
                  what + ("" if code == 0 else f"; exit status {code}"))


@step(timeout_s=60, needs=("torch",))
def step_environment(run: Run) -> Result:
    from importlib.metadata import requires

    import torch
    from packaging.requirements import Requirement

    lines = [f"python {platform.python_version()} ({sys.executable})",
             f"torch {torch.__version__} (CUDA {torch.version.cuda})"]
    spec = importlib.util.find_spec("posenc")  # the install step's, or an older one's
    lines.append(f"posenc {installed_version('posenc') or 'not installed'}"
                 + (f" (from {Path(spec.origin).parent})" if spec and spec.origin else ""))
    lines += [f"{name} {installed_version(name) or 'not installed'}" for name in
              ("timm", "lightning", "jsonargparse", "numpy", "pandas", "triton")]
    unmet = []
    for text in requires("posenc") or []:
        requirement = Requirement(text)
        if requirement.marker is not None:  # an extra's: not needed to run
            continue
        have = installed_version(requirement.name)
        if have is None or not requirement.specifier.contains(have, prereleases=True):
            unmet.append(f"{requirement} (have {have or 'none'})")
    gpu = "no GPU"
    if torch.cuda.is_available():
        props = torch.cuda.get_device_properties(0)
        gpu = (f"{props.name}, {props.total_memory / 2**30:.0f} GiB, compute capability "
               f"{props.major}.{props.minor}, {props.multi_processor_count} SMs")
    lines.insert(0, f"GPU: {gpu}")
    if shutil.which("nvidia-smi"):
        query = subprocess.run(["nvidia-smi", "--query-gpu=name,driver_version",
                                "--format=csv,noheader"], capture_output=True, text=True)
        lines.insert(1, f"nvidia-smi: {(query.stdout or query.stderr).strip()}")
    if unmet:
        lines.append("below posenc's requirements (results speak for these versions): "
                     + "; ".join(unmet))
    summary = f"{gpu}; torch {torch.__version__}" + (f"; unmet: {'; '.join(unmet)}"
                                                       if unmet else "")
    details = "\n".join(f"- {line}" for line in lines)
    if run.device == "cuda" and not torch.cuda.is_available():
        return Result("FAIL", f"--device cuda, but torch {torch.__version__} sees no CUDA "
                              f"device", details)
    return Result("PASS", summary, details)


@step(timeout_s=150, needs=("torch", "timm"))
def step_vit_encodings(run: Run) -> Result:
    import torch
    from posenc.spatial import ENCODINGS

    device = torch.device(run.device)
    x, y = images(run.sizes, device)

    def case(name: str):
        return lambda: (small_vit(run.sizes, name).to(device).train(), x,
                        lambda logits: torch.nn.functional.cross_entropy(logits.float(), y))

    return guarded_cases({name: case(name) for name in ENCODINGS}, device)


@step(timeout_s=120, needs=("torch", "lightning", "pandas"))
def step_forecaster_encodings(run: Run) -> Result:
    import torch
    from posenc.tasks.forecasting.network import RELATIVE_ENCODINGS, TIME_ENCODINGS

    device = torch.device(run.device)
    batch = forecast_batch(run.sizes, device)
    combos = {f"time {name}, relative rope": ([name], "rope") for name in TIME_ENCODINGS}
    combos |= {f"time continuous, relative {relative}": (["continuous"], relative)
               for relative in [*RELATIVE_ENCODINGS, None]}

    def case(encodings: list[str], relative: str | None):
        return lambda: (forecaster(run.sizes, encodings, relative).to(device).train(), batch,
                        mean_square)

    return guarded_cases({name: case(*combo) for name, combo in combos.items()}, device)


FIT_NEEDS = ("torch", "lightning", "jsonargparse", "docstring_parser", "typeshed_client")


@step(timeout_s=150, needs=(*FIT_NEEDS, "timm", "mlxtend"))
def step_fit_quickstart(run: Run) -> Result:
    return posenc_fit(run, "configs/quickstart.yaml")


@step(timeout_s=150, needs=(*FIT_NEEDS, "vega_datasets"))
def step_fit_forecast(run: Run) -> Result:
    return posenc_fit(run, "configs/forecast_seattle.yaml")


@step(timeout_s=150, needs=("torch", "timm"))
def step_compile_vit(run: Run) -> Result:
    import torch

    device = torch.device(run.device)
    x, y = images(run.sizes, device)
    model = small_vit(run.sizes, "rope_mixed").to(device)
    return compile_check(run, model, x,
                         lambda logits: torch.nn.functional.cross_entropy(logits.float(), y),
                         "ViT with rope_mixed")


@step(timeout_s=150, needs=("torch", "lightning", "pandas"))
def step_compile_forecaster(run: Run) -> Result:
    import torch

    device = torch.device(run.device)
    model = forecaster(run.sizes, ["calendar"], "rope").to(device)
    return compile_check(run, model, forecast_batch(run.sizes, device), mean_square,
                         "Forecaster with calendar features and RoPE")


@step(timeout_s=240, needs=("torch", "timm"))
def step_gpu_benchmark(run: Run) -> Result:
    cmd = [sys.executable, str(HERE / "gpu.py"), *run.sizes.benchmark_args]
    print("$", " ".join(cmd), flush=True)
    code, table = stream(cmd, merge=False)  # stdout is its report; tracebacks go to the log
    what = "benchmarks/gpu.py " + " ".join(run.sizes.benchmark_args)
    return Result("PASS" if code == 0 else "FAIL",
                  what + ("" if code == 0 else f"; exit status {code} (rows FAILED)"), table)


# -- the driver ------------------------------------------------------------------------------------
@dataclass
class Record:
    name: str
    status: str = "NOT RUN"  # until the step ends; stays so when the run is cut short
    seconds: float = 0.0
    result: Result | None = None
    tail: str = ""  # the last output lines of a failed step


@dataclass
class Report:
    path: Path
    mode: str
    budget_s: float
    started: float = field(default_factory=time.monotonic)
    when: str = field(default_factory=lambda: datetime.now(UTC).strftime("%Y-%m-%d %H:%M UTC"))
    records: dict[str, Record] = field(default_factory=dict)

    def write(self) -> None:
        """The whole report, replacing the last one (a reader never sees half a file)."""
        counts = {s: sum(r.status == s for r in self.records.values()) for s in STATUSES}
        elapsed = time.monotonic() - self.started
        lines = ["# posenc GPU check", "",
                 f"- mode: {self.mode}; started {self.when}; {elapsed:.0f} s of a "
                 f"{self.budget_s:.0f} s budget",
                 "- result: " + ", ".join(f"{n} {s}" for s, n in counts.items()), "",
                 md_table(("step", "status", "seconds", "summary"),
                          [(r.name, r.status, f"{r.seconds:.1f}",
                            r.result.summary if r.result else "") for r in self.records.values()])]
        environment = self.records.get("environment")
        if environment is not None and environment.status == "PASS":
            lines.insert(3, f"- machine: {environment.result.summary}")
        for record in self.records.values():
            body = [record.result.details if record.result else "",
                    f"Last {TAIL_LINES} lines of its output:\n\n{fenced(record.tail)}"
                    if record.tail else ""]
            if any(body):
                lines += ["", f"## {record.name}: {record.status}", "",
                          "\n\n".join(part for part in body if part)]
        temporary = self.path.with_suffix(".tmp")
        temporary.write_text("\n".join(lines) + "\n")
        temporary.replace(self.path)


def missing_modules(names: tuple[str, ...]) -> list[str]:
    importlib.invalidate_caches()  # the wheels step may have installed some
    return [name for name in names if importlib.util.find_spec(name) is None]


def tail_of(log: Path, offset: int) -> str:
    with log.open("rb") as fh:
        fh.seek(offset)
        return "\n".join(fh.read().decode(errors="replace").splitlines()[-TAIL_LINES:])


def run_child(name: str, args: argparse.Namespace, timeout_s: float, log: Path, work: Path
              ) -> Record:
    """Step ``name`` in a child process, its output appended to ``log``. The child leads a
    process group of its own (a timeout kills it and whatever it started) in this session (a
    machine that ends the session's processes ends it too)."""
    result_path = work / "result.json"
    cmd = [sys.executable, str(Path(__file__).resolve()), "--step", name, "--device",
           args.device, "--work", str(work), *(["--dry-run"] if args.dry_run else []),
           *(["--wheels", str(args.wheels)] if args.wheels else []),
           *(["--target", str(args.target)] if args.target else [])]
    record = Record(name)
    begin = time.monotonic()
    with log.open("ab") as fh:
        fh.write(f"\n===== {name} (limit {timeout_s:.0f} s): {' '.join(cmd)}\n".encode())
        fh.flush()
        offset = fh.tell()
        env = {**os.environ, "PYTHONUNBUFFERED": "1"}
        if args.target:
            env["PYTHONPATH"] = os.pathsep.join(
                [str(args.target), *filter(None, [os.environ.get("PYTHONPATH")])])
        proc = subprocess.Popen(cmd, stdout=fh, stderr=subprocess.STDOUT, env=env, cwd=work,
                                process_group=0)
        try:
            code = proc.wait(timeout=timeout_s)
            why = f"exit status {code}"
        except subprocess.TimeoutExpired:
            os.killpg(proc.pid, signal.SIGKILL)
            code = proc.wait()
            why = f"timed out after {timeout_s:.0f} s"
        except BaseException:  # the driver is stopped (SIGTERM, Ctrl-C): the step goes too
            os.killpg(proc.pid, signal.SIGKILL)
            raise
    record.seconds = time.monotonic() - begin
    if result_path.exists():
        record.result = Result(**json.loads(result_path.read_text()))
    if record.result is not None and code == 0 and record.result.status in STATUSES:
        record.status = record.result.status
    else:
        record.status = "FAIL"
        record.result = Result("FAIL", why if record.result is None
                               else f"{record.result.summary}; {why}",
                               record.result.details if record.result else "")
    if record.status == "FAIL":
        record.tail = tail_of(log, offset)
    return record


def run_steps(args: argparse.Namespace) -> int:
    """Every chosen step in order, the report written after each; 1 if any step FAILed."""
    args.out.mkdir(parents=True, exist_ok=True)
    log = args.out / LOG
    log.write_text("")
    site = Path(sysconfig.get_paths()["purelib"])
    if args.target is None and not os.access(site, os.W_OK):
        args.target = Path(tempfile.gettempdir()) / "posenc-gpu-check-site"
    if args.target is not None:
        sys.path.insert(0, str(args.target))  # where missing_modules looks too
    mode = (f"{'dry run (tiny sizes)' if args.dry_run else 'full'} on {args.device}; "
            f"{platform.node()}; python {platform.python_version()}"
            + (f"; installs into {args.target} (on PYTHONPATH)" if args.target else ""))
    report = Report(args.out / REPORT, mode, args.budget)
    names = args.steps or list(STEPS)
    report.records = {name: Record(name) for name in names}
    report.write()
    deadline = report.started + args.budget
    with tempfile.TemporaryDirectory(prefix="posenc-gpu-check-") as root:
        for name in names:
            work = Path(root) / name
            work.mkdir(parents=True, exist_ok=True)
            left = deadline - time.monotonic() - RESERVE_S
            missing = missing_modules(STEPS[name].needs)
            if missing:
                record = Record(name, "SKIP", result=Result(
                    "SKIP", f"missing {', '.join(missing)}: {WHEELS_HINT}"))
            elif left < MIN_STEP_S:
                record = Record(name, "SKIP", result=Result(
                    "SKIP", f"the {args.budget:.0f} s budget is spent ({left:.0f} s left)"))
            else:
                try:
                    record = run_child(name, args, min(
                        args.timeout.get(name, STEPS[name].timeout_s), left), log, work)
                except KeyboardInterrupt:
                    report.records[name] = Record(name, "FAIL", result=Result(
                        "FAIL", "stopped by a signal while it ran; the steps after it did not "
                                "run"))
                    report.write()
                    raise
            report.records[name] = record
            report.write()
            print(f"[gpu_check] {name}: {record.status} ({record.seconds:.1f} s) "
                  f"{record.result.summary if record.result else ''}", flush=True)
    print(f"[gpu_check] report: {report.path}", flush=True)
    return 1 if any(r.status == "FAIL" for r in report.records.values()) else 0


def run_one(args: argparse.Namespace) -> int:
    """The child's side: run step ``args.step`` and write its result as JSON into its work
    folder (an exception is left to propagate: the driver records FAIL with the traceback)."""
    run = Run(args.device, args.dry_run, args.wheels, args.work, args.target)
    result = STEPS[args.step].function(run)
    (args.work / "result.json").write_text(json.dumps(result.__dict__))
    return 0


def timeouts(text: str) -> tuple[str, float]:
    name, _, seconds = text.partition("=")
    if name not in STEPS or not re.fullmatch(r"\d+(\.\d*)?", seconds) or float(seconds) <= 0:
        raise argparse.ArgumentTypeError(
            f"--timeout takes STEP=SECONDS with STEP one of {list(STEPS)} and SECONDS > 0, "
            f"got {text!r}")
    return name, float(seconds)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--out", type=Path, help="folder of the report (gpu_check.md) and log")
    parser.add_argument("--device", choices=("cuda", "cpu"), default="cuda")
    parser.add_argument("--dry-run", action="store_true",
                        help="tiny sizes (CI runs it on the CPU: --device cpu --dry-run)")
    parser.add_argument("--wheels", type=Path, default=None,
                        help="folder of wheels to install where missing or older (offline)")
    parser.add_argument("--target", type=Path, default=None,
                        help="install posenc (a copy, not editable) and the wheels into this "
                             "folder, put on the steps' PYTHONPATH, not into the environment "
                             "(the default where the environment's site folder is read-only)")
    parser.add_argument("--steps", nargs="+", choices=list(STEPS), default=None,
                        help="run only these steps (default: all, in order)")
    parser.add_argument("--budget", type=float, default=BUDGET_S,
                        help=f"seconds for the whole run (default {BUDGET_S:.0f}); a step gets "
                             f"at most what is left")
    parser.add_argument("--timeout", type=timeouts, action="append", default=[],
                        metavar="STEP=SECONDS", help="another limit for one step")
    parser.add_argument("--step", choices=list(STEPS), help=argparse.SUPPRESS)  # a child's
    parser.add_argument("--work", type=Path, help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    args.timeout = dict(args.timeout)
    # Absolute: each child runs in its own work folder.
    args.out, args.wheels, args.work, args.target = (
        None if path is None else path.resolve()
        for path in (args.out, args.wheels, args.work, args.target))
    if args.device == "cpu" and not args.dry_run:
        parser.error("--device cpu needs --dry-run: the full sizes are a GPU's")
    if args.budget <= 0:
        parser.error(f"--budget must be > 0 seconds, got {args.budget}")
    if args.wheels is not None and not args.wheels.is_dir():
        parser.error(f"--wheels must be a folder of .whl files, got {str(args.wheels)!r}")
    if args.step:
        return run_one(args)
    if args.out is None:
        parser.error("--out is required: the folder the report is written into")
    # SIGTERM (a timeout of whoever runs the check) stops the run as Ctrl-C does: the step
    # that was running is reported as stopped and the report written.
    previous = signal.signal(signal.SIGTERM, signal.default_int_handler)
    try:
        return run_steps(args)
    except KeyboardInterrupt:
        print(f"[gpu_check] stopped; report: {args.out / REPORT}", flush=True)
        return 1
    finally:
        signal.signal(signal.SIGTERM, previous)


if __name__ == "__main__":
    sys.exit(main())
