// A run's state as the etcd backend stores it (run_record.proto), and what
// etcd's leases and the nodes' reports add back when it is read.
//
// Stored: everything of RunState that is decided by the rules (rounds,
// participants, joiners, spares, timestamps of joins and close). Not
// stored: liveness (Joiner::last_heard and polling, ParticipantState::
// last_heard), which is whether the node's lease key exists, and what its
// keep-alives report (restart count, progress, last restart). Two states
// that differ only there encode to the same bytes, so a reader that
// changed nothing writes nothing.
#ifndef CPPTORCHRUN_RENDEZVOUS_ETCD_RUN_RECORD_H_
#define CPPTORCHRUN_RENDEZVOUS_ETCD_RUN_RECORD_H_

#include <string>

#include "absl/container/flat_hash_map.h"
#include "absl/container/flat_hash_set.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "absl/time/time.h"
#include "rendezvous/etcd/run_record.pb.h"
#include "rendezvous/rules.h"

namespace cpptorchrun::rdzv::etcd {

inline constexpr int kRunRecordFormat = 1;

std::string EncodeRun(const RunState& state);
// DataLoss naming `key` for bytes that are not a StoredRun of this format;
// liveness is left unknown (last_heard InfinitePast, not polling) until
// ApplyLiveness.
absl::StatusOr<RunState> DecodeRun(absl::string_view bytes, absl::string_view key);

struct Liveness {
  // Node ids whose lease key exists.
  absl::flat_hash_set<std::string> alive;
  // Their last keep-alive reports, by node id.
  absl::flat_hash_map<std::string, record::StoredProgress> reports;
};

// Nodes alive in `live` were heard `now` (joiners and spares: as if their
// Join were held); the others never (so the rules find them dead at once).
// Participants get their reported restart count, progress and last restart.
void ApplyLiveness(absl::Time now, const Liveness& live, RunState* state);

}  // namespace cpptorchrun::rdzv::etcd

#endif  // CPPTORCHRUN_RENDEZVOUS_ETCD_RUN_RECORD_H_
