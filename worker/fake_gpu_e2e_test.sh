#!/usr/bin/env bash
# End to end under the launcher: `cpptorchrun --standalone --nproc_per_node=2
# --fake_gpus=2 train --epochs 1` reaches at least 0.82 test accuracy on
# Fashion-MNIST; then a group whose rank fails mid-epoch on its first
# attempt is restarted (--max_restarts=1), resumes from the checkpoint and
# finishes with the same accuracy floor.
set -euo pipefail
launcher="$1"
train="$2"
source worker/e2e_lib.sh
skip_without_data fake_gpu_e2e_test
tmp="${TEST_TMPDIR:-$(mktemp -d)}"
at_least() { awk -v a="$1" -v b="$2" 'BEGIN { exit !(a + 0 >= b + 0) }'; }

"$launcher" --standalone --nproc_per_node=2 --fake_gpus=2 "$train" --epochs 1 \
  --data_dir "$data" --progress lines --metrics_json "$tmp/one.json" > "$tmp/one.log" 2>&1 \
  || fail "the fake-GPU run failed: $(tail -20 "$tmp/one.log")"
grep -q "backend fake-gpu" "$tmp/one.log" || fail "not on fake GPUs: $(head -5 "$tmp/one.log")"
[[ "$(field "$tmp/one.json" world_size)" == 2 ]] || fail "world size $(field "$tmp/one.json" world_size)"
[[ "$(field "$tmp/one.json" samples)" == 60000 ]] || fail "samples $(field "$tmp/one.json" samples)"
at_least "$(field "$tmp/one.json" test_accuracy)" 0.82 || fail "accuracy $(field "$tmp/one.json" test_accuracy)"

"$launcher" --standalone --nproc_per_node=2 --fake_gpus=2 --max_restarts=1 "$train" --epochs 1 \
  --data_dir "$data" --progress lines --checkpoint_dir "$tmp/ckpt" --checkpoint_every 50 \
  --fail_after_steps 230 --metrics_json "$tmp/two.json" > "$tmp/two.log" 2>&1 \
  || fail "the restarted run failed: $(tail -20 "$tmp/two.log")"
[[ "$(field "$tmp/two.json" restart_count)" == 1 ]] || fail "restart_count $(field "$tmp/two.json" restart_count)"
[[ "$(field "$tmp/two.json" resumed_from_step)" == 200 ]] || fail "resumed from $(field "$tmp/two.json" resumed_from_step)"
[[ "$(field "$tmp/two.json" steps)" == 269 ]] || fail "steps after resume $(field "$tmp/two.json" steps)"
at_least "$(field "$tmp/two.json" test_accuracy)" 0.82 || fail "accuracy after restart $(field "$tmp/two.json" test_accuracy)"
echo PASS
