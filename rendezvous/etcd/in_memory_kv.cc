#include "rendezvous/etcd/in_memory_kv.h"

#include <map>
#include <set>
#include <utility>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/clock.h"

namespace cpptorchrun::rdzv::etcd {
namespace {

// Every call ends at once, CANCELLED, after Cancel().
#define RETURN_IF_CANCELLED() \
  if (cancelled_) return absl::CancelledError("etcd: cancelled")

bool Matches(const std::string& key, const std::string& want, bool prefix) {
  return prefix ? absl::StartsWith(key, want) : key == want;
}

template <typename T>
bool CompareNumbers(Compare::Result r, T have, T want) {
  switch (r) {
    case Compare::Result::kEqual: return have == want;
    case Compare::Result::kNotEqual: return have != want;
    case Compare::Result::kLess: return have < want;
    case Compare::Result::kGreater: return have > want;
  }
  return false;
}

class InMemoryKvImpl final : public InMemoryKv {
 public:
  explicit InMemoryKvImpl(base::Clock* clock) : clock_(clock) {}

  absl::StatusOr<RangeResult> Get(const std::string& key) override {
    absl::MutexLock lock(&mu_);
    RETURN_IF_CANCELLED();
    ExpireLocked();
    return RangeLocked(key, false);
  }

  absl::StatusOr<RangeResult> GetPrefix(const std::string& prefix) override {
    absl::MutexLock lock(&mu_);
    RETURN_IF_CANCELLED();
    ExpireLocked();
    return RangeLocked(prefix, true);
  }

  absl::StatusOr<int64_t> Put(const std::string& key, const std::string& value,
                              int64_t lease) override {
    absl::MutexLock lock(&mu_);
    RETURN_IF_CANCELLED();
    ExpireLocked();
    if (lease != 0 && leases_.count(lease) == 0) {
      return absl::NotFoundError(absl::StrCat("etcd Put: lease ", lease, " not found"));
    }
    ++revision_;
    PutLocked(key, value, lease);
    return revision_;
  }

  absl::StatusOr<int64_t> DeletePrefix(const std::string& prefix) override {
    absl::MutexLock lock(&mu_);
    RETURN_IF_CANCELLED();
    ExpireLocked();
    std::vector<std::string> keys = KeysLocked(prefix, true);
    if (!keys.empty()) {
      ++revision_;
      for (const std::string& k : keys) DeleteLocked(k);
    }
    return static_cast<int64_t>(keys.size());
  }

  absl::StatusOr<TxnResult> Txn(const std::vector<Compare>& compares, const std::vector<Op>& success,
                                const std::vector<Op>& failure) override {
    absl::MutexLock lock(&mu_);
    RETURN_IF_CANCELLED();
    ExpireLocked();
    TxnResult out;
    out.succeeded = true;
    for (const Compare& c : compares) {
      if (!HoldsLocked(c)) {
        out.succeeded = false;
        break;
      }
    }
    const std::vector<Op>& ops = out.succeeded ? success : failure;
    for (const Op& op : ops) {
      if (op.kind == Op::Kind::kPut && op.lease != 0 && leases_.count(op.lease) == 0) {
        return absl::NotFoundError(absl::StrCat("etcd Txn: lease ", op.lease, " not found"));
      }
    }
    // Every write of the branch shares one revision; reads see the writes
    // made before them in the branch.
    bool wrote = false;
    auto bump = [&] {
      if (!wrote) ++revision_;
      wrote = true;
    };
    for (const Op& op : ops) {
      switch (op.kind) {
        case Op::Kind::kPut:
          bump();
          PutLocked(op.key, op.value, op.lease);
          break;
        case Op::Kind::kDelete:
        case Op::Kind::kDeletePrefix: {
          std::vector<std::string> keys = KeysLocked(op.key, op.kind == Op::Kind::kDeletePrefix);
          if (!keys.empty()) bump();
          for (const std::string& k : keys) DeleteLocked(k);
          break;
        }
        case Op::Kind::kGet:
        case Op::Kind::kGetPrefix:
          out.reads.push_back(RangeLocked(op.key, op.kind == Op::Kind::kGetPrefix));
          break;
      }
    }
    out.revision = revision_;
    for (RangeResult& r : out.reads) r.revision = revision_;
    return out;
  }

  absl::StatusOr<int64_t> LeaseGrant(absl::Duration ttl) override {
    absl::Duration whole = absl::Ceil(ttl, absl::Seconds(1));
    if (whole < absl::Seconds(1)) return absl::InvalidArgumentError("etcd lease TTL must be at least 1 s");
    absl::MutexLock lock(&mu_);
    RETURN_IF_CANCELLED();
    ExpireLocked();
    const int64_t id = next_lease_++;
    leases_[id] = Lease{whole, clock_->Now() + whole, {}};
    return id;
  }

  absl::StatusOr<absl::Duration> LeaseKeepAlive(int64_t lease) override {
    absl::MutexLock lock(&mu_);
    RETURN_IF_CANCELLED();
    ExpireLocked();
    auto it = leases_.find(lease);
    if (it == leases_.end()) return absl::NotFoundError(absl::StrCat("etcd lease ", lease, " has expired"));
    it->second.deadline = clock_->Now() + it->second.ttl;
    return it->second.ttl;
  }

  absl::Status LeaseRevoke(int64_t lease) override {
    absl::MutexLock lock(&mu_);
    RETURN_IF_CANCELLED();
    ExpireLocked();
    if (leases_.count(lease) == 0) return absl::NotFoundError(absl::StrCat("etcd lease ", lease, " not found"));
    DropLeaseLocked(lease);
    return absl::OkStatus();
  }

  absl::StatusOr<WatchResult> Watch(const std::string& key, bool prefix, int64_t start_revision,
                                    absl::Duration timeout) override {
    const absl::Time deadline = absl::Now() + timeout;
    absl::MutexLock lock(&mu_);
    RETURN_IF_CANCELLED();
    ExpireLocked();
    if (start_revision <= 0) start_revision = revision_ + 1;
    if (start_revision <= compacted_) {
      return absl::OutOfRangeError(
          absl::StrCat("etcd watch of ", key, ": revision ", start_revision, " has been compacted"));
    }
    while (true) {
      WatchResult out;
      for (const auto& [rev, ev] : history_) {
        if (rev >= start_revision && Matches(ev.kv.key, key, prefix)) out.events.push_back(ev);
      }
      out.revision = revision_;
      if (!out.events.empty()) return out;
      if (cancelled_) return absl::CancelledError("etcd Watch: cancelled");
      if (changed_.WaitWithDeadline(&mu_, deadline)) {
        if (cancelled_) return absl::CancelledError("etcd Watch: cancelled");
        return out;  // timed out: no changes
      }
    }
  }

  void Cancel() override {
    absl::MutexLock lock(&mu_);
    cancelled_ = true;
    changed_.SignalAll();
  }

  void ExpireLeases() override {
    absl::MutexLock lock(&mu_);
    ExpireLocked();
  }

  void Compact(int64_t revision) override {
    absl::MutexLock lock(&mu_);
    compacted_ = std::max(compacted_, std::min(revision, revision_) - 1);
    std::vector<std::pair<int64_t, WatchEvent>> kept;
    for (auto& h : history_) {
      if (h.first > compacted_) kept.push_back(std::move(h));
    }
    history_ = std::move(kept);
  }

 private:
  struct Lease {
    absl::Duration ttl;
    absl::Time deadline;
    std::set<std::string> keys;
  };

  RangeResult RangeLocked(const std::string& key, bool prefix) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) {
    RangeResult out;
    out.revision = revision_;
    for (auto it = prefix ? data_.lower_bound(key) : data_.find(key); it != data_.end(); ++it) {
      if (!Matches(it->first, key, prefix)) break;
      out.kvs.push_back(it->second);
    }
    return out;
  }

  std::vector<std::string> KeysLocked(const std::string& key, bool prefix)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) {
    std::vector<std::string> keys;
    for (const KeyValue& kv : RangeLocked(key, prefix).kvs) keys.push_back(kv.key);
    return keys;
  }

  bool HoldsLocked(const Compare& c) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) {
    auto it = data_.find(c.key);
    // As etcd: a value compared on an absent key always fails; the other
    // targets of an absent key are 0.
    if (it == data_.end() && c.target == Compare::Target::kValue) return false;
    const KeyValue absent;
    const KeyValue& kv = it == data_.end() ? absent : it->second;
    switch (c.target) {
      case Compare::Target::kModRevision: return CompareNumbers(c.result, kv.mod_revision, c.number);
      case Compare::Target::kCreateRevision:
        return CompareNumbers(c.result, kv.create_revision, c.number);
      case Compare::Target::kVersion: return CompareNumbers(c.result, kv.version, c.number);
      case Compare::Target::kValue: return CompareNumbers(c.result, kv.value, c.value);
    }
    return false;
  }

  // At revision_ (the caller bumped it).
  void PutLocked(const std::string& key, const std::string& value, int64_t lease)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) {
    KeyValue& kv = data_[key];
    if (kv.create_revision == 0) {
      kv.key = key;
      kv.create_revision = revision_;
    }
    if (kv.lease != 0 && kv.lease != lease) {
      auto old = leases_.find(kv.lease);
      if (old != leases_.end()) old->second.keys.erase(key);
    }
    kv.value = value;
    kv.mod_revision = revision_;
    kv.version += 1;
    kv.lease = lease;
    if (lease != 0) leases_[lease].keys.insert(key);
    history_.push_back({revision_, WatchEvent{WatchEvent::Type::kPut, kv}});
    changed_.SignalAll();
  }

  // At revision_ (the caller bumped it).
  void DeleteLocked(const std::string& key) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) {
    auto it = data_.find(key);
    if (it == data_.end()) return;
    if (it->second.lease != 0) {
      auto l = leases_.find(it->second.lease);
      if (l != leases_.end()) l->second.keys.erase(key);
    }
    data_.erase(it);
    KeyValue gone;
    gone.key = key;
    gone.mod_revision = revision_;
    history_.push_back({revision_, WatchEvent{WatchEvent::Type::kDelete, gone}});
    changed_.SignalAll();
  }

  void DropLeaseLocked(int64_t lease) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) {
    auto it = leases_.find(lease);
    std::set<std::string> keys = std::move(it->second.keys);
    leases_.erase(it);
    if (keys.empty()) return;
    ++revision_;
    for (const std::string& k : keys) DeleteLocked(k);
  }

  void ExpireLocked() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) {
    const absl::Time now = clock_->Now();
    std::vector<int64_t> due;
    for (const auto& [id, lease] : leases_) {
      if (lease.deadline <= now) due.push_back(id);
    }
    for (int64_t id : due) DropLeaseLocked(id);
  }

#undef RETURN_IF_CANCELLED

  base::Clock* const clock_;
  absl::Mutex mu_;
  absl::CondVar changed_;
  bool cancelled_ ABSL_GUARDED_BY(mu_) = false;
  int64_t revision_ ABSL_GUARDED_BY(mu_) = 1;  // etcd starts at 1
  int64_t compacted_ ABSL_GUARDED_BY(mu_) = 0;
  int64_t next_lease_ ABSL_GUARDED_BY(mu_) = 0x1000;
  std::map<std::string, KeyValue> data_ ABSL_GUARDED_BY(mu_);
  std::map<int64_t, Lease> leases_ ABSL_GUARDED_BY(mu_);
  std::vector<std::pair<int64_t, WatchEvent>> history_ ABSL_GUARDED_BY(mu_);
};

}  // namespace

std::unique_ptr<InMemoryKv> NewInMemoryKv(base::Clock* clock) {
  return std::make_unique<InMemoryKvImpl>(clock);
}

}  // namespace cpptorchrun::rdzv::etcd
