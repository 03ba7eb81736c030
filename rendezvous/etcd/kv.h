// Kv: the part of etcd's v3 API the rendezvous uses (KV, Lease, Watch), as a
// small interface with two implementations: the gRPC client of a real etcd
// cluster (NewEtcdKv, etcd_kv.h) and an in-memory fake with the same
// revision, lease and watch semantics (NewInMemoryKv, in_memory_kv.h) that
// the round logic is tested on without a cluster.
//
// Semantics follow etcd's: every write bumps the store's revision by one (a
// transaction's writes share one); a key's mod_revision is the revision of its
// last write, its create_revision that of its creation (0 in a Compare: the
// key is absent); keys attached to a lease vanish when the lease expires or is
// revoked. All methods are thread-safe, and every call that can block honours
// Cancel().
#ifndef CPPTORCHRUN_RENDEZVOUS_ETCD_KV_H_
#define CPPTORCHRUN_RENDEZVOUS_ETCD_KV_H_

#include <cstdint>
#include <string>
#include <utility>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/time/time.h"

namespace cpptorchrun::rdzv::etcd {

struct KeyValue {
  std::string key;
  std::string value;
  int64_t create_revision = 0;
  int64_t mod_revision = 0;
  int64_t version = 0;
  int64_t lease = 0;
};

// A read: the matching keys (sorted by key) and the store's revision when it
// was served.
struct RangeResult {
  std::vector<KeyValue> kvs;
  int64_t revision = 0;
};

// One comparison of a transaction.
struct Compare {
  enum class Target { kModRevision, kCreateRevision, kVersion, kValue };
  enum class Result { kEqual, kNotEqual, kLess, kGreater };
  std::string key;
  Target target = Target::kModRevision;
  Result result = Result::kEqual;
  int64_t number = 0;  // for the revision and version targets
  std::string value;   // for kValue

  // The key's last write was at `revision` (0: the key is absent).
  static Compare ModRevisionIs(std::string key, int64_t revision) {
    return Compare{std::move(key), Target::kModRevision, Result::kEqual, revision, {}};
  }
  static Compare Absent(std::string key) {
    return Compare{std::move(key), Target::kCreateRevision, Result::kEqual, 0, {}};
  }
  static Compare ValueIs(std::string key, std::string value) {
    return Compare{std::move(key), Target::kValue, Result::kEqual, 0, std::move(value)};
  }
};

// One operation of a transaction's success or failure branch.
struct Op {
  enum class Kind { kPut, kDelete, kDeletePrefix, kGet, kGetPrefix };
  Kind kind = Kind::kGet;
  std::string key;  // the key, or the prefix for the *Prefix kinds
  std::string value;
  int64_t lease = 0;  // kPut: attach the key to this lease (0: none)

  static Op Put(std::string key, std::string value, int64_t lease = 0) {
    return Op{Kind::kPut, std::move(key), std::move(value), lease};
  }
  static Op Delete(std::string key) { return Op{Kind::kDelete, std::move(key), {}, 0}; }
  static Op DeletePrefix(std::string prefix) {
    return Op{Kind::kDeletePrefix, std::move(prefix), {}, 0};
  }
  static Op Get(std::string key) { return Op{Kind::kGet, std::move(key), {}, 0}; }
  static Op GetPrefix(std::string prefix) { return Op{Kind::kGetPrefix, std::move(prefix), {}, 0}; }
};

struct TxnResult {
  // Whether every comparison held (the success branch ran).
  bool succeeded = false;
  // The store's revision after the transaction.
  int64_t revision = 0;
  // One entry per kGet/kGetPrefix op of the branch that ran, in order.
  std::vector<RangeResult> reads;
};

struct WatchEvent {
  enum class Type { kPut, kDelete };
  Type type = Type::kPut;
  KeyValue kv;  // for kDelete: the key and the deletion's mod_revision
};

struct WatchResult {
  // Changes at or after the watch's start revision, oldest first; empty when
  // the wait timed out.
  std::vector<WatchEvent> events;
  // The store's revision when the answer was made: a caller that saw no
  // events may watch again from revision + 1.
  int64_t revision = 0;
};

class Kv {
 public:
  virtual ~Kv() = default;

  virtual absl::StatusOr<RangeResult> Get(const std::string& key) = 0;
  virtual absl::StatusOr<RangeResult> GetPrefix(const std::string& prefix) = 0;
  // Returns the revision of the write.
  virtual absl::StatusOr<int64_t> Put(const std::string& key, const std::string& value,
                                      int64_t lease = 0) = 0;
  // Returns the number of keys deleted.
  virtual absl::StatusOr<int64_t> DeletePrefix(const std::string& prefix) = 0;
  virtual absl::StatusOr<TxnResult> Txn(const std::vector<Compare>& compares,
                                        const std::vector<Op>& success,
                                        const std::vector<Op>& failure) = 0;

  // A lease of `ttl` (whole seconds, at least 1, as etcd grants them).
  virtual absl::StatusOr<int64_t> LeaseGrant(absl::Duration ttl) = 0;
  // Renews the lease once; its TTL. NotFound once the lease has expired.
  virtual absl::StatusOr<absl::Duration> LeaseKeepAlive(int64_t lease) = 0;
  virtual absl::Status LeaseRevoke(int64_t lease) = 0;

  // Waits up to `timeout` for changes of `key` (of every key under it when
  // `prefix`) at revision `start_revision` or later; changes already made
  // since then are answered at once. OutOfRange when `start_revision` has
  // been compacted away (read again, then watch from the read's revision + 1).
  virtual absl::StatusOr<WatchResult> Watch(const std::string& key, bool prefix,
                                            int64_t start_revision, absl::Duration timeout) = 0;

  // Every call in flight ends now, and every later one at once, with
  // CANCELLED (for shutting down threads blocked in Watch).
  virtual void Cancel() = 0;
};

// Whether a failed write may or may not have landed: etcd did not answer
// in time (DEADLINE_EXCEEDED) or no member could take it (UNAVAILABLE).
// The caller reads again; a write that landed makes its comparison fail.
inline bool WriteUnanswered(const absl::Status& s) {
  return absl::IsDeadlineExceeded(s) || absl::IsUnavailable(s);
}

// Unanswered writes (above) one operation retries before it gives up and
// reports etcd's error: a few, not its bound on lost races, so that a caller
// that counts failures (the keep-alive's) hears of them within a few call
// timeouts.
inline constexpr int kMaxUnansweredWrites = 3;

}  // namespace cpptorchrun::rdzv::etcd

#endif  // CPPTORCHRUN_RENDEZVOUS_ETCD_KV_H_
