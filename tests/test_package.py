"""The distribution: ``posenc.__version__`` is the installed version, and a wheel installs one
top-level package, ``posenc``, holding every folder the package-dir mapping names."""

from __future__ import annotations

import shutil
import subprocess
import sys
import tomllib
import zipfile
from importlib.metadata import version
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
FOLDERS = ("core", "spatial", "temporal", "tasks")  # posenc.core is core/, and so on


def test_version_is_the_installed_distributions():
    import posenc

    declared = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]["version"]
    assert posenc.__version__ == version("posenc") == declared, (
        "the installed metadata is stale: reinstall (pip install -e .)")


@pytest.mark.slow
def test_the_wheel_installs_posenc_and_every_sub_package_under_it(tmp_path):
    # Built as users build it (pip, isolated build requirements), from a copy, so that the
    # build's egg-info and build/ stay out of the working tree.
    source = tmp_path / "source"
    source.mkdir()
    for name in ("pyproject.toml", "README.md"):
        shutil.copy(ROOT / name, source)
    for folder in ("posenc", *FOLDERS):
        shutil.copytree(ROOT / folder, source / folder,
                        ignore=shutil.ignore_patterns("__pycache__"))
    subprocess.run([sys.executable, "-m", "pip", "wheel", str(source), "--no-deps", "-q",
                    "-w", str(tmp_path / "wheel")], check=True)
    (wheel,) = (tmp_path / "wheel").glob("posenc-*.whl")
    names = set(zipfile.ZipFile(wheel).namelist())
    assert {name.split("/")[0] for name in names} == {
        "posenc", f"posenc-{version('posenc')}.dist-info"}  # no top-level core/ or tasks/
    # Every package folder of the source (sub-packages too), under posenc/.
    expected = {"posenc/__init__.py"} | {
        f"posenc/{init.relative_to(ROOT).as_posix()}"
        for folder in FOLDERS for init in (ROOT / folder).rglob("__init__.py")
        if "__pycache__" not in init.parts}
    assert expected <= names and "posenc/core/__init__.py" in expected
    modules = {f"posenc/{path.relative_to(ROOT).as_posix()}"
               for folder in FOLDERS for path in (ROOT / folder).rglob("*.py")}
    assert modules <= names
