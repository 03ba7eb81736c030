// When DDP all-reduces the gradients (`train --allreduce`), and the
// benchmark's rotation through the modes with its per-mode tallies. Kept
// out of the training loop: the loop asks ModeForOptimizerStep which mode a
// step runs in and hands its figures to ModeTallies; nothing else there
// knows that a run may rotate. Pure and torch-free.
#ifndef CPPTORCHRUN_WORKER_TRAINING_ALLREDUCE_MODE_H_
#define CPPTORCHRUN_WORKER_TRAINING_ALLREDUCE_MODE_H_

#include <cstdint>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "worker/training/ddp_stats.h"
#include "worker/training/metrics.h"

namespace cpptorchrun::worker {

// When DDP all-reduces the gradients: during the backward pass (DDP's
// way), after it (to measure what the overlap saves), or not at all (each
// rank trains its own replica on its shard: the step time without DDP);
// or the three in turn, four optimizer steps each: off, after_backward,
// overlap, off, ... (the DDP benchmark's A/B/C within one run, so that a
// busy machine slows all three alike). All but the first are for
// benchmarks.
enum class AllReduceMode { kOverlap, kAfterBackward, kOff, kRotate };

// "overlap", "after_backward", "off", "rotate".
const char* AllReduceModeName(AllReduceMode mode);
// The inverse; InvalidArgument naming the flag and the choices.
absl::StatusOr<AllReduceMode> ParseAllReduceMode(const std::string& name);

// Optimizer steps in each mode's block under kRotate. Blocks, not single
// steps: the ranks drift apart on steps without an all-reduce, and the next
// all-reduce waits for the slower one; step by step that wait would always
// fall on the mode after "off". In blocks it falls on a block's first step,
// which the per-mode median leaves out.
inline constexpr int64_t kRotationBlock = 4;

// The mode the optimizer step `opt_step` (0-based, counted since the job
// began, so a resumed run continues the rotation) runs in: `configured`
// itself, or under kRotate off, after_backward, overlap in blocks of
// kRotationBlock. Never kRotate. A whole accumulation window shares its
// optimizer step's mode, the same on every rank.
AllReduceMode ModeForOptimizerStep(AllReduceMode configured, int64_t opt_step);

// The median (the upper one of an even count); 0 for none. Reorders.
double Median(std::vector<double>& values);

// Each mode's share of a run: its steps' wall times and DDP figures, and
// the per-mode figures of TrainMetrics::by_mode made of them.
class ModeTallies {
 public:
  // One step (batch) run in `mode` (not kRotate).
  void Add(AllReduceMode mode, double step_seconds, const DdpStats& ddp);
  // One entry per mode that ran a step, in rotation order (off,
  // after_backward, overlap).
  std::vector<TrainMetrics::ModeFigures> Figures() const;

 private:
  struct Tally {
    std::vector<double> step_seconds;
    DdpStats ddp;
  };
  Tally tallies_[3];  // indexed as the rotation
};

}  // namespace cpptorchrun::worker

#endif  // CPPTORCHRUN_WORKER_TRAINING_ALLREDUCE_MODE_H_
