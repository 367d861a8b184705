"""The API reference (mkdocs.yml, docs/): every public name of the four packages has a docstring
and a place in the reference, and the reference builds with warnings as errors, as CI runs it."""

from __future__ import annotations

import importlib
import inspect
import os
import pkgutil
import re
import subprocess
import sys
import tomllib
from pathlib import Path

import pandas as pd
import pytest

ROOT = Path(__file__).resolve().parents[1]
PACKAGES = ("core", "spatial", "temporal", "tasks")


def _exports(package: str) -> dict[str, object]:
    module = importlib.import_module(f"posenc.{package}")
    return {name: getattr(module, name) for name in module.__all__}


def _module_exports(package: str) -> dict[str, object]:
    """What each module of ``package`` lists in its ``__all__``: the building blocks importable
    from their modules only (validators, helpers, functions behind the classes)."""
    root = importlib.import_module(f"posenc.{package}")
    found = {}
    for info in pkgutil.walk_packages(root.__path__, f"{root.__name__}."):
        module = importlib.import_module(info.name)
        found.update({f"{info.name}.{name}": getattr(module, name) for name in module.__all__})
    return found


@pytest.mark.parametrize("package", PACKAGES)
def test_every_exported_object_has_its_own_docstring(package):
    # A class's ``__doc__`` is its own (not inherited): a subclass without one shows None here.
    # Constants carry no ``__doc__``; the build test below checks that theirs is rendered.
    # The modules' own exports are held to it too, though the reference shows only the package's.
    objects = {name: obj for name, obj in {**_exports(package), **_module_exports(package)}.items()
               if inspect.isclass(obj) or inspect.isroutine(obj) or inspect.ismodule(obj)}
    assert objects
    undocumented = [name for name, obj in objects.items() if not (obj.__doc__ or "").strip()]
    assert undocumented == [], f"posenc.{package} exports undocumented {undocumented}"


@pytest.mark.parametrize("package", PACKAGES)
def test_each_package_page_renders_the_whole_package(package):
    """One directive per package, with no member list: the page follows the package's
    ``__all__`` (mkdocs.yml's ``filters: public``) wherever its modules move."""
    page = (ROOT / "docs" / "api" / f"{package}.md").read_text()
    assert re.findall(r"^::: (\S+)$", page, re.M) == [f"posenc.{package}"]
    assert "members" not in page
    assert f"api/{package}.md" in (ROOT / "mkdocs.yml").read_text()


def test_the_test_command_installs_the_docs_build():
    """The README's test command installs ``dev``; the build test needs ``docs`` in it."""
    extras = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"][
        "optional-dependencies"]
    assert "posenc[docs]" in extras["dev"]
    assert any(r.startswith("mkdocstrings") for r in extras["docs"])



@pytest.mark.parametrize("table", sorted((ROOT / "docs" / "studies").glob("*_table.md")),
                         ids=lambda path: path.stem)
def test_the_studies_page_shows_each_table_as_its_study_wrote_it(table):
    """docs/studies/*_table.md are rebuilt from their CSVs by the study tests; the page (where
    the README's tables moved) must show each of their tables row for row."""
    page = (ROOT / "docs" / "studies" / "README.md").read_text()
    blocks = [block for block in table.read_text().split("\n\n") if block.startswith("|")]
    assert blocks
    for block in blocks:
        rows = "\n".join(line for line in block.splitlines() if line.startswith("|"))
        assert rows in page, f"{table.name}: a table differs from the page's"

@pytest.mark.slow  # about 6-12 s: griffe reads every module, material renders ~170 objects
def test_the_reference_builds_strict_and_shows_every_exported_name(tmp_path):
    pytest.importorskip("mkdocs", reason="the docs extra (in dev) builds the reference")
    site = tmp_path / "site"
    proc = subprocess.run(
        [sys.executable, "-m", "mkdocs", "build", "--strict", "--site-dir", str(site)],
        cwd=ROOT, capture_output=True, text=True, timeout=300,
        env={**os.environ, "NO_MKDOCS_2_WARNING": "1"})
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert "WARNING" not in proc.stderr, proc.stderr
    for package in PACKAGES:
        html = (site / "api" / package / "index.html").read_text()
        anchors = set(re.findall(r'id="(posenc\.[\w.]+)"', html))
        # mkdocstrings renders an object only with a docstring (show_if_no_docstring is off),
        # so an anchor is also proof that the constants are documented.
        missing = [name for name in _exports(package) if f"posenc.{package}.{name}" not in anchors]
        assert missing == [], f"not in the posenc.{package} reference: {missing}"


def test_the_forecaster_ablation_prose_quotes_its_table_and_the_peers():
    """Every number of two or more decimals in the ablation section's text (not its tables)
    is a cell of the ablation table (rebuilt from its CSV) or a peer comparison MAE (from
    docs/peers_results.csv), as the table or the peers' table rounds it."""
    page = (ROOT / "docs" / "studies" / "README.md").read_text()
    section = page.split("## Forecaster ablation", 1)[1].split("\n## ")[0]
    prose = "\n".join(line for line in section.splitlines() if not line.startswith("|"))
    table = (ROOT / "docs" / "studies" / "forecast_ablation_table.md").read_text()
    cells = set(re.findall(r"-?\d+\.\d+", table))
    maes = pd.read_csv(ROOT / "docs" / "peers_results.csv")["mae"].dropna()
    cells |= {f"{v:.4f}" for v in maes} | {f"{v:.4g}" for v in maes}
    quoted = re.findall(r"-?\d+\.\d{2,}", prose)
    assert len(quoted) >= 20
    assert [q for q in quoted if q not in cells] == []

