// LARS, LAMB and the trainer's view of the four optimizers.
#include "worker/training/optimizers.h"

#include <cmath>
#include <utility>

namespace cpptorchrun::worker {
namespace {

// The key torch::optim keeps a parameter's state under.
std::string StateKey(const torch::Tensor& p) {
  return c10::guts::to_string(p.unsafeGetTensorImpl());
}

double Norm(const torch::Tensor& t) { return t.norm().item<double>(); }

// p's state of type S, created by `fresh` when absent.
template <typename S, typename Fresh>
S& StateOf(torch::optim::Optimizer& optimizer, const torch::Tensor& p, Fresh fresh) {
  auto& states = optimizer.state();
  auto it = states.find(StateKey(p));
  if (it == states.end()) {
    std::unique_ptr<S> made = std::make_unique<S>();
    fresh(*made);
    it = states.emplace(StateKey(p), std::move(made)).first;
  }
  return static_cast<S&>(*it->second);
}

torch::Tensor ZerosLike(const torch::Tensor& p) {
  return torch::zeros_like(p, torch::MemoryFormat::Preserve);
}

LarsParamState& LarsStateOf(torch::optim::Optimizer& o, const torch::Tensor& p) {
  return StateOf<LarsParamState>(o, p, [&](LarsParamState& s) { s.momentum_buffer(ZerosLike(p)); });
}

LambParamState& LambStateOf(torch::optim::Optimizer& o, const torch::Tensor& p) {
  return StateOf<LambParamState>(o, p, [&](LambParamState& s) {
    s.exp_avg(ZerosLike(p));
    s.exp_avg_sq(ZerosLike(p));
  });
}

torch::optim::AdamParamState& AdamStateOf(torch::optim::Optimizer& o, const torch::Tensor& p) {
  return StateOf<torch::optim::AdamParamState>(o, p, [&](torch::optim::AdamParamState& s) {
    s.step(0);
    s.exp_avg(ZerosLike(p));
    s.exp_avg_sq(ZerosLike(p));
  });
}

// SGD creates its buffer from the first gradient; a zero one steps the same
// with dampening 0 (0.9 * 0 + g).
torch::optim::SGDParamState& SgdStateOf(torch::optim::Optimizer& o, const torch::Tensor& p) {
  return StateOf<torch::optim::SGDParamState>(
      o, p, [&](torch::optim::SGDParamState& s) { s.momentum_buffer(ZerosLike(p)); });
}

torch::Tensor LossOf(const torch::optim::Optimizer::LossClosure& closure) {
  if (!closure) return {};
  torch::AutoGradMode enable_grad(true);
  return closure();
}

}  // namespace

bool AdaptedLayer(const torch::Tensor& p) { return p.dim() > 1; }

void LarsUpdate(torch::Tensor& p, const torch::Tensor& grad, torch::Tensor& momentum_buffer,
                const LarsOptions& options) {
  torch::NoGradGuard no_grad;
  double ratio = 1.0;
  torch::Tensor direction = grad;
  if (AdaptedLayer(p)) {
    ratio = LarsTrustRatio(Norm(p), Norm(grad), options.trust_coefficient(), options.weight_decay());
    if (options.weight_decay() != 0) direction = grad.add(p, options.weight_decay());
  }
  momentum_buffer.mul_(options.momentum()).add_(direction, options.lr() * ratio);
  p.sub_(momentum_buffer);
}

Lars::Lars(std::vector<torch::Tensor> params, const LarsOptions& defaults)
    : torch::optim::Optimizer({torch::optim::OptimizerParamGroup(std::move(params))},
                              std::make_unique<LarsOptions>(defaults)) {}

torch::Tensor Lars::step(LossClosure closure) {
  torch::Tensor loss = LossOf(closure);
  for (torch::optim::OptimizerParamGroup& group : param_groups_) {
    const auto& options = static_cast<const LarsOptions&>(group.options());
    for (torch::Tensor& p : group.params()) {
      if (!p.grad().defined()) continue;
      LarsUpdate(p, p.grad(), LarsStateOf(*this, p).momentum_buffer(), options);
    }
  }
  return loss;
}

void LambUpdate(torch::Tensor& p, const torch::Tensor& grad, torch::Tensor& exp_avg,
                torch::Tensor& exp_avg_sq, int64_t step, const LambOptions& options) {
  torch::NoGradGuard no_grad;
  const double b1 = options.beta1();
  const double b2 = options.beta2();
  exp_avg.mul_(b1).add_(grad, 1 - b1);
  exp_avg_sq.mul_(b2).addcmul_(grad, grad, 1 - b2);
  const double correction1 = 1 - std::pow(b1, static_cast<double>(step));
  const double correction2 = 1 - std::pow(b2, static_cast<double>(step));
  torch::Tensor update =
      (exp_avg / correction1).div_((exp_avg_sq / correction2).sqrt_().add_(options.eps()));
  double ratio = 1.0;
  if (AdaptedLayer(p)) {
    if (options.weight_decay() != 0) update.add_(p, options.weight_decay());
    ratio = LambTrustRatio(Norm(p), Norm(update));
  }
  p.add_(update, -options.lr() * ratio);
}

Lamb::Lamb(std::vector<torch::Tensor> params, const LambOptions& defaults)
    : torch::optim::Optimizer({torch::optim::OptimizerParamGroup(std::move(params))},
                              std::make_unique<LambOptions>(defaults)) {}

torch::Tensor Lamb::step(LossClosure closure) {
  torch::Tensor loss = LossOf(closure);
  for (torch::optim::OptimizerParamGroup& group : param_groups_) {
    const auto& options = static_cast<const LambOptions&>(group.options());
    for (torch::Tensor& p : group.params()) {
      if (!p.grad().defined()) continue;
      LambParamState& state = LambStateOf(*this, p);
      state.step(state.step() + 1);
      LambUpdate(p, p.grad(), state.exp_avg(), state.exp_avg_sq(), state.step(), options);
    }
  }
  return loss;
}

namespace {

std::unique_ptr<torch::optim::Optimizer> MakeTorchOptimizer(const OptimizerOptions& o,
                                                            std::vector<torch::Tensor> params,
                                                            double lr) {
  switch (o.kind) {
    case OptimizerKind::kAdam:
      return std::make_unique<torch::optim::Adam>(
          std::move(params), torch::optim::AdamOptions(lr).weight_decay(o.weight_decay));
    case OptimizerKind::kSgd:
      return std::make_unique<torch::optim::SGD>(
          std::move(params),
          torch::optim::SGDOptions(lr).momentum(o.momentum).weight_decay(o.weight_decay));
    case OptimizerKind::kLars:
      return std::make_unique<Lars>(std::move(params), LarsOptions(lr)
                                                           .momentum(o.momentum)
                                                           .weight_decay(o.weight_decay)
                                                           .trust_coefficient(o.trust_coefficient));
    case OptimizerKind::kLamb:
      return std::make_unique<Lamb>(std::move(params), LambOptions(lr).weight_decay(o.weight_decay));
  }
  return nullptr;
}

}  // namespace

ModelOptimizer::ModelOptimizer(const OptimizerOptions& options, std::vector<torch::Tensor> params,
                               double lr)
    : options_(options), params_(params), optimizer_(MakeTorchOptimizer(options, params, lr)) {}

void ModelOptimizer::Step(double lr) {
  for (torch::optim::OptimizerParamGroup& group : optimizer_->param_groups()) {
    group.options().set_lr(lr);
  }
  optimizer_->step();
}

std::vector<StateTensor> ModelOptimizer::State(size_t i) {
  const torch::Tensor& p = params_.at(i);
  switch (options_.kind) {
    case OptimizerKind::kAdam: {
      torch::optim::AdamParamState& s = AdamStateOf(*optimizer_, p);
      return {{"exp_avg", s.exp_avg()}, {"exp_avg_sq", s.exp_avg_sq()}};
    }
    case OptimizerKind::kSgd:
      return {{"momentum", SgdStateOf(*optimizer_, p).momentum_buffer()}};
    case OptimizerKind::kLars:
      return {{"momentum", LarsStateOf(*optimizer_, p).momentum_buffer()}};
    case OptimizerKind::kLamb: {
      LambParamState& s = LambStateOf(*optimizer_, p);
      return {{"exp_avg", s.exp_avg()}, {"exp_avg_sq", s.exp_avg_sq()}};
    }
  }
  return {};
}

bool ModelOptimizer::CountsSteps() const {
  return options_.kind == OptimizerKind::kAdam || options_.kind == OptimizerKind::kLamb;
}

int64_t ModelOptimizer::StepCount(size_t i) {
  const torch::Tensor& p = params_.at(i);
  if (options_.kind == OptimizerKind::kAdam) return AdamStateOf(*optimizer_, p).step();
  if (options_.kind == OptimizerKind::kLamb) return LambStateOf(*optimizer_, p).step();
  return 0;
}

void ModelOptimizer::SetStepCount(size_t i, int64_t step) {
  const torch::Tensor& p = params_.at(i);
  if (options_.kind == OptimizerKind::kAdam) AdamStateOf(*optimizer_, p).step(step);
  if (options_.kind == OptimizerKind::kLamb) LambStateOf(*optimizer_, p).step(step);
}

}  // namespace cpptorchrun::worker
