#include "rendezvous/etcd/kv_store.h"

#include <algorithm>
#include <random>
#include <optional>
#include <utility>
#include <vector>

#include "absl/strings/numbers.h"
#include "absl/strings/str_format.h"
#include "absl/synchronization/mutex.h"
#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"

namespace cpptorchrun::rdzv::etcd {
namespace {

// Add's transaction lost to a concurrent writer this many times in a row:
// an error rather than an unbounded loop.
constexpr int kMaxAddConflicts = 1000;

// Between a key and an Add's mark: a byte no store key of the project holds.
constexpr char kAddMark[] = "\x1f" "add" "\x1f";

std::string UniqueId() {
  static absl::Mutex mu(absl::kConstInit);
  static std::mt19937_64* engine = new std::mt19937_64(std::random_device{}());
  absl::MutexLock lock(&mu);
  return absl::StrFormat("%016x%016x", (*engine)(), (*engine)());
}

class KvStore final : public Store {
 public:
  KvStore(Kv* kv, std::string prefix) : kv_(kv), prefix_(std::move(prefix)) {}

  absl::Status Set(const std::string& key, const std::string& value) override {
    return kv_->Put(prefix_ + key, value).status();
  }

  absl::StatusOr<std::string> Get(const std::string& key, absl::Duration timeout) override {
    return WaitFor(key, absl::Now() + timeout, timeout);
  }

  absl::StatusOr<int64_t> Add(const std::string& key, int64_t delta) override {
    const std::string k = prefix_ + key;
    // This Add's mark, written in the same transaction as the sum: a
    // transaction retried on another member after its answer was lost
    // finds its mark and the sum it wrote, and does not add twice.
    const std::string mark = absl::StrCat(k, kAddMark, UniqueId());
    int unanswered = 0;
    for (int attempt = 0; attempt < kMaxAddConflicts; ++attempt) {
      absl::StatusOr<TxnResult> read = kv_->Txn({}, {Op::Get(k), Op::Get(mark)}, {});
      if (!read.ok()) return read.status();
      if (read->reads.size() == 2 && !read->reads[1].kvs.empty()) {
        int64_t landed = 0;
        if (absl::SimpleAtoi(read->reads[1].kvs[0].value, &landed)) return landed;
      }
      RangeResult* got = &read->reads[0];
      int64_t current = 0;
      int64_t mod_revision = 0;  // 0: absent
      if (!got->kvs.empty()) {
        mod_revision = got->kvs[0].mod_revision;
        if (!absl::SimpleAtoi(got->kvs[0].value, &current)) {
          return absl::FailedPreconditionError(
              absl::StrCat("Add: key '", key, "' holds a value that is not a decimal integer"));
        }
      }
      const int64_t next = current + delta;
      absl::StatusOr<TxnResult> t = kv_->Txn({Compare::ModRevisionIs(k, mod_revision)},
                                             {Op::Put(k, absl::StrCat(next)), Op::Put(mark, absl::StrCat(next))}, {});
      if (!t.ok()) {
        // Applied or not, we cannot tell: read again, and the mark says.
        if (WriteUnanswered(t.status()) && ++unanswered < kMaxUnansweredWrites) continue;
        return t.status();
      }
      if (t->succeeded) return next;
    }
    return absl::AbortedError(absl::StrCat("Add: key '", key, "' changed under ", kMaxAddConflicts,
                                           " attempts in a row"));
  }

  absl::StatusOr<std::string> CompareSet(const std::string& key,
                                         const std::optional<std::string>& expected,
                                         const std::string& desired, bool* swapped) override {
    const std::string k = prefix_ + key;
    Compare c = expected.has_value() ? Compare::ValueIs(k, *expected) : Compare::Absent(k);
    absl::StatusOr<TxnResult> t = kv_->Txn({c}, {Op::Put(k, desired)}, {Op::Get(k)});
    if (!t.ok()) return t.status();
    if (swapped != nullptr) *swapped = t->succeeded;
    if (t->succeeded) return desired;
    if (t->reads.empty() || t->reads[0].kvs.empty()) return std::string();
    return t->reads[0].kvs[0].value;
  }

  absl::StatusOr<bool> Delete(const std::string& key) override {
    const std::string k = prefix_ + key;
    Compare exists{k, Compare::Target::kCreateRevision, Compare::Result::kGreater, 0, {}};
    absl::StatusOr<TxnResult> t = kv_->Txn({exists}, {Op::Delete(k)}, {});
    if (!t.ok()) return t.status();
    return t->succeeded;
  }

  absl::StatusOr<std::vector<std::string>> MultiGet(const std::vector<std::string>& keys,
                                                    absl::Duration timeout) override {
    const absl::Time deadline = absl::Now() + timeout;
    std::vector<std::string> values;
    values.reserve(keys.size());
    for (const std::string& key : keys) {
      absl::StatusOr<std::string> v = WaitFor(key, deadline, timeout);
      if (!v.ok()) return v.status();
      values.push_back(std::move(*v));
    }
    return values;
  }

  absl::Status MultiSet(const std::vector<std::pair<std::string, std::string>>& entries) override {
    std::vector<Op> puts;
    puts.reserve(entries.size());
    for (const auto& [key, value] : entries) puts.push_back(Op::Put(prefix_ + key, value));
    return kv_->Txn({}, puts, {}).status();
  }

 private:
  // The key's value, waiting until `deadline` (`timeout` is for the error).
  absl::StatusOr<std::string> WaitFor(const std::string& key, absl::Time deadline,
                                      absl::Duration timeout) {
    const std::string k = prefix_ + key;
    absl::StatusOr<RangeResult> got = kv_->Get(k);
    if (!got.ok()) return got.status();
    if (!got->kvs.empty()) return got->kvs[0].value;
    if (timeout <= absl::ZeroDuration()) {
      return absl::NotFoundError(absl::StrCat("key '", key, "' is not set"));
    }
    int64_t from = got->revision + 1;
    // Each pass either answers or moves `from` past what it saw; the
    // deadline bounds the passes.
    while (true) {
      const absl::Duration left = deadline - absl::Now();
      if (left <= absl::ZeroDuration()) break;
      absl::StatusOr<WatchResult> w = kv_->Watch(k, false, from, left);
      if (w.status().code() == absl::StatusCode::kOutOfRange) {
        got = kv_->Get(k);  // compacted: read again, then watch on
        if (!got.ok()) return got.status();
        if (!got->kvs.empty()) return got->kvs[0].value;
        from = got->revision + 1;
        continue;
      }
      if (!w.ok()) return w.status();
      if (!w->events.empty()) {
        const WatchEvent& last = w->events.back();
        if (last.type == WatchEvent::Type::kPut) return last.kv.value;
        from = last.kv.mod_revision + 1;  // set, then deleted: still absent
      } else {
        from = std::max(from, w->revision + 1);
      }
    }
    return absl::DeadlineExceededError(absl::StrCat("key '", key, "' was not set within ",
                                                    absl::FormatDuration(timeout)));
  }

  Kv* const kv_;
  const std::string prefix_;
};

}  // namespace

std::unique_ptr<Store> NewKvStore(Kv* kv, std::string prefix) {
  return std::make_unique<KvStore>(kv, std::move(prefix));
}

}  // namespace cpptorchrun::rdzv::etcd
