// Start-up timing from /proc/self/stat.
#include "worker/agent/startup.h"

#include <time.h>
#include <unistd.h>

#include <fstream>
#include <sstream>
#include <vector>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_join.h"
#include "absl/strings/str_split.h"

namespace cpptorchrun::worker {

std::optional<int64_t> ParseStartTicks(const std::string& stat_line) {
  const size_t close = stat_line.rfind(')');
  if (close == std::string::npos) return std::nullopt;
  // After ") " come field 3 (state) onwards; starttime is field 22.
  std::vector<absl::string_view> fields =
      absl::StrSplit(absl::string_view(stat_line).substr(close + 1), ' ', absl::SkipEmpty());
  constexpr size_t kStartTimeIndex = 22 - 3;
  int64_t ticks = 0;
  if (fields.size() <= kStartTimeIndex || !absl::SimpleAtoi(fields[kStartTimeIndex], &ticks) ||
      ticks < 0) {
    return std::nullopt;
  }
  return ticks;
}

std::optional<double> SecondsSinceProcessStart() {
  std::ifstream in("/proc/self/stat");
  std::string line;
  if (!std::getline(in, line)) return std::nullopt;
  std::optional<int64_t> ticks = ParseStartTicks(line);
  const long hz = ::sysconf(_SC_CLK_TCK);
  timespec now{};
  if (!ticks.has_value() || hz <= 0 || ::clock_gettime(CLOCK_BOOTTIME, &now) != 0) return std::nullopt;
  const double since = static_cast<double>(now.tv_sec) + now.tv_nsec * 1e-9 -
                       static_cast<double>(*ticks) / static_cast<double>(hz);
  return since < 0 ? 0.0 : since;
}

double MonotonicSeconds() {
  timespec now{};
  ::clock_gettime(CLOCK_MONOTONIC, &now);
  return static_cast<double>(now.tv_sec) + now.tv_nsec * 1e-9;
}

std::string FormatStartup(const StartupPhases& p) {
  std::vector<std::string> parts;
  auto add = [&parts](const char* name, double v) {
    if (v >= 0) parts.push_back(absl::StrFormat("%s %.2f s", name, v));
  };
  add("before main", p.before_main);
  add("data", p.data);
  add("communicator", p.communicator);
  std::string out = p.total >= 0 ? absl::StrFormat("started in %.2f s", p.total) : "started";
  if (!parts.empty()) absl::StrAppend(&out, " (", absl::StrJoin(parts, ", "), ")");
  return out;
}

}  // namespace cpptorchrun::worker
