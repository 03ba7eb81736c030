// The per-batch rules of the training loop.
#include "worker/training/step_plan.h"

#include <algorithm>

namespace cpptorchrun::worker {

BatchPlan PlanBatch(int64_t index, int64_t batches, int64_t grad_accum_steps) {
  const int64_t window_start = index / grad_accum_steps * grad_accum_steps;
  BatchPlan plan;
  plan.window = std::min(grad_accum_steps, batches - window_start);
  plan.sync = index == window_start + plan.window - 1;
  plan.last_in_epoch = index + 1 == batches;
  return plan;
}

bool MidEpochCheckpointDue(const BatchPlan& plan, int64_t opt_steps_done,
                           int64_t checkpoint_every) {
  return plan.sync && checkpoint_every > 0 && opt_steps_done % checkpoint_every == 0 &&
         !plan.last_in_epoch;
}

}  // namespace cpptorchrun::worker
