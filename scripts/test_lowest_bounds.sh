#!/usr/bin/env bash
# Run the test suite on the lowest bounds pyproject.toml declares: a fresh virtualenv, every direct
# dependency (and the `test` extra's) pinned to its `>=` bound through a constraints file, then pytest.
#   scripts/test_lowest_bounds.sh [VENV_DIR] [PYTEST ARGS...]
# VENV_DIR defaults to a temporary folder; PYTEST ARGS default to `-x -q`.
# A bound that does not install or does not pass is too low: raise it in pyproject.toml.
# Only the `test` extra is installed: tests that need the cuda-build toolchain without skipping (the
# fuzz families prod_build) fail here for that reason, not for a bound.
# pytest-mpi has no lower bound: it is installed as pip resolves it.
set -euo pipefail
here="$(cd "$(dirname "$0")/.." && pwd)"
venv="${1:-$(mktemp -d)/lowvenv}"
shift || true
python="${PYTHON:-python3.11}"
"$python" -m venv "$venv"
"$venv/bin/python" -m pip install -q --upgrade pip
constraints="$venv/lower.txt"
# name>=X  ->  name==X, for the dependencies and the test extra (the others need MPI, CUDA, matplotlib)
"$venv/bin/python" - "$here/pyproject.toml" > "$constraints" <<'PY'
import re, sys, tomllib
project = tomllib.load(open(sys.argv[1], "rb"))["project"]
for spec in project["dependencies"] + project["optional-dependencies"]["test"]:
    m = re.fullmatch(r"\s*([A-Za-z0-9_.-]+)\s*>=\s*([^,;\s]+)\s*", spec)
    if m:
        print(f"{m.group(1)}=={m.group(2)}")
PY
echo "lowest bounds:"; cat "$constraints"
(cd "$here" && "$venv/bin/python" -m pip install -q -c "$constraints" -e '.[test]')
"$venv/bin/python" -m pip list --format=freeze | grep -i -E '^(pydantic|pydantic.core|networkx|z3-solver|rich|pyyaml|numpy|pytest|pytest-mpi|hypothesis)=='
cd "$here"
if [ "$#" -eq 0 ]; then set -- -x -q; fi
"$venv/bin/python" -m pytest -p no:cacheprovider "$@"
