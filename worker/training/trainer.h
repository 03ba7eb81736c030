// The training loop of the seed: Linear(784, 512), ReLU, Linear(512, 10)
// (or more hidden layers, TrainConfig::hidden);
// Adam, SGD, LARS or LAMB; cross-entropy; the distributed sampler; DDP over the injected
// communicator; checkpoints and resume; test accuracy at the end. The
// header is torch-free so that main and tests stay cheap to compile.
#ifndef CPPTORCHRUN_WORKER_TRAINING_TRAINER_H_
#define CPPTORCHRUN_WORKER_TRAINING_TRAINER_H_

#include <cstdint>
#include <functional>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "worker/comm/comm.h"
#include "worker/data/idx.h"
#include "worker/training/allreduce_mode.h"
#include "worker/training/metrics.h"
#include "worker/training/comm_hook_options.h"
#include "worker/training/optimizer_options.h"

namespace cpptorchrun::worker {

struct TrainConfig {
  int64_t epochs = 10;
  int64_t batch_size = 64;  // per rank
  // The base learning rate (before the linear scaling rule); 0: the
  // optimizer's default, DefaultLearningRate(optimizer.kind).
  double lr = 0;
  OptimizerOptions optimizer;
  uint64_t seed = 0;
  bool drop_last = false;
  // Optimizer step every this many batches; the all-reduce only on those.
  int64_t grad_accum_steps = 1;
  // Linear scaling rule (lr x world x accumulation) with linear warm-up.
  bool scale_lr = false;
  int64_t warmup_steps = 100;
  int64_t bucket_cap_bytes = int64_t{25} << 20;
  int64_t first_bucket_cap_bytes = int64_t{1} << 20;
  AllReduceMode allreduce = AllReduceMode::kOverlap;
  // --comm_hook and PowerSGD's knobs (its seed is `seed`).
  CommHookOptions comm_hook;
  // The MLP's hidden layer widths, each followed by a ReLU: the seed's is
  // one layer of 512. Deeper models give DDP more than one bucket to
  // overlap (the DDP benchmark uses one).
  std::vector<int64_t> hidden = {512};
  // Empty: no checkpoints. Rank 0 writes every `checkpoint_every` optimizer
  // steps (0: only at epoch ends) and at each epoch's end, keeping
  // `keep_checkpoints`.
  std::string checkpoint_dir;
  int64_t checkpoint_every = 0;
  int keep_checkpoints = 3;
  int64_t restart_count = 0;
  // Fault injection for tests: return Aborted after this many batches of
  // this run, as if killed (no further checkpoint). 0: off.
  int64_t fail_after_steps = 0;
  // Fault injection for tests: return Aborted before training global step
  // N, in every attempt (a batch that always breaks the job: no attempt
  // ever passes it). 0: off.
  int64_t fail_at_step = 0;
  // Fault injection for tests: a new rank of a round whose restart count
  // is this kills itself (SIGKILL) in the middle of receiving a survivor's
  // state (after the position, before the optimizer state and the
  // parameters). -1: off.
  int64_t die_in_state_transfer_at_restart = -1;
};

// What a scheduler's signal asks of training (worker/agent/signals.h maps
// signals to these): a checkpoint at the next optimizer step and go on
// (SIGUSR1/SIGUSR2, Slurm's warning before a preemption or the time limit),
// or a checkpoint there and stop (SIGTERM).
enum class SignalRequest { kNone = 0, kCheckpoint = 1, kCheckpointAndStop = 2 };

struct TrainDeps {
  // Required; borrowed.
  Communicator* comm = nullptr;
  const Dataset* train = nullptr;
  // Optional: no evaluation when null.
  const Dataset* test = nullptr;
  // Optional observers (progress, heartbeats); borrowed.
  std::vector<TrainObserver*> observers;
  // Warnings (a skipped checkpoint); default: stderr.
  std::function<void(const std::string&)> warn;
  // Seconds on a monotonic clock; default: std::chrono::steady_clock.
  std::function<double()> now;
  // When set, receives the final parameters, flattened in registration order.
  std::vector<float>* final_parameters = nullptr;
  // Optional: polled after every batch (and its checkpoint, if one falls
  // there); true stops training there with Cancelled. The binary passes
  // the agent's HeartbeatAck.stop_requested.
  std::function<bool()> stop_requested;
  // Optional, with `recover`: polled at every optimizer-step boundary; true
  // when the launcher changes the round without a loss (a node grows back
  // or joins, RoundWatcher::ChangeAtBoundary): the worker leaves the round
  // there, through `recover`, and no step is redone.
  std::function<bool()> round_changing;
  // Optional: polled after every batch; a request is kept until the next
  // optimizer-step boundary (the only place a checkpoint is consistent),
  // where rank 0 writes the checkpoint (when checkpoints are on) and
  // `on_signal_checkpoint(global_step, stopping)` is called on every rank;
  // kCheckpointAndStop then ends Train with Cancelled. When a batch fails
  // while a stop is pending (a peer that stopped first left a collective),
  // rank 0 writes the last optimizer step's checkpoint before the error is
  // returned: nothing trained before the signal is lost.
  std::function<SignalRequest()> signal_request;
  std::function<void(int64_t global_step, bool stopping)> on_signal_checkpoint;
  // In-place recovery (docs/DESIGN.md, "In-place recovery"). When set, a
  // batch whose collective fails does not end Train: `recover(failure)`
  // returns the next round's communicator (borrowed; it replaces `comm`
  // from then on, and the old one is never used again) or an error, which
  // Train then fails with. Every rank of the new round takes the newest
  // state any rank holds (a survivor's own, from memory), or rank 0's
  // checkpoint when no rank holds one, and the rest of the epoch is
  // re-sharded over the new world. Train calls no collective at start
  // before that agreement, so a new rank meets its survivors there.
  std::function<absl::StatusOr<Communicator*>(const absl::Status& failure)> recover;
  // After each state transfer from a live rank (at start, or after a
  // recovery): the step training goes on after and "rank R", the source.
  std::function<void(int64_t global_step, const std::string& from)> on_state_received;
};

// Trains and evaluates. Collective: every rank calls it with the same
// config. Errors: the communicator's, checkpoint I/O, bad config
// (InvalidArgument naming the field), Aborted from fail_after_steps,
// Cancelled when stop_requested or a kCheckpointAndStop said so, and Internal for an exception
// (LibTorch's c10::Error or any std::exception) thrown inside. On every
// error Train has aborted the communicator first, so that the other ranks
// fail at once instead of at their collective timeout.
absl::StatusOr<TrainMetrics> Train(const TrainConfig& config, const TrainDeps& deps);

// InvalidArgument naming the first bad field.
absl::Status ValidateConfig(const TrainConfig& config);

// config.lr, or the optimizer's default when it is 0.
double BaseLearningRate(const TrainConfig& config);

// Sets LibTorch's intra-op threads (process-wide).
void SetTorchThreads(int threads);

}  // namespace cpptorchrun::worker

#endif  // CPPTORCHRUN_WORKER_TRAINING_TRAINER_H_
