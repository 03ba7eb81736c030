// Tests of the learning-rate rule and of the metrics JSON.
#include <cstdio>
#include <fstream>
#include <sstream>

#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "worker/training/metrics.h"
#include "worker/training/schedule.h"

namespace cpptorchrun::worker {
namespace {

using ::testing::HasSubstr;

TEST(Schedule, LinearScalingWithWarmup) {
  LrSchedule s;
  s.base_lr = 0.001;
  s.scale = 4;
  EXPECT_DOUBLE_EQ(LearningRate(s, 0), 0.001);  // scale_lr off
  s.scale_lr = true;
  s.warmup_steps = 10;
  EXPECT_DOUBLE_EQ(LearningRate(s, 0), 0.001 + 0.003 * 0.1);
  EXPECT_DOUBLE_EQ(LearningRate(s, 4), 0.001 + 0.003 * 0.5);
  EXPECT_DOUBLE_EQ(LearningRate(s, 9), 0.004);
  EXPECT_DOUBLE_EQ(LearningRate(s, 1000), 0.004);
  s.warmup_steps = 0;
  EXPECT_DOUBLE_EQ(LearningRate(s, 0), 0.004);
  s.scale = 1;
  EXPECT_DOUBLE_EQ(LearningRate(s, 0), 0.001);
}

TEST(Metrics, JsonHasTheRequiredKeys) {
  TrainMetrics m;
  m.world_size = 2;
  m.samples = 60000;
  m.train_seconds = 20;
  m.samples_per_s = 3000;
  m.test_accuracy = 0.85;
  m.backend = "fake-gpu:\"0\"";
  std::string json = MetricsToJson(m);
  for (const char* key : {"world_size", "epochs", "steps", "samples", "train_seconds",
                          "samples_per_s", "cpu_seconds", "test_accuracy", "final_loss", "restart_count",
                          "resumed_from_step", "step_seconds_mean", "step_seconds_median", "backward_seconds_mean",
                          "comm_wait_seconds", "allreduce_timed_steps", "allreduce_seconds",
                          "allreduce_hidden_seconds", "allreduce", "hidden", "checkpoints_written",
                          "checkpoint_wait_seconds"}) {
    EXPECT_THAT(json, HasSubstr(std::string("\"") + key + "\": ")) << key;
  }
  EXPECT_THAT(json, HasSubstr("\"samples_per_s\": 3000"));
  EXPECT_THAT(json, HasSubstr("\"test_accuracy\": 0.85"));
  EXPECT_THAT(json, HasSubstr("fake-gpu:\\\"0\\\""));
  EXPECT_THAT(json, HasSubstr("\"allreduce\": \"overlap\""));
  EXPECT_THAT(json, HasSubstr("\"hidden\": \"512\""));
  EXPECT_THAT(json, HasSubstr("\"by_mode\": {}"));
  TrainMetrics::ModeFigures off;
  off.mode = "off";
  off.steps = 4;
  TrainMetrics::ModeFigures overlap;
  overlap.mode = "overlap";
  overlap.allreduce_seconds = 0.25;
  m.by_mode = {off, overlap};
  EXPECT_THAT(MetricsToJson(m),
              HasSubstr("\"by_mode\": {\"off\": {\"steps\": 4, \"step_seconds_median\": 0, "
                        "\"comm_wait_seconds\": 0, \"allreduce_timed_steps\": 0, "
                        "\"allreduce_seconds\": 0, \"allreduce_hidden_seconds\": 0}, "
                        "\"overlap\": {\"steps\": 0"));
  EXPECT_THAT(MetricsToJson(m), HasSubstr("\"allreduce_seconds\": 0.25, "));
  m.test_accuracy = -1;
  EXPECT_THAT(MetricsToJson(m), HasSubstr("\"test_accuracy\": null"));
}

TEST(Metrics, WritesTheFileAndNamesABadPath) {
  std::string path = std::string(std::getenv("TEST_TMPDIR") ? std::getenv("TEST_TMPDIR") : "/tmp") +
                     "/metrics.json";
  ASSERT_TRUE(WriteMetricsJson(path, TrainMetrics()).ok());
  std::ifstream in(path);
  std::stringstream text;
  text << in.rdbuf();
  EXPECT_EQ(text.str(), MetricsToJson(TrainMetrics()));
  absl::Status bad = WriteMetricsJson("/nonexistent-dir/m.json", TrainMetrics());
  EXPECT_THAT(bad.message(), HasSubstr("/nonexistent-dir/m.json"));
}

}  // namespace
}  // namespace cpptorchrun::worker
