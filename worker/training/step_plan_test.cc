// Tests of the per-batch rules: accumulation windows and mid-epoch
// checkpoints.
#include "worker/training/step_plan.h"

#include "gtest/gtest.h"

namespace cpptorchrun::worker {
namespace {

TEST(PlanBatch, WithoutAccumulationEveryBatchSteps) {
  for (int64_t b = 0; b < 3; ++b) {
    BatchPlan plan = PlanBatch(b, 3, 1);
    EXPECT_EQ(plan.window, 1);
    EXPECT_TRUE(plan.sync);
    EXPECT_EQ(plan.last_in_epoch, b == 2);
  }
}

TEST(PlanBatch, WindowsOfFourWithAShortLastOne) {
  // 10 batches in windows of 4: [0..3], [4..7], [8, 9].
  for (int64_t b = 0; b < 10; ++b) {
    BatchPlan plan = PlanBatch(b, 10, 4);
    EXPECT_EQ(plan.window, b < 8 ? 4 : 2) << b;
    EXPECT_EQ(plan.sync, b == 3 || b == 7 || b == 9) << b;
  }
}

TEST(MidEpochCheckpointDue, OnMultiplesOfEveryButNotAtTheEpochsEnd) {
  BatchPlan plan = PlanBatch(1, 10, 1);
  EXPECT_TRUE(MidEpochCheckpointDue(plan, 6, 3));
  EXPECT_FALSE(MidEpochCheckpointDue(plan, 7, 3));
  EXPECT_FALSE(MidEpochCheckpointDue(plan, 6, 0));
  EXPECT_FALSE(MidEpochCheckpointDue(PlanBatch(9, 10, 1), 6, 3));
  // An accumulating batch is not an optimizer step.
  EXPECT_FALSE(MidEpochCheckpointDue(PlanBatch(0, 10, 2), 6, 3));
}

}  // namespace
}  // namespace cpptorchrun::worker
