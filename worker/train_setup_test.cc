// Tests of the binary's pure decisions: the config from flags and
// environment, the heartbeat options, rank 0's opening lines, and how a
// training result ends the process.
#include "worker/train_setup.h"

#include <csignal>

#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace cpptorchrun::worker {
namespace {

using ::testing::HasSubstr;
using ::testing::Not;

TEST(ConfigFromFlags, CarriesTheFlagsAndTheRestartCount) {
  Flags flags;
  flags.bucket_cap_mb = 2;
  flags.allreduce = "after_backward";
  flags.train.fail_after_steps = 7;
  WorkerEnv env;
  absl::StatusOr<TrainConfig> config = ConfigFromFlags(flags, env);
  ASSERT_TRUE(config.ok()) << config.status();
  EXPECT_EQ(config->bucket_cap_bytes, 2 << 20);
  EXPECT_EQ(config->allreduce, AllReduceMode::kAfterBackward);
  EXPECT_EQ(config->fail_after_steps, 7);
  EXPECT_EQ(config->restart_count, 0);
}

TEST(ConfigFromFlags, TheOptimizerAndItsKnobs) {
  Flags flags;
  absl::StatusOr<TrainConfig> config = ConfigFromFlags(flags, WorkerEnv());
  ASSERT_TRUE(config.ok()) << config.status();
  EXPECT_EQ(config->optimizer.kind, OptimizerKind::kAdam) << "the seed's, as before";
  EXPECT_EQ(BaseLearningRate(*config), 1e-3);
  flags.optimizer = "lars";
  flags.train.optimizer.weight_decay = 1e-4;
  flags.train.optimizer.momentum = 0.8;
  flags.train.optimizer.trust_coefficient = 0.02;
  config = ConfigFromFlags(flags, WorkerEnv());
  ASSERT_TRUE(config.ok()) << config.status();
  EXPECT_EQ(config->optimizer.kind, OptimizerKind::kLars);
  EXPECT_EQ(config->optimizer.weight_decay, 1e-4);
  EXPECT_EQ(config->optimizer.momentum, 0.8);
  EXPECT_EQ(config->optimizer.trust_coefficient, 0.02);
  EXPECT_EQ(BaseLearningRate(*config), DefaultLearningRate(OptimizerKind::kLars));
  flags.train.lr = 0.5;
  EXPECT_EQ(BaseLearningRate(*ConfigFromFlags(flags, WorkerEnv())), 0.5) << "--lr wins";
  flags.optimizer = "lamb";
  EXPECT_EQ(ConfigFromFlags(flags, WorkerEnv())->optimizer.kind, OptimizerKind::kLamb);
  flags.optimizer = "sgd";
  EXPECT_EQ(ConfigFromFlags(flags, WorkerEnv())->optimizer.kind, OptimizerKind::kSgd);
}

TEST(ConfigFromFlags, TheCommHookAndPowerSgdKnobs) {
  Flags flags;
  absl::StatusOr<TrainConfig> config = ConfigFromFlags(flags, WorkerEnv());
  ASSERT_TRUE(config.ok()) << config.status();
  EXPECT_EQ(config->comm_hook.kind, CommHookKind::kAllReduce) << "as before";
  EXPECT_EQ(config->comm_hook.powersgd_rank, 1) << "torch's default";
  flags.comm_hook = "powersgd";
  flags.train.comm_hook.powersgd_rank = 4;
  flags.train.comm_hook.powersgd_start_iter = 0;
  config = ConfigFromFlags(flags, WorkerEnv());
  ASSERT_TRUE(config.ok()) << config.status();
  EXPECT_EQ(config->comm_hook.kind, CommHookKind::kPowerSgd);
  EXPECT_EQ(config->comm_hook.powersgd_rank, 4);
  EXPECT_EQ(config->comm_hook.powersgd_start_iter, 0);
  flags.comm_hook = "bf16";
  EXPECT_EQ(ConfigFromFlags(flags, WorkerEnv())->comm_hook.kind, CommHookKind::kBf16);
  flags.comm_hook = "fp32";
  EXPECT_THAT(ConfigFromFlags(flags, WorkerEnv()).status().message(), HasSubstr("--comm_hook"));
  flags.comm_hook = "powersgd";
  flags.train.comm_hook.powersgd_rank = 0;
  EXPECT_THAT(ConfigFromFlags(flags, WorkerEnv()).status().message(), HasSubstr("--powersgd_rank"));
  flags.train.comm_hook.powersgd_rank = 1;
  flags.train.comm_hook.powersgd_start_iter = -3;
  EXPECT_THAT(ConfigFromFlags(flags, WorkerEnv()).status().message(),
              HasSubstr("--powersgd_start_iter"));
}

TEST(ConfigFromFlags, FaultInjectionKillsTheFirstAttemptOnly) {
  Flags flags;
  flags.train.fail_after_steps = 7;
  WorkerEnv env;
  env.restart_count = 1;
  absl::StatusOr<TrainConfig> config = ConfigFromFlags(flags, env);
  ASSERT_TRUE(config.ok()) << config.status();
  EXPECT_EQ(config->fail_after_steps, 0);
  EXPECT_EQ(config->restart_count, 1);
}

TEST(ConfigFromFlags, BadFlagsAreNamed) {
  Flags flags;
  flags.allreduce = "later";
  EXPECT_THAT(ConfigFromFlags(flags, WorkerEnv()).status().message(), HasSubstr("--allreduce"));
  flags = Flags();
  flags.optimizer = "adamw";
  EXPECT_THAT(ConfigFromFlags(flags, WorkerEnv()).status().message(), HasSubstr("--optimizer"));
  flags = Flags();
  flags.train.optimizer.momentum = 1;
  EXPECT_THAT(ConfigFromFlags(flags, WorkerEnv()).status().message(), HasSubstr("--momentum"));
  flags = Flags();
  flags.train.keep_checkpoints = 0;
  EXPECT_THAT(ConfigFromFlags(flags, WorkerEnv()).status().message(),
              HasSubstr("--keep_checkpoints"));
}

TEST(StallBound, IsTheWorkerTimeoutButNeverUnderAMinute) {
  EXPECT_EQ(StallBound(absl::Seconds(600)), absl::Seconds(600));
  EXPECT_EQ(StallBound(absl::Seconds(300)), absl::Seconds(300));
  EXPECT_EQ(StallBound(absl::Seconds(2)), kMinStall) << "a short timeout is for silence, not for pauses";
}

TEST(HeartbeatOptionsFor, StallBoundComesFromTheEnvironmentsWorkerTimeout) {
  Flags flags;
  flags.heartbeat_interval = 0.5;
  WorkerEnv env;
  env.rank = 3;
  env.local_rank = 1;
  env.worker_timeout = absl::Seconds(420);
  HeartbeatOptions options = HeartbeatOptionsFor(flags, env, 1234);
  EXPECT_EQ(options.interval, absl::Milliseconds(500));
  EXPECT_EQ(options.stall_after, absl::Seconds(420));
  EXPECT_EQ(options.rank, 3);
  EXPECT_EQ(options.local_rank, 1);
  EXPECT_EQ(options.pid, 1234);
}

TEST(OpeningLines, ShapeAndTheBenchmarkWarningOnlyWhereReplicasDrift) {
  WorkerEnv env;
  env.world_size = 2;
  TrainConfig config;
  config.epochs = 3;
  std::string lines = OpeningLines(env, "gloo", 60000, config, "started in 0.8 s");
  EXPECT_EQ(lines,
            "train: world 2, backend gloo, 60000 samples, batch 64 per rank, 3 epochs; "
            "started in 0.8 s\n");
  config.allreduce = AllReduceMode::kRotate;
  EXPECT_THAT(OpeningLines(env, "gloo", 60000, config, ""),
              HasSubstr("--allreduce rotate: gradients are not averaged on a third of the steps"));
  config.allreduce = AllReduceMode::kOff;
  EXPECT_THAT(OpeningLines(env, "gloo", 60000, config, ""), HasSubstr("on any step"));
  env.world_size = 1;
  EXPECT_THAT(OpeningLines(env, "gloo", 60000, config, ""), Not(HasSubstr("drift")));
}

TEST(EndingOf, AStopIsACancelAfterTheLaunchersRequest) {
  EXPECT_EQ(EndingOf(absl::OkStatus(), false), Ending::kFinished);
  EXPECT_EQ(EndingOf(absl::OkStatus(), true), Ending::kFinished);
  EXPECT_EQ(EndingOf(absl::CancelledError("stopped"), true), Ending::kStopped);
  // A cancel nobody asked for is a failure, and so is any other error.
  EXPECT_EQ(EndingOf(absl::CancelledError("?"), false), Ending::kFailed);
  EXPECT_EQ(EndingOf(absl::AbortedError("peer"), true), Ending::kFailed);
  // After SIGTERM, a collective whose peer stopped first is part of stopping.
  EXPECT_EQ(EndingOf(absl::AbortedError("peer"), false, /*terminated=*/true), Ending::kStopped);
  EXPECT_EQ(EndingOf(absl::CancelledError("stopped on a signal"), false, true), Ending::kStopped);
  EXPECT_EQ(EndingOf(absl::OkStatus(), false, true), Ending::kFinished);
}

TEST(SignalRequestFor, CheckpointOnTheWarningsStopOnTerm) {
  EXPECT_EQ(SignalRequestFor(SIGUSR1), SignalRequest::kCheckpoint);
  EXPECT_EQ(SignalRequestFor(SIGUSR2), SignalRequest::kCheckpoint);
  EXPECT_EQ(SignalRequestFor(SIGTERM), SignalRequest::kCheckpointAndStop);
  EXPECT_EQ(SignalRequestFor(SIGHUP), SignalRequest::kNone);
}

}  // namespace
}  // namespace cpptorchrun::worker
