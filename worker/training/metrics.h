// The run's final figures and their JSON form (--metrics_json), and the
// per-step report the trainer hands its observers (console progress,
// heartbeats). No LibTorch here.
#ifndef CPPTORCHRUN_WORKER_TRAINING_METRICS_H_
#define CPPTORCHRUN_WORKER_TRAINING_METRICS_H_

#include <cstdint>
#include <string>
#include <vector>

#include "absl/types/span.h"

#include "absl/status/status.h"

namespace cpptorchrun::worker {

struct TrainMetrics {
  int world_size = 1;
  int64_t epochs = 0;
  // Optimizer steps and batches this run took (after any resume).
  int64_t steps = 0;
  // Training samples processed by all ranks together in this run.
  int64_t samples = 0;
  double train_seconds = 0;
  // The whole job's: samples / train_seconds.
  double samples_per_s = 0;
  // CPU time (user + system) all ranks' processes spent in the training
  // loop: samples / cpu_seconds compares implementations on a busy machine.
  double cpu_seconds = 0;
  // Rank 0's wall seconds per batch: drawing the batch, forward, backward,
  // the gradients' all-reduce and the optimizer step (progress and
  // checkpoints not counted): mean and median (the median shrugs off a
  // busy machine's stalls); and the backward call's mean.
  double step_seconds_mean = 0;
  double step_seconds_median = 0;
  double backward_seconds_mean = 0;
  // Wall seconds rank 0 waited for gradient all-reduces after backward.
  double comm_wait_seconds = 0;
  // Rank 0's gradient all-reduces: their own run time and the part of it
  // that ran before the backward pass returned (hidden behind it), summed
  // over the steps whose backend reports when a collective ran (Gloo and
  // fake GPUs do, NCCL does not: then 0 steps).
  int64_t allreduce_timed_steps = 0;
  double allreduce_seconds = 0;
  double allreduce_hidden_seconds = 0;
  // --comm_hook, and the payload bytes rank 0 handed to the gradients'
  // all-reduces (comm_hook.h): in all, and per synchronised step.
  std::string comm_hook = "allreduce";
  int64_t bytes_sent = 0;
  double bytes_sent_per_step = 0;
  // A hash of rank 0's final parameters (hex), and the number of ranks
  // whose final parameters differ from rank 0's, bit for bit.
  std::string parameters_fingerprint;
  int64_t replicas_differing = 0;
  // "overlap", "after_backward", "off" or "rotate" (TrainConfig::allreduce).
  std::string allreduce = "overlap";
  // The same figures (rank 0's) per all-reduce mode the steps ran in: one
  // entry, or three under "rotate".
  struct ModeFigures {
    std::string mode;
    int64_t steps = 0;
    double step_seconds_median = 0;
    double comm_wait_seconds = 0;
    int64_t allreduce_timed_steps = 0;
    double allreduce_seconds = 0;
    double allreduce_hidden_seconds = 0;
  };
  std::vector<ModeFigures> by_mode;
  // The MLP's hidden widths, "512" or "1024,1024".
  std::string hidden = "512";
  // --optimizer ("adam", "sgd", "lars", "lamb") and the base rate it used
  // (before the linear scaling rule).
  std::string optimizer = "adam";
  double base_lr = 0;
  // On the t10k split, in [0, 1]; negative when not evaluated.
  double test_accuracy = -1;
  // Mean training loss over the last epoch trained, averaged over ranks.
  double final_loss = 0;
  int64_t restart_count = 0;
  // The global batch index restored from a checkpoint; -1 when none.
  int64_t resumed_from_step = -1;
  // In-place recoveries this rank went through (its communicator replaced,
  // its state kept), and the world size it ended in.
  int64_t recoveries = 0;
  // Rank 0's checkpoints (checkpoint_writer.h): how many were written in
  // the background, and the seconds the training thread waited for the
  // writer (a snapshot still waiting, a signal's checkpoint, and the last
  // one, waited for after train_seconds ends).
  int64_t checkpoints_written = 0;
  double checkpoint_wait_seconds = 0;
  std::string backend;
};

// One JSON object with the keys of TrainMetrics.
std::string MetricsToJson(const TrainMetrics& metrics);

// Writes MetricsToJson to `path` (replaced atomically). Errors name the path.
absl::Status WriteMetricsJson(const std::string& path, const TrainMetrics& metrics);

// Progress after one batch, as rank `rank` sees it.
struct StepReport {
  int rank = 0;
  int64_t epoch = 0;   // 0-based
  int64_t epochs = 0;
  int64_t step_in_epoch = 0;  // batches done in this epoch (1-based after the first)
  int64_t steps_in_epoch = 0;
  int64_t global_step = 0;  // batches done since the job began
  int64_t total_steps = 0;
  double loss = 0;
  // The whole job's throughput since this run started.
  double samples_per_s = 0;
  double elapsed_seconds = 0;
  // This batch's wall seconds on this rank without its wait for the
  // gradients' all-reduce: what a slow rank (a straggler) has more of than
  // its peers, who wait for it instead.
  double compute_seconds = 0;
  // The data set indices of this rank's batch (valid during OnStep only).
  absl::Span<const int64_t> samples;
};

// What the trainer tells about its progress. Called on the training thread;
// implementations must be quick (hand off to their own threads).
class TrainObserver {
 public:
  virtual ~TrainObserver() = default;
  virtual void OnStep(const StepReport& report) {}
  // Before a batch is trained: its global step (the one it will be),
  // epoch and samples (the other fields are not filled).
  virtual void OnBatchStart(const StepReport& batch) {}
  virtual void OnResumed(int64_t global_step) {}
  virtual void OnFinished(const TrainMetrics& metrics) {}
};

}  // namespace cpptorchrun::worker

#endif  // CPPTORCHRUN_WORKER_TRAINING_METRICS_H_
