# Shared by the worker's end-to-end shell tests (sourced; the test's cwd is
# its runfiles root): the data set check that counts a test without it as
# skipped, and small helpers.

# Exits 0 with a skipped JUnit case named $1 when Fashion-MNIST is absent:
# counted as skipped, not passed (Bazel keeps the JUnit XML a test writes).
skip_without_data() {
  local name="$1"
  data="${CPPTORCHRUN_FASHION_MNIST:-/usr/share/datasets/fashion-mnist}"
  if [[ ! -e "$data/train-images-idx3-ubyte.gz" ]]; then
    local why="no Fashion-MNIST at $data"
    echo "SKIP: $why"
    if [[ -n "${XML_OUTPUT_FILE:-}" ]]; then
      printf '<?xml version="1.0" encoding="UTF-8"?>\n<testsuites><testsuite name="%s" tests="1" failures="0" skipped="1"><testcase name="%s"><skipped message="%s"/></testcase></testsuite></testsuites>\n' \
        "$name" "$name" "$why" >"$XML_OUTPUT_FILE"
    fi
    exit 0
  fi
}

fail() { echo "FAIL: $*" >&2; exit 1; }
# The value of "key" in a one-line JSON file: field FILE KEY.
field() { sed -n "s/.*\"$2\": \([^,}]*\).*/\1/p" "$1"; }
