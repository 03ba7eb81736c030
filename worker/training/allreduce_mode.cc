// The all-reduce modes, the rotation rule and the per-mode tallies.
#include "worker/training/allreduce_mode.h"

#include <algorithm>
#include <iterator>

#include "absl/strings/str_cat.h"

namespace cpptorchrun::worker {
namespace {

constexpr AllReduceMode kRotation[] = {AllReduceMode::kOff, AllReduceMode::kAfterBackward,
                                       AllReduceMode::kOverlap};

size_t RotationIndex(AllReduceMode mode) {
  return static_cast<size_t>(std::find(std::begin(kRotation), std::end(kRotation), mode) -
                             std::begin(kRotation));
}

}  // namespace

const char* AllReduceModeName(AllReduceMode mode) {
  switch (mode) {
    case AllReduceMode::kOverlap:
      return "overlap";
    case AllReduceMode::kAfterBackward:
      return "after_backward";
    case AllReduceMode::kOff:
      return "off";
    case AllReduceMode::kRotate:
      return "rotate";
  }
  return "?";
}

absl::StatusOr<AllReduceMode> ParseAllReduceMode(const std::string& name) {
  for (AllReduceMode mode : {AllReduceMode::kOverlap, AllReduceMode::kAfterBackward,
                             AllReduceMode::kOff, AllReduceMode::kRotate}) {
    if (name == AllReduceModeName(mode)) return mode;
  }
  return absl::InvalidArgumentError(absl::StrCat(
      "--allreduce must be overlap, after_backward, off or rotate, got \"", name, "\""));
}

AllReduceMode ModeForOptimizerStep(AllReduceMode configured, int64_t opt_step) {
  if (configured != AllReduceMode::kRotate) return configured;
  return kRotation[static_cast<size_t>(opt_step / kRotationBlock % std::size(kRotation))];
}

double Median(std::vector<double>& values) {
  if (values.empty()) return 0;
  const size_t mid = values.size() / 2;
  std::nth_element(values.begin(), values.begin() + mid, values.end());
  return values[mid];
}

void ModeTallies::Add(AllReduceMode mode, double step_seconds, const DdpStats& ddp) {
  const size_t i = RotationIndex(mode);
  if (i >= std::size(tallies_)) return;  // kRotate is never a step's mode
  tallies_[i].step_seconds.push_back(step_seconds);
  tallies_[i].ddp += ddp;
}

std::vector<TrainMetrics::ModeFigures> ModeTallies::Figures() const {
  std::vector<TrainMetrics::ModeFigures> out;
  for (size_t i = 0; i < std::size(tallies_); ++i) {
    const Tally& tally = tallies_[i];
    if (tally.step_seconds.empty()) continue;
    std::vector<double> seconds = tally.step_seconds;
    TrainMetrics::ModeFigures figures;
    figures.mode = AllReduceModeName(kRotation[i]);
    figures.steps = static_cast<int64_t>(seconds.size());
    figures.step_seconds_median = Median(seconds);
    figures.comm_wait_seconds = tally.ddp.wait_seconds;
    figures.allreduce_timed_steps = tally.ddp.timed_steps;
    figures.allreduce_seconds = tally.ddp.allreduce_seconds;
    figures.allreduce_hidden_seconds = tally.ddp.hidden_seconds;
    out.push_back(figures);
  }
  return out;
}

}  // namespace cpptorchrun::worker
