// Smoke test: a Gloo all-reduce between two threads over TCP on loopback,
// bootstrapped through Gloo's in-memory HashStore.
#include <array>
#include <memory>
#include <thread>
#include <vector>

#include "gloo/allreduce.h"
#include "gloo/math.h"
#include "gloo/rendezvous/context.h"
#include "gloo/rendezvous/hash_store.h"
#include "gloo/transport/tcp/device.h"
#include "gtest/gtest.h"

TEST(GlooSmoke, TwoThreadAllreduceOverLoopback) {
  constexpr int kWorld = 2;
  gloo::rendezvous::HashStore store;
  std::array<std::vector<float>, kWorld> data;
  std::vector<std::thread> threads;
  for (int rank = 0; rank < kWorld; ++rank) {
    data[rank] = {float(rank + 1), float(10 * (rank + 1))};
    threads.emplace_back([&, rank] {
      gloo::transport::tcp::attr attr;
      attr.hostname = "127.0.0.1";
      auto device = gloo::transport::tcp::CreateDevice(attr);
      auto context = std::make_shared<gloo::rendezvous::Context>(rank, kWorld);
      context->connectFullMesh(store, device);
      gloo::AllreduceOptions opts(context);
      opts.setOutput(data[rank].data(), data[rank].size());
      opts.setReduceFunction(static_cast<void (*)(void*, const void*, const void*, size_t)>(
          &gloo::sum<float>));
      gloo::allreduce(opts);
    });
  }
  for (auto& t : threads) t.join();
  for (int rank = 0; rank < kWorld; ++rank) {
    EXPECT_FLOAT_EQ(data[rank][0], 3.0f);
    EXPECT_FLOAT_EQ(data[rank][1], 30.0f);
  }
}
