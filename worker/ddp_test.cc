// Tests of DDP on its own: bucket assignment, overlap of the first bucket's
// all-reduce with the backward pass (recording communicator), and gradient
// averaging across two Gloo ranks.
#include "worker/ddp.h"

#include <thread>

#include "gtest/gtest.h"
#include "rendezvous/store.h"
#include "worker/gloo_comm.h"
#include "worker/recording_comm.h"

namespace cpptorchrun::worker {
namespace {

TEST(AssignBuckets, ReverseOrderWithFirstAndLaterCaps) {
  // The seed's MLP: fc1.weight, fc1.bias, fc2.weight, fc2.bias.
  std::vector<int64_t> sizes = {784 * 512 * 4, 512 * 4, 512 * 10 * 4, 10 * 4};
  auto buckets = AssignBuckets(sizes, int64_t{1} << 20, int64_t{25} << 20);
  ASSERT_EQ(buckets.size(), 2u);
  EXPECT_EQ(buckets[0], (std::vector<size_t>{3, 2, 1}));
  EXPECT_EQ(buckets[1], (std::vector<size_t>{0}));
  auto one = AssignBuckets(sizes, int64_t{25} << 20, int64_t{25} << 20);
  ASSERT_EQ(one.size(), 1u);
  EXPECT_EQ(one[0], (std::vector<size_t>{3, 2, 1, 0}));
  // First bucket 8 bytes, later ones 16.
  auto small = AssignBuckets({8, 8, 8, 8}, 8, 16);
  ASSERT_EQ(small.size(), 3u);
  EXPECT_EQ(small[0], (std::vector<size_t>{3}));
  EXPECT_EQ(small[1], (std::vector<size_t>{2, 1}));
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
  // Bucket 0: fc2's weight and bias (20,520 bytes); then fc1.bias; fc1.weight.
  options.first_bucket_cap_bytes = 21000;
  options.bucket_cap_bytes = 21000;
  auto ddp = DistributedDataParallel::Create(params, {}, &comm, options);
  ASSERT_TRUE(ddp.ok()) << ddp.status();
  ASSERT_EQ((*ddp)->buckets().size(), 3u);

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

  ASSERT_GE(log.size(), 5u);
  EXPECT_EQ(log[0], "allreduce 5130");  // fc2: 512*10 + 10
  EXPECT_EQ(log[1], "hidden grad");
  EXPECT_EQ(log.back(), "backward returned");
  ASSERT_FALSE(fc1_weight_grad_at_call.empty());
  EXPECT_FALSE(fc1_weight_grad_at_call[0]) << "fc1.weight already had its gradient";
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
  EXPECT_EQ(calls, 2);  // two buckets with the default caps
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

}  // namespace
}  // namespace cpptorchrun::worker
