// The worker's side of in-place recovery (docs/DESIGN.md, "In-place
// recovery"): a thread that long-polls the launcher's word on this worker's
// round (agent.proto's AwaitRound) and keeps the newest. When the launcher
// says the round is changing (CHANGING) or that the group stops (STOP),
// `on_changing` is called at once from that thread, so that the binary
// aborts the collective in flight; the training thread then waits for the
// new round's environment (AwaitAssignment).
#ifndef CPPTORCHRUN_WORKER_AGENT_ROUND_WATCH_H_
#define CPPTORCHRUN_WORKER_AGENT_ROUND_WATCH_H_

#include <cstdint>
#include <functional>
#include <map>
#include <optional>
#include <string>
#include <thread>

#include "absl/base/thread_annotations.h"
#include "absl/status/statusor.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"
#include "worker/agent/heartbeat.h"

namespace cpptorchrun::worker {

struct RoundWatchOptions {
  int local_rank = 0;
  int64_t pid = 0;
  // Each long poll's bound (then it asks again).
  absl::Duration poll = absl::Seconds(10);
  // After a failed call (the launcher busy, restarting its service), the
  // next one waits this long; this many failures in a row end the watch.
  absl::Duration retry = absl::Milliseconds(100);
  int max_failures = 50;
  // A change at a step boundary (RoundUpdate.at_step_boundary) not taken
  // (TakeChange) within this long is escalated: `on_changing` aborts the
  // collective in flight, as for a plain CHANGING.
  absl::Duration boundary_bound = absl::Seconds(1);
};

// Thread-safe.
class RoundWatcher {
 public:
  // `client` is borrowed and must outlive the watcher.
  RoundWatcher(AgentClient* client, const RoundWatchOptions& options,
               std::function<void(const std::string& reason)> on_changing);
  // Cancels the poll in flight (AgentClient::CancelWaits) and joins.
  ~RoundWatcher();
  RoundWatcher(const RoundWatcher&) = delete;
  RoundWatcher& operator=(const RoundWatcher&) = delete;

  // The environment of the first round after `after_round` the launcher
  // assigns this worker, waiting at most `timeout`. Errors: Cancelled when
  // the launcher stops the group instead (STOP), Unavailable when the
  // launcher cannot be asked (no notices, or the watch gave up),
  // DeadlineExceeded when no round came in time.
  absl::StatusOr<std::map<std::string, std::string>> AwaitAssignment(int64_t after_round,
                                                                      absl::Duration timeout);

  // The launcher changes the round without a loss (a node grows back or
  // joins): the worker should leave `current_round` at its next step
  // boundary. True from such a CHANGING (or a newer round's ASSIGNED) on.
  bool ChangeAtBoundary(int64_t current_round) const;
  // Whether `round` is over as far as the launcher said: a newer round was
  // assigned, or a change (CHANGING) or a stop was announced after it was.
  bool Superseded(int64_t round) const;
  // The training thread leaves its round (at a boundary, or because a
  // collective failed): a pending change is no longer escalated, so that
  // the next round's communicator is never aborted for it.
  void TakeChange();

 private:
  void Loop();

  AgentClient* const client_;
  const RoundWatchOptions options_;
  const std::function<void(const std::string&)> on_changing_;
  mutable absl::Mutex mu_;
  bool stopping_ ABSL_GUARDED_BY(mu_) = false;
  bool ended_ ABSL_GUARDED_BY(mu_) = false;  // the watch gave up (why in end_)
  std::string end_ ABSL_GUARDED_BY(mu_);
  agent_pb::RoundUpdate latest_ ABSL_GUARDED_BY(mu_);
  int64_t latest_round_ ABSL_GUARDED_BY(mu_) = -1;  // RoundOf(latest_'s env); -1: none
  // A change at a step boundary, since when, until taken or escalated.
  std::optional<absl::Time> boundary_since_ ABSL_GUARDED_BY(mu_);
  std::thread thread_;
};

// The round `env` is for (contract::kRdzvRound, proto/worker_contract.h); -1 when absent or not a number. Pure.
int64_t RoundOf(const std::map<std::string, std::string>& env);

}  // namespace cpptorchrun::worker

#endif  // CPPTORCHRUN_WORKER_AGENT_ROUND_WATCH_H_
