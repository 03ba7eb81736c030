// Progress lines, bars and the final summary.
#include "worker/training/progress.h"

#include <cmath>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"

namespace cpptorchrun::worker {
namespace {

std::string Duration(double seconds) {
  if (seconds < 0 || !std::isfinite(seconds)) return "?";
  int64_t s = static_cast<int64_t>(seconds + 0.5);
  if (s >= 3600) return absl::StrFormat("%d:%02d:%02d", s / 3600, s / 60 % 60, s % 60);
  return absl::StrFormat("%d:%02d", s / 60, s % 60);
}

}  // namespace

double EstimateEta(const StepReport& r, int64_t first_step) {
  const int64_t done = r.global_step - first_step;
  if (done <= 0 || r.elapsed_seconds <= 0) return -1;
  return r.elapsed_seconds / static_cast<double>(done) *
         static_cast<double>(std::max<int64_t>(0, r.total_steps - r.global_step));
}

std::string FormatProgress(const StepReport& r, double eta_seconds, bool bar) {
  std::string head;
  if (bar) {
    constexpr int kWidth = 24;
    const double fraction =
        r.steps_in_epoch > 0 ? static_cast<double>(r.step_in_epoch) / r.steps_in_epoch : 0;
    const int filled = static_cast<int>(fraction * kWidth);
    head = absl::StrCat("[", std::string(filled, '='), std::string(kWidth - filled, ' '), "] ");
  }
  return absl::StrFormat("%sepoch %d/%d step %d/%d loss %.4f %.0f samples/s ETA %s", head,
                         r.epoch + 1, r.epochs, r.step_in_epoch, r.steps_in_epoch, r.loss,
                         r.samples_per_s, Duration(eta_seconds));
}

std::string FormatSummary(const TrainMetrics& m) {
  std::string accuracy = m.test_accuracy >= 0
                             ? absl::StrFormat("test accuracy %.2f%%", 100 * m.test_accuracy)
                             : "no test set";
  std::string out =
      absl::StrFormat("%s, %.0f samples/s over %.1f s (world %d, %s), final loss %.4f", accuracy,
                      m.samples_per_s, m.train_seconds, m.world_size, m.backend, m.final_loss);
  if (m.bytes_sent_per_step > 0) {
    absl::StrAppendFormat(&out, ", comm hook %s: %.0f bytes sent a step", m.comm_hook,
                          m.bytes_sent_per_step);
  }
  return out;
}

ConsoleProgress::ConsoleProgress(std::FILE* out, bool terminal, int64_t line_every)
    : out_(out), terminal_(terminal), line_every_(std::max<int64_t>(1, line_every)) {}

void ConsoleProgress::OnStep(const StepReport& r) {
  // The run's first step gets a line of its own: the job is seen to train
  // (again, after a resume) at once, not line_every steps later.
  const bool first = first_step_ < 0;
  if (first) first_step_ = r.global_step - 1;
  const bool line_next = line_next_;
  line_next_ = false;
  const bool epoch_end = r.step_in_epoch == r.steps_in_epoch;
  const double eta = EstimateEta(r, first_step_);
  if (terminal_) {
    std::fprintf(out_, "\r\033[K%s", FormatProgress(r, eta, true).c_str());
    line_open_ = !epoch_end;
    if (epoch_end) std::fputc('\n', out_);
    std::fflush(out_);
  } else if (first || line_next || epoch_end || r.step_in_epoch % line_every_ == 0) {
    std::fprintf(out_, "%s\n", FormatProgress(r, eta, false).c_str());
    std::fflush(out_);
  }
}

void ConsoleProgress::OnResumed(int64_t global_step) {
  std::fprintf(out_, "resumed from checkpoint at step %lld\n", static_cast<long long>(global_step));
  std::fflush(out_);
}

void ConsoleProgress::OnFinished(const TrainMetrics& metrics) {
  if (line_open_) std::fputc('\n', out_);
  std::fprintf(out_, "%s\n", FormatSummary(metrics).c_str());
  std::fflush(out_);
}

}  // namespace cpptorchrun::worker
