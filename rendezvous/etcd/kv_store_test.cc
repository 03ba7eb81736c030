// The etcd store's Add when etcd applied its transaction but the answer was
// lost (a member died after committing it; the Kv tried again elsewhere):
// the sum is written once, not twice.
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

// An in-memory Kv whose first `lose` writing transactions are applied, then
// answered DEADLINE_EXCEEDED, as a lost answer looks to the caller.
class LostAnswers : public Kv {
 public:
  LostAnswers(Kv* kv, int lose) : kv_(kv), lose_(lose) {}
  absl::StatusOr<RangeResult> Get(const std::string& k) override { return kv_->Get(k); }
  absl::StatusOr<RangeResult> GetPrefix(const std::string& p) override { return kv_->GetPrefix(p); }
  absl::StatusOr<int64_t> Put(const std::string& k, const std::string& v, int64_t l) override {
    return kv_->Put(k, v, l);
  }
  absl::StatusOr<int64_t> DeletePrefix(const std::string& p) override { return kv_->DeletePrefix(p); }
  absl::StatusOr<TxnResult> Txn(const std::vector<Compare>& c, const std::vector<Op>& s,
                                const std::vector<Op>& f) override {
    absl::StatusOr<TxnResult> r = kv_->Txn(c, s, f);
    const bool writes = !s.empty() && s[0].kind == Op::Kind::kPut;
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

}  // namespace
}  // namespace cpptorchrun::rdzv::etcd
