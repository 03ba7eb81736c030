// Tests of the all-reduce modes' names, the benchmark's rotation rule and
// the per-mode tallies.
#include "worker/training/allreduce_mode.h"

#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace cpptorchrun::worker {
namespace {

using ::testing::HasSubstr;

TEST(AllReduceMode, NamesRoundTrip) {
  for (AllReduceMode mode : {AllReduceMode::kOverlap, AllReduceMode::kAfterBackward,
                             AllReduceMode::kOff, AllReduceMode::kRotate}) {
    EXPECT_EQ(ParseAllReduceMode(AllReduceModeName(mode)).value(), mode);
  }
  EXPECT_THAT(ParseAllReduceMode("later").status().message(), HasSubstr("got \"later\""));
}

TEST(ModeForOptimizerStep, AFixedModeIsEveryStepsMode) {
  for (int64_t step : {0, 5, 1000}) {
    EXPECT_EQ(ModeForOptimizerStep(AllReduceMode::kAfterBackward, step),
              AllReduceMode::kAfterBackward);
  }
}

TEST(ModeForOptimizerStep, RotateRunsOffAfterBackwardOverlapInBlocks) {
  const AllReduceMode expected[] = {AllReduceMode::kOff, AllReduceMode::kAfterBackward,
                                    AllReduceMode::kOverlap, AllReduceMode::kOff};
  for (int64_t step = 0; step < 4 * kRotationBlock; ++step) {
    EXPECT_EQ(ModeForOptimizerStep(AllReduceMode::kRotate, step), expected[step / kRotationBlock])
        << step;
  }
}

TEST(ModeTallies, FiguresPerModeInRotationOrder) {
  ModeTallies tallies;
  DdpStats ddp;
  ddp.wait_seconds = 0.5;
  ddp.timed_steps = 1;
  tallies.Add(AllReduceMode::kOverlap, 3.0, ddp);
  tallies.Add(AllReduceMode::kOverlap, 1.0, ddp);
  tallies.Add(AllReduceMode::kOverlap, 2.0, ddp);
  tallies.Add(AllReduceMode::kOff, 7.0, DdpStats());
  std::vector<TrainMetrics::ModeFigures> figures = tallies.Figures();
  ASSERT_EQ(figures.size(), 2u);
  EXPECT_EQ(figures[0].mode, "off");
  EXPECT_EQ(figures[0].steps, 1);
  EXPECT_EQ(figures[0].comm_wait_seconds, 0);
  EXPECT_EQ(figures[1].mode, "overlap");
  EXPECT_EQ(figures[1].steps, 3);
  EXPECT_EQ(figures[1].step_seconds_median, 2.0);
  EXPECT_EQ(figures[1].comm_wait_seconds, 1.5);
  EXPECT_EQ(figures[1].allreduce_timed_steps, 3);
}

TEST(Median, UpperOfAnEvenCountAndZeroForNone) {
  std::vector<double> none;
  EXPECT_EQ(Median(none), 0);
  std::vector<double> four = {4, 1, 3, 2};
  EXPECT_EQ(Median(four), 3);
}

}  // namespace
}  // namespace cpptorchrun::worker
