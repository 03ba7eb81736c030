// Tests of DDP on its own: bucket assignment, overlap of the first bucket's
// all-reduce with the backward pass (recording communicator), the overlap
// figures on a fake clock, the no-overlap mode, and gradient averaging
// across two Gloo ranks.
#include "worker/training/ddp.h"

#include <optional>
#include <thread>

#include "absl/strings/str_cat.h"
#include "gtest/gtest.h"
#include "rendezvous/store.h"
#include "worker/comm/gloo_comm.h"
#include "worker/comm/recording_comm.h"

namespace cpptorchrun::worker {
namespace {

TEST(AssignBuckets, ReverseOrderWithFirstAndLaterCaps) {
  // The seed's MLP: fc1.weight, fc1.bias, fc2.weight, fc2.bias. As in
  // PyTorch, a bucket closes once it reaches its cap: walking backwards,
  // fc1.weight takes the first bucket past 1 MB, so all four share it.
  std::vector<int64_t> sizes = {784 * 512 * 4, 512 * 4, 512 * 10 * 4, 10 * 4};
  auto buckets = AssignBuckets(sizes, int64_t{1} << 20, int64_t{25} << 20);
  ASSERT_EQ(buckets.size(), 1u);
  EXPECT_EQ(buckets[0], (std::vector<size_t>{3, 2, 1, 0}));
  // A first cap that fc2 alone reaches: fc2 in the first bucket, fc1 after.
  auto split = AssignBuckets(sizes, 20000, int64_t{25} << 20);
  ASSERT_EQ(split.size(), 2u);
  EXPECT_EQ(split[0], (std::vector<size_t>{3, 2}));
  EXPECT_EQ(split[1], (std::vector<size_t>{1, 0}));
  // The cap is a closing threshold, not a ceiling: 8 + 8 < 20 stays open,
  // 24 >= 20 closes.
  auto past = AssignBuckets({8, 8, 8, 8}, 20, 20);
  ASSERT_EQ(past.size(), 2u);
  EXPECT_EQ(past[0], (std::vector<size_t>{3, 2, 1}));
  EXPECT_EQ(past[1], (std::vector<size_t>{0}));
  // First bucket 8 bytes, later ones 16.
  auto small = AssignBuckets({8, 8, 8, 8}, 8, 16);
  ASSERT_EQ(small.size(), 3u);
  EXPECT_EQ(small[0], (std::vector<size_t>{3}));
  EXPECT_EQ(small[1], (std::vector<size_t>{2, 1}));
  EXPECT_EQ(small[2], (std::vector<size_t>{0}));
  // The first cap never exceeds the general one.
  EXPECT_EQ(AssignBuckets({8, 8, 8, 8}, 64, 8).size(), 4u);
}

struct Net {
  torch::nn::Linear fc1{784, 512};
  torch::nn::Linear fc2{512, 10};
  std::vector<torch::Tensor> Params() { return {fc1->weight, fc1->bias, fc2->weight, fc2->bias}; }
};

TEST(Ddp, FirstBucketAllReduceStartsBeforeBackwardEnds) {
  torch::manual_seed(1);
  Net net;
  std::vector<std::string> log;
  std::vector<bool> fc1_weight_grad_at_call;
  std::vector<torch::Tensor> params = net.Params();
  RecordingCommunicator comm([&](const std::string& event) {
    log.push_back(event);
    if (event.rfind("allreduce", 0) == 0) fc1_weight_grad_at_call.push_back(params[0].grad().defined());
  });
  DdpOptions options;
  // Bucket 0: fc2's bias and weight (20,520 bytes reach the 20,000-byte
  // cap); bucket 1: fc1.bias and fc1.weight.
  options.first_bucket_cap_bytes = 20000;
  options.bucket_cap_bytes = 20000;
  auto ddp = DistributedDataParallel::Create(params, {}, &comm, options);
  ASSERT_TRUE(ddp.ok()) << ddp.status();
  ASSERT_EQ((*ddp)->buckets().size(), 2u);

  torch::Tensor x = torch::randn({8, 784});
  torch::Tensor hidden = net.fc1(x);
  // The hidden layer's gradient exists only midway through the backward
  // pass: after fc2's backward, before fc1's.
  hidden.register_hook([&](torch::Tensor) { log.push_back("hidden grad"); });
  torch::Tensor loss = net.fc2(torch::relu(hidden)).pow(2).mean();
  (*ddp)->PrepareBackward(true);
  loss.backward();
  log.push_back("backward returned");
  ASSERT_TRUE((*ddp)->FinishBackward().ok());

  ASSERT_EQ(log.size(), 4u);
  EXPECT_EQ(log[0], "allreduce 5130");  // fc2: 512*10 + 10
  EXPECT_EQ(log[1], "hidden grad");
  EXPECT_EQ(log[2], "allreduce 401920");  // fc1: 784*512 + 512
  EXPECT_EQ(log.back(), "backward returned");
  ASSERT_FALSE(fc1_weight_grad_at_call.empty());
  EXPECT_FALSE(fc1_weight_grad_at_call[0]) << "fc1.weight already had its gradient";
}

// A world of one whose all-reduces "run" on a fake clock: each starts when
// it is launched and lasts `duration` seconds; the log has its launches.
class TimedCommunicator final : public Communicator {
 public:
  TimedCommunicator(const double* clock, double duration, std::vector<std::string>* log)
      : clock_(clock), duration_(duration), log_(log) {}
  int rank() const override { return 0; }
  int world_size() const override { return 1; }
  std::string backend() const override { return "timed"; }
  std::shared_ptr<Work> AllReduceAsync(void*, int64_t count, DType, ReduceOp) override {
    log_->push_back(absl::StrCat("allreduce ", count, " at ", *clock_));
    return std::make_shared<TimedWork>(WorkTimes{*clock_, *clock_ + duration_});
  }
  std::shared_ptr<Work> BroadcastAsync(void*, int64_t, DType, int) override {
    return CompletedWork(absl::OkStatus());
  }
  absl::Status Barrier() override { return absl::OkStatus(); }
  void Abort(const std::string&) override {}

 private:
  class TimedWork final : public Work {
   public:
    explicit TimedWork(WorkTimes times) : times_(times) {}
    absl::Status Wait() override { return absl::OkStatus(); }
    bool IsCompleted() override { return true; }
    std::optional<WorkTimes> Times() override { return times_; }

   private:
    const WorkTimes times_;
  };
  const double* clock_;
  const double duration_;
  std::vector<std::string>* log_;
};

// One backward pass of `net` on the fake clock: it starts at 1.000, the
// hidden layer's gradient (between fc2's backward and fc1's) comes at
// 1.010, and the pass returns at 1.011.
void TimedBackward(Net& net, DistributedDataParallel& ddp, double* clock,
                   std::vector<std::string>* log) {
  torch::Tensor hidden = net.fc1(torch::randn({4, 784}));
  hidden.register_hook([&](torch::Tensor) {
    *clock = 1.010;
    log->push_back("hidden grad");
  });
  torch::Tensor loss = net.fc2(torch::relu(hidden)).pow(2).mean();
  *clock = 1.000;
  ddp.PrepareBackward(true);
  loss.backward();
  *clock = 1.011;
  log->push_back("backward returned");
  ASSERT_TRUE(ddp.FinishBackward().ok());
}

// Two buckets, fc2 first, then fc1 (as above), timed on `clock`.
DdpOptions TwoBucketsOnClock(const double* clock, bool overlap) {
  DdpOptions options;
  options.first_bucket_cap_bytes = 20000;
  options.bucket_cap_bytes = 20000;
  options.overlap = overlap;
  options.now = [clock] { return *clock; };
  return options;
}

TEST(Ddp, CountsTheAllReduceTimeTheBackwardPassHides) {
  torch::manual_seed(3);
  Net net;
  double clock = 0;
  std::vector<std::string> log;
  TimedCommunicator comm(&clock, 0.004, &log);
  auto ddp = DistributedDataParallel::Create(net.Params(), {}, &comm,
                                             TwoBucketsOnClock(&clock, /*overlap=*/true));
  ASSERT_TRUE(ddp.ok()) << ddp.status();
  TimedBackward(net, **ddp, &clock, &log);
  EXPECT_EQ(log, (std::vector<std::string>{"allreduce 5130 at 1", "hidden grad",
                                           "allreduce 401920 at 1.01", "backward returned"}));
  const DdpStats& stats = (*ddp)->stats();
  EXPECT_EQ(stats.steps, 1);
  EXPECT_EQ(stats.timed_steps, 1);
  // fc2's bucket ran 1.000-1.004, wholly before the pass returned; fc1's
  // ran 1.010-1.014, of which 1.010-1.011 before.
  EXPECT_NEAR(stats.allreduce_seconds, 0.008, 1e-9);
  EXPECT_NEAR(stats.hidden_seconds, 0.005, 1e-9);
  EXPECT_NEAR(stats.wait_seconds, 0.0, 1e-12);  // the fake clock stood still in Wait
}

TEST(Ddp, WithoutOverlapEveryAllReduceStartsAfterTheBackwardPass) {
  torch::manual_seed(4);
  Net net;
  double clock = 0;
  std::vector<std::string> log;
  TimedCommunicator comm(&clock, 0.004, &log);
  auto ddp = DistributedDataParallel::Create(net.Params(), {}, &comm,
                                             TwoBucketsOnClock(&clock, /*overlap=*/false));
  ASSERT_TRUE(ddp.ok()) << ddp.status();
  TimedBackward(net, **ddp, &clock, &log);
  EXPECT_EQ(log, (std::vector<std::string>{"hidden grad", "backward returned",
                                           "allreduce 5130 at 1.011", "allreduce 401920 at 1.011"}));
  const DdpStats& stats = (*ddp)->stats();
  EXPECT_NEAR(stats.allreduce_seconds, 0.008, 1e-9);
  EXPECT_EQ(stats.hidden_seconds, 0.0);
}

TEST(Ddp, WithoutOverlapTheGradientsAreTheSame) {
  // Overlap changes when the all-reduces start, not what they reduce.
  std::vector<torch::Tensor> grads[2];
  for (bool overlap : {true, false}) {
    torch::manual_seed(5);
    Net net;
    RecordingCommunicator comm([](const std::string&) {});
    DdpOptions options;
    options.first_bucket_cap_bytes = 20000;
    options.bucket_cap_bytes = 20000;
    options.overlap = overlap;
    auto ddp = DistributedDataParallel::Create(net.Params(), {}, &comm, options);
    ASSERT_TRUE(ddp.ok());
    (*ddp)->PrepareBackward(true);
    net.fc2(torch::relu(net.fc1(torch::randn({4, 784})))).sum().backward();
    ASSERT_TRUE((*ddp)->FinishBackward().ok());
    for (const torch::Tensor& p : net.Params()) grads[overlap].push_back(p.grad().clone());
    // The recording fake's work has no times: no step is timed.
    EXPECT_EQ((*ddp)->stats().steps, 1);
    EXPECT_EQ((*ddp)->stats().timed_steps, 0);
  }
  ASSERT_EQ(grads[0].size(), grads[1].size());
  for (size_t i = 0; i < grads[0].size(); ++i) EXPECT_TRUE(torch::equal(grads[0][i], grads[1][i]));
}

TEST(Ddp, AccumulatingStepsDoNotCommunicate) {
  torch::manual_seed(2);
  Net net;
  int calls = 0;
  RecordingCommunicator comm([&](const std::string& e) { calls += e.rfind("allreduce", 0) == 0; });
  auto ddp = DistributedDataParallel::Create(net.Params(), {}, &comm, DdpOptions());
  ASSERT_TRUE(ddp.ok());
  torch::Tensor x = torch::randn({4, 784});
  (*ddp)->PrepareBackward(false);
  net.fc2(torch::relu(net.fc1(x))).sum().backward();
  ASSERT_TRUE((*ddp)->FinishBackward().ok());
  EXPECT_EQ(calls, 0);
  torch::Tensor first = net.fc2->bias.grad().clone();
  (*ddp)->PrepareBackward(true);
  net.fc2(torch::relu(net.fc1(x))).sum().backward();
  ASSERT_TRUE((*ddp)->FinishBackward().ok());
  EXPECT_EQ(calls, 1);  // one bucket with the default caps
  // Twice the same input: the reduced gradient is the accumulated sum.
  EXPECT_TRUE(torch::allclose(net.fc2->bias.grad(), 2 * first));
}

TEST(Ddp, TwoRanksAverageGradientsAndBroadcastState) {
  std::unique_ptr<rdzv::Store> store = rdzv::NewInMemoryStore();
  std::vector<torch::Tensor> grads(2), weights(2);
  std::vector<std::thread> threads;
  for (int rank = 0; rank < 2; ++rank) {
    threads.emplace_back([&, rank] {
      GlooOptions gloo;
      gloo.store = store.get();
      gloo.rank = rank;
      gloo.world_size = 2;
      auto comm = NewGlooCommunicator(gloo);
      ASSERT_TRUE(comm.ok()) << comm.status();
      torch::nn::Linear layer(3, 2);
      {
        torch::NoGradGuard no_grad;
        layer->weight.fill_(rank + 1.0);
        layer->bias.fill_(rank);
      }
      DdpOptions options;
      options.bucket_cap_bytes = 8;  // one bucket per parameter
      auto ddp = DistributedDataParallel::Create({layer->weight, layer->bias}, {}, comm->get(),
                                                 options);
      ASSERT_TRUE(ddp.ok());
      ASSERT_TRUE((*ddp)->BroadcastState(0).ok());
      weights[rank] = layer->weight.detach().clone();
      (*ddp)->PrepareBackward(true);
      layer(torch::full({1, 3}, rank + 1.0)).sum().backward();
      ASSERT_TRUE((*ddp)->FinishBackward().ok());
      grads[rank] = layer->weight.grad().clone();
    });
  }
  for (auto& t : threads) t.join();
  EXPECT_TRUE(torch::equal(weights[1], torch::ones({2, 3})));  // rank 0's
  // d(sum)/dW = input: 1 on rank 0, 2 on rank 1; average 1.5.
  EXPECT_TRUE(torch::allclose(grads[0], torch::full({2, 3}, 1.5)));
  EXPECT_TRUE(torch::equal(grads[0], grads[1]));
}

TEST(Ddp, TwoRanksThroughEachHookCountTheirBytes) {
  // The same layer and inputs as above; 1.5 is exact at 16 bits, and the
  // 2 x 3 weight is too small for PowerSGD to compress (all uncompressed).
  const std::vector<std::pair<CommHookKind, int64_t>> hooks = {
      {CommHookKind::kAllReduce, 8 * 4}, {CommHookKind::kFp16, 8 * 2},
      {CommHookKind::kBf16, 8 * 2}, {CommHookKind::kPowerSgd, 8 * 4}};
  for (const auto& [kind, bytes] : hooks) {
    std::unique_ptr<rdzv::Store> store = rdzv::NewInMemoryStore();
    std::vector<torch::Tensor> grads(2);
    std::vector<int64_t> sent(2);
    std::vector<std::thread> threads;
    for (int rank = 0; rank < 2; ++rank) {
      threads.emplace_back([&, rank] {
        GlooOptions gloo;
        gloo.store = store.get();
        gloo.rank = rank;
        gloo.world_size = 2;
        auto comm = NewGlooCommunicator(gloo);
        ASSERT_TRUE(comm.ok()) << comm.status();
        torch::nn::Linear layer(3, 2);
        DdpOptions options;
        options.bucket_cap_bytes = 8;  // one bucket per parameter
        options.comm_hook.kind = kind;
        options.comm_hook.powersgd_start_iter = 0;
        auto ddp = DistributedDataParallel::Create({layer->weight, layer->bias}, {},
                                                   comm->get(), options);
        ASSERT_TRUE(ddp.ok());
        (*ddp)->PrepareBackward(true);
        layer(torch::full({1, 3}, rank + 1.0)).sum().backward();
        ASSERT_TRUE((*ddp)->FinishBackward().ok());
        grads[rank] = layer->weight.grad().clone();
        sent[rank] = (*ddp)->stats().bytes_sent;
      });
    }
    for (auto& t : threads) t.join();
    EXPECT_TRUE(torch::equal(grads[0], torch::full({2, 3}, 1.5))) << CommHookName(kind);
    EXPECT_TRUE(torch::equal(grads[0], grads[1]));
    EXPECT_EQ(sent[0], bytes) << CommHookName(kind);
  }
}

TEST(Ddp, BadHookOptionsAreRefused) {
  RecordingCommunicator comm([](const std::string&) {});
  torch::nn::Linear layer(3, 2);
  DdpOptions options;
  options.comm_hook.powersgd_rank = 0;
  auto ddp = DistributedDataParallel::Create({layer->weight}, {}, &comm, options);
  EXPECT_EQ(ddp.status().code(), absl::StatusCode::kInvalidArgument);
}

}  // namespace
}  // namespace cpptorchrun::worker
