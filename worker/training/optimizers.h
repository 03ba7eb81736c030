// LARS and LAMB as torch::optim::Optimizer subclasses, their per-layer
// updates as functions of tensors, and ModelOptimizer: the trainer's one
// view of whichever of adam, sgd, lars and lamb --optimizer picked (a step
// at a given rate, and the per-parameter state a checkpoint saves and
// restores). Includes LibTorch.
//
// Layer-wise adaptation applies to parameters of two or more dimensions
// (weight matrices). 1-d parameters (biases) are excluded from both the
// trust ratio and weight decay, the common practice: their norm says
// little about a sensible step, and decaying them does not regularise.
#ifndef CPPTORCHRUN_WORKER_TRAINING_OPTIMIZERS_H_
#define CPPTORCHRUN_WORKER_TRAINING_OPTIMIZERS_H_

#include <torch/torch.h>

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "worker/training/optimizer_options.h"

namespace cpptorchrun::worker {

// Whether p gets the trust ratio and weight decay (LARS, LAMB): 2-d and up.
bool AdaptedLayer(const torch::Tensor& p);

struct LarsOptions : torch::optim::OptimizerCloneableOptions<LarsOptions> {
  explicit LarsOptions(double lr) : lr_(lr) {}
  TORCH_ARG(double, lr);
  TORCH_ARG(double, momentum) = 0.9;
  TORCH_ARG(double, weight_decay) = 0;
  TORCH_ARG(double, trust_coefficient) = 0.001;

 public:
  double get_lr() const override { return lr(); }
  void set_lr(const double lr) override { this->lr(lr); }
};

struct LarsParamState : torch::optim::OptimizerCloneableParamState<LarsParamState> {
  // Zero until the first step (the same as starting from the first update).
  TORCH_ARG(torch::Tensor, momentum_buffer);
};

// One LARS step of p (in place), the paper's Algorithm 1 with the rate
// inside the momentum:
//   d = g + wd * w,  lambda = eta * |w| / (|g| + wd * |w|)   (adapted layers)
//   d = g,           lambda = 1                              (1-d parameters)
//   v = momentum * v + lr * lambda * d;  w = w - v
void LarsUpdate(torch::Tensor& p, const torch::Tensor& grad, torch::Tensor& momentum_buffer,
                const LarsOptions& options);

class Lars : public torch::optim::Optimizer {
 public:
  Lars(std::vector<torch::Tensor> params, const LarsOptions& defaults);
  // Parameters without a gradient are left alone. The closure, if any, is
  // called first (with grad enabled) and its loss returned.
  torch::Tensor step(LossClosure closure = nullptr) override;
};

struct LambOptions : torch::optim::OptimizerCloneableOptions<LambOptions> {
  explicit LambOptions(double lr) : lr_(lr) {}
  TORCH_ARG(double, lr);
  TORCH_ARG(double, beta1) = 0.9;
  TORCH_ARG(double, beta2) = 0.999;
  TORCH_ARG(double, eps) = 1e-6;
  TORCH_ARG(double, weight_decay) = 0;

 public:
  double get_lr() const override { return lr(); }
  void set_lr(const double lr) override { this->lr(lr); }
};

struct LambParamState : torch::optim::OptimizerCloneableParamState<LambParamState> {
  TORCH_ARG(int64_t, step) = 0;
  TORCH_ARG(torch::Tensor, exp_avg);
  TORCH_ARG(torch::Tensor, exp_avg_sq);
};

// One LAMB step of p (in place), the paper's Algorithm 2 with phi the
// identity; `step` is this update's number, from 1:
//   m = b1 m + (1 - b1) g,  v = b2 v + (1 - b2) g^2
//   r = (m / (1 - b1^t)) / (sqrt(v / (1 - b2^t)) + eps)
//   u = r + wd * w, ratio = |w| / |u|   (adapted layers; 1 if a norm is 0)
//   u = r,          ratio = 1           (1-d parameters)
//   w = w - lr * ratio * u
void LambUpdate(torch::Tensor& p, const torch::Tensor& grad, torch::Tensor& exp_avg,
                torch::Tensor& exp_avg_sq, int64_t step, const LambOptions& options);

class Lamb : public torch::optim::Optimizer {
 public:
  Lamb(std::vector<torch::Tensor> params, const LambOptions& defaults);
  torch::Tensor step(LossClosure closure = nullptr) override;
};

// One field of a parameter's optimizer state, aliasing the optimizer's
// tensor (writing into it changes the optimizer).
struct StateTensor {
  std::string field;  // "exp_avg", "exp_avg_sq", "momentum"
  torch::Tensor tensor;
};

// The trainer's optimizer: one of the four over the model's parameters.
// Not thread-safe.
class ModelOptimizer {
 public:
  // `params` in a fixed order (the model's registration order): State(i)
  // and the step counts are by that index. `lr` is the initial base rate.
  ModelOptimizer(const OptimizerOptions& options, std::vector<torch::Tensor> params, double lr);

  OptimizerKind kind() const { return options_.kind; }
  // Sets every group's rate to `lr` and steps on the parameters' gradients.
  void Step(double lr);

  // Parameter i's state fields, in a fixed order per kind, created zeroed
  // when the optimizer has none yet (a zero state steps as a fresh one).
  std::vector<StateTensor> State(size_t i);
  // Whether the kind keeps a per-parameter step count (adam, lamb).
  bool CountsSteps() const;
  // Parameter i's step count; 0 for kinds without one (and setting is a
  // no-op for them).
  int64_t StepCount(size_t i);
  void SetStepCount(size_t i, int64_t step);

 private:
  OptimizerOptions options_;
  std::vector<torch::Tensor> params_;
  std::unique_ptr<torch::optim::Optimizer> optimizer_;
};

}  // namespace cpptorchrun::worker

#endif  // CPPTORCHRUN_WORKER_TRAINING_OPTIMIZERS_H_
