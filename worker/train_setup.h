// The `train` binary's decisions, apart from its wiring (train_main.cc):
// its flags, the training config they and the environment make, the
// heartbeat options, rank 0's opening lines, and how a training result ends
// the process. Pure functions, so that tests need no process.
#ifndef CPPTORCHRUN_WORKER_TRAIN_SETUP_H_
#define CPPTORCHRUN_WORKER_TRAIN_SETUP_H_

#include <cstdint>
#include <string>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "worker/agent/env.h"
#include "worker/agent/heartbeat.h"
#include "worker/training/trainer.h"

namespace cpptorchrun::worker {

struct Flags {
  TrainConfig train;
  std::string backend = "auto";
  std::string data_dir = "/usr/share/datasets/fashion-mnist";
  std::string data_cache;
  int64_t limit = 0;
  double bucket_cap_mb = 25;
  std::string allreduce = "overlap";
  // --optimizer; its knobs live in train.optimizer.
  std::string optimizer = "adam";
  // --comm_hook; PowerSGD's knobs live in train.comm_hook.
  std::string comm_hook = "allreduce";
  double heartbeat_interval = 1.0;
  double comm_timeout = 300;
  std::string metrics_json;
  std::string sample_log;
  int threads = 1;
  std::string progress = "auto";
};

// The flags' training config for this worker: bucket cap in bytes, the
// all-reduce mode, the optimizer, the restart count; fault injection only on the first
// attempt (so that a restarted group runs to the end). InvalidArgument
// naming the flag when one is bad.
absl::StatusOr<TrainConfig> ConfigFromFlags(const Flags& flags, const WorkerEnv& env);

// How long the training thread may go without a step before the worker
// stops heartbeating (and the launcher, after --worker_timeout of silence,
// declares it hung): the launcher's --worker_timeout, but never under
// kMinStall. Steps pause for good reasons (start-up, peers still starting,
// evaluation, checkpoints); a short --worker_timeout is meant for silence (a
// stopped or frozen process) and must not turn such a pause into a hang.
inline constexpr absl::Duration kMinStall = absl::Seconds(60);
absl::Duration StallBound(absl::Duration worker_timeout);

// Heartbeats every --heartbeat_interval, silent after StallBound of the
// environment's worker timeout without a step.
HeartbeatOptions HeartbeatOptionsFor(const Flags& flags, const WorkerEnv& env, int64_t pid);

// Rank 0's first lines: the run's shape and start-up, and for the
// benchmark modes a warning that the replicas drift apart.
std::string OpeningLines(const WorkerEnv& env, const std::string& backend, int64_t samples,
                         const TrainConfig& config, const std::string& startup);

// How a training result ends the process.
enum class Ending {
  kFinished,
  // The launcher asked the group to stop (HeartbeatAck.stop_requested) and
  // training stopped at a batch boundary: the process exits as a worker
  // killed by SIGTERM would (kStoppedExitCode), writing no error file and
  // sending no FAILED event. Not 0: the launcher is stopping the group, and
  // a successful exit could count as a finished worker.
  kStopped,
  kFailed,
};
inline constexpr int kStoppedExitCode = 128 + 15;

// `terminated`: the worker received SIGTERM (worker/agent/signals.h): it
// stops as asked, and whatever ended training after that (a collective
// whose peer stopped first) is part of stopping, not a failure of its own.
Ending EndingOf(const absl::Status& trained, bool stop_requested, bool terminated = false);

// What `train` does with a scheduler's signal (worker/agent/signals.h):
// SIGUSR1 and SIGUSR2 a checkpoint, then on; SIGTERM a checkpoint, then
// stop; anything else nothing.
SignalRequest SignalRequestFor(int signo);

}  // namespace cpptorchrun::worker

#endif  // CPPTORCHRUN_WORKER_TRAIN_SETUP_H_
