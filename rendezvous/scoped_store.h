// ScopedStore: one run's key-value store as the rendezvous service holds
// it. Keys live in scopes, one per round (0: the run's own scope, kept for
// the run's life); a round's scope is dropped, keys and waiting reads, once
// the run is two rounds past it. The store keeps the run's key and byte
// budgets (and its share of the server's byte budget), and the reads that
// wait for keys not set yet: a write that completes a read hands it back to
// the caller, who answers it.
//
// No gRPC and no lock: the owner (the service, under its mutex) serialises
// every call. A scope exists while it holds a key or a waiting read.
#ifndef CPPTORCHRUN_RENDEZVOUS_SCOPED_STORE_H_
#define CPPTORCHRUN_RENDEZVOUS_SCOPED_STORE_H_

#include <cstdint>
#include <map>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "absl/container/flat_hash_map.h"
#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "rendezvous/limits.h"

namespace cpptorchrun::rdzv {

// A read of `keys` in `round`'s scope that may wait. Owned by the caller,
// which must keep it alive while it waits (see ScopedStore::StopReading).
struct StoreRead {
  int64_t round = 0;
  std::vector<std::string> keys;
  // The key it waits on in its scope; empty while it does not wait.
  std::string waiting_on;
  // Once answered: the values, in the order of `keys`.
  std::vector<std::string> values;
};

class ScopedStore {
 public:
  // The reads a call completed, to be answered by the caller.
  using Answered = std::vector<StoreRead*>;
  // Entries of one write, in order (the last value of a repeated key wins).
  using Entries = std::vector<std::pair<absl::string_view, absl::string_view>>;

  // `limits` and `server_bytes` (the bytes every run's store holds, which
  // this one adds its own to) must outlive the store.
  ScopedStore(std::string run_id, const Limits* limits, int64_t* server_bytes);
  // Takes its bytes out of the server's tally. Reads still waiting are
  // forgotten, not answered.
  ~ScopedStore();
  ScopedStore(const ScopedStore&) = delete;
  ScopedStore& operator=(const ScopedStore&) = delete;

  // FailedPrecondition when `round`'s keys were dropped (a round more than
  // one below `active_round`); rounds 0 and all while none is active are
  // fine.
  absl::Status CheckRound(int64_t round, int64_t active_round) const;

  // The value of `key` in `round`'s scope; nullptr when absent.
  const std::string* Find(int64_t round, absl::string_view key) const;

  // Sets every entry, or none: ResourceExhausted naming the limit when the
  // new keys or bytes would put the run or the server over its budget.
  // Appends the reads the entries complete to `answered`.
  absl::Status Set(int64_t round, const Entries& entries, Answered* answered);

  // Adds `delta` to the decimal integer at `key` (absent: 0); the new value.
  // FailedPrecondition when the value is not an integer, OutOfRange when the
  // sum overflows int64, or as Set.
  absl::StatusOr<int64_t> Add(int64_t round, const std::string& key, int64_t delta,
                              Answered* answered);

  struct Swap {
    bool swapped = false;
    // Whether the key is present afterwards, and its value then.
    bool present = false;
    std::string value;
  };
  // Stores `desired` when the value is `expected` (nullopt: when the key is
  // absent). Errors as Set.
  absl::StatusOr<Swap> CompareSet(int64_t round, const std::string& key,
                                  const std::optional<std::string>& expected,
                                  const std::string& desired, Answered* answered);

  // True when the key was there.
  bool Delete(int64_t round, absl::string_view key);

  // True when every key of `read` is present: its values are filled in.
  // Otherwise it waits on the first missing key (waiting_on) until a write
  // completes it, StopReading, or its round's scope is dropped.
  bool Read(StoreRead* read);

  // Takes a waiting read out of its scope (no-op when it does not wait).
  void StopReading(StoreRead* read);

  // Drops the scopes of rounds 1 .. keep_from - 1 with their keys; the reads
  // that waited in them (no longer waiting) are returned, to be refused.
  std::vector<StoreRead*> DropRoundsBefore(int64_t keep_from);

  int64_t keys() const { return keys_; }
  int64_t bytes() const { return bytes_; }
  // Scopes held now (tests).
  int scopes() const { return static_cast<int>(scopes_.size()); }

 private:
  struct Scope {
    absl::flat_hash_map<std::string, std::string> data;
    // Waiting reads by the first key they miss.
    absl::flat_hash_map<std::string, std::vector<StoreRead*>> waiting;
  };

  // ResourceExhausted when `fresh` more keys and `more_bytes` more bytes do
  // not fit.
  absl::Status Room(int64_t fresh, int64_t more_bytes) const;
  void CountBytes(int64_t delta);
  // The scope of `round`; nullptr when absent.
  Scope* ScopeOf(int64_t round);
  const Scope* ScopeOf(int64_t round) const;
  void DropIfEmpty(int64_t round);
  // Re-checks the reads waiting on `key` in `scope`.
  void Wake(Scope* scope, const std::string& key, Answered* answered);
  // Fills `read`'s values, or makes it wait on its first missing key.
  bool TryAnswer(Scope* scope, StoreRead* read);

  const std::string run_id_;
  const Limits* const limits_;
  int64_t* const server_bytes_;
  std::map<int64_t, Scope> scopes_;
  int64_t keys_ = 0;
  int64_t bytes_ = 0;  // keys' and values' sizes in its scopes
};

}  // namespace cpptorchrun::rdzv

#endif  // CPPTORCHRUN_RENDEZVOUS_SCOPED_STORE_H_
