// Tests of the console progress (lines, bar, ETA, summary).
#include <cstdio>

#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "worker/training/progress.h"

namespace cpptorchrun::worker {
namespace {

using ::testing::HasSubstr;

StepReport Report(int64_t step_in_epoch, int64_t global_step) {
  StepReport r;
  r.epoch = 1;
  r.epochs = 3;
  r.step_in_epoch = step_in_epoch;
  r.steps_in_epoch = 100;
  r.global_step = global_step;
  r.total_steps = 300;
  r.loss = 0.5;
  r.samples_per_s = 2500;
  r.elapsed_seconds = 10;
  return r;
}

TEST(Progress, LineAndBar) {
  StepReport r = Report(50, 150);
  EXPECT_EQ(FormatProgress(r, 75, false), "epoch 2/3 step 50/100 loss 0.5000 2500 samples/s ETA 1:15");
  EXPECT_THAT(FormatProgress(r, -1, true), HasSubstr("[============            ] epoch 2/3"));
  EXPECT_THAT(FormatProgress(r, -1, false), HasSubstr("ETA ?"));
}

TEST(Progress, EtaFromThePaceOfThisRun) {
  // 50 steps since the run started at step 100, in 10 s: 150 left take 30 s.
  EXPECT_DOUBLE_EQ(EstimateEta(Report(50, 150), 100), 30.0);
  EXPECT_LT(EstimateEta(Report(50, 150), 150), 0);
}

TEST(Progress, PrintsLinesEveryNStepsAndTheSummary) {
  char* buffer = nullptr;
  size_t size = 0;
  FILE* out = open_memstream(&buffer, &size);
  {
    ConsoleProgress progress(out, false, 25);
    // A resumed run: its first step (global 101, step 1 of the epoch) is shown.
    for (int64_t s = 1; s <= 100; ++s) progress.OnStep(Report(s, 100 + s));
    TrainMetrics m;
    m.test_accuracy = 0.8531;
    m.samples_per_s = 2345;
    m.train_seconds = 25.6;
    m.world_size = 2;
    m.backend = "gloo";
    progress.OnFinished(m);
  }
  std::fclose(out);
  std::string text(buffer, size);
  std::free(buffer);
  EXPECT_THAT(text, HasSubstr("step 1/100 "));
  EXPECT_THAT(text, HasSubstr("step 25/100"));
  EXPECT_THAT(text, HasSubstr("step 100/100"));
  EXPECT_THAT(text, ::testing::Not(HasSubstr("step 2/100 ")));
  EXPECT_THAT(text, ::testing::Not(HasSubstr("step 26/100")));
  EXPECT_THAT(text, HasSubstr("test accuracy 85.31%, 2345 samples/s over 25.6 s (world 2, gloo)"));
}

// After an in-place recovery the worker goes on in a new round: its next
// step gets a line of its own, the ones after it do not.
TEST(Progress, TheFirstStepOfANewRoundHasALine) {
  char* buffer = nullptr;
  size_t size = 0;
  FILE* out = open_memstream(&buffer, &size);
  {
    ConsoleProgress progress(out, false, 25);
    for (int64_t s = 1; s <= 40; ++s) progress.OnStep(Report(s, s));
    progress.OnRoundChanged();
    for (int64_t s = 41; s <= 45; ++s) progress.OnStep(Report(s, s));
  }
  std::fclose(out);
  std::string text(buffer, size);
  std::free(buffer);
  EXPECT_THAT(text, HasSubstr("step 41/100 "));
  EXPECT_THAT(text, ::testing::Not(HasSubstr("step 42/100 ")));
  EXPECT_THAT(text, ::testing::Not(HasSubstr("step 40/100 ")));
}

}  // namespace
}  // namespace cpptorchrun::worker
