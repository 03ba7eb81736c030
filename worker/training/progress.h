// Rank 0's console progress: epoch, step of total, loss, samples/s and ETA,
// as a redrawn bar on a terminal and as plain lines otherwise.
#ifndef CPPTORCHRUN_WORKER_TRAINING_PROGRESS_H_
#define CPPTORCHRUN_WORKER_TRAINING_PROGRESS_H_

#include <cstdint>
#include <cstdio>
#include <string>

#include "worker/training/metrics.h"

namespace cpptorchrun::worker {

// One progress line (no newline). `eta_seconds` < 0 prints "?".
std::string FormatProgress(const StepReport& report, double eta_seconds, bool bar);

// ETA from the run's pace: the steps left at the seconds per step so far.
double EstimateEta(const StepReport& report, int64_t first_step);

// "test accuracy 85.31%, 2,345 samples/s over 25.6 s (world 2)"
std::string FormatSummary(const TrainMetrics& metrics);

// Prints reports to `out` (not owned). On a terminal it redraws one line;
// otherwise it prints a line for the run's first step, every `line_every`
// steps and at each epoch's end. Used on the training thread only.
class ConsoleProgress final : public TrainObserver {
 public:
  ConsoleProgress(std::FILE* out, bool terminal, int64_t line_every = 100);
  void OnStep(const StepReport& report) override;
  void OnResumed(int64_t global_step) override;
  void OnFinished(const TrainMetrics& metrics) override;
  // The worker went on in a new round (an in-place recovery): the next
  // step gets a line of its own, as after a resume.
  void OnRoundChanged() { line_next_ = true; }

 private:
  std::FILE* const out_;
  const bool terminal_;
  const int64_t line_every_;
  int64_t first_step_ = -1;
  bool line_open_ = false;
  bool line_next_ = false;
};

}  // namespace cpptorchrun::worker

#endif  // CPPTORCHRUN_WORKER_TRAINING_PROGRESS_H_
