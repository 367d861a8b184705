"""posenc.core's modules import each other one way: checks and the encoding base first, then
the encodings, then the attention module that uses them (issue 29: ``bias.py`` imported
``attention.py``)."""

from __future__ import annotations

import ast
from pathlib import Path

import posenc.core

# Each module may import only the modules listed before it.
ORDER = ["_checks", "encoding", "positions", "additive", "rope", "xpos", "bias", "attention"]


def _core_imports(path: Path) -> set[str]:
    """The posenc.core modules ``path`` imports, at module level or inside functions."""
    found = set()
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.ImportFrom):
            if node.level == 1 and node.module:
                found.add(node.module.split(".")[0])
            elif node.module and node.module.startswith("posenc.core."):
                found.add(node.module.split(".")[2])
    return found


def test_core_modules_import_only_the_layers_below_them():
    folder = Path(posenc.core.__file__).parent
    modules = {p.stem for p in folder.glob("*.py")} - {"__init__"}
    assert modules == set(ORDER)  # a new module takes its place in ORDER
    for index, name in enumerate(ORDER):
        upward = _core_imports(folder / f"{name}.py") - set(ORDER[:index])
        assert not upward, f"core/{name}.py imports {sorted(upward)}, a layer above it"
