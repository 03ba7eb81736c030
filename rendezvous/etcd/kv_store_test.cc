// The etcd store's Add when etcd applied its transaction but the answer was
// lost (a member died after committing it; the Kv tried again elsewhere):
// the sum is written once, not twice; and when etcd answers no write at all
// (no quorum), Add reports etcd's error after a few tries.
#include "rendezvous/etcd/kv_store.h"

#include <memory>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "gtest/gtest.h"
#include "base/clock.h"
#include "rendezvous/etcd/in_memory_kv.h"

namespace cpptorchrun::rdzv::etcd {
namespace {

// An in-memory Kv whose first `lose` writing transactions are answered
// DEADLINE_EXCEEDED, as a lost answer looks to the caller: applied first
// (the answer was lost) or not (etcd could not commit it).
class LostAnswers : public Kv {
 public:
  LostAnswers(Kv* kv, int lose, bool applied = true) : kv_(kv), lose_(lose), applied_(applied) {}
  int writes() const { return writes_; }
  absl::StatusOr<RangeResult> Get(const std::string& k) override { return kv_->Get(k); }
  absl::StatusOr<RangeResult> GetPrefix(const std::string& p) override { return kv_->GetPrefix(p); }
  absl::StatusOr<int64_t> Put(const std::string& k, const std::string& v, int64_t l) override {
    return kv_->Put(k, v, l);
  }
  absl::StatusOr<int64_t> DeletePrefix(const std::string& p) override { return kv_->DeletePrefix(p); }
  absl::StatusOr<TxnResult> Txn(const std::vector<Compare>& c, const std::vector<Op>& s,
                                const std::vector<Op>& f) override {
    const bool writes = !s.empty() && s[0].kind == Op::Kind::kPut;
    if (writes) ++writes_;
    if (writes && lose_ > 0 && !applied_) {
      --lose_;
      return absl::DeadlineExceededError("etcd Txn: no member answered");
    }
    absl::StatusOr<TxnResult> r = kv_->Txn(c, s, f);
    if (r.ok() && writes && lose_ > 0) {
      --lose_;
      return absl::DeadlineExceededError("etcd Txn: the answer was lost");
    }
    return r;
  }
  absl::StatusOr<int64_t> LeaseGrant(absl::Duration ttl) override { return kv_->LeaseGrant(ttl); }
  absl::StatusOr<absl::Duration> LeaseKeepAlive(int64_t l) override { return kv_->LeaseKeepAlive(l); }
  absl::Status LeaseRevoke(int64_t l) override { return kv_->LeaseRevoke(l); }
  absl::StatusOr<WatchResult> Watch(const std::string& k, bool p, int64_t r, absl::Duration t) override {
    return kv_->Watch(k, p, r, t);
  }
  void Cancel() override { kv_->Cancel(); }

 private:
  Kv* kv_;
  int lose_;
  bool applied_;
  int writes_ = 0;
};

TEST(KvStoreAddTest, AnAddWhoseAnswerWasLostCountsOnceWhenTriedAgain) {
  base::FakeClock clock;
  std::unique_ptr<InMemoryKv> memory = NewInMemoryKv(&clock);
  LostAnswers lossy(memory.get(), 1);
  std::unique_ptr<Store> store = NewKvStore(&lossy, "/s/");
  // The first try's answer is lost; Add reads again and finds its mark.
  absl::StatusOr<int64_t> first = store->Add("barrier", 1);
  ASSERT_TRUE(first.ok()) << first.status();
  EXPECT_EQ(*first, 1);
  auto value = store->Get("barrier", absl::ZeroDuration());
  ASSERT_TRUE(value.ok());
  EXPECT_EQ(*value, "1");
  absl::StatusOr<int64_t> second = store->Add("barrier", 1);
  ASSERT_TRUE(second.ok());
  EXPECT_EQ(*second, *first + 1);
}

TEST(KvStoreAddTest, AnAddEtcdNeverAnswersFailsAfterAFewTriesWithEtcdsError) {
  base::FakeClock clock;
  std::unique_ptr<InMemoryKv> memory = NewInMemoryKv(&clock);
  LostAnswers silent(memory.get(), 1000, /*applied=*/false);
  std::unique_ptr<Store> store = NewKvStore(&silent, "/s/");
  absl::StatusOr<int64_t> r = store->Add("barrier", 1);
  ASSERT_FALSE(r.ok());
  EXPECT_TRUE(absl::IsDeadlineExceeded(r.status())) << r.status();
  EXPECT_NE(r.status().message().find("no member answered"), absl::string_view::npos) << r.status();
  EXPECT_EQ(silent.writes(), kMaxUnansweredWrites);
  // Nothing was added: once etcd answers again, the sum starts from 0.
  LostAnswers answering(memory.get(), 0);
  std::unique_ptr<Store> again = NewKvStore(&answering, "/s/");
  absl::StatusOr<int64_t> next = again->Add("barrier", 1);
  ASSERT_TRUE(next.ok()) << next.status();
  EXPECT_EQ(*next, 1);
}

}  // namespace
}  // namespace cpptorchrun::rdzv::etcd
