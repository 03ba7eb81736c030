// The optimizers' names, defaults and trust ratios.
#include "worker/training/optimizer_options.h"

#include <cmath>

#include "absl/strings/str_cat.h"

namespace cpptorchrun::worker {

const char* OptimizerName(OptimizerKind kind) {
  switch (kind) {
    case OptimizerKind::kAdam:
      return "adam";
    case OptimizerKind::kSgd:
      return "sgd";
    case OptimizerKind::kLars:
      return "lars";
    case OptimizerKind::kLamb:
      return "lamb";
  }
  return "?";
}

absl::StatusOr<OptimizerKind> ParseOptimizerKind(const std::string& name) {
  for (OptimizerKind kind :
       {OptimizerKind::kAdam, OptimizerKind::kSgd, OptimizerKind::kLars, OptimizerKind::kLamb}) {
    if (name == OptimizerName(kind)) return kind;
  }
  return absl::InvalidArgumentError(
      absl::StrCat("--optimizer must be adam, sgd, lars or lamb, got \"", name, "\""));
}

double DefaultLearningRate(OptimizerKind kind) {
  switch (kind) {
    case OptimizerKind::kAdam:
      return 1e-3;
    case OptimizerKind::kSgd:
      return 0.03;
    case OptimizerKind::kLars:
      return 0.1;
    case OptimizerKind::kLamb:
      return 1e-2;
  }
  return 1e-3;
}

absl::Status ValidateOptimizerOptions(const OptimizerOptions& o) {
  auto bad = [](const std::string& what) { return absl::InvalidArgumentError(what); };
  if (!(o.weight_decay >= 0) || !std::isfinite(o.weight_decay)) {
    return bad(absl::StrCat("--weight_decay must not be negative, got ", o.weight_decay));
  }
  if (!(o.momentum >= 0 && o.momentum < 1)) {
    return bad(absl::StrCat("--momentum must be in [0, 1), got ", o.momentum));
  }
  if (!(o.trust_coefficient > 0) || !std::isfinite(o.trust_coefficient)) {
    return bad(absl::StrCat("--trust_coefficient must be positive, got ", o.trust_coefficient));
  }
  return absl::OkStatus();
}

double LarsTrustRatio(double weight_norm, double grad_norm, double eta, double weight_decay) {
  const double denominator = grad_norm + weight_decay * weight_norm;
  if (!(weight_norm > 0) || !(denominator > 0)) return 1.0;
  return eta * weight_norm / denominator;
}

double LambTrustRatio(double weight_norm, double update_norm) {
  if (!(weight_norm > 0) || !(update_norm > 0)) return 1.0;
  return weight_norm / update_norm;
}

}  // namespace cpptorchrun::worker
