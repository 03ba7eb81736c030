#!/usr/bin/env bash
# Runs a Python scenario test (tests/<name>.py) as the module tests.<name>
# from the runfiles' root, so that it imports the shared helpers as the
# package `tests` without a search path of its own; /usr/bin/python3 is
# preferred (it also has torch).
set -euo pipefail
script="$1"; shift
py=/usr/bin/python3
[ -x "$py" ] || py=$(command -v python3)
cd "${TEST_SRCDIR:-.}/${TEST_WORKSPACE:-cpptorchrun}"
module="${script%.py}"
PYTHONUNBUFFERED=1 exec "$py" -m "${module//\//.}" "$@"
