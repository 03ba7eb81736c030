// The job page the rendezvous server serves to browsers: a run list and a
// page per run that polls the run's status as JSON and draws it (nodes and
// ranks, round and state, restarts and their phases, loss and samples/s
// per rank, heartbeat ages turning red when stale). The HTML, CSS and
// script are constants built into the binary, the same for every run (the
// run id is read by the script from the address and only ever set as text,
// so an id holding HTML or script is shown, never run); the JSON is made by
// the pure functions below, its strings by base::JsonString.
#ifndef CPPTORCHRUN_RENDEZVOUS_JOB_PAGE_H_
#define CPPTORCHRUN_RENDEZVOUS_JOB_PAGE_H_

#include <string>

#include "absl/strings/string_view.h"
#include "proto/rendezvous.pb.h"
#include "rendezvous/metrics.h"

namespace cpptorchrun::rdzv {

// {"run_id", "state", "round", "version", "world_size", "options": {...},
//  "nodes": [{"node_id", "host", "group_rank", "rank_offset",
//   "local_world_size", "keep_alive_age_ms", "restart_count",
//   "last_restart": {"cause", "round", "total_s", ...} | null,
//   "faults": NodeFaultsJson,
//   "ranks": [{"rank", "local_rank", "epoch", "step", "total_steps",
//              "loss", "samples_per_s", "heartbeat_age_ms"}]}],
//  "waiting": [{"node_id", "host"}], "closed_reason", "store_bytes",
//  "history": {"<rank>": [[step, loss, samples_per_s], ...]}}
std::string RunStatusJson(const v1::RunStatusResponse& status, const ProgressHistory& history = {});

// A node's latest hang and straggler (rendezvous.proto NodeFaults), for
// the page and `cpptorchrun status --json`:
// {"last_hang": {"unix_ms", "culprit_ranks", "culprit_hosts",
//   "waiting_ranks", "step", "collective_seq", "waited_s", "deadline_s",
//   "process_states"} | null,
//  "last_straggler": {"unix_ms", "ranks", "hosts", "slowdown", "policy"} | null}
std::string NodeFaultsJson(const v1::NodeFaults& faults);

// {"runs": [{"run_id", "state", "round", "nodes", "world_size",
//  "restarts"}], "not_shown": N}
std::string RunListJson(const ServiceSnapshot& snapshot);

// The static files.
absl::string_view RunListHtml();
absl::string_view RunPageHtml();
absl::string_view PageScript();
absl::string_view PageStyle();

}  // namespace cpptorchrun::rdzv

#endif  // CPPTORCHRUN_RENDEZVOUS_JOB_PAGE_H_
