// Where the etcd backend keeps a run (docs/RENDEZVOUS.md, "On etcd"), under
// the job's prefix (--rdzv_conf prefix, default /cpptorchrun):
//
//   <prefix>/runs/<run>/live/state            the round rules' state (StoredRun)
//   <prefix>/runs/<run>/live/alive/<node>     "", on the node's lease
//   <prefix>/runs/<run>/progress/<node>       its last keep-alive (StoredProgress), same lease
//   <prefix>/runs/<run>/rounds/<round>/store/ the round's store (kv_store.h)
//
// Everything a waiter must see (the state, a node's lease ending) is under
// .../live/, so one Watch of that prefix wakes it; progress reports, which
// come every keep-alive interval from every node, are not. Run and node ids
// are escaped (EscapeKeyPart), so no id can reach outside its own keys.
#ifndef CPPTORCHRUN_RENDEZVOUS_ETCD_KEYS_H_
#define CPPTORCHRUN_RENDEZVOUS_ETCD_KEYS_H_

#include <cstdint>
#include <string>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"

namespace cpptorchrun::rdzv::etcd {

inline constexpr char kDefaultPrefix[] = "/cpptorchrun";

// Letters, digits, '.', '_' and '-' as they are; every other byte as %XX.
std::string EscapeKeyPart(absl::string_view part);
// The inverse; InvalidArgument for a malformed escape.
absl::StatusOr<std::string> UnescapeKeyPart(absl::string_view escaped);

// A prefix as --rdzv_conf gives it: starts with '/', at most 256 bytes, no
// NUL, no trailing '/' (one is dropped), not "/" alone. The error names it.
absl::StatusOr<std::string> ParsePrefix(absl::string_view text);

class RunKeys {
 public:
  RunKeys(absl::string_view prefix, absl::string_view run_id);

  const std::string& Run() const { return run_; }  // ends with '/'
  std::string Live() const { return run_ + "live/"; }
  std::string State() const { return run_ + "live/state"; }
  std::string AlivePrefix() const { return run_ + "live/alive/"; }
  std::string Alive(absl::string_view node_id) const;
  std::string ProgressPrefix() const { return run_ + "progress/"; }
  std::string Progress(absl::string_view node_id) const;
  std::string Rounds() const { return run_ + "rounds/"; }
  std::string Store(int64_t round) const;

 private:
  std::string run_;
};

}  // namespace cpptorchrun::rdzv::etcd

#endif  // CPPTORCHRUN_RENDEZVOUS_ETCD_KEYS_H_
