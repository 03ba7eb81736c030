// Tests of LARS and LAMB against hand computations on small tensors, the
// trust ratios' zero-norm cases, the 1-d exclusions, determinism, and the
// state a checkpoint carries: restored into a fresh optimizer, training
// continues exactly as without the break, for all four optimizers.
#include "worker/training/optimizers.h"

#include <cmath>

#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace cpptorchrun::worker {
namespace {

using ::testing::HasSubstr;

torch::Tensor T(std::vector<float> values, std::vector<int64_t> shape) {
  return torch::tensor(values).reshape(shape);
}

void ExpectNear(const torch::Tensor& actual, std::vector<double> expected, double tolerance = 1e-6) {
  torch::Tensor flat = actual.reshape({-1}).to(torch::kDouble);
  ASSERT_EQ(flat.numel(), static_cast<int64_t>(expected.size()));
  for (size_t i = 0; i < expected.size(); ++i) {
    EXPECT_NEAR(flat[i].item<double>(), expected[i], tolerance) << "element " << i;
  }
}

TEST(OptimizerOptions, NamesParseAndBadValuesNameTheFlag) {
  for (OptimizerKind kind :
       {OptimizerKind::kAdam, OptimizerKind::kSgd, OptimizerKind::kLars, OptimizerKind::kLamb}) {
    EXPECT_EQ(ParseOptimizerKind(OptimizerName(kind)).value(), kind);
    EXPECT_GT(DefaultLearningRate(kind), 0);
  }
  EXPECT_THAT(ParseOptimizerKind("adamw").status().message(),
              HasSubstr("--optimizer must be adam, sgd, lars or lamb, got \"adamw\""));
  EXPECT_DOUBLE_EQ(DefaultLearningRate(OptimizerKind::kAdam), 1e-3) << "the seed's";
  OptimizerOptions options;
  EXPECT_TRUE(ValidateOptimizerOptions(options).ok());
  options.momentum = 1;
  EXPECT_THAT(ValidateOptimizerOptions(options).message(), HasSubstr("--momentum"));
  options = OptimizerOptions();
  options.weight_decay = -1;
  EXPECT_THAT(ValidateOptimizerOptions(options).message(), HasSubstr("--weight_decay"));
  options = OptimizerOptions();
  options.trust_coefficient = 0;
  EXPECT_THAT(ValidateOptimizerOptions(options).message(), HasSubstr("--trust_coefficient"));
}

TEST(TrustRatio, LarsIsEtaTimesWeightOverGradientPlusDecay) {
  EXPECT_DOUBLE_EQ(LarsTrustRatio(5, 1, 0.01, 0), 0.05);
  EXPECT_DOUBLE_EQ(LarsTrustRatio(5, 1, 0.01, 0.1), 0.01 * 5 / 1.5);
  // No gradient but decay: the decay alone sets the scale.
  EXPECT_DOUBLE_EQ(LarsTrustRatio(5, 0, 0.01, 0.1), 0.1);
  // Zero norms: nothing to scale against, the global rate applies.
  EXPECT_EQ(LarsTrustRatio(0, 1, 0.01, 0.1), 1.0);
  EXPECT_EQ(LarsTrustRatio(5, 0, 0.01, 0), 1.0);
  EXPECT_EQ(LarsTrustRatio(0, 0, 0.01, 0), 1.0);
}

TEST(TrustRatio, LambIsWeightOverUpdateAndOneAtZero) {
  EXPECT_DOUBLE_EQ(LambTrustRatio(6, 2), 3.0);
  EXPECT_EQ(LambTrustRatio(0, 2), 1.0);
  EXPECT_EQ(LambTrustRatio(6, 0), 1.0);
  EXPECT_EQ(LambTrustRatio(0, 0), 1.0);
}

TEST(Lars, TwoStepsOfALayerByHand) {
  // |w| = 5, |g| = 1, eta 0.01, lr 1, momentum 0.9, no decay.
  torch::Tensor w = T({3, 4}, {1, 2});
  torch::Tensor g = T({0.6f, 0.8f}, {1, 2});
  torch::Tensor v = torch::zeros_like(w);
  LarsOptions options = LarsOptions(1.0).trust_coefficient(0.01).momentum(0.9);
  LarsUpdate(w, g, v, options);  // lambda 0.05: v = 0.05 g
  ExpectNear(v, {0.03, 0.04});
  ExpectNear(w, {2.97, 3.96});
  LarsUpdate(w, g, v, options);  // |w| = 4.95: lambda 0.0495
  ExpectNear(v, {0.9 * 0.03 + 0.0495 * 0.6, 0.9 * 0.04 + 0.0495 * 0.8});
  ExpectNear(w, {2.97 - 0.0567, 3.96 - 0.0756});
}

TEST(Lars, WeightDecayEntersTheDirectionAndTheRatio) {
  torch::Tensor w = T({3, 4}, {1, 2});
  torch::Tensor g = T({0.6f, 0.8f}, {1, 2});
  torch::Tensor v = torch::zeros_like(w);
  // lambda = 0.01 * 5 / (1 + 0.1 * 5); d = g + 0.1 w = (0.9, 1.2); lr 0.5.
  LarsUpdate(w, g, v, LarsOptions(0.5).trust_coefficient(0.01).weight_decay(0.1));
  const double step = 0.5 * 0.01 * 5 / 1.5;
  ExpectNear(w, {3 - step * 0.9, 4 - step * 1.2});
}

TEST(Lars, OneDimensionalParametersGetPlainMomentumSgd) {
  torch::Tensor b = T({1, 2}, {2});
  torch::Tensor v = torch::zeros_like(b);
  LarsUpdate(b, T({0.5f, -0.5f}, {2}), v, LarsOptions(0.1).trust_coefficient(0.01).weight_decay(0.1));
  ExpectNear(b, {0.95, 2.05});  // no ratio, no decay
}

TEST(Lars, AZeroLayerStepsAtTheGlobalRate) {
  torch::Tensor w = torch::zeros({1, 2});
  torch::Tensor v = torch::zeros_like(w);
  LarsUpdate(w, T({0.6f, 0.8f}, {1, 2}), v, LarsOptions(0.1).trust_coefficient(0.01));
  ExpectNear(w, {-0.06, -0.08});
  torch::Tensor still = T({3, 4}, {1, 2});
  torch::Tensor v2 = torch::zeros_like(still);
  LarsUpdate(still, torch::zeros({1, 2}), v2, LarsOptions(0.1));
  ExpectNear(still, {3, 4});  // no gradient, no decay: no move
}

TEST(Lamb, OneStepOfALayerByHand) {
  // First step: the bias-corrected moments are g and g^2, so r = g / (|g| + eps).
  for (double decay : {0.0, 0.01}) {
    torch::Tensor w = T({3, 4}, {1, 2});
    torch::Tensor g = T({0.6f, -0.8f}, {1, 2});
    torch::Tensor m = torch::zeros_like(w);
    torch::Tensor s = torch::zeros_like(w);
    LambUpdate(w, g, m, s, 1, LambOptions(0.01).weight_decay(decay));
    ExpectNear(m, {0.06, -0.08});
    ExpectNear(s, {0.00036, 0.00064}, 1e-9);
    const double r0 = 0.6 / (0.6 + 1e-6), r1 = -0.8 / (0.8 + 1e-6);
    const double u0 = r0 + decay * 3, u1 = r1 + decay * 4;
    const double ratio = 5 / std::sqrt(u0 * u0 + u1 * u1);
    SCOPED_TRACE(decay);
    ExpectNear(w, {3 - 0.01 * ratio * u0, 4 - 0.01 * ratio * u1});
  }
}

TEST(Lamb, SecondStepUsesTheBiasCorrection) {
  torch::Tensor w = T({3, 4}, {1, 2});
  torch::Tensor m = torch::zeros_like(w);
  torch::Tensor s = torch::zeros_like(w);
  LambOptions options(0.01);
  LambUpdate(w, T({0.6f, -0.8f}, {1, 2}), m, s, 1, options);
  torch::Tensor before = w.clone();
  torch::Tensor g2 = T({0.2f, 0.4f}, {1, 2});
  LambUpdate(w, g2, m, s, 2, options);
  const double m0 = 0.9 * 0.06 + 0.1 * 0.2, m1 = 0.9 * -0.08 + 0.1 * 0.4;
  const double s0 = 0.999 * 0.00036 + 0.001 * 0.04, s1 = 0.999 * 0.00064 + 0.001 * 0.16;
  const double c1 = 1 - 0.81, c2 = 1 - 0.999 * 0.999;
  const double r0 = (m0 / c1) / (std::sqrt(s0 / c2) + 1e-6);
  const double r1 = (m1 / c1) / (std::sqrt(s1 / c2) + 1e-6);
  const double b0 = before.reshape({-1})[0].item<double>(), b1 = before.reshape({-1})[1].item<double>();
  const double ratio = std::sqrt(b0 * b0 + b1 * b1) / std::sqrt(r0 * r0 + r1 * r1);
  ExpectNear(w, {b0 - 0.01 * ratio * r0, b1 - 0.01 * ratio * r1}, 1e-5);
}

TEST(Lamb, OneDimensionalParametersGetPlainAdamSteps) {
  torch::Tensor b = T({1, 2}, {2});
  torch::Tensor m = torch::zeros_like(b);
  torch::Tensor s = torch::zeros_like(b);
  LambUpdate(b, T({0.5f, -0.5f}, {2}), m, s, 1, LambOptions(0.01).weight_decay(0.1));
  ExpectNear(b, {1 - 0.01 * 0.5 / (0.5 + 1e-6), 2 + 0.01 * 0.5 / (0.5 + 1e-6)});
}

TEST(Lamb, AZeroLayerStepsAtTheGlobalRate) {
  torch::Tensor w = torch::zeros({1, 2});
  torch::Tensor m = torch::zeros_like(w);
  torch::Tensor s = torch::zeros_like(w);
  LambUpdate(w, T({0.6f, -0.8f}, {1, 2}), m, s, 1, LambOptions(0.01));
  ExpectNear(w, {-0.01 * 0.6 / (0.6 + 1e-6), 0.01 * 0.8 / (0.8 + 1e-6)});
}

// A weight and a bias with seeded values and a seeded gradient per step.
struct Tiny {
  explicit Tiny(uint64_t seed) {
    torch::manual_seed(seed);
    weight = torch::randn({4, 3});
    bias = torch::randn({4});
  }
  std::vector<torch::Tensor> params() { return {weight, bias}; }
  torch::Tensor weight, bias;
};

void SetGradients(Tiny& model, int step) {
  at::Generator gen = at::detail::createCPUGenerator(1000 + step);
  model.weight.mutable_grad() = torch::randn({4, 3}, gen);
  model.bias.mutable_grad() = torch::randn({4}, gen);
}

void Train(Tiny& model, ModelOptimizer& optimizer, int from, int to) {
  for (int step = from; step < to; ++step) {
    SetGradients(model, step);
    optimizer.Step(0.05 * (1 + step % 3));  // a changing rate, as under warm-up
  }
}

OptimizerOptions Kind(OptimizerKind kind) {
  OptimizerOptions options;
  options.kind = kind;
  options.weight_decay = 0.01;
  options.trust_coefficient = 0.02;
  return options;
}

class EveryOptimizer : public ::testing::TestWithParam<OptimizerKind> {};

TEST_P(EveryOptimizer, IsDeterministicAndMovesEveryParameter) {
  Tiny a(3), b(3), start(3);
  ModelOptimizer oa(Kind(GetParam()), a.params(), 0.05);
  ModelOptimizer ob(Kind(GetParam()), b.params(), 0.05);
  Train(a, oa, 0, 6);
  Train(b, ob, 0, 6);
  EXPECT_TRUE(torch::equal(a.weight, b.weight));
  EXPECT_TRUE(torch::equal(a.bias, b.bias));
  EXPECT_FALSE(torch::equal(a.weight, start.weight));
  EXPECT_FALSE(torch::equal(a.bias, start.bias));
}

TEST_P(EveryOptimizer, RestoredStateContinuesExactlyAsWithoutTheBreak) {
  Tiny whole(4);
  ModelOptimizer continuous(Kind(GetParam()), whole.params(), 0.05);
  Train(whole, continuous, 0, 8);

  Tiny first(4);
  ModelOptimizer before(Kind(GetParam()), first.params(), 0.05);
  Train(first, before, 0, 5);
  // What a checkpoint keeps: parameters, state fields, step counts.
  Tiny resumed(99);
  ModelOptimizer after(Kind(GetParam()), resumed.params(), 0.05);
  {
    torch::NoGradGuard no_grad;
    resumed.weight.copy_(first.weight);
    resumed.bias.copy_(first.bias);
  }
  for (size_t i = 0; i < 2; ++i) {
    std::vector<StateTensor> saved = before.State(i);
    std::vector<StateTensor> fresh = after.State(i);
    ASSERT_EQ(saved.size(), fresh.size());
    for (size_t f = 0; f < saved.size(); ++f) {
      EXPECT_EQ(saved[f].field, fresh[f].field);
      fresh[f].tensor.copy_(saved[f].tensor.clone());
    }
    after.SetStepCount(i, before.StepCount(i));
    EXPECT_EQ(after.StepCount(i), after.CountsSteps() ? 5 : 0);
  }
  Train(resumed, after, 5, 8);
  EXPECT_TRUE(torch::equal(resumed.weight, whole.weight));
  EXPECT_TRUE(torch::equal(resumed.bias, whole.bias));
}

TEST_P(EveryOptimizer, StateFieldsArePerKind) {
  Tiny model(5);
  ModelOptimizer optimizer(Kind(GetParam()), model.params(), 0.05);
  std::vector<std::string> fields;
  for (const StateTensor& s : optimizer.State(0)) {
    fields.push_back(s.field);
    EXPECT_EQ(s.tensor.sizes(), model.weight.sizes());
    EXPECT_EQ(s.tensor.abs().sum().item<float>(), 0.0f) << "a fresh state is zero";
  }
  const bool moments = GetParam() == OptimizerKind::kAdam || GetParam() == OptimizerKind::kLamb;
  const std::vector<std::string> expected =
      moments ? std::vector<std::string>{"exp_avg", "exp_avg_sq"} : std::vector<std::string>{"momentum"};
  EXPECT_EQ(fields, expected);
  EXPECT_EQ(optimizer.CountsSteps(), moments);
}

INSTANTIATE_TEST_SUITE_P(Kinds, EveryOptimizer,
                         ::testing::Values(OptimizerKind::kAdam, OptimizerKind::kSgd,
                                           OptimizerKind::kLars, OptimizerKind::kLamb),
                         [](const auto& info) { return std::string(OptimizerName(info.param)); });

TEST(ModelOptimizer, SgdMatchesTheHeavyBallByHand) {
  // torch's SGD: buf = 0.9 buf + (g + wd w), w -= lr buf; from a zero buffer.
  torch::Tensor w = T({1, 2}, {2});
  w.mutable_grad() = T({0.5f, 0.5f}, {2});
  OptimizerOptions options;
  options.kind = OptimizerKind::kSgd;
  ModelOptimizer sgd(options, {w}, 0.1);
  sgd.Step(0.1);
  sgd.Step(0.1);
  // buf: 0.5, then 0.95; w: 1 - 0.05 - 0.095.
  ExpectNear(w, {1 - 0.145, 2 - 0.145});
}

}  // namespace
}  // namespace cpptorchrun::worker
