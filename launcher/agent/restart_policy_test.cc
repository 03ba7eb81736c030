// Tests of the supervision rules with made-up times (no sleeping).
#include "launcher/agent/restart_policy.h"

#include <signal.h>

#include "gtest/gtest.h"

namespace cpptorchrun::launcher {
namespace {

const absl::Time kT0 = absl::FromUnixSeconds(1700000000);

// --worker_timeout given: hung after that many seconds of silence.
HangOptions Fixed(int seconds) {
  HangOptions o;
  o.fixed_silence = absl::Seconds(seconds);
  return o;
}

TEST(CheckGroup, RunningSucceededFailed) {
  std::vector<WorkerView> w(2);
  auto c = CheckGroup(w, kT0, Fixed(10), absl::Seconds(5));
  EXPECT_EQ(c.outcome, GroupOutcome::kRunning);
  EXPECT_EQ(c.next_check, kT0 + absl::Seconds(5));
  w[0].exited = true;
  EXPECT_EQ(CheckGroup(w, kT0, Fixed(10), absl::Seconds(5)).outcome, GroupOutcome::kRunning);
  w[1].exited = true;
  EXPECT_EQ(CheckGroup(w, kT0, Fixed(10), absl::Seconds(5)).outcome, GroupOutcome::kSucceeded);
  w[1].status = ExitStatus::Killed(SIGSEGV);
  c = CheckGroup(w, kT0, Fixed(10), absl::Seconds(5));
  EXPECT_EQ(c.outcome, GroupOutcome::kFailed);
  EXPECT_EQ(c.failed, std::vector<int>{1});
}

TEST(CheckGroup, HungAfterSilence) {
  std::vector<WorkerView> w(3);
  w[1].watch.last_heartbeat = kT0;
  w[2].watch.last_heartbeat = kT0 + absl::Seconds(3);
  // Before the timeout: running, and the next check is the first deadline.
  auto c = CheckGroup(w, kT0 + absl::Seconds(2), Fixed(4), absl::Seconds(60));
  EXPECT_EQ(c.outcome, GroupOutcome::kRunning);
  EXPECT_EQ(c.next_check, kT0 + absl::Seconds(4));
  c = CheckGroup(w, kT0 + absl::Seconds(4), Fixed(4), absl::Seconds(60));
  EXPECT_EQ(c.outcome, GroupOutcome::kFailed);
  EXPECT_EQ(c.hung, std::vector<int>{1});
  EXPECT_EQ(c.next_check, kT0 + absl::Seconds(7));
  // A worker that never heartbeated is never hung; one that finished neither.
  w[1].finished = true;
  c = CheckGroup(w, kT0 + absl::Seconds(5), Fixed(4), absl::Seconds(60));
  EXPECT_EQ(c.outcome, GroupOutcome::kRunning);
}

// A SIGSTOP shows first as silence: a worker is looked at once its
// heartbeat is late (1.5 periods), then every stopped_look while it is late
// or stopped (hang_policy.h), sooner than the monitor interval or its
// deadline. Under --worker_timeout, only silence counts.
TEST(CheckGroup, ALateOrStoppedWorkerIsLookedAtOften) {
  HangOptions o;
  std::vector<WorkerView> w(2);
  w[0].watch.last_heartbeat = kT0;
  w[1].watch.last_heartbeat = kT0;
  EXPECT_EQ(CheckGroup(w, kT0, o, absl::Seconds(5)).next_check, kT0 + absl::Milliseconds(1500));
  EXPECT_EQ(CheckGroup(w, kT0 + absl::Seconds(2), o, absl::Seconds(5)).next_check,
            kT0 + absl::Seconds(2) + o.stopped_look);
  w[0].watch.last_heartbeat = kT0 + absl::Seconds(2);
  w[1].watch.last_heartbeat = kT0 + absl::Seconds(2);
  w[1].watch.stopped_since = kT0 + absl::Seconds(2);
  EXPECT_EQ(CheckGroup(w, kT0 + absl::Seconds(2), o, absl::Seconds(5)).next_check,
            kT0 + absl::Seconds(2) + o.stopped_look);
  EXPECT_EQ(CheckGroup(w, kT0 + absl::Seconds(2), Fixed(60), absl::Seconds(5)).next_check,
            kT0 + absl::Seconds(2) + o.stopped_look);
  w[1].watch.stopped_since.reset();
  EXPECT_EQ(CheckGroup(w, kT0 + absl::Seconds(2), Fixed(60), absl::Seconds(5)).next_check, kT0 + absl::Seconds(7));
}

TEST(DecideNext, RestartsOnlyFailuresCount) {
  EXPECT_EQ(DecideNext(StopCause::kSucceeded, 0, 3), NextAction::kExitSuccess);
  EXPECT_EQ(DecideNext(StopCause::kWorkerFailed, 0, 3), NextAction::kRestartCounted);
  EXPECT_EQ(DecideNext(StopCause::kWorkerFailed, 2, 3), NextAction::kRestartCounted);
  EXPECT_EQ(DecideNext(StopCause::kWorkerFailed, 3, 3), NextAction::kExitFailure);
  EXPECT_EQ(DecideNext(StopCause::kWorkerFailed, 0, 0), NextAction::kExitFailure);
  EXPECT_EQ(DecideNext(StopCause::kMembershipChanged, 3, 3), NextAction::kRestartFree);
  EXPECT_EQ(DecideNext(StopCause::kRunClosed, 0, 3), NextAction::kExitFailure);
  EXPECT_EQ(DecideNext(StopCause::kStopSignal, 0, 3), NextAction::kExitFailure) << "a signal spends no restart";
  EXPECT_EQ(DecideNext(StopCause::kAgentError, 0, 3), NextAction::kExitFailure);
}

TEST(NoProgress, OnlyFailuresThatGainNoStepCount) {
  ProgressLedger l;
  NoteFailure(l, -1);  // a worker that reports no steps: not counted
  EXPECT_EQ(l.failures_without_progress, 0);
  NoteFailure(l, 500);  // the first failure of a job that stepped is progress
  EXPECT_EQ(l.best_step, 500);
  EXPECT_EQ(l.failures_without_progress, 0);
  NoteFailure(l, 480);  // resumed from a checkpoint, failed before 500
  NoteFailure(l, 500);
  EXPECT_EQ(l.failures_without_progress, 2);
  NoteFailure(l, 501);  // past the best: progress again
  EXPECT_EQ(l.failures_without_progress, 0);
  EXPECT_EQ(l.best_step, 501);
}

TEST(NoProgress, DecideNextGivesUpBeforeTheRestartsRunOut) {
  ProgressLedger l;
  l.best_step = 10;
  l.failures_without_progress = 3;
  EXPECT_EQ(DecideNext(StopCause::kWorkerFailed, 3, 100, l, 3), NextAction::kExitNoProgress);
  EXPECT_EQ(DecideNext(StopCause::kWorkerFailed, 3, 100, l, 4), NextAction::kRestartCounted);
  EXPECT_EQ(DecideNext(StopCause::kWorkerFailed, 3, 100, l, 0), NextAction::kRestartCounted) << "0: never";
  // Out of restarts is out of restarts, whatever the progress.
  EXPECT_EQ(DecideNext(StopCause::kWorkerFailed, 100, 100, l, 3), NextAction::kExitFailure);
  // Only worker failures: a membership change restarts for free.
  EXPECT_EQ(DecideNext(StopCause::kMembershipChanged, 3, 100, l, 3), NextAction::kRestartFree);
  EXPECT_EQ(kNoProgressExitCode, 78);
}

}  // namespace
}  // namespace cpptorchrun::launcher
