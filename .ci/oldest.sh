#!/usr/bin/env bash
# The fast tests on the oldest supported versions: a fresh venv on the oldest Python posenc
# supports, each runtime dependency pinned at the floor pyproject.toml declares (and pyarrow,
# which is built against numpy), the dev and data extras resolved beside them from the package
# registries, posenc editable. docs/versions.md gives each floor's reason.
set -euo pipefail
cd "$(dirname "$0")/.."
venv=.venv-oldest
python3.11 -m venv --clear "$venv"
# The floors as pins, read from pyproject.toml: "torch>=2.13" -> "torch==2.13".
"$venv/bin/python" - > "$venv/floors.txt" <<'PY'
import re
import tomllib

project = tomllib.load(open("pyproject.toml", "rb"))["project"]
pyarrow = [r for r in project["optional-dependencies"]["data"] if r.startswith("pyarrow")]
for requirement in project["dependencies"] + pyarrow:
    name, floor = re.fullmatch(r"([\w.-]+)(?:\[\w+\])?>=([\w.]+)(?:,<\w+)?", requirement).groups()
    print(f"{name}=={floor}")
PY
# PIP_FIND_LINKS: PyPI's torch, not a local CPU-only wheel that PyPI's torchvision cannot load.
PIP_FIND_LINKS=" " "$venv/bin/pip" install -q -c "$venv/floors.txt" -e ".[dev,data]"
"$venv/bin/pip" check
echo "oldest supported versions: Python $("$venv/bin/python" -c 'import platform; print(platform.python_version())'), $(paste -sd' ' "$venv/floors.txt")"
# The fast tests of every package, the README examples among them (`-m "not slow"`): the slow
# ones would take CI past its 25 minutes with this install; `.ci/oldest.sh` forwards pytest's
# arguments, so `.ci/oldest.sh -m ""` runs the whole suite here.
"$venv/bin/python" -m pytest -m "not slow" "$@"
