#!/usr/bin/env bash
# Runs a Python scenario test (tests/*.py) with an interpreter that has the
# standard library; /usr/bin/python3 is preferred (it also has torch).
set -euo pipefail
script="$1"; shift
py=/usr/bin/python3
[ -x "$py" ] || py=$(command -v python3)
cd "${TEST_SRCDIR:-.}/${TEST_WORKSPACE:-cpptorchrun}"
PYTHONPATH="$PWD/tests${PYTHONPATH:+:$PYTHONPATH}" PYTHONUNBUFFERED=1 exec "$py" "$script" "$@"
