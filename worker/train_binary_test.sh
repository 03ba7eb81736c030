#!/usr/bin/env bash
# End-to-end test of the `train` binary as a world of one: flags, metrics
# JSON, a run killed mid-epoch (fault injection) leaving a torchrun error
# file, the resumed run ending where an uninterrupted one ends, the DDP
# benchmark's flags, and clear errors for a bad data folder, bad flags and
# an unusable backend.
set -euo pipefail
train="$1"
source worker/e2e_lib.sh
skip_without_data train_binary_test
tmp="${TEST_TMPDIR:-$(mktemp -d)}"
common=(--data_dir "$data" --limit 2048 --epochs 2 --checkpoint_every 5 --progress lines)

[[ "$("$train" --version)" == "train 0.1.0" ]] || fail "--version"
# Whole, then searched: `train --help | grep -q` fails under pipefail when
# grep stops reading before train has written its last line (SIGPIPE).
help="$("$train" --help)"
grep -q -- "--grad_accum_steps" <<<"$help" || fail "--help lacks flags"

"$train" "${common[@]}" --checkpoint_dir "$tmp/whole" --metrics_json "$tmp/whole.json" > "$tmp/whole.log"
[[ "$(field "$tmp/whole.json" steps)" == 64 ]] || fail "uninterrupted run took $(field "$tmp/whole.json" steps) steps"
grep -q "test accuracy" "$tmp/whole.log" || fail "no summary line"

export TORCHELASTIC_ERROR_FILE="$tmp/error.json"
if "$train" "${common[@]}" --checkpoint_dir "$tmp/cut" --fail_after_steps 40 > "$tmp/cut.log" 2>&1; then
  fail "the fault-injected run exited 0"
fi
grep -q '"message": {"message": "absl::Status(ABORTED): fault injection' "$tmp/error.json" \
  || fail "error file: $(cat "$tmp/error.json")"
grep -q '"timestamp": "' "$tmp/error.json" || fail "error file lacks a timestamp"

"$train" "${common[@]}" --checkpoint_dir "$tmp/cut" --metrics_json "$tmp/rest.json" > "$tmp/rest.log"
[[ "$(field "$tmp/rest.json" resumed_from_step)" == 35 ]] || fail "resumed from $(field "$tmp/rest.json" resumed_from_step)"
[[ "$(field "$tmp/rest.json" steps)" == 29 ]] || fail "resumed run took $(field "$tmp/rest.json" steps) steps"
grep -q "resumed from checkpoint at step 35" "$tmp/rest.log" || fail "no resume line"
# Deterministic on one rank: the same model, so the same accuracy and loss.
[[ "$(field "$tmp/rest.json" test_accuracy)" == "$(field "$tmp/whole.json" test_accuracy)" ]] \
  || fail "accuracy $(field "$tmp/rest.json" test_accuracy) vs $(field "$tmp/whole.json" test_accuracy)"

rm -f "$tmp/error.json"
mkdir -p "$tmp/bad"
printf 'not gzip at all' > "$tmp/bad/train-images-idx3-ubyte"
if "$train" --data_dir "$tmp/bad" > "$tmp/bad.log" 2>&1; then fail "a bad data folder exited 0"; fi
grep -q "train-labels-idx1-ubyte.gz\|train-images-idx3-ubyte" "$tmp/bad.log" || fail "bad data: $(cat "$tmp/bad.log")"
grep -q "DataError" "$tmp/error.json" || fail "no error file for bad data"

if "$train" --backend bogus > "$tmp/flag.log" 2>&1; then fail "--backend bogus exited 0"; fi
if "$train" --data_dir "$data" --limit 64 --epochs 1 --backend nccl > "$tmp/nccl.log" 2>&1; then
  echo "note: --backend nccl ran (a GPU is here)"
else
  grep -q "no CUDA device\|built without CUDA" "$tmp/nccl.log" || fail "nccl error: $(cat "$tmp/nccl.log")"
fi
# The DDP benchmark's flags: a deeper model, the modes in turn, figures per mode.
"$train" --data_dir "$data" --limit 640 --epochs 1 --progress none --hidden 32,16 --allreduce rotate \
  --metrics_json "$tmp/rotate.json" > "$tmp/rotate.log"
grep -q '"hidden": "32,16"' "$tmp/rotate.json" || fail "hidden: $(cat "$tmp/rotate.json")"
grep -q '"by_mode": {"off": {"steps": 4, .*"after_backward": {"steps": 4, .*"overlap": {"steps": 2' \
  "$tmp/rotate.json" || fail "by_mode: $(cat "$tmp/rotate.json")"
if "$train" --hidden 32,0 --data_dir "$data" --limit 64 > "$tmp/hidden.log" 2>&1; then fail "--hidden 32,0 exited 0"; fi
grep -q -- "--hidden widths must be in \[1, 16384\], got 0" "$tmp/hidden.log" || fail "hidden: $(cat "$tmp/hidden.log")"
if "$train" --allreduce later > "$tmp/mode.log" 2>&1; then fail "--allreduce later exited 0"; fi
grep -q -- "--allreduce: later not in" "$tmp/mode.log" || fail "allreduce: $(cat "$tmp/mode.log")"
WORLD_SIZE=2 RANK=1 "$train" --data_dir "$data" --limit 64 > "$tmp/world.log" 2>&1 && fail "WORLD_SIZE=2 without a store exited 0"
grep -q "CPPTORCHRUN_RDZV_ENDPOINT is not set" "$tmp/world.log" || fail "world 2: $(cat "$tmp/world.log")"
echo PASS
