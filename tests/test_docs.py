"""The API reference (mkdocs.yml, docs/): every public name of the four packages has a docstring
and a place in the reference, and the reference builds with warnings as errors, as CI runs it.

Docstrings are Google style in Markdown. A cross-reference is an autorefs link (mkdocstrings):
``[`SinCos2D`][posenc.spatial.SinCos2D]``, the text in code font and the target the shortest
path the site shows (the package's public name where the package exports it; a method through
its class, ``posenc.core.XPos.rotation``). A name the site does not show (a private helper,
torch, timm) is plain code. Sphinx roles (``:class:`X```) are not read: they would show as
literal text. docs/contributing.md says the same for contributors.
"""

from __future__ import annotations

import importlib
import inspect
import os
import pkgutil
import re
import subprocess
import sys
import tomllib
import zlib
from pathlib import Path

import pandas as pd
import pytest

ROOT = Path(__file__).resolve().parents[1]
PACKAGES = ("core", "spatial", "temporal", "tasks")
# A Sphinx cross-reference role, which mkdocstrings renders as literal text (":class:X").
ROLE = re.compile(r":(?:py:)?(?:class|func|data|meth|attr|mod|exc|obj):`")
# An autorefs link in a docstring: [`text`][posenc.target].
LINK = re.compile(r"\[`[^`\]]+`\]\[(posenc\.[\w.]+)\]")


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

@pytest.fixture(scope="module")
def site(tmp_path_factory) -> tuple[subprocess.CompletedProcess, Path]:
    """The reference built as CI builds it (strict); mkdocs writes the pages before it aborts on
    a warning, so the tests below can read what a warning left in them."""
    pytest.importorskip("mkdocs", reason="the docs extra (in dev) builds the reference")
    site = tmp_path_factory.mktemp("docs") / "site"
    proc = subprocess.run(
        [sys.executable, "-m", "mkdocs", "build", "--strict", "--site-dir", str(site)],
        cwd=ROOT, capture_output=True, text=True, timeout=300,
        env={**os.environ, "NO_MKDOCS_2_WARNING": "1"})
    return proc, site


@pytest.mark.slow  # about 10-25 s: griffe reads every module, material renders ~170 objects
def test_the_reference_builds_strict_and_shows_every_exported_name(site):
    proc, site = site
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert "WARNING" not in proc.stderr, proc.stderr
    for package in PACKAGES:
        html = (site / "api" / package / "index.html").read_text()
        anchors = set(re.findall(r'id="(posenc\.[\w.]+)"', html))
        # mkdocstrings renders an object only with a docstring (show_if_no_docstring is off),
        # so an anchor is also proof that the constants are documented.
        missing = [name for name in _exports(package) if f"posenc.{package}.{name}" not in anchors]
        assert missing == [], f"not in the posenc.{package} reference: {missing}"


def _leftovers(html: str) -> list[str]:
    """What a page shows of a cross-reference that did not become a link: a Sphinx role as
    text (``:class:<code>X</code>``), autorefs' own element, or the ``][target]`` of a link it
    could not resolve (it leaves ``[<code>text</code>][posenc.target]`` and logs "Could not
    find cross-reference target"). Code blocks and code spans are left out: ``x[i][j]`` is
    code, and so is a role that a page quotes."""
    text = re.sub(r"<pre\b.*?</pre>|<code\b[^>]*>.*?</code>", "", html, flags=re.S)
    return re.findall(r".{0,60}(?::(?:py:)?(?:class|func|data|meth|attr|mod|exc|obj):"
                      r"|<autoref\b|\]\[[\w.]*\]).{0,20}", text)


@pytest.mark.slow  # shares the build above
def test_no_page_shows_a_role_or_an_unresolved_reference(site):
    _, site = site
    pages = sorted(site.rglob("*.html"))
    assert len(pages) >= 9  # home, guide, 4 API pages, studies, benchmarks, plots
    found = {str(page.relative_to(site)): _leftovers(page.read_text()) for page in pages}
    assert {page: left for page, left in found.items() if left} == {}
    # The docstrings' links did become links: each API page has some.
    for package in PACKAGES:
        assert "autorefs-internal" in (site / "api" / package / "index.html").read_text()


@pytest.mark.slow  # shares the build above
@pytest.mark.parametrize("package", PACKAGES)
def test_each_object_is_documented_once(site, package):
    """A package shows the classes and functions it re-exports; its modules' sections show
    only what the package does not (docs/griffe_extensions.py): before, every exported class
    came twice on its page, heading, signature and docstring."""
    _, site = site
    html = (site / "api" / package / "index.html").read_text()
    shown: dict[int, list[str]] = {}
    for path in re.findall(r'<h\d id="(posenc\.[\w.]+)" class="doc doc-heading"', html):
        parent, _, name = path.rpartition(".")
        try:  # module-level objects only: methods are shared by design (inherited ones)
            obj = getattr(importlib.import_module(parent), name, None)
        except ModuleNotFoundError:
            continue
        if inspect.isclass(obj) or inspect.isfunction(obj):
            shown.setdefault(id(obj), []).append(path)
    assert len(shown) >= 10
    assert [paths for paths in shown.values() if len(paths) > 1] == []


@pytest.mark.slow  # shares the build above
def test_every_link_between_pages_lands_on_a_page_and_its_anchor(site):
    """mkdocs only logs (INFO, even in strict mode) a link to a file the build leaves out: the
    benchmarks and studies pages linked peers_table.md, which was not built."""
    _, site = site
    pages = {page.resolve(): page.read_text() for page in site.rglob("*.html")}
    ids = {page: set(re.findall(r'\bid="([^"]+)"', html)) for page, html in pages.items()}
    broken = []
    for page, html in pages.items():
        for href in re.findall(r'\bhref="([^"]+)"', html):
            if re.match(r"[a-z]+:|//", href):
                continue  # another site
            path, _, anchor = href.partition("#")
            base = site.resolve() if path.startswith("/") else page.parent  # 404.html: absolute
            target = (base / path.lstrip("/")).resolve() if path else page
            target = target / "index.html" if target.is_dir() else target
            if not target.exists() or (anchor and target in ids and anchor not in ids[target]):
                broken.append(f"{page.relative_to(site.resolve())}: {href}")
    assert broken == []


@pytest.mark.slow  # shares the build above
def test_every_docstring_link_names_an_object_the_site_shows(site):
    """Each ``[`text`][posenc.target]`` in the packages' sources, rendered or not (a private
    helper's docstring is not, so the build never resolves it), names an object of the site's
    inventory: a link goes stale when its object moves or leaves ``__all__``."""
    _, site = site
    data = (site / "objects.inv").read_bytes()
    inventory = {line.split(" ", 1)[0]
                 for line in zlib.decompress(data.split(b"\n", 4)[4]).decode().splitlines()}
    targets = {(str(path.relative_to(ROOT)), target)
               for package in PACKAGES for path in sorted((ROOT / package).rglob("*.py"))
               for target in LINK.findall(path.read_text())}
    assert len(targets) >= 100
    assert sorted(item for item in targets if item[1] not in inventory) == []


@pytest.mark.parametrize("package", PACKAGES)
def test_no_docstring_holds_a_sphinx_role(package):
    """The one cross-reference convention (this module's docstring) holds everywhere in the
    code, in docstrings the site does not render too."""
    found = [f"{path.relative_to(ROOT)}:{number}: {line.strip()}"
             for path in sorted((ROOT / package).rglob("*.py"))
             for number, line in enumerate(path.read_text().splitlines(), 1) if ROLE.search(line)]
    assert found == []


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

