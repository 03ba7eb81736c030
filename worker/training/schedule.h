// The learning-rate rule: the linear scaling rule with linear warm-up
// (--scale_lr), as the seed's exercise 1.3 describes. A pure function.
#ifndef CPPTORCHRUN_WORKER_TRAINING_SCHEDULE_H_
#define CPPTORCHRUN_WORKER_TRAINING_SCHEDULE_H_

#include <cstdint>

namespace cpptorchrun::worker {

struct LrSchedule {
  double base_lr = 1e-3;
  // Effective batch / per-rank batch: world size x accumulation steps.
  int64_t scale = 1;
  bool scale_lr = false;
  // Optimizer steps over which the rate climbs from base_lr to
  // base_lr * scale. 0: the scaled rate from the first step.
  int64_t warmup_steps = 0;
};

// The rate for optimizer step `step` (0-based). Without scale_lr: base_lr.
double LearningRate(const LrSchedule& schedule, int64_t step);

}  // namespace cpptorchrun::worker

#endif  // CPPTORCHRUN_WORKER_TRAINING_SCHEDULE_H_
