// `train --optimizer` and its knobs, torch-free: the four optimizers'
// names, their hyper-parameters with defaults, the default base learning
// rate of each, and the layer-wise adaptation of LARS and LAMB as pure
// functions of norms (worker/training/optimizers.h applies them to tensors).
#ifndef CPPTORCHRUN_WORKER_TRAINING_OPTIMIZER_OPTIONS_H_
#define CPPTORCHRUN_WORKER_TRAINING_OPTIMIZER_OPTIONS_H_

#include <string>

#include "absl/status/status.h"
#include "absl/status/statusor.h"

namespace cpptorchrun::worker {

// adam: torch::optim::Adam (the seed's). sgd: torch::optim::SGD with
// momentum. lars: SGD with momentum and a per-layer trust ratio (You,
// Gitman, Ginsburg 2017). lamb: Adam's moments with a per-layer trust ratio
// (You et al. 2019).
enum class OptimizerKind { kAdam, kSgd, kLars, kLamb };

// "adam", "sgd", "lars", "lamb".
const char* OptimizerName(OptimizerKind kind);
// The inverse; InvalidArgument naming --optimizer and the choices.
absl::StatusOr<OptimizerKind> ParseOptimizerKind(const std::string& name);

// The base learning rate (before the linear scaling rule) each optimizer
// uses when --lr is not given; measured on the seed's MLP at batch 64
// (worker/training/README.md).
double DefaultLearningRate(OptimizerKind kind);

struct OptimizerOptions {
  OptimizerKind kind = OptimizerKind::kAdam;
  // L2 penalty added to the gradient (adam, sgd) or to the update (lars,
  // lamb); never applied to 1-d parameters by lars and lamb.
  double weight_decay = 0;
  // Heavy-ball momentum of sgd and lars.
  double momentum = 0.9;
  // LARS's eta: how far (relative to the layer's weight norm) one step of
  // rate 1 may move a layer. The paper's 0.001 needs a global rate of 3-10
  // to train the seed's MLP, which the excluded biases then take as a plain
  // SGD rate; 0.02 trains as well or better at 0.1 (README.md).
  double trust_coefficient = 0.02;
};

// InvalidArgument naming the first bad flag.
absl::Status ValidateOptimizerOptions(const OptimizerOptions& options);

// LARS's local rate for a layer: eta * |w| / (|g| + wd * |w|), or 1 when
// |w| or the denominator is 0 (a zero layer, or no gradient: nothing to
// scale against, so the global rate applies unchanged).
double LarsTrustRatio(double weight_norm, double grad_norm, double eta, double weight_decay);

// LAMB's ratio for a layer: |w| / |u| where u is the Adam direction plus
// weight decay, or 1 when either norm is 0.
double LambTrustRatio(double weight_norm, double update_norm);

}  // namespace cpptorchrun::worker

#endif  // CPPTORCHRUN_WORKER_TRAINING_OPTIMIZER_OPTIONS_H_
