// The supervision rules.
#include "launcher/agent/restart_policy.h"

#include <algorithm>

namespace cpptorchrun::launcher {

GroupCheck CheckGroup(const std::vector<WorkerView>& workers, absl::Time now, const HangOptions& hang,
                      absl::Duration monitor_interval) {
  GroupCheck check;
  check.next_check = now + monitor_interval;
  bool all_succeeded = true;
  for (int i = 0; i < static_cast<int>(workers.size()); ++i) {
    const WorkerView& w = workers[i];
    if (w.exited) {
      if (!w.status.success()) check.failed.push_back(i);
      all_succeeded = all_succeeded && w.status.success();
      continue;
    }
    all_succeeded = false;
    if (w.finished) continue;
    if (std::optional<absl::Time> look = StoppedLook(w.watch, now, hang)) {
      check.next_check = std::min(check.next_check, *look);
    }
    if (std::optional<absl::Time> deadline = HangTime(w.watch, now, hang)) {
      if (now >= *deadline) {
        check.hung.push_back(i);
        if (IsCulprit(w.watch, now, hang)) check.culprits.push_back(i);
      } else if (*deadline < check.next_check) {
        check.next_check = *deadline;
      }
    }
  }
  if (!check.failed.empty() || !check.hung.empty()) {
    check.outcome = GroupOutcome::kFailed;
  } else if (all_succeeded) {
    check.outcome = GroupOutcome::kSucceeded;
  }
  return check;
}

void NoteFailure(ProgressLedger& ledger, int64_t attempt_best) {
  if (attempt_best < 0) return;
  if (attempt_best > ledger.best_step) {
    // The first failure of a job that stepped is progress too.
    ledger.best_step = attempt_best;
    ledger.failures_without_progress = 0;
    return;
  }
  ++ledger.failures_without_progress;
}

NextAction DecideNext(StopCause cause, int restart_count, int max_restarts, const ProgressLedger& ledger,
                      int max_without_progress) {
  switch (cause) {
    case StopCause::kSucceeded:
      return NextAction::kExitSuccess;
    case StopCause::kWorkerFailed:
      if (restart_count >= max_restarts) return NextAction::kExitFailure;
      if (max_without_progress > 0 && ledger.failures_without_progress >= max_without_progress) {
        return NextAction::kExitNoProgress;
      }
      return NextAction::kRestartCounted;
    case StopCause::kMembershipChanged:
      return NextAction::kRestartFree;
    case StopCause::kRunClosed:
    case StopCause::kStopSignal:
    case StopCause::kAgentError:
      return NextAction::kExitFailure;
  }
  return NextAction::kExitFailure;
}

}  // namespace cpptorchrun::launcher
