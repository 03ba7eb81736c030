// The linear scaling rule with warm-up.
#include "worker/training/schedule.h"

#include <algorithm>

namespace cpptorchrun::worker {

double LearningRate(const LrSchedule& schedule, int64_t step) {
  if (!schedule.scale_lr || schedule.scale <= 1) return schedule.base_lr;
  const double target = schedule.base_lr * static_cast<double>(schedule.scale);
  if (schedule.warmup_steps <= 0 || step >= schedule.warmup_steps) return target;
  const double progress = static_cast<double>(std::max<int64_t>(step, 0) + 1) /
                          static_cast<double>(schedule.warmup_steps);
  return schedule.base_lr + (target - schedule.base_lr) * progress;
}

}  // namespace cpptorchrun::worker
