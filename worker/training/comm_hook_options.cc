// --comm_hook names, validation, PowerSGD's compression rule.
#include "worker/training/comm_hook_options.h"

#include <algorithm>

#include "absl/strings/str_cat.h"

namespace cpptorchrun::worker {

const char* CommHookName(CommHookKind kind) {
  switch (kind) {
    case CommHookKind::kAllReduce:
      return "allreduce";
    case CommHookKind::kFp16:
      return "fp16";
    case CommHookKind::kBf16:
      return "bf16";
    case CommHookKind::kPowerSgd:
      return "powersgd";
  }
  return "?";
}

absl::StatusOr<CommHookKind> ParseCommHookKind(const std::string& name) {
  for (CommHookKind kind : {CommHookKind::kAllReduce, CommHookKind::kFp16, CommHookKind::kBf16,
                            CommHookKind::kPowerSgd}) {
    if (name == CommHookName(kind)) return kind;
  }
  return absl::InvalidArgumentError(absl::StrCat(
      "--comm_hook: \"", name, "\" is not one of allreduce, fp16, bf16, powersgd"));
}

absl::Status ValidateCommHookOptions(const CommHookOptions& options) {
  if (options.powersgd_rank < 1) {
    return absl::InvalidArgumentError(
        absl::StrCat("--powersgd_rank: ", options.powersgd_rank, " (must be at least 1)"));
  }
  if (options.powersgd_start_iter < 0) {
    return absl::InvalidArgumentError(absl::StrCat(
        "--powersgd_start_iter: ", options.powersgd_start_iter, " (must be 0 or more)"));
  }
  if (!(options.min_compression_rate > 0)) {
    return absl::InvalidArgumentError("PowerSGD's minimum compression rate must be positive");
  }
  return absl::OkStatus();
}

bool PowerSgdCompresses(int64_t n, int64_t m, int rank, double min_rate) {
  const int64_t r = std::min<int64_t>({n, m, rank});
  return static_cast<double>(n + m) * r * min_rate < static_cast<double>(n) * m;
}

}  // namespace cpptorchrun::worker
