// The Kv contract (kv.h), every case on both backends: the in-memory fake on
// a fake clock, and a real 3-member etcd cluster on loopback ports started
// here (EtcdCluster). Then what only the real client has: endpoint parsing,
// failover when a member or the leader is killed, and a cluster that is
// down answered with an error naming every member.
#include <sys/stat.h>

#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/synchronization/notification.h"
#include "absl/time/clock.h"
#include "base/clock.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "rendezvous/etcd/etcd_cluster.h"
#include "rendezvous/etcd/etcd_kv.h"
#include "rendezvous/etcd/in_memory_kv.h"

namespace cpptorchrun::rdzv::etcd {
namespace {

using ::testing::HasSubstr;

std::string TestDir() {
  const char* t = getenv("TEST_TMPDIR");
  return t != nullptr ? t : "/tmp";
}

enum class Backend { kInMemory, kEtcd };

class KvContractTest : public ::testing::TestWithParam<Backend> {
 protected:
  void SetUp() override {
    const auto* info = ::testing::UnitTest::GetInstance()->current_test_info();
    std::string name = info->name();  // "Case/Backend"
    for (char& c : name) {
      if (c == '/') c = '_';
    }
    prefix_ = absl::StrCat("/contract/", name, "/");
    if (GetParam() == Backend::kInMemory) {
      auto mem = NewInMemoryKv(&clock_);
      mem_ = mem.get();
      kv_ = std::move(mem);
      return;
    }
    std::string why_not;
    EtcdCluster* cluster = EtcdCluster::Shared(&why_not);
    if (cluster == nullptr) GTEST_SKIP() << "no etcd cluster: " << why_not;
    EtcdOptions options;
    options.endpoints = cluster->Endpoints();
    auto kv = NewEtcdKv(options);
    ASSERT_TRUE(kv.ok()) << kv.status();
    kv_ = std::move(*kv);
    ASSERT_TRUE(kv_->DeletePrefix(prefix_).ok());
  }

  std::string K(const std::string& name) const { return prefix_ + name; }

  // Lets `d` pass for leases: the fake clock moves; a real cluster's time
  // passes on its own (the caller then waits on a Watch, never a sleep).
  void PassTime(absl::Duration d) {
    if (mem_ != nullptr) {
      clock_.Advance(d);
      mem_->ExpireLeases();
    }
  }

  base::FakeClock clock_;
  InMemoryKv* mem_ = nullptr;
  std::unique_ptr<Kv> kv_;
  std::string prefix_;
};

TEST_P(KvContractTest, PutThenGetCarriesRevisionsAndVersion) {
  absl::StatusOr<int64_t> r1 = kv_->Put(K("a"), "one");
  ASSERT_TRUE(r1.ok()) << r1.status();
  absl::StatusOr<int64_t> r2 = kv_->Put(K("a"), "two");
  ASSERT_TRUE(r2.ok()) << r2.status();
  EXPECT_EQ(*r2, *r1 + 1);
  absl::StatusOr<RangeResult> got = kv_->Get(K("a"));
  ASSERT_TRUE(got.ok()) << got.status();
  ASSERT_EQ(got->kvs.size(), 1u);
  EXPECT_EQ(got->kvs[0].key, K("a"));
  EXPECT_EQ(got->kvs[0].value, "two");
  EXPECT_EQ(got->kvs[0].create_revision, *r1);
  EXPECT_EQ(got->kvs[0].mod_revision, *r2);
  EXPECT_EQ(got->kvs[0].version, 2);
  EXPECT_GE(got->revision, *r2);
  absl::StatusOr<RangeResult> none = kv_->Get(K("absent"));
  ASSERT_TRUE(none.ok());
  EXPECT_TRUE(none->kvs.empty());
}

TEST_P(KvContractTest, GetPrefixIsSortedAndStaysUnderThePrefix) {
  ASSERT_TRUE(kv_->Put(K("dir/b"), "2").ok());
  ASSERT_TRUE(kv_->Put(K("dir/a"), "1").ok());
  ASSERT_TRUE(kv_->Put(K("dirx"), "sibling").ok());
  ASSERT_TRUE(kv_->Put(K("dir0"), "sibling").ok());
  absl::StatusOr<RangeResult> got = kv_->GetPrefix(K("dir/"));
  ASSERT_TRUE(got.ok()) << got.status();
  ASSERT_EQ(got->kvs.size(), 2u);
  EXPECT_EQ(got->kvs[0].key, K("dir/a"));
  EXPECT_EQ(got->kvs[1].key, K("dir/b"));
}

TEST_P(KvContractTest, TxnOnAbsentKeyCreatesOnceAndTheLoserReadsTheWinner) {
  const std::string key = K("leader");
  auto claim = [&](const std::string& who) {
    return kv_->Txn({Compare::Absent(key)}, {Op::Put(key, who)}, {Op::Get(key)});
  };
  absl::StatusOr<TxnResult> first = claim("node-a");
  ASSERT_TRUE(first.ok()) << first.status();
  EXPECT_TRUE(first->succeeded);
  EXPECT_TRUE(first->reads.empty());
  absl::StatusOr<TxnResult> second = claim("node-b");
  ASSERT_TRUE(second.ok()) << second.status();
  EXPECT_FALSE(second->succeeded);
  ASSERT_EQ(second->reads.size(), 1u);
  ASSERT_EQ(second->reads[0].kvs.size(), 1u);
  EXPECT_EQ(second->reads[0].kvs[0].value, "node-a");
  EXPECT_EQ(second->revision, first->revision);  // the failed branch wrote nothing
}

TEST_P(KvContractTest, TxnOnModRevisionRefusesAStaleWriter) {
  const std::string key = K("state");
  absl::StatusOr<int64_t> rev = kv_->Put(key, "v1");
  ASSERT_TRUE(rev.ok());
  absl::StatusOr<TxnResult> fresh = kv_->Txn({Compare::ModRevisionIs(key, *rev)}, {Op::Put(key, "v2")}, {});
  ASSERT_TRUE(fresh.ok());
  EXPECT_TRUE(fresh->succeeded);
  absl::StatusOr<TxnResult> stale = kv_->Txn({Compare::ModRevisionIs(key, *rev)}, {Op::Put(key, "v3")}, {});
  ASSERT_TRUE(stale.ok());
  EXPECT_FALSE(stale->succeeded);
  absl::StatusOr<TxnResult> by_value =
      kv_->Txn({Compare::ValueIs(key, "v2")}, {Op::Put(key, "v4")}, {});
  ASSERT_TRUE(by_value.ok());
  EXPECT_TRUE(by_value->succeeded);
  // A value compared on an absent key fails, as in etcd.
  absl::StatusOr<TxnResult> on_absent = kv_->Txn({Compare::ValueIs(K("none"), "")}, {Op::Put(key, "x")}, {});
  ASSERT_TRUE(on_absent.ok());
  EXPECT_FALSE(on_absent->succeeded);
  absl::StatusOr<RangeResult> got = kv_->Get(key);
  ASSERT_TRUE(got.ok());
  EXPECT_EQ(got->kvs.at(0).value, "v4");
}

TEST_P(KvContractTest, TxnWritesShareOneRevision) {
  absl::StatusOr<TxnResult> t = kv_->Txn(
      {}, {Op::Put(K("x"), "1"), Op::Put(K("y"), "2"), Op::GetPrefix(K(""))}, {});
  ASSERT_TRUE(t.ok()) << t.status();
  ASSERT_TRUE(t->succeeded);
  ASSERT_EQ(t->reads.size(), 1u);
  ASSERT_EQ(t->reads[0].kvs.size(), 2u);
  EXPECT_EQ(t->reads[0].kvs[0].mod_revision, t->revision);
  EXPECT_EQ(t->reads[0].kvs[1].mod_revision, t->revision);
}

TEST_P(KvContractTest, DeletePrefixCountsAndRemoves) {
  ASSERT_TRUE(kv_->Put(K("round/1/a"), "a").ok());
  ASSERT_TRUE(kv_->Put(K("round/1/b"), "b").ok());
  ASSERT_TRUE(kv_->Put(K("round/2/a"), "a").ok());
  absl::StatusOr<int64_t> n = kv_->DeletePrefix(K("round/1/"));
  ASSERT_TRUE(n.ok()) << n.status();
  EXPECT_EQ(*n, 2);
  absl::StatusOr<RangeResult> left = kv_->GetPrefix(K("round/"));
  ASSERT_TRUE(left.ok());
  ASSERT_EQ(left->kvs.size(), 1u);
  EXPECT_EQ(left->kvs[0].key, K("round/2/a"));
  absl::StatusOr<int64_t> again = kv_->DeletePrefix(K("round/1/"));
  ASSERT_TRUE(again.ok());
  EXPECT_EQ(*again, 0);
}

TEST_P(KvContractTest, RevokedLeaseTakesItsKeysAndCannotBeRenewed) {
  absl::StatusOr<int64_t> lease = kv_->LeaseGrant(absl::Seconds(30));
  ASSERT_TRUE(lease.ok()) << lease.status();
  ASSERT_TRUE(kv_->Put(K("alive/node-a"), "1", *lease).ok());
  ASSERT_TRUE(kv_->Put(K("alive/keep"), "1").ok());
  absl::StatusOr<RangeResult> got = kv_->Get(K("alive/node-a"));
  ASSERT_TRUE(got.ok());
  EXPECT_EQ(got->kvs.at(0).lease, *lease);
  absl::StatusOr<absl::Duration> ttl = kv_->LeaseKeepAlive(*lease);
  ASSERT_TRUE(ttl.ok()) << ttl.status();
  EXPECT_EQ(*ttl, absl::Seconds(30));
  ASSERT_TRUE(kv_->LeaseRevoke(*lease).ok());
  absl::StatusOr<RangeResult> after = kv_->GetPrefix(K("alive/"));
  ASSERT_TRUE(after.ok());
  ASSERT_EQ(after->kvs.size(), 1u);
  EXPECT_EQ(after->kvs[0].key, K("alive/keep"));
  EXPECT_EQ(kv_->LeaseKeepAlive(*lease).status().code(), absl::StatusCode::kNotFound);
  EXPECT_EQ(kv_->LeaseRevoke(*lease).code(), absl::StatusCode::kNotFound);
  EXPECT_EQ(kv_->Put(K("alive/late"), "1", *lease).status().code(), absl::StatusCode::kNotFound);
}

TEST_P(KvContractTest, AnExpiredLeaseDeletesItsKeysAndTheWatchSeesIt) {
  absl::StatusOr<int64_t> lease = kv_->LeaseGrant(absl::Seconds(1));
  ASSERT_TRUE(lease.ok()) << lease.status();
  absl::StatusOr<int64_t> rev = kv_->Put(K("alive/node-b"), "1", *lease);
  ASSERT_TRUE(rev.ok()) << rev.status();
  PassTime(absl::Seconds(10));
  absl::StatusOr<WatchResult> w = kv_->Watch(K("alive/"), true, *rev + 1, absl::Seconds(20));
  ASSERT_TRUE(w.ok()) << w.status();
  ASSERT_EQ(w->events.size(), 1u);
  EXPECT_EQ(w->events[0].type, WatchEvent::Type::kDelete);
  EXPECT_EQ(w->events[0].kv.key, K("alive/node-b"));
  EXPECT_GT(w->events[0].kv.mod_revision, *rev);
  EXPECT_EQ(kv_->LeaseKeepAlive(*lease).status().code(), absl::StatusCode::kNotFound);
}

TEST_P(KvContractTest, WatchAnswersChangesAlreadyMadeAtOnce) {
  absl::StatusOr<int64_t> r1 = kv_->Put(K("w"), "1");
  ASSERT_TRUE(r1.ok());
  ASSERT_TRUE(kv_->Put(K("w"), "2").ok());
  absl::StatusOr<WatchResult> w = kv_->Watch(K("w"), false, *r1, absl::Seconds(20));
  ASSERT_TRUE(w.ok()) << w.status();
  ASSERT_EQ(w->events.size(), 2u);
  EXPECT_EQ(w->events[0].kv.value, "1");
  EXPECT_EQ(w->events[1].kv.value, "2");
  EXPECT_EQ(w->events[1].type, WatchEvent::Type::kPut);
}

TEST_P(KvContractTest, WatchWakesOnALaterChangeUnderItsPrefixOnly) {
  absl::StatusOr<RangeResult> now = kv_->Get(K("none"));
  ASSERT_TRUE(now.ok());
  absl::StatusOr<WatchResult> w;
  std::thread watcher([&] { w = kv_->Watch(K("round/"), true, now->revision + 1, absl::Seconds(30)); });
  ASSERT_TRUE(kv_->Put(K("elsewhere"), "x").ok());
  ASSERT_TRUE(kv_->Put(K("round/end"), "3").ok());
  watcher.join();
  ASSERT_TRUE(w.ok()) << w.status();
  ASSERT_GE(w->events.size(), 1u);
  for (const WatchEvent& e : w->events) EXPECT_EQ(e.kv.key, K("round/end"));
}

TEST_P(KvContractTest, WatchWithNoChangeTimesOutEmptyWithTheRevision) {
  absl::StatusOr<int64_t> rev = kv_->Put(K("quiet"), "1");
  ASSERT_TRUE(rev.ok());
  absl::StatusOr<WatchResult> w = kv_->Watch(K("quiet"), false, *rev + 1, absl::Milliseconds(300));
  ASSERT_TRUE(w.ok()) << w.status();
  EXPECT_TRUE(w->events.empty());
  EXPECT_GE(w->revision, *rev);
}

TEST_P(KvContractTest, CancelEndsABlockedWatchAndLaterCalls) {
  absl::StatusOr<int64_t> rev = kv_->Put(K("c"), "1");
  ASSERT_TRUE(rev.ok());
  absl::StatusOr<WatchResult> w;
  absl::Notification started;
  std::thread watcher([&] {
    started.Notify();
    w = kv_->Watch(K("c"), false, *rev + 1, absl::Seconds(60));
  });
  started.WaitForNotification();
  // Cancel may come before or during the Watch: both end it CANCELLED.
  kv_->Cancel();
  watcher.join();
  EXPECT_EQ(w.status().code(), absl::StatusCode::kCancelled) << w.status();
  EXPECT_EQ(kv_->Get(K("c")).status().code(), absl::StatusCode::kCancelled);
}

INSTANTIATE_TEST_SUITE_P(Backends, KvContractTest,
                         ::testing::Values(Backend::kInMemory, Backend::kEtcd),
                         [](const ::testing::TestParamInfo<Backend>& info) {
                           return info.param == Backend::kInMemory ? "InMemory" : "Etcd";
                         });

TEST(InMemoryKvTest, AWatchFromACompactedRevisionIsOutOfRange) {
  base::FakeClock clock;
  auto kv = NewInMemoryKv(&clock);
  absl::StatusOr<int64_t> r1 = kv->Put("/a", "1");
  ASSERT_TRUE(kv->Put("/a", "2").ok());
  kv->Compact(*r1 + 1);
  EXPECT_EQ(kv->Watch("/a", false, *r1, absl::Seconds(1)).status().code(), absl::StatusCode::kOutOfRange);
  absl::StatusOr<WatchResult> w = kv->Watch("/a", false, *r1 + 1, absl::Seconds(1));
  ASSERT_TRUE(w.ok()) << w.status();
  EXPECT_EQ(w->events.size(), 1u);
}

TEST(EtcdEndpointsTest, ParsesAListAndNamesTheBadEntry) {
  absl::StatusOr<std::vector<std::string>> ok = ParseEtcdEndpoints(" 10.0.0.1:2379, etcd-b ,[::1]:23790");
  ASSERT_TRUE(ok.ok()) << ok.status();
  EXPECT_THAT(*ok, ::testing::ElementsAre("10.0.0.1:2379", "etcd-b:2379", "[::1]:23790"));
  EXPECT_THAT(ParseEtcdEndpoints("a:1,,b:2").status().message(), HasSubstr("empty entry"));
  EXPECT_THAT(ParseEtcdEndpoints("a:1,b:99999").status().message(), HasSubstr("\"b:99999\""));
  EXPECT_THAT(ParseEtcdEndpoints("a:0").status().message(), HasSubstr("port 0"));
  EXPECT_THAT(ParseEtcdEndpoints("a:1,a:1").status().message(), HasSubstr("listed twice"));
  EXPECT_EQ(NewEtcdKv(EtcdOptions{}).status().code(), absl::StatusCode::kInvalidArgument);
}

TEST(EtcdKvTest, AClusterThatIsDownIsUnavailableNamingEveryMember) {
  // Loopback ports 1 and 2: privileged, and nothing here listens on them
  // (never another host).
  if (EtcdCluster::Binary().empty()) GTEST_SKIP() << "etcd is not installed";
  EtcdOptions options;
  options.endpoints = {"127.0.0.1:1", "127.0.0.1:2"};
  options.call_timeout = absl::Seconds(2);
  auto kv = NewEtcdKv(options);
  ASSERT_TRUE(kv.ok());
  absl::StatusOr<RangeResult> got = (*kv)->Get("/x");
  EXPECT_EQ(got.status().code(), absl::StatusCode::kUnavailable);
  EXPECT_THAT(got.status().message(), HasSubstr("127.0.0.1:1"));
  EXPECT_THAT(got.status().message(), HasSubstr("127.0.0.1:2"));
}

// Its own cluster: members die here.
TEST(EtcdKvTest, KeepsServingWhenAMemberAndThenTheLeaderAreKilled) {
  if (EtcdCluster::Binary().empty()) GTEST_SKIP() << "etcd is not installed";
  std::string dir = TestDir() + "/failover-etcd";
  mkdir(dir.c_str(), 0755);
  absl::StatusOr<std::unique_ptr<EtcdCluster>> cluster = EtcdCluster::Start(3, dir);
  ASSERT_TRUE(cluster.ok()) << cluster.status();
  EtcdOptions options;
  options.endpoints = (*cluster)->Endpoints();
  auto kv = NewEtcdKv(options);
  ASSERT_TRUE(kv.ok());
  absl::StatusOr<int64_t> lease = (*kv)->LeaseGrant(absl::Seconds(30));
  ASSERT_TRUE(lease.ok()) << lease.status();
  ASSERT_TRUE((*kv)->Put("/f/node", "a", *lease).ok());

  // The first member (the one the client uses first) goes.
  ASSERT_TRUE((*cluster)->Kill(0).ok());
  // (If member 0 led, the write waits for, or moves on to, the new leader.)
  absl::StatusOr<int64_t> r = (*kv)->Put("/f/after-member", "1");
  if (r.status().code() == absl::StatusCode::kDeadlineExceeded) r = (*kv)->Put("/f/after-member", "1");
  ASSERT_TRUE(r.ok()) << r.status();
  ASSERT_TRUE((*kv)->LeaseKeepAlive(*lease).ok());

  // Then, with member 0 back, the leader goes.
  ASSERT_TRUE((*cluster)->Restart(0).ok());
  absl::StatusOr<int> leader = (*cluster)->Leader();
  ASSERT_TRUE(leader.ok()) << leader.status();
  ASSERT_TRUE((*cluster)->Kill(*leader).ok());
  // A write the dead leader was to commit may be tried again on another
  // member (applied or not: the member cannot say), or, past the call's
  // deadline, answered DEADLINE_EXCEEDED; as the rendezvous does, the
  // transaction compares first, so it applies once: either this call
  // succeeded, or its comparison found the key its own earlier attempt wrote
  // (no one else writes it).
  bool applied = false;
  for (int attempt = 0; attempt < 3 && !applied; ++attempt) {
    absl::StatusOr<TxnResult> t = (*kv)->Txn({Compare::Absent("/f/after-leader")},
                                             {Op::Put("/f/after-leader", "1")}, {Op::Get("/f/after-leader")});
    if (t.status().code() == absl::StatusCode::kDeadlineExceeded) continue;
    ASSERT_TRUE(t.ok()) << t.status();
    applied = t->succeeded ||
              (t->reads.size() == 1 && t->reads[0].kvs.size() == 1 && t->reads[0].kvs[0].value == "1");
  }
  EXPECT_TRUE(applied);
  absl::StatusOr<RangeResult> once = (*kv)->Get("/f/after-leader");
  ASSERT_TRUE(once.ok()) << once.status();
  ASSERT_EQ(once->kvs.size(), 1u);
  EXPECT_EQ(once->kvs[0].version, 1) << "written once, not twice";
  absl::StatusOr<absl::Duration> ttl = (*kv)->LeaseKeepAlive(*lease);
  ASSERT_TRUE(ttl.ok()) << ttl.status();
  absl::StatusOr<RangeResult> all = (*kv)->GetPrefix("/f/");
  ASSERT_TRUE(all.ok()) << all.status();
  EXPECT_EQ(all->kvs.size(), 3u);  // the leased key outlived both losses
}

}  // namespace
}  // namespace cpptorchrun::rdzv::etcd
