// The supervision rules as pure functions of (now, state, options): whether
// a worker group is running, succeeded or failed (a worker exited non-zero
// or is hung: hang_policy.h), when to look again, and what to do
// after a group stops.
#ifndef CPPTORCHRUN_LAUNCHER_RESTART_POLICY_H_
#define CPPTORCHRUN_LAUNCHER_RESTART_POLICY_H_

#include <optional>
#include <string>
#include <vector>

#include "absl/time/time.h"
#include "launcher/agent/hang_policy.h"
#include "launcher/workers/process.h"

namespace cpptorchrun::launcher {

struct WorkerView {
  bool exited = false;
  ExitStatus status;
  bool finished = false;  // sent FINISHED
  RankWatch watch;        // what the hang rules judge (hang_policy.h)
};

enum class GroupOutcome { kRunning, kSucceeded, kFailed };

struct GroupCheck {
  GroupOutcome outcome = GroupOutcome::kRunning;
  std::vector<int> failed;  // local ranks that exited non-zero
  std::vector<int> hung;    // local ranks past their hang deadline (hang_policy.h)
  std::vector<int> culprits;  // those of them stuck themselves (IsCulprit), not waiting on a peer
  absl::Time next_check;    // when to look again at the latest
};

// kFailed when any worker exited non-zero or is hung (IsHung); kSucceeded
// when all exited 0; else kRunning. next_check is the earliest hang
// deadline, bounded by now + monitor_interval.
GroupCheck CheckGroup(const std::vector<WorkerView>& workers, absl::Time now, const HangOptions& hang,
                      absl::Duration monitor_interval);

enum class StopCause {
  kSucceeded,
  kWorkerFailed,       // exited non-zero, crashed or hung
  kMembershipChanged,  // a node died, left, or waits to join: the round ended
  kRunClosed,          // another node closed the run (out of restarts)
  kStopSignal,         // the launcher was told to stop (SIGTERM, SIGINT, ...)
  kAgentError,         // the agent cannot go on (no free port, the rendezvous failed)
};

enum class NextAction {
  kExitSuccess,
  kRestartCounted,  // re-rendezvous; TORCHELASTIC_RESTART_COUNT + 1
  kRestartFree,     // re-rendezvous without consuming --max_restarts
  kExitFailure,
  kExitNoProgress,  // kExitFailure with kNoProgressExitCode: do not requeue
};

// The launcher's exit code when failures keep coming and no step is ever
// gained (docs/FLAGS.md, --failures_without_progress): 78, sysexits'
// EX_CONFIG, "running it again as it is will not help"; a scheduler's
// script tests it to stop requeueing.
inline constexpr int kNoProgressExitCode = 78;

// Progress across restarts: the furthest global step any local worker
// reported, and the worker failures in a row that did not pass it.
struct ProgressLedger {
  int64_t best_step = -1;
  int failures_without_progress = 0;
};

// After a worker failure whose group had reached `attempt_best` (-1: its
// workers report no steps, as a Python script's): a step beyond the best is
// progress and resets the count; none counts one more failure without
// progress. Workers that never report steps are never counted.
void NoteFailure(ProgressLedger& ledger, int64_t attempt_best);

// Every way a worker group stops goes through this one rule: only a
// worker's failure spends a restart; a membership change re-rendezvouses for
// free; a stop signal, a closed run or an agent error ends the launcher.
// Before --max_restarts runs out, `max_without_progress` (> 0) failures in
// a row without progress (ProgressLedger) end the launcher with
// kExitNoProgress.
NextAction DecideNext(StopCause cause, int restart_count, int max_restarts, const ProgressLedger& ledger = {},
                      int max_without_progress = 0);

}  // namespace cpptorchrun::launcher

#endif  // CPPTORCHRUN_LAUNCHER_RESTART_POLICY_H_
