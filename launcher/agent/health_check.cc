#include "launcher/agent/health_check.h"

namespace cpptorchrun::launcher {

std::string LastLine(absl::string_view output) {
  constexpr size_t kMax = 200;
  size_t end = output.size();
  while (end > 0) {
    while (end > 0 && (output[end - 1] == '\n' || output[end - 1] == '\r')) --end;
    if (end == 0) break;
    const size_t nl = output.find_last_of('\n', end == 0 ? 0 : end - 1);
    const size_t begin = nl == absl::string_view::npos ? 0 : nl + 1;
    absl::string_view line = output.substr(begin, end - begin);
    if (line.find_first_not_of(" \t") != absl::string_view::npos) {
      return std::string(line.substr(0, kMax));
    }
    end = begin;
  }
  return "";
}

HealthNext DecideHealth(bool passed, absl::Time out_since, absl::Time now, const HealthCheckOptions& o) {
  if (passed) return HealthNext::kJoin;
  if (now - out_since + o.retry_interval > o.give_up_after) return HealthNext::kGiveUp;
  return HealthNext::kRetry;
}

}  // namespace cpptorchrun::launcher
