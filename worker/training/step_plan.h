// The training loop's decisions about a batch, as pure functions of where
// the batch stands: its accumulation window, whether a checkpoint falls
// after it, and the progress report it produces. Torch-free, so tests call
// them with made-up positions.
#ifndef CPPTORCHRUN_WORKER_TRAINING_STEP_PLAN_H_
#define CPPTORCHRUN_WORKER_TRAINING_STEP_PLAN_H_

#include <cstdint>

namespace cpptorchrun::worker {

// Batch `index` (0-based) of an epoch's `batches` on this rank.
struct BatchPlan {
  // Batches in its accumulation window: the loss is divided by this.
  // The last window of an epoch may be shorter than grad_accum_steps.
  int64_t window = 1;
  // The window's last batch: gradients are all-reduced and the optimizer
  // steps after it.
  bool sync = true;
  // The epoch's last batch on this rank.
  bool last_in_epoch = false;
};

// Windows of `grad_accum_steps` batches from the epoch's first (resumed
// epochs count from their first remaining batch). Requires index < batches
// and grad_accum_steps >= 1.
BatchPlan PlanBatch(int64_t index, int64_t batches, int64_t grad_accum_steps);

// Whether a checkpoint is written after a batch inside its epoch: on an
// optimizer step that is a multiple of `checkpoint_every` (0: never), not
// on an epoch's last batch (the epoch's end writes one anyway).
// `opt_steps_done` counts optimizer steps including this batch's.
bool MidEpochCheckpointDue(const BatchPlan& plan, int64_t opt_steps_done,
                           int64_t checkpoint_every);

}  // namespace cpptorchrun::worker

#endif  // CPPTORCHRUN_WORKER_TRAINING_STEP_PLAN_H_
