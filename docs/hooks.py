"""mkdocs hook: lets mkdocstrings find ``posenc.core`` etc., which live in top-level folders.

The distribution maps ``posenc.core`` to ``core/`` (``[tool.setuptools] package-dir`` in
pyproject.toml) beside ``posenc/`` (``posenc/__init__.py``: the version), a layout griffe's
finder cannot follow: it looks for a folder named like the module. So the build links each
mapped folder and ``posenc/__init__.py`` into a temporary ``posenc/`` tree and gives
mkdocstrings that tree as its search path; the sources are read statically from the working
tree (nothing is imported, nothing needs installing).
"""

from __future__ import annotations

import shutil
import tempfile
import tomllib
from pathlib import Path

from mkdocs.plugins import event_priority

_TREES: list[Path] = []


# Before mkdocstrings' own on_config, which already builds the handler (to fetch inventories).
@event_priority(100)
def on_config(config):
    root = Path(config.config_file_path).parent
    setuptools = tomllib.loads((root / "pyproject.toml").read_text())["tool"]["setuptools"]
    tree = Path(tempfile.mkdtemp(prefix="posenc-docs-"))
    _TREES.append(tree)
    mapping = setuptools["package-dir"]
    # The tree's posenc must be a regular package too, or griffe takes the working tree's
    # posenc/ (a regular package beats a namespace), which holds no core/.
    (tree / "posenc").mkdir()
    (tree / "posenc" / "__init__.py").symlink_to(root / "posenc" / "__init__.py")
    for name, folder in mapping.items():
        # A sub-package mapped inside its parent's folder comes with the parent's link.
        if name.rpartition(".")[0] in mapping:
            continue
        link = tree.joinpath(*name.split("."))
        link.parent.mkdir(parents=True, exist_ok=True)
        link.symlink_to(root / folder, target_is_directory=True)
    config.plugins["mkdocstrings"].config.handlers.setdefault("python", {})["paths"] = [str(tree)]
    return config


def on_shutdown():
    while _TREES:
        shutil.rmtree(_TREES.pop(), ignore_errors=True)
