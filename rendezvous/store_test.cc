// The Store contract (waiting reads, counters, compare-and-set, deletion,
// timeouts), run on every implementation: the in-memory store, the gRPC
// store over a loopback rendezvous server, and the etcd store (on the
// in-memory Kv, and on a real 3-member etcd cluster on loopback ports).
#include <optional>
#include <string>
#include <thread>
#include <utility>
#include <vector>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "absl/synchronization/notification.h"
#include "absl/time/time.h"
#include "gtest/gtest.h"
#include "base/clock.h"
#include "rendezvous/client.h"
#include "rendezvous/etcd/etcd_cluster.h"
#include "rendezvous/etcd/etcd_kv.h"
#include "rendezvous/etcd/in_memory_kv.h"
#include "rendezvous/etcd/kv_store.h"
#include "rendezvous/server.h"
#include "rendezvous/store.h"

namespace cpptorchrun::rdzv {
namespace {

enum class Backend { kInMemory, kGrpc, kEtcdInMemory, kEtcd };

class StoreTest : public ::testing::TestWithParam<Backend> {
 protected:
  void SetUp() override {
    if (GetParam() == Backend::kInMemory) {
      store_ = NewInMemoryStore();
      return;
    }
    const auto* info = ::testing::UnitTest::GetInstance()->current_test_info();
    std::string scope = absl::StrCat("/store-test/", info->name(), "/");
    if (GetParam() == Backend::kEtcdInMemory) {
      kv_ = etcd::NewInMemoryKv(&clock_);
      store_ = etcd::NewKvStore(kv_.get(), scope);
      return;
    }
    if (GetParam() == Backend::kEtcd) {
      std::string why_not;
      etcd::EtcdCluster* cluster = etcd::EtcdCluster::Shared(&why_not);
      if (cluster == nullptr) GTEST_SKIP() << "no etcd cluster: " << why_not;
      etcd::EtcdOptions options;
      options.endpoints = cluster->Endpoints();
      auto kv = etcd::NewEtcdKv(options);
      ASSERT_TRUE(kv.ok()) << kv.status();
      kv_ = std::move(*kv);
      ASSERT_TRUE(kv_->DeletePrefix(scope).ok());
      store_ = etcd::NewKvStore(kv_.get(), scope);
      return;
    }
    auto server = RendezvousServer::Start(ServerOptions());
    ASSERT_TRUE(server.ok()) << server.status();
    server_ = std::move(*server);
    ClientOptions options;
    options.endpoint = server_->endpoint();
    client_ = NewGrpcRendezvousClient(options);
    store_ = client_->OpenStore("store-test", 1);
  }

  base::FakeClock clock_;
  std::unique_ptr<etcd::Kv> kv_;
  std::unique_ptr<RendezvousServer> server_;
  std::unique_ptr<RendezvousClient> client_;
  std::unique_ptr<Store> store_;
};

TEST_P(StoreTest, SetThenGetAnswersAtOnce) {
  Store* store = store_.get();
  ASSERT_TRUE(store->Set("k", "v").ok());
  auto value = store->Get("k", absl::ZeroDuration());
  ASSERT_TRUE(value.ok()) << value.status();
  EXPECT_EQ(*value, "v");
}

TEST_P(StoreTest, GetWaitsForALaterSetFromAnotherThread) {
  Store* store = store_.get();
  absl::Notification reader_started;
  absl::StatusOr<std::string> got = absl::UnknownError("not run");
  std::thread reader([&] {
    reader_started.Notify();
    got = store->Get("nccl_id", absl::Seconds(30));
  });
  reader_started.WaitForNotification();
  ASSERT_TRUE(store->Set("nccl_id", "abc").ok());
  reader.join();
  ASSERT_TRUE(got.ok()) << got.status();
  EXPECT_EQ(*got, "abc");
}

TEST_P(StoreTest, GetOfAbsentKeyWithZeroTimeoutIsNotFound) {
  Store* store = store_.get();
  auto value = store->Get("missing", absl::ZeroDuration());
  EXPECT_EQ(value.status().code(), absl::StatusCode::kNotFound);
  EXPECT_NE(value.status().message().find("missing"), std::string::npos);
}

TEST_P(StoreTest, GetTimesOutWithDeadlineExceeded) {
  Store* store = store_.get();
  auto value = store->Get("missing", absl::Milliseconds(20));
  EXPECT_EQ(value.status().code(), absl::StatusCode::kDeadlineExceeded);
}

TEST_P(StoreTest, AddCountsFromZeroAndRejectsNonIntegers) {
  Store* store = store_.get();
  auto first = store->Add("counter", 3);
  ASSERT_TRUE(first.ok());
  EXPECT_EQ(*first, 3);
  auto second = store->Add("counter", -5);
  ASSERT_TRUE(second.ok());
  EXPECT_EQ(*second, -2);
  EXPECT_EQ(*store->Get("counter", absl::ZeroDuration()), "-2");
  ASSERT_TRUE(store->Set("text", "abc").ok());
  EXPECT_EQ(store->Add("text", 1).status().code(), absl::StatusCode::kFailedPrecondition);
}

TEST_P(StoreTest, AddFromManyThreadsIsAtomic) {
  Store* store = store_.get();
  std::vector<std::thread> threads;
  for (int t = 0; t < 8; ++t) {
    threads.emplace_back([&] {
      for (int i = 0; i < 100; ++i) ASSERT_TRUE(store->Add("n", 1).ok());
    });
  }
  for (auto& thread : threads) thread.join();
  EXPECT_EQ(*store->Get("n", absl::ZeroDuration()), "800");
}

TEST_P(StoreTest, CompareSetWhenAbsent) {
  Store* store = store_.get();
  bool swapped = false;
  auto value = store->CompareSet("k", std::nullopt, "first", &swapped);
  ASSERT_TRUE(value.ok());
  EXPECT_TRUE(swapped);
  EXPECT_EQ(*value, "first");
  value = store->CompareSet("k", std::nullopt, "second", &swapped);
  ASSERT_TRUE(value.ok());
  EXPECT_FALSE(swapped);
  EXPECT_EQ(*value, "first");
}

TEST_P(StoreTest, CompareSetWhenPresent) {
  Store* store = store_.get();
  ASSERT_TRUE(store->Set("k", "a").ok());
  bool swapped = true;
  auto value = store->CompareSet("k", std::string("b"), "c", &swapped);
  ASSERT_TRUE(value.ok());
  EXPECT_FALSE(swapped);
  EXPECT_EQ(*value, "a");
  value = store->CompareSet("k", std::string("a"), "c", &swapped);
  ASSERT_TRUE(value.ok());
  EXPECT_TRUE(swapped);
  EXPECT_EQ(*value, "c");
  // Expecting a value of an absent key never swaps.
  value = store->CompareSet("other", std::string("x"), "y", &swapped);
  ASSERT_TRUE(value.ok());
  EXPECT_FALSE(swapped);
  EXPECT_EQ(store->Get("other", absl::ZeroDuration()).status().code(),
            absl::StatusCode::kNotFound);
}

TEST_P(StoreTest, DeleteSaysWhetherTheKeyExisted) {
  Store* store = store_.get();
  ASSERT_TRUE(store->Set("k", "v").ok());
  EXPECT_TRUE(*store->Delete("k"));
  EXPECT_FALSE(*store->Delete("k"));
  EXPECT_EQ(store->Get("k", absl::ZeroDuration()).status().code(), absl::StatusCode::kNotFound);
}

TEST_P(StoreTest, MultiGetWaitsForEveryKey) {
  Store* store = store_.get();
  ASSERT_TRUE(store->Set("a", "1").ok());
  absl::Notification started;
  absl::StatusOr<std::vector<std::string>> got = absl::UnknownError("not run");
  std::thread reader([&] {
    started.Notify();
    got = store->MultiGet({"a", "b", "c"}, absl::Seconds(30));
  });
  started.WaitForNotification();
  ASSERT_TRUE(store->Set("b", "2").ok());
  ASSERT_TRUE(store->MultiSet({{"c", "3"}, {"d", "4"}}).ok());
  reader.join();
  ASSERT_TRUE(got.ok()) << got.status();
  EXPECT_EQ(*got, (std::vector<std::string>{"1", "2", "3"}));
}

TEST_P(StoreTest, MultiGetTimesOutNamingAMissingKey) {
  Store* store = store_.get();
  ASSERT_TRUE(store->Set("a", "1").ok());
  auto got = store->MultiGet({"a", "zz"}, absl::Milliseconds(20));
  EXPECT_EQ(got.status().code(), absl::StatusCode::kDeadlineExceeded);
  EXPECT_NE(got.status().message().find("zz"), std::string::npos);
}

// Two ranks each set their own key and then wait for both, started
// together each round (fresh keys): both reads see both values.
TEST_P(StoreTest, RanksSettingTheirOwnKeyThenMultiGetBothSeeBoth) {
  constexpr int kRounds = 20;
  Store* store = store_.get();
  std::vector<absl::StatusOr<std::vector<std::string>>> got[2];
  for (int round = 0; round < kRounds; ++round) {
    const std::vector<std::string> keys = {absl::StrCat("round", round, "/0"),
                                           absl::StrCat("round", round, "/1")};
    absl::Notification go;
    auto rank = [&](int me) {
      go.WaitForNotificationWithTimeout(absl::Seconds(30));
      absl::Status set = store->Set(keys[me], absl::StrCat("v", me));
      if (!set.ok()) {
        got[me].push_back(set);
        return;
      }
      got[me].push_back(store->MultiGet(keys, absl::Seconds(5)));
    };
    std::thread rank0(rank, 0);
    std::thread rank1(rank, 1);
    go.Notify();
    rank0.join();
    rank1.join();
  }
  for (int me = 0; me < 2; ++me) {
    ASSERT_EQ(got[me].size(), static_cast<size_t>(kRounds));
    for (int round = 0; round < kRounds; ++round) {
      ASSERT_TRUE(got[me][round].ok()) << "rank " << me << " round " << round << ": "
                                       << got[me][round].status();
      EXPECT_EQ(*got[me][round], (std::vector<std::string>{"v0", "v1"}));
    }
  }
}

INSTANTIATE_TEST_SUITE_P(Backends, StoreTest,
                         ::testing::Values(Backend::kInMemory, Backend::kGrpc,
                                           Backend::kEtcdInMemory, Backend::kEtcd),
                         [](const ::testing::TestParamInfo<Backend>& info) {
                           switch (info.param) {
                             case Backend::kInMemory: return "InMemory";
                             case Backend::kGrpc: return "Grpc";
                             case Backend::kEtcdInMemory: return "EtcdOnInMemoryKv";
                             case Backend::kEtcd: return "Etcd";
                           }
                           return "Unknown";
                         });

}  // namespace
}  // namespace cpptorchrun::rdzv
