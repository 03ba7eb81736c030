#!/usr/bin/env bash
# End-to-end test of `train --optimizer lars` and `--optimizer lamb` as a
# world of one: each trains (test accuracy above a floor), a run killed
# mid-epoch (fault injection) resumes from its checkpoint and ends where an
# uninterrupted one ends, and resuming with another optimizer fails naming
# both; a bad --optimizer is a usage error naming the flag.
set -euo pipefail
train="$1"
source worker/e2e_lib.sh
skip_without_data optimizer_binary_test
tmp="${TEST_TMPDIR:-$(mktemp -d)}"
at_least() { awk -v a="$1" -v b="$2" 'BEGIN { exit !(a + 0 >= b + 0) }'; }
common=(--data_dir "$data" --limit 4096 --epochs 2 --checkpoint_every 20 --progress none)

for opt in lars lamb; do
  "$train" "${common[@]}" --optimizer "$opt" --checkpoint_dir "$tmp/$opt-whole" \
    --metrics_json "$tmp/$opt-whole.json" > "$tmp/$opt-whole.log" 2>&1 \
    || fail "$opt: $(tail -5 "$tmp/$opt-whole.log")"
  grep -q "\"optimizer\": \"$opt\"" "$tmp/$opt-whole.json" || fail "$opt: $(cat "$tmp/$opt-whole.json")"
  at_least "$(field "$tmp/$opt-whole.json" test_accuracy)" 0.70 \
    || fail "$opt: accuracy $(field "$tmp/$opt-whole.json" test_accuracy)"

  if "$train" "${common[@]}" --optimizer "$opt" --checkpoint_dir "$tmp/$opt-cut" \
    --fail_after_steps 90 > "$tmp/$opt-cut.log" 2>&1; then
    fail "$opt: the fault-injected run exited 0"
  fi
  "$train" "${common[@]}" --optimizer "$opt" --checkpoint_dir "$tmp/$opt-cut" \
    --metrics_json "$tmp/$opt-rest.json" > "$tmp/$opt-rest.log" 2>&1 \
    || fail "$opt resume: $(tail -5 "$tmp/$opt-rest.log")"
  [[ "$(field "$tmp/$opt-rest.json" resumed_from_step)" == 80 ]] \
    || fail "$opt: resumed from $(field "$tmp/$opt-rest.json" resumed_from_step)"
  # Deterministic on one rank: the optimizer's state came back whole.
  [[ "$(field "$tmp/$opt-rest.json" test_accuracy)" == "$(field "$tmp/$opt-whole.json" test_accuracy)" ]] \
    || fail "$opt: resumed accuracy $(field "$tmp/$opt-rest.json" test_accuracy) vs $(field "$tmp/$opt-whole.json" test_accuracy)"
done

if "$train" --data_dir "$data" --limit 4096 --epochs 3 --optimizer adam --checkpoint_dir "$tmp/lamb-whole" \
  > "$tmp/mismatch.log" 2>&1; then
  fail "resuming lamb's checkpoint with adam exited 0"
fi
grep -q "written with --optimizer lamb but this run has --optimizer adam" "$tmp/mismatch.log" \
  || fail "mismatch: $(cat "$tmp/mismatch.log")"
if "$train" --optimizer adamw > "$tmp/flag.log" 2>&1; then fail "--optimizer adamw exited 0"; fi
grep -q -- "--optimizer: adamw not in" "$tmp/flag.log" || fail "bad flag: $(cat "$tmp/flag.log")"
echo PASS
