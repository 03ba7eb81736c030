// Store: the key-value interface that agents and workers share bootstrap
// keys through (the NCCL unique id, Gloo's addresses, barriers).
//
// One Store object is bound to one scope (run, round) for its whole life; a
// new round means a new Store, so a restarted round can never read the
// previous round's keys. Implementations: the gRPC client of the rendezvous
// service (rendezvous/grpc_store.h) and an in-memory one for tests
// (NewInMemoryStore below). All methods are thread-safe.
#ifndef CPPTORCHRUN_RENDEZVOUS_STORE_H_
#define CPPTORCHRUN_RENDEZVOUS_STORE_H_

#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/time/time.h"

namespace cpptorchrun::rdzv {

class Store {
 public:
  virtual ~Store() = default;

  virtual absl::Status Set(const std::string& key, const std::string& value) = 0;

  // Waits up to `timeout` for `key` to be set. A zero timeout answers at
  // once. NotFound when absent at once; DeadlineExceeded after waiting.
  virtual absl::StatusOr<std::string> Get(const std::string& key, absl::Duration timeout) = 0;

  // Atomically adds `delta` to the decimal integer stored at `key` (absent
  // counts as 0) and returns the new value.
  virtual absl::StatusOr<int64_t> Add(const std::string& key, int64_t delta) = 0;

  // Stores `desired` if the current value equals `expected` (nullopt: if the
  // key is absent). Returns the value stored afterwards; `*swapped` says
  // whether this call stored it.
  virtual absl::StatusOr<std::string> CompareSet(const std::string& key,
                                                 const std::optional<std::string>& expected,
                                                 const std::string& desired, bool* swapped) = 0;

  // True when the key existed.
  virtual absl::StatusOr<bool> Delete(const std::string& key) = 0;

  // Waits up to `timeout` for all keys; values in the order of `keys`.
  virtual absl::StatusOr<std::vector<std::string>> MultiGet(const std::vector<std::string>& keys,
                                                            absl::Duration timeout) = 0;

  virtual absl::Status MultiSet(
      const std::vector<std::pair<std::string, std::string>>& entries) = 0;
};

// A thread-safe store in this process's memory (tests, single-process use).
std::unique_ptr<Store> NewInMemoryStore();

}  // namespace cpptorchrun::rdzv

#endif  // CPPTORCHRUN_RENDEZVOUS_STORE_H_
