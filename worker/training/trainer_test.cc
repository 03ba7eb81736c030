// Tests of the training loop on a small synthetic data set: DDP
// equivalence (two ranks of batch 32 = one of batch 64), gradient
// accumulation, resume after a simulated kill (same final parameters),
// fallback past a corrupt checkpoint, re-sharding over a new world size,
// the all-reduce modes of the DDP benchmark, deeper models, and the four
// optimizers (learning, resume, a checkpoint of another optimizer refused,
// an older build's Adam checkpoint resumed).
#include "worker/training/trainer.h"

#include <unistd.h>

#include <algorithm>
#include <cmath>
#include <cstdlib>
#include <fstream>
#include <random>
#include <thread>

#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "rendezvous/store.h"
#include "worker/training/checkpoint.h"
#include "worker/comm/gloo_comm.h"
#include "worker/comm/recording_comm.h"

namespace cpptorchrun::worker {
namespace {

using ::testing::Contains;
using ::testing::ElementsAre;
using ::testing::HasSubstr;

Dataset Synthetic(int64_t n, uint32_t seed) {
  Dataset data;
  data.images.count = n;
  data.images.rows = 28;
  data.images.cols = 28;
  std::mt19937 gen(seed);
  data.images.pixels.resize(n * 784);
  data.labels.labels.resize(n);
  for (int64_t i = 0; i < n; ++i) {
    const int label = static_cast<int>(gen() % 10);
    data.labels.labels[i] = static_cast<uint8_t>(label);
    // Learnable: a bright band whose place depends on the label, plus noise.
    for (int64_t p = 0; p < 784; ++p) {
      int v = static_cast<int>(gen() % 64) + ((p / 78) == label ? 160 : 0);
      data.images.pixels[i * 784 + p] = static_cast<uint8_t>(std::min(v, 255));
    }
  }
  return data;
}

std::string FreshDir(const std::string& name) {
  std::string dir = std::string(std::getenv("TEST_TMPDIR") ? std::getenv("TEST_TMPDIR") : "/tmp") +
                    "/" + name;
  std::system(("rm -rf " + dir).c_str());
  return dir;
}

struct Outcome {
  absl::Status status;
  TrainMetrics metrics;
  std::vector<float> params;
  std::vector<std::string> warnings;
  // Every rank's status and final parameters (multi-rank runs).
  std::vector<absl::Status> rank_status;
  std::vector<std::vector<float>> rank_params;
};

// Trains on `world` ranks (threads, Gloo on loopback; a single-process
// communicator for one) and returns rank 0's outcome.
Outcome TrainOn(int world, TrainConfig config, const Dataset& train, const Dataset* test = nullptr) {
  std::vector<Outcome> runs(world);
  if (world == 1) {
    std::unique_ptr<Communicator> comm = NewSingleProcessCommunicator();
    TrainDeps deps;
    deps.comm = comm.get();
    deps.train = &train;
    deps.test = test;
    deps.final_parameters = &runs[0].params;
    deps.warn = [&](const std::string& w) { runs[0].warnings.push_back(w); };
    absl::StatusOr<TrainMetrics> m = Train(config, deps);
    runs[0].status = m.status();
    if (m.ok()) runs[0].metrics = *m;
    return runs[0];
  }
  std::unique_ptr<rdzv::Store> store = rdzv::NewInMemoryStore();
  std::vector<std::thread> threads;
  for (int rank = 0; rank < world; ++rank) {
    threads.emplace_back([&, rank] {
      GlooOptions gloo;
      gloo.store = store.get();
      gloo.rank = rank;
      gloo.world_size = world;
      gloo.timeout = absl::Seconds(60);
      auto comm = NewGlooCommunicator(gloo);
      if (!comm.ok()) {
        runs[rank].status = comm.status();
        return;
      }
      TrainDeps deps;
      deps.comm = comm->get();
      deps.train = &train;
      deps.test = test;
      deps.final_parameters = &runs[rank].params;
      deps.warn = [&, rank](const std::string& w) { runs[rank].warnings.push_back(w); };
      absl::StatusOr<TrainMetrics> m = Train(config, deps);
      runs[rank].status = m.status();
      if (m.ok()) runs[rank].metrics = *m;
    });
  }
  for (auto& t : threads) t.join();
  for (int rank = 0; rank < world; ++rank) {
    runs[0].rank_status.push_back(runs[rank].status);
    runs[0].rank_params.push_back(runs[rank].params);
  }
  // Replicas stay equal, unless the all-reduce is (at times) off.
  const bool averaged =
      config.allreduce != AllReduceMode::kOff && config.allreduce != AllReduceMode::kRotate;
  for (int rank = 1; rank < world && averaged; ++rank) {
    if (runs[rank].status.ok() && runs[0].status.ok()) {
      EXPECT_EQ(runs[rank].params, runs[0].params) << "rank " << rank << " diverged";
    }
  }
  return runs[0];
}

float MaxAbsDiff(const std::vector<float>& a, const std::vector<float>& b) {
  EXPECT_EQ(a.size(), b.size());
  float worst = 0;
  for (size_t i = 0; i < std::min(a.size(), b.size()); ++i) worst = std::max(worst, std::abs(a[i] - b[i]));
  return worst;
}

TrainConfig Small() {
  TrainConfig config;
  config.epochs = 1;
  config.seed = 5;
  return config;
}

TEST(Trainer, TwoRanksOfBatch32EqualOneOfBatch64) {
  Dataset data = Synthetic(640, 1);
  TrainConfig one = Small();
  one.batch_size = 64;
  TrainConfig two = Small();
  two.batch_size = 32;
  Outcome single = TrainOn(1, one, data);
  Outcome pair = TrainOn(2, two, data);
  ASSERT_TRUE(single.status.ok()) << single.status;
  ASSERT_TRUE(pair.status.ok()) << pair.status;
  EXPECT_EQ(single.metrics.steps, 10);
  EXPECT_EQ(pair.metrics.steps, 10);
  EXPECT_EQ(pair.metrics.samples, 640);
  ASSERT_FALSE(single.params.empty());
  EXPECT_LE(MaxAbsDiff(single.params, pair.params), 1e-5f);
  // And training did move the parameters.
  Outcome untrained = single;
  TrainConfig none = one;
  none.lr = 1e-12;
  untrained = TrainOn(1, none, data);
  EXPECT_GT(MaxAbsDiff(single.params, untrained.params), 1e-3f);
}

TEST(Trainer, GradientAccumulationEqualsTheLargerBatch) {
  Dataset data = Synthetic(512, 2);
  TrainConfig big = Small();
  big.batch_size = 64;
  TrainConfig accumulated = Small();
  accumulated.batch_size = 32;
  accumulated.grad_accum_steps = 2;
  Outcome a = TrainOn(1, big, data);
  Outcome b = TrainOn(1, accumulated, data);
  ASSERT_TRUE(a.status.ok() && b.status.ok());
  EXPECT_EQ(b.metrics.steps, 16);
  EXPECT_LE(MaxAbsDiff(a.params, b.params), 1e-5f);
}

TEST(Trainer, LearnsTheSyntheticTask) {
  Dataset train = Synthetic(1024, 3);
  Dataset test = Synthetic(300, 4);
  TrainConfig config = Small();
  config.epochs = 2;
  Outcome run = TrainOn(2, config, train, &test);
  ASSERT_TRUE(run.status.ok()) << run.status;
  EXPECT_GT(run.metrics.test_accuracy, 0.9);
  EXPECT_EQ(run.metrics.world_size, 2);
  EXPECT_EQ(run.metrics.resumed_from_step, -1);
  EXPECT_TRUE(std::isfinite(run.metrics.final_loss));
}

TEST(Trainer, ResumeAfterAKillEndsWithTheSameParameters) {
  Dataset data = Synthetic(640, 6);
  TrainConfig config = Small();
  config.epochs = 2;
  config.checkpoint_every = 3;
  config.checkpoint_dir = FreshDir("uninterrupted");
  Outcome whole = TrainOn(1, config, data);
  ASSERT_TRUE(whole.status.ok()) << whole.status;
  // Steps 3, 6, 9, the end of epoch 0 (10), 12, 15, 18 and the end (20),
  // all written by the background writer before Train returned.
  EXPECT_EQ(whole.metrics.checkpoints_written, 8);
  EXPECT_EQ(ListCheckpoints(config.checkpoint_dir).front().first, 20);

  config.checkpoint_dir = FreshDir("interrupted");
  TrainConfig killed = config;
  killed.fail_after_steps = 15;  // epoch 1, batch 5; last checkpoint after step 12
  Outcome first = TrainOn(1, killed, data);
  EXPECT_EQ(first.status.code(), absl::StatusCode::kAborted);
  Outcome rest = TrainOn(1, config, data);
  ASSERT_TRUE(rest.status.ok()) << rest.status;
  EXPECT_EQ(rest.metrics.resumed_from_step, 12);
  EXPECT_EQ(rest.metrics.steps, 20 - 12);
  EXPECT_EQ(rest.params, whole.params);
}

TrainConfig With(TrainConfig config, OptimizerKind kind) {
  config.optimizer.kind = kind;
  return config;
}

class EveryOptimizer : public ::testing::TestWithParam<OptimizerKind> {};

TEST_P(EveryOptimizer, LearnsTheSyntheticTaskAtItsDefaultRate) {
  Dataset train = Synthetic(1024, 3);
  Dataset test = Synthetic(300, 4);
  TrainConfig config = With(Small(), GetParam());
  config.epochs = 4;  // 32 steps: LARS and SGD take smaller first steps than Adam
  Outcome run = TrainOn(2, config, train, &test);
  ASSERT_TRUE(run.status.ok()) << run.status;
  EXPECT_GT(run.metrics.test_accuracy, 0.9);
  EXPECT_EQ(run.metrics.optimizer, OptimizerName(GetParam()));
  EXPECT_EQ(run.metrics.base_lr, DefaultLearningRate(GetParam()));
}

TEST_P(EveryOptimizer, ResumeAfterAKillEndsWithTheSameParameters) {
  Dataset data = Synthetic(640, 6);
  TrainConfig config = With(Small(), GetParam());
  config.epochs = 2;
  config.checkpoint_every = 3;
  config.scale_lr = true;  // the schedule's position must resume too
  config.warmup_steps = 8;
  config.checkpoint_dir = FreshDir(absl::StrCat("whole-", OptimizerName(GetParam())));
  Outcome whole = TrainOn(2, config, data);
  ASSERT_TRUE(whole.status.ok()) << whole.status;

  config.checkpoint_dir = FreshDir(absl::StrCat("cut-", OptimizerName(GetParam())));
  TrainConfig killed = config;
  killed.fail_after_steps = 7;  // epoch 1, batch 2; last checkpoint after step 6
  EXPECT_EQ(TrainOn(2, killed, data).status.code(), absl::StatusCode::kAborted);
  Outcome rest = TrainOn(2, config, data);
  ASSERT_TRUE(rest.status.ok()) << rest.status;
  EXPECT_EQ(rest.metrics.resumed_from_step, 6);
  EXPECT_EQ(rest.params, whole.params);
}

INSTANTIATE_TEST_SUITE_P(Kinds, EveryOptimizer,
                         ::testing::Values(OptimizerKind::kAdam, OptimizerKind::kSgd,
                                           OptimizerKind::kLars, OptimizerKind::kLamb),
                         [](const auto& info) { return std::string(OptimizerName(info.param)); });

TEST(Trainer, ACheckpointOfAnotherOptimizerIsRefusedNamingBoth) {
  Dataset data = Synthetic(256, 15);
  TrainConfig config = With(Small(), OptimizerKind::kLars);
  config.checkpoint_dir = FreshDir("other-optimizer");
  ASSERT_TRUE(TrainOn(1, config, data).status.ok());
  config.epochs = 2;
  config.optimizer.kind = OptimizerKind::kAdam;
  Outcome run = TrainOn(2, config, data);
  EXPECT_EQ(run.status.code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_THAT(run.status.message(),
              HasSubstr("written with --optimizer lars but this run has --optimizer adam"));
  EXPECT_THAT(run.rank_status[1].message(), HasSubstr("rank 0 could not restore"));
}

TEST(Trainer, AnOlderBuildsAdamCheckpointResumes) {
  // Version 1, no optimizer named: what builds before --optimizer wrote.
  Dataset data = Synthetic(640, 16);
  TrainConfig config = Small();
  config.epochs = 2;
  config.checkpoint_dir = FreshDir("v1-whole");
  Outcome whole = TrainOn(1, config, data);
  ASSERT_TRUE(whole.status.ok()) << whole.status;
  config.checkpoint_dir = FreshDir("v1-cut");
  TrainConfig first = config;
  first.epochs = 1;
  ASSERT_TRUE(TrainOn(1, first, data).status.ok());
  std::vector<std::string> warnings;
  std::optional<LoadedCheckpoint> loaded = LoadNewestCheckpoint(config.checkpoint_dir, &warnings);
  ASSERT_TRUE(loaded.has_value());
  EXPECT_EQ(loaded->state.strings.at("optimizer"), "adam");
  loaded->state.strings.clear();
  std::ofstream(loaded->path, std::ios::binary | std::ios::trunc) << EncodeCheckpointV1(loaded->state);
  Outcome rest = TrainOn(1, config, data);
  ASSERT_TRUE(rest.status.ok()) << rest.status;
  EXPECT_EQ(rest.metrics.resumed_from_step, 10);
  EXPECT_EQ(rest.params, whole.params);
}

TEST(Trainer, CorruptNewestCheckpointFallsBackToThePreviousOne) {
  Dataset data = Synthetic(640, 7);
  TrainConfig config = Small();
  config.epochs = 2;
  config.batch_size = 32;  // 10 batches per rank and epoch
  config.checkpoint_every = 2;
  config.checkpoint_dir = FreshDir("clean");
  Outcome whole = TrainOn(2, config, data);
  ASSERT_TRUE(whole.status.ok()) << whole.status;

  config.checkpoint_dir = FreshDir("corrupt");
  TrainConfig killed = config;
  killed.fail_after_steps = 15;  // checkpoints after batches 12 and 14
  EXPECT_FALSE(TrainOn(2, killed, data).status.ok());
  auto files = ListCheckpoints(config.checkpoint_dir);
  ASSERT_GE(files.size(), 2u);
  ASSERT_EQ(files[0].first, 14);
  ASSERT_EQ(::truncate(files[0].second.c_str(), 100), 0);
  Outcome rest = TrainOn(2, config, data);
  ASSERT_TRUE(rest.status.ok()) << rest.status;
  EXPECT_EQ(rest.metrics.resumed_from_step, 12);
  ASSERT_EQ(rest.warnings.size(), 1u);
  EXPECT_THAT(rest.warnings[0], HasSubstr(CheckpointFileName(14)));
  EXPECT_LE(MaxAbsDiff(rest.params, whole.params), 0.0f);
}

TEST(Trainer, ResumeOnAnotherWorldSizeTrainsTheRestOfTheEpochOnce) {
  Dataset data = Synthetic(640, 8);
  TrainConfig config = Small();
  config.batch_size = 32;
  config.checkpoint_every = 4;
  config.checkpoint_dir = FreshDir("reshard");
  TrainConfig killed = config;
  killed.fail_after_steps = 5;  // checkpoint after 4 steps of 2 x 32 samples
  EXPECT_FALSE(TrainOn(2, killed, data).status.ok());
  Outcome rest = TrainOn(1, config, data);
  ASSERT_TRUE(rest.status.ok()) << rest.status;
  EXPECT_EQ(rest.metrics.resumed_from_step, 4);
  EXPECT_EQ(rest.metrics.samples, 640 - 4 * 2 * 32);
}

TEST(Trainer, AnUnusableCheckpointFailsEveryRankPromptly) {
  Dataset data = Synthetic(128, 10);
  TrainConfig config = Small();
  config.checkpoint_dir = FreshDir("unusable");
  CheckpointState bogus;
  bogus.ints = {{"epoch", 0}, {"samples_in_epoch", 0}, {"global_step", 1}, {"opt_step", 1}};
  bogus.tensors.push_back({"param.0", {2, 2}, {1, 2, 3, 4}});
  ASSERT_TRUE(WriteCheckpoint(config.checkpoint_dir, 1, bogus, 3).ok());
  Outcome run = TrainOn(2, config, data);
  EXPECT_EQ(run.status.code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_THAT(run.status.message(), HasSubstr("another shape"));
  ASSERT_EQ(run.rank_status.size(), 2u);
  EXPECT_THAT(run.rank_status[1].message(), HasSubstr("rank 0 could not restore"));
}

TEST(Trainer, AllReduceAfterTheBackwardPassGivesTheSameModel) {
  // Overlap changes when the gradients travel, not the training.
  Dataset data = Synthetic(640, 11);
  TrainConfig config = Small();
  config.batch_size = 32;
  config.hidden = {64, 32};  // three buckets at a 4 KB cap
  config.bucket_cap_bytes = 4096;
  config.first_bucket_cap_bytes = 4096;
  Outcome overlap = TrainOn(2, config, data);
  config.allreduce = AllReduceMode::kAfterBackward;
  Outcome after = TrainOn(2, config, data);
  ASSERT_TRUE(overlap.status.ok()) << overlap.status;
  ASSERT_TRUE(after.status.ok()) << after.status;
  EXPECT_EQ(overlap.params, after.params);
  EXPECT_EQ(after.metrics.allreduce, "after_backward");
  EXPECT_EQ(after.metrics.hidden, "64,32");
  // Gloo tells when each all-reduce ran: every step is timed, and the
  // hidden part is a part. Launched after the backward pass, none is hidden.
  for (const TrainMetrics& m : {overlap.metrics, after.metrics}) {
    EXPECT_EQ(m.allreduce_timed_steps, m.steps);
    EXPECT_GT(m.allreduce_seconds, 0);
    EXPECT_GE(m.allreduce_hidden_seconds, 0);
    EXPECT_LE(m.allreduce_hidden_seconds, m.allreduce_seconds);
    EXPECT_GT(m.step_seconds_mean, m.backward_seconds_mean);
    EXPECT_GT(m.step_seconds_median, 0);
    EXPECT_GT(m.backward_seconds_mean, 0);
  }
  EXPECT_EQ(after.metrics.allreduce_hidden_seconds, 0);
  ASSERT_EQ(after.metrics.by_mode.size(), 1u);
  EXPECT_EQ(after.metrics.by_mode[0].mode, "after_backward");
  EXPECT_EQ(after.metrics.by_mode[0].steps, after.metrics.steps);
}

TEST(Trainer, AllReduceOffTrainsEachReplicaOnItsShard) {
  Dataset data = Synthetic(640, 12);
  TrainConfig config = Small();
  config.batch_size = 32;
  config.allreduce = AllReduceMode::kOff;
  Outcome off = TrainOn(2, config, data);
  ASSERT_TRUE(off.status.ok()) << off.status;
  ASSERT_EQ(off.rank_params.size(), 2u);
  // Same start (rank 0's broadcast), different shards, no averaging.
  EXPECT_GT(MaxAbsDiff(off.rank_params[0], off.rank_params[1]), 1e-4f);
  EXPECT_EQ(off.metrics.allreduce_timed_steps, 0);
  EXPECT_EQ(off.metrics.comm_wait_seconds, 0);
  EXPECT_EQ(off.metrics.steps, 10);
  EXPECT_EQ(off.metrics.allreduce, "off");
  EXPECT_EQ(off.metrics.replicas_differing, 1);  // the fingerprints tell
}

TEST(Trainer, EveryCommHookKeepsTheReplicasEqual) {
  Dataset data = Synthetic(640, 12);
  TrainConfig config = Small();
  config.batch_size = 32;
  config.hidden = {64, 32};
  config.comm_hook.powersgd_start_iter = 2;
  for (CommHookKind kind : {CommHookKind::kAllReduce, CommHookKind::kFp16, CommHookKind::kBf16,
                            CommHookKind::kPowerSgd}) {
    config.comm_hook.kind = kind;
    Outcome out = TrainOn(2, config, data);
    ASSERT_TRUE(out.status.ok()) << out.status;
    ASSERT_EQ(out.rank_params.size(), 2u);
    EXPECT_EQ(out.rank_params[0], out.rank_params[1]) << CommHookName(kind);
    EXPECT_EQ(out.metrics.replicas_differing, 0) << CommHookName(kind);
    EXPECT_EQ(out.metrics.parameters_fingerprint.size(), 16u);
    EXPECT_EQ(out.metrics.comm_hook, CommHookName(kind));
    EXPECT_GT(out.metrics.bytes_sent_per_step, 0);
  }
}

TEST(Trainer, RotateRunsTheModesInBlocksAndTalliesThemApart) {
  Dataset data = Synthetic(768, 14);
  TrainConfig config = Small();
  config.batch_size = 32;  // 12 steps: a block of 4 in each mode
  config.allreduce = AllReduceMode::kRotate;
  Outcome run = TrainOn(2, config, data);
  ASSERT_TRUE(run.status.ok()) << run.status;
  EXPECT_EQ(run.metrics.steps, 12);
  ASSERT_EQ(run.metrics.by_mode.size(), 3u);
  const auto& off = run.metrics.by_mode[0];
  const auto& after = run.metrics.by_mode[1];
  const auto& overlap = run.metrics.by_mode[2];
  EXPECT_EQ(off.mode, "off");
  EXPECT_EQ(after.mode, "after_backward");
  EXPECT_EQ(overlap.mode, "overlap");
  for (const auto& f : run.metrics.by_mode) {
    EXPECT_EQ(f.steps, 4) << f.mode;
    EXPECT_GT(f.step_seconds_median, 0) << f.mode;
  }
  // No all-reduce on the off steps; every other step's is timed (Gloo).
  EXPECT_EQ(off.allreduce_timed_steps, 0);
  EXPECT_EQ(off.allreduce_seconds, 0);
  EXPECT_EQ(off.comm_wait_seconds, 0);
  EXPECT_EQ(after.allreduce_timed_steps, 4);
  EXPECT_EQ(overlap.allreduce_timed_steps, 4);
  EXPECT_EQ(after.allreduce_hidden_seconds, 0);
  EXPECT_LE(overlap.allreduce_hidden_seconds, overlap.allreduce_seconds);
  EXPECT_EQ(run.metrics.allreduce_timed_steps, 8);
  // Off steps left the replicas apart.
  ASSERT_EQ(run.rank_params.size(), 2u);
  EXPECT_GT(MaxAbsDiff(run.rank_params[0], run.rank_params[1]), 1e-5f);
}

TEST(Trainer, HiddenLayersShapeTheModelAndGuardTheCheckpoint) {
  Dataset data = Synthetic(256, 13);
  TrainConfig config = Small();
  config.hidden = {16, 8};
  config.checkpoint_dir = FreshDir("hidden");
  Outcome deep = TrainOn(1, config, data);
  ASSERT_TRUE(deep.status.ok()) << deep.status;
  // 784x16 + 16, 16x8 + 8, 8x10 + 10.
  EXPECT_EQ(deep.params.size(), 784u * 16 + 16 + 16 * 8 + 8 + 8 * 10 + 10);
  // Resuming that checkpoint into the seed's model fails and says why.
  TrainConfig seed = Small();
  seed.checkpoint_dir = config.checkpoint_dir;
  Outcome mismatch = TrainOn(1, seed, data);
  EXPECT_EQ(mismatch.status.code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_THAT(mismatch.status.message(), HasSubstr("another shape"));
}

// Counts steps, so a test can stop training from the outside after some.
class StepCounter final : public TrainObserver {
 public:
  void OnStep(const StepReport& report) override { last_step = report.global_step; }
  int64_t last_step = 0;
};

TEST(Trainer, StopsAtTheBatchAfterTheRequestAndAbortsTheCommunicator) {
  Dataset data = Synthetic(640, 3);
  std::vector<std::string> log;
  RecordingCommunicator comm([&](const std::string& line) { log.push_back(line); });
  StepCounter steps;
  TrainDeps deps;
  deps.comm = &comm;
  deps.train = &data;
  deps.observers = {&steps};
  deps.stop_requested = [&] { return steps.last_step >= 4; };
  absl::StatusOr<TrainMetrics> m = Train(Small(), deps);
  EXPECT_EQ(m.status().code(), absl::StatusCode::kCancelled);
  EXPECT_THAT(m.status().message(), HasSubstr("after step 4"));
  EXPECT_EQ(steps.last_step, 4);
  ASSERT_FALSE(log.empty());
  EXPECT_THAT(log.back(), HasSubstr("abort stopped at the launcher's request"));
}

// One rank training with TrainDeps::signal_request; records each
// checkpoint written for a signal as (step, stopping).
struct SignalRun {
  SignalRun() {
    deps.comm = &comm;
    deps.train = &data;
    deps.observers = {&steps};
    deps.on_signal_checkpoint = [this](int64_t step, bool stopping) { written.emplace_back(step, stopping); };
  }
  Dataset data = Synthetic(640, 3);  // 10 batches of 64
  StepCounter steps;
  std::vector<std::pair<int64_t, bool>> written;
  RecordingCommunicator comm{[](const std::string&) {}};
  TrainDeps deps;
};

// The steps of the checkpoints in `dir`.
std::vector<int64_t> StepsOnDisk(const std::string& dir) {
  std::vector<int64_t> steps;
  for (const auto& [step, path] : ListCheckpoints(dir)) steps.push_back(step);
  return steps;
}

// A scheduler's SIGUSR1 (TrainDeps::signal_request): a checkpoint at the
// next optimizer step, then training goes on; SIGTERM: a checkpoint there,
// then Cancelled. With accumulation the request waits for the window's end.
TEST(Trainer, ASignalsCheckpointFallsOnTheNextOptimizerStep) {
  SignalRun run;
  TrainConfig config = Small();
  config.grad_accum_steps = 2;
  config.checkpoint_dir = FreshDir("signal_checkpoint");
  // Asked once, after batch 3 (an accumulating batch): written after 4.
  run.deps.signal_request = [&] {
    return run.steps.last_step == 3 ? SignalRequest::kCheckpoint : SignalRequest::kNone;
  };
  absl::StatusOr<TrainMetrics> m = Train(config, run.deps);
  ASSERT_TRUE(m.ok()) << m.status();
  EXPECT_EQ(run.steps.last_step, 10) << "training went on to the end";
  EXPECT_THAT(run.written, ElementsAre(std::make_pair(int64_t{4}, false)));
  EXPECT_THAT(StepsOnDisk(config.checkpoint_dir), Contains(4));

  config.checkpoint_dir = FreshDir("signal_stop");
  run.written.clear();
  run.deps.signal_request = [&] {
    return run.steps.last_step == 5 ? SignalRequest::kCheckpointAndStop : SignalRequest::kNone;
  };
  m = Train(config, run.deps);
  EXPECT_EQ(m.status().code(), absl::StatusCode::kCancelled);
  EXPECT_THAT(m.status().message(), HasSubstr("stopped on a signal after step 6, its checkpoint written"));
  EXPECT_EQ(run.steps.last_step, 6);
  EXPECT_THAT(run.written, ElementsAre(std::make_pair(int64_t{6}, true)));
  EXPECT_THAT(StepsOnDisk(config.checkpoint_dir), ElementsAre(6));
}

// SIGTERM reached a peer first and it left the collective: the batch fails
// here, and rank 0 still writes the last optimizer step it completed.
TEST(Trainer, AFailedBatchAfterSigtermStillWritesTheLastOptimizerStep) {
  SignalRun run;
  TrainConfig config = Small();
  config.checkpoint_dir = FreshDir("signal_failed_batch");
  bool terminated = false;
  run.deps.signal_request = [&] {
    return terminated ? SignalRequest::kCheckpointAndStop : SignalRequest::kNone;
  };
  // The signal arrives during batch 5's all-reduce, which then fails.
  run.comm.allreduce_result = [&] {
    if (run.steps.last_step < 4) return absl::OkStatus();
    terminated = true;
    return absl::UnavailableError("the peer has gone");
  };
  absl::StatusOr<TrainMetrics> m = Train(config, run.deps);
  EXPECT_FALSE(m.ok());
  EXPECT_EQ(run.steps.last_step, 4);
  EXPECT_THAT(run.written, ElementsAre(std::make_pair(int64_t{4}, true)));
  EXPECT_THAT(StepsOnDisk(config.checkpoint_dir), ElementsAre(4));
}

TEST(Trainer, ALibTorchErrorBecomesAStatusAndAbortsTheCommunicator) {
  // A label past the model's 10 classes makes cross_entropy throw.
  Dataset data = Synthetic(64, 4);
  data.labels.labels[7] = 42;
  std::vector<std::string> log;
  RecordingCommunicator comm([&](const std::string& line) { log.push_back(line); });
  TrainDeps deps;
  deps.comm = &comm;
  deps.train = &data;
  absl::StatusOr<TrainMetrics> m = Train(Small(), deps);
  EXPECT_EQ(m.status().code(), absl::StatusCode::kInternal);
  EXPECT_THAT(m.status().message(), HasSubstr("LibTorch: "));
  ASSERT_FALSE(log.empty());
  EXPECT_THAT(log.back(), HasSubstr("abort LibTorch: "));
}

TEST(Trainer, RejectsBadConfig) {
  TrainConfig config;
  config.batch_size = 0;
  EXPECT_THAT(ValidateConfig(config).message(), HasSubstr("--batch_size"));
  config = TrainConfig();
  config.grad_accum_steps = 0;
  EXPECT_THAT(ValidateConfig(config).message(), HasSubstr("--grad_accum_steps"));
  config = TrainConfig();
  config.hidden = {512, 0};
  EXPECT_THAT(ValidateConfig(config).message(), HasSubstr("--hidden widths must be in [1, 16384], got 0"));
  config.hidden.assign(17, 8);
  EXPECT_THAT(ValidateConfig(config).message(), HasSubstr("--hidden has 17 layers, at most 16"));
  config = TrainConfig();
  config.optimizer.momentum = 1.5;
  EXPECT_THAT(ValidateConfig(config).message(), HasSubstr("--momentum"));
  config = TrainConfig();
  config.lr = -1;
  EXPECT_THAT(ValidateConfig(config).message(), HasSubstr("--lr"));
  config.lr = 0;
  EXPECT_TRUE(ValidateConfig(config).ok()) << "0: the optimizer's default";
  config.optimizer.kind = OptimizerKind::kLamb;
  EXPECT_EQ(BaseLearningRate(config), DefaultLearningRate(OptimizerKind::kLamb));
  config.lr = 0.3;
  EXPECT_EQ(BaseLearningRate(config), 0.3);
  EXPECT_EQ(ParseAllReduceMode("after_backward").value(), AllReduceMode::kAfterBackward);
  EXPECT_THAT(ParseAllReduceMode("later").status().message(), HasSubstr("got \"later\""));
  Dataset data = Synthetic(10, 9);
  data.images.cols = 27;
  data.images.pixels.resize(10 * 28 * 27);
  std::unique_ptr<Communicator> comm = NewSingleProcessCommunicator();
  TrainDeps deps;
  deps.comm = comm.get();
  deps.train = &data;
  EXPECT_THAT(Train(TrainConfig(), deps).status().message(), HasSubstr("756 pixels"));
}

}  // namespace
}  // namespace cpptorchrun::worker
