#!/usr/bin/env bash
# End to end under the launcher at world 2: `train --comm_hook powersgd` and
# `--comm_hook fp16` each train to an accuracy floor on a short run, send
# fewer bytes a step than the float32 all-reduce, and end with both ranks'
# parameters bit for bit equal (train's replicas_differing: ranks whose
# parameter fingerprint differs from rank 0's). A bad --comm_hook or
# --powersgd_rank is an error naming the flag.
set -euo pipefail
launcher="$1"
train="$2"
source worker/e2e_lib.sh
skip_without_data compression_binary_test
tmp="${TEST_TMPDIR:-$(mktemp -d)}"
at_least() { awk -v a="$1" -v b="$2" 'BEGIN { exit !(a + 0 >= b + 0) }'; }
below() { awk -v a="$1" -v b="$2" 'BEGIN { exit !(a + 0 < b + 0) }'; }
# The seed MLP's one bucket: 407,050 floats.
float32_bytes=$((407050 * 4))

for hook in powersgd fp16; do
  "$launcher" --standalone --nproc_per_node=2 "$train" --epochs 1 --limit 9600 --backend gloo \
    --data_dir "$data" --progress none --comm_hook "$hook" --powersgd_start_iter 5 \
    --metrics_json "$tmp/$hook.json" > "$tmp/$hook.log" 2>&1 \
    || fail "$hook: $(tail -20 "$tmp/$hook.log")"
  m="$tmp/$hook.json"
  [[ "$(field "$m" comm_hook)" == "\"$hook\"" ]] || fail "$hook: comm_hook $(field "$m" comm_hook)"
  [[ "$(field "$m" world_size)" == 2 ]] || fail "$hook: world size $(field "$m" world_size)"
  [[ "$(field "$m" replicas_differing)" == 0 ]] \
    || fail "$hook: $(field "$m" replicas_differing) rank(s) ended with other parameters than rank 0"
  at_least "$(field "$m" test_accuracy)" 0.65 || fail "$hook: accuracy $(field "$m" test_accuracy)"
  below "$(field "$m" bytes_sent_per_step)" "$float32_bytes" \
    || fail "$hook: $(field "$m" bytes_sent_per_step) bytes a step, float32 sends $float32_bytes"
done
# fp16 sends exactly half of float32's payload every step.
[[ "$(field "$tmp/fp16.json" bytes_sent_per_step)" == $((float32_bytes / 2)) ]] \
  || fail "fp16: $(field "$tmp/fp16.json" bytes_sent_per_step) bytes a step"

if "$train" --comm_hook fp8 > "$tmp/flag.log" 2>&1; then fail "--comm_hook fp8 exited 0"; fi
grep -q -- "--comm_hook" "$tmp/flag.log" || fail "bad hook: $(cat "$tmp/flag.log")"
if "$train" --comm_hook powersgd --powersgd_rank 0 --data_dir "$data" > "$tmp/rank.log" 2>&1; then
  fail "--powersgd_rank 0 exited 0"
fi
grep -q -- "--powersgd_rank" "$tmp/rank.log" || fail "bad rank: $(cat "$tmp/rank.log")"
echo PASS
