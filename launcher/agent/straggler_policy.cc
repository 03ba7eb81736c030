#include "launcher/agent/straggler_policy.h"

#include <algorithm>

namespace cpptorchrun::launcher {
namespace {

double Median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  const size_t n = v.size();
  return n % 2 == 1 ? v[n / 2] : (v[n / 2 - 1] + v[n / 2]) / 2;
}

}  // namespace

bool ParseStragglerPolicy(const std::string& text, StragglerPolicy* out) {
  if (text == "warn") {
    *out = StragglerPolicy::kWarn;
  } else if (text == "replace") {
    *out = StragglerPolicy::kReplace;
  } else {
    return false;
  }
  return true;
}

void AddToWindow(std::deque<double>& window, double value, size_t size) {
  window.push_back(value);
  while (window.size() > size) window.pop_front();
}

std::optional<double> WindowMedian(const std::deque<double>& values, size_t window) {
  if (window == 0 || values.size() < window) return std::nullopt;
  return Median({values.end() - window, values.end()});
}

std::vector<Straggler> FindStragglers(const std::map<int, std::deque<double>>& compute, const StragglerOptions& o,
                                      const std::vector<double>& elsewhere) {
  std::vector<Straggler> out;
  if (o.factor <= 0 || o.window == 0) return out;
  std::map<int, double> medians;
  for (const auto& [local_rank, window] : compute) {
    if (std::optional<double> m = WindowMedian(window, o.window)) medians[local_rank] = *m;
  }
  if (medians.size() + elsewhere.size() < 2) return out;
  for (const auto& [local_rank, median] : medians) {
    std::vector<double> peers = elsewhere;
    for (const auto& [other, m] : medians) {
      if (other != local_rank) peers.push_back(m);
    }
    const double typical = Median(peers);
    if (typical > 0 && median >= o.factor * typical) out.push_back({local_rank, median / typical});
  }
  return out;
}

}  // namespace cpptorchrun::launcher
