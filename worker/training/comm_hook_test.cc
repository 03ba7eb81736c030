// Tests of the communication hooks as tensor functions: the options' rules,
// Gram-Schmidt, and each hook's results, collectives and bytes at world 1
// (recording communicator) and world 2 (two Gloo ranks as threads), with
// exact expected values for small tensors.
#include "worker/training/comm_hook.h"

#include <thread>

#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "rendezvous/store.h"
#include "worker/comm/float16.h"
#include "worker/comm/gloo_comm.h"
#include "worker/comm/recording_comm.h"
#include "worker/training/comm_hook_options.h"

namespace cpptorchrun::worker {
namespace {

using ::testing::ElementsAre;
using ::testing::HasSubstr;

TEST(CommHookOptions, NamesAndBadValues) {
  for (const char* name : {"allreduce", "fp16", "bf16", "powersgd"}) {
    absl::StatusOr<CommHookKind> kind = ParseCommHookKind(name);
    ASSERT_TRUE(kind.ok()) << name;
    EXPECT_STREQ(CommHookName(*kind), name);
  }
  absl::StatusOr<CommHookKind> bad = ParseCommHookKind("fp8");
  EXPECT_THAT(bad.status().message(), HasSubstr("--comm_hook"));
  EXPECT_THAT(bad.status().message(), HasSubstr("fp8"));
  CommHookOptions options;
  EXPECT_TRUE(ValidateCommHookOptions(options).ok());
  options.powersgd_rank = 0;
  EXPECT_THAT(ValidateCommHookOptions(options).message(), HasSubstr("--powersgd_rank"));
  options.powersgd_rank = 1;
  options.powersgd_start_iter = -1;
  EXPECT_THAT(ValidateCommHookOptions(options).message(), HasSubstr("--powersgd_start_iter"));
}

TEST(CommHookOptions, PowerSgdCompressesWhereItPays) {
  EXPECT_TRUE(PowerSgdCompresses(512, 784, 1, 2));  // the seed's fc1.weight
  EXPECT_TRUE(PowerSgdCompresses(10, 512, 1, 2));   // fc2.weight
  EXPECT_FALSE(PowerSgdCompresses(512, 1, 1, 2));   // a bias
  EXPECT_FALSE(PowerSgdCompresses(4, 4, 1, 2));     // 8 x 2 is not below 16
  EXPECT_TRUE(PowerSgdCompresses(6, 6, 1, 2));      // 24 < 36
  EXPECT_FALSE(PowerSgdCompresses(6, 6, 4, 2));     // rank 4: 96 > 36
}

TEST(OrthogonaliseColumns, GramSchmidt) {
  torch::Tensor one = torch::tensor({3.0f, 4.0f}).view({2, 1});
  OrthogonaliseColumns(one);
  EXPECT_TRUE(torch::allclose(one, torch::tensor({0.6f, 0.8f}).view({2, 1})));
  torch::Tensor two = torch::tensor({1.0f, 1.0f, 0.0f, 1.0f}).view({2, 2});
  OrthogonaliseColumns(two);
  EXPECT_TRUE(torch::allclose(two, torch::eye(2)));
  torch::Tensor zero = torch::zeros({3, 1});
  OrthogonaliseColumns(zero);
  EXPECT_TRUE(torch::equal(zero, torch::zeros({3, 1})));  // no NaN
}

// A bucket of a 6 x 6 matrix and a 3-element bias, flat, with its views.
struct TestBucket {
  torch::Tensor flat = torch::zeros({39});
  std::vector<torch::Tensor> grads = {flat.narrow(0, 0, 36).view({6, 6}),
                                      flat.narrow(0, 36, 3)};
};

// One step of `hook` on bucket 0.
absl::Status Step(CommHook& hook, TestBucket& b) {
  hook.Start(0, b.flat, b.grads);
  absl::Status status = hook.Finish(0);
  hook.EndStep();
  return status;
}

// u v^T: rank 1, so PowerSGD at rank 1 recovers it whatever Q is.
torch::Tensor RankOne(float scale) {
  torch::Tensor u = torch::arange(1, 7, torch::kFloat).view({6, 1});
  torch::Tensor v = torch::tensor({1.0f, -1.0f, 2.0f, 0.0f, 0.5f, 3.0f}).view({1, 6});
  return scale * u.mm(v);
}

TEST(CommHook, AllReduceAndSixteenBitAtWorldOne) {
  std::vector<std::string> log;
  RecordingCommunicator comm([&](const std::string& e) { log.push_back(e); });
  torch::Tensor values = torch::tensor({1.0f, 0.1f, -3.0f});
  for (CommHookKind kind : {CommHookKind::kAllReduce, CommHookKind::kFp16, CommHookKind::kBf16}) {
    CommHookOptions options;
    options.kind = kind;
    std::unique_ptr<CommHook> hook = NewCommHook(options, &comm);
    torch::Tensor flat = values.clone();
    hook->Start(0, flat, {flat});
    ASSERT_TRUE(hook->Finish(0).ok());
    const float tenth = kind == CommHookKind::kFp16   ? HalfToFloat(FloatToHalf(0.1f))
                        : kind == CommHookKind::kBf16 ? BFloat16ToFloat(FloatToBFloat16(0.1f))
                                                      : 0.1f;
    EXPECT_EQ(flat[1].item<float>(), tenth) << CommHookName(kind);
    EXPECT_EQ(flat[0].item<float>(), 1.0f);
    EXPECT_EQ(flat[2].item<float>(), -3.0f);
    EXPECT_EQ(hook->bytes_sent(), kind == CommHookKind::kAllReduce ? 12 : 6);
  }
  EXPECT_THAT(log, ElementsAre("allreduce 3", "allreduce 3", "allreduce 3"));
}

TEST(CommHook, PowerSgdStartsPlainThenCompresses) {
  std::vector<std::string> log;
  RecordingCommunicator comm([&](const std::string& e) { log.push_back(e); });
  CommHookOptions options;
  options.kind = CommHookKind::kPowerSgd;
  options.powersgd_start_iter = 1;
  std::unique_ptr<CommHook> hook = NewCommHook(options, &comm);
  TestBucket b;
  b.grads[0].copy_(RankOne(1));
  b.grads[1].copy_(torch::tensor({5.0f, 6.0f, 7.0f}));
  const torch::Tensor input = b.flat.clone();
  ASSERT_TRUE(Step(*hook, b).ok());
  EXPECT_TRUE(torch::equal(b.flat, input));
  EXPECT_THAT(log, ElementsAre("allreduce 39"));
  EXPECT_EQ(hook->bytes_sent(), 39 * 4);
  log.clear();
  ASSERT_TRUE(Step(*hook, b).ok());
  // The bias uncompressed, then P (6 x 1), then Q (6 x 1).
  EXPECT_THAT(log, ElementsAre("allreduce 3", "allreduce 6", "allreduce 6"));
  EXPECT_EQ(hook->bytes_sent(), 39 * 4 + 15 * 4);
  EXPECT_TRUE(torch::allclose(b.flat, input, /*rtol=*/1e-5, /*atol=*/1e-5));
}

TEST(CommHook, PowerSgdErrorFeedbackAndSeededStart) {
  RecordingCommunicator comm([](const std::string&) {});
  CommHookOptions options;
  options.kind = CommHookKind::kPowerSgd;
  options.powersgd_start_iter = 0;
  // Rank 2: rank 1 cannot hold it, so compression leaves an error.
  const torch::Tensor m = RankOne(1) + torch::eye(6) * 4;
  auto first_step = [&](uint64_t seed, torch::Tensor* out) {
    options.seed = seed;
    std::unique_ptr<CommHook> hook = NewCommHook(options, &comm);
    TestBucket b;
    b.grads[0].copy_(m);
    ASSERT_TRUE(Step(*hook, b).ok());
    *out = b.grads[0].clone();
    // A zero gradient next: only the error fed back is there to send.
    b.flat.zero_();
    ASSERT_TRUE(Step(*hook, b).ok());
    const double residual = (m - *out).norm().item<double>();
    EXPECT_GT(residual, 0.1);
    EXPECT_GT(b.grads[0].norm().item<double>(), 0.1);
    EXPECT_LT((m - *out - b.grads[0]).norm().item<double>(), residual);
  };
  torch::Tensor a, again, other;
  first_step(7, &a);
  first_step(7, &again);
  first_step(8, &other);
  EXPECT_TRUE(torch::equal(a, again));  // the same seed, the same first Q
  EXPECT_FALSE(torch::allclose(a, other));
}

// Runs `body(rank, comm)` on two Gloo ranks (threads).
template <typename Body>
void TwoRanks(Body body) {
  std::unique_ptr<rdzv::Store> store = rdzv::NewInMemoryStore();
  std::vector<std::thread> threads;
  for (int rank = 0; rank < 2; ++rank) {
    threads.emplace_back([&, rank] {
      GlooOptions gloo;
      gloo.store = store.get();
      gloo.rank = rank;
      gloo.world_size = 2;
      auto comm = NewGlooCommunicator(gloo);
      ASSERT_TRUE(comm.ok()) << comm.status();
      body(rank, **comm);
    });
  }
  for (auto& t : threads) t.join();
}

TEST(CommHook, Fp16AtWorldTwoDividesBeforeTheSum) {
  std::vector<torch::Tensor> out(2);
  TwoRanks([&](int rank, Communicator& comm) {
    CommHookOptions options;
    options.kind = CommHookKind::kFp16;
    std::unique_ptr<CommHook> hook = NewCommHook(options, &comm);
    torch::Tensor flat = rank == 0 ? torch::tensor({1.0f, 0.1f, 70000.0f})
                                   : torch::tensor({3.0f, 0.3f, 60000.0f});
    hook->Start(0, flat, {flat});
    ASSERT_TRUE(hook->Finish(0).ok());
    out[rank] = flat;
    EXPECT_EQ(hook->bytes_sent(), 6);
  });
  auto half = [](float x) { return HalfToFloat(FloatToHalf(x)); };
  EXPECT_EQ(out[0][0].item<float>(), 2.0f);
  EXPECT_EQ(out[0][1].item<float>(), half(half(0.1f) / 2 + half(0.3f) / 2));
  // 70,000 is infinite in fp16 before any division: torch's order (cast,
  // then divide) keeps that; 60,000 / 2 + inf stays inf.
  EXPECT_TRUE(std::isinf(out[0][2].item<float>()));
  EXPECT_TRUE(torch::equal(out[0], out[1]));
}

TEST(CommHook, PowerSgdAtWorldTwoAveragesAndFeedsBackErrors) {
  std::vector<torch::Tensor> first(2), second(2);
  TwoRanks([&](int rank, Communicator& comm) {
    CommHookOptions options;
    options.kind = CommHookKind::kPowerSgd;
    options.powersgd_start_iter = 0;
    std::unique_ptr<CommHook> hook = NewCommHook(options, &comm);
    TestBucket b;
    auto fill = [&] {
      b.grads[0].copy_(RankOne(rank == 0 ? 1 : 3));
      b.grads[1].copy_(rank == 0 ? torch::tensor({1.0f, 2.0f, 3.0f})
                                 : torch::tensor({3.0f, 4.0f, 5.0f}));
    };
    fill();
    ASSERT_TRUE(Step(*hook, b).ok());
    first[rank] = b.flat.clone();
    // Errors now: rank 0 -(u v^T, 1), rank 1 +(u v^T, 1); added to the same
    // gradients they make inputs 0 and 4 u v^T, bias 0,1,2 and 4,5,6: the
    // same average again, the errors doubled.
    fill();
    ASSERT_TRUE(Step(*hook, b).ok());
    second[rank] = b.flat.clone();
    EXPECT_EQ(hook->bytes_sent(), 2 * (3 + 6 + 6) * 4);
    // A third step with zero gradients sends only the errors, which cancel.
    b.flat.zero_();
    ASSERT_TRUE(Step(*hook, b).ok());
    EXPECT_LT(b.flat.abs().max().item<float>(), 1e-4);
  });
  TestBucket expected;
  expected.grads[0].copy_(RankOne(2));
  expected.grads[1].copy_(torch::tensor({2.0f, 3.0f, 4.0f}));
  for (int rank = 0; rank < 2; ++rank) {
    EXPECT_TRUE(torch::allclose(first[rank], expected.flat, 1e-5, 1e-4)) << rank;
    EXPECT_TRUE(torch::allclose(second[rank], expected.flat, 1e-5, 1e-4)) << rank;
  }
  EXPECT_TRUE(torch::equal(first[0], first[1]));
}

}  // namespace
}  // namespace cpptorchrun::worker
