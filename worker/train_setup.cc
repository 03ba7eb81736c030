// The `train` binary's pure decisions.
#include "worker/train_setup.h"

#include <csignal>

#include <algorithm>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"

namespace cpptorchrun::worker {

absl::StatusOr<TrainConfig> ConfigFromFlags(const Flags& flags, const WorkerEnv& env) {
  TrainConfig config = flags.train;
  config.bucket_cap_bytes = static_cast<int64_t>(flags.bucket_cap_mb * (1 << 20));
  absl::StatusOr<AllReduceMode> allreduce = ParseAllReduceMode(flags.allreduce);
  if (!allreduce.ok()) return allreduce.status();
  config.allreduce = *allreduce;
  absl::StatusOr<OptimizerKind> optimizer = ParseOptimizerKind(flags.optimizer);
  if (!optimizer.ok()) return optimizer.status();
  config.optimizer.kind = *optimizer;
  absl::StatusOr<CommHookKind> comm_hook = ParseCommHookKind(flags.comm_hook);
  if (!comm_hook.ok()) return comm_hook.status();
  config.comm_hook.kind = *comm_hook;
  config.restart_count = env.restart_count;
  if (env.restart_count > 0) config.fail_after_steps = 0;
  if (absl::Status valid = ValidateConfig(config); !valid.ok()) return valid;
  return config;
}

absl::Duration StallBound(absl::Duration worker_timeout) {
  return std::max(worker_timeout, kMinStall);
}

HeartbeatOptions HeartbeatOptionsFor(const Flags& flags, const WorkerEnv& env, int64_t pid) {
  HeartbeatOptions options;
  options.interval = absl::Seconds(flags.heartbeat_interval);
  options.stall_after = StallBound(env.worker_timeout);
  options.rank = env.rank;
  options.local_rank = env.local_rank;
  options.pid = pid;
  // train starts as a warm spare when the launcher asks (train_main.cc).
  options.can_wait_warm = true;
  // and stays through a round change when the launcher recovers in place.
  options.can_recover_in_place = true;
  return options;
}

std::string OpeningLines(const WorkerEnv& env, const std::string& backend, int64_t samples,
                         const TrainConfig& config, const std::string& startup) {
  std::string out = absl::StrFormat(
      "train: world %d, backend %s, %d samples, batch %d per rank, %d epochs; %s\n",
      env.world_size, backend, samples, config.batch_size, config.epochs, startup);
  const bool drifts =
      config.allreduce == AllReduceMode::kOff || config.allreduce == AllReduceMode::kRotate;
  if (drifts && env.world_size > 1) {
    absl::StrAppend(&out, "train: --allreduce ", AllReduceModeName(config.allreduce),
                    ": gradients are not averaged on ",
                    config.allreduce == AllReduceMode::kOff ? "any step" : "a third of the steps",
                    ", the replicas drift apart (a benchmark, not data parallelism)\n");
  }
  return out;
}

Ending EndingOf(const absl::Status& trained, bool stop_requested, bool terminated) {
  if (trained.ok()) return Ending::kFinished;
  if (terminated) return Ending::kStopped;
  if (trained.code() == absl::StatusCode::kCancelled && stop_requested) return Ending::kStopped;
  return Ending::kFailed;
}

SignalRequest SignalRequestFor(int signo) {
  if (signo == SIGUSR1 || signo == SIGUSR2) return SignalRequest::kCheckpoint;
  if (signo == SIGTERM) return SignalRequest::kCheckpointAndStop;
  return SignalRequest::kNone;
}

}  // namespace cpptorchrun::worker
