#include "worker/agent/signals.h"

#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <atomic>

#include "absl/synchronization/notification.h"
#include "base/signals.h"
#include "gtest/gtest.h"

namespace cpptorchrun::worker {
namespace {

TEST(Signals, CountedAndTakenOnceEachByACounterMadeAfterThem) {
  InstallSignalCounters();
  InstallSignalCounters();  // idempotent
  ASSERT_EQ(raise(SIGUSR1), 0);  // before the counter: not its
  SignalCounter counter;
  EXPECT_TRUE(counter.TakeNew().empty());
  ASSERT_EQ(raise(SIGUSR1), 0);
  ASSERT_EQ(raise(SIGTERM), 0);  // counted, not fatal
  ASSERT_EQ(raise(SIGUSR1), 0);
  EXPECT_EQ(counter.TakeNew(), (std::vector<int>{SIGUSR1, SIGUSR1, SIGTERM}));
  EXPECT_TRUE(counter.TakeNew().empty());
  ASSERT_EQ(raise(SIGUSR2), 0);
  EXPECT_EQ(counter.TakeNew(), (std::vector<int>{SIGUSR2}));
  EXPECT_EQ(SignalsReceived(SIGUSR1), 3);
}

// A worker stuck in a collective after SIGTERM is let go at the bound; one
// that reaches a batch boundary acts on the signal itself.
TEST(SigtermDeadline, RunsOnlyForAWorkerThatReachesNoBoundary) {
  InstallSignalCounters();
  absl::Notification stuck;
  {
    SigtermDeadline deadline(absl::Milliseconds(50), [&] { stuck.Notify(); }, absl::Milliseconds(1));
    deadline.TrainingStarted();
    ASSERT_EQ(raise(SIGTERM), 0);
    EXPECT_TRUE(stuck.WaitForNotificationWithTimeout(absl::Seconds(60)));
  }
  std::atomic<bool> ran{false};
  {
    SigtermDeadline deadline(absl::Hours(1), [&] { ran = true; }, absl::Milliseconds(1));
    deadline.TrainingStarted();
    ASSERT_EQ(raise(SIGTERM), 0);
    deadline.AtBoundary();
    // The watcher ends without running it: the destructor joins it.
  }
  EXPECT_FALSE(ran.load());
  {
    // Before training (loading, bootstrap): at once, whatever the bound.
    absl::Notification at_once;
    SigtermDeadline deadline(absl::Hours(1), [&] { at_once.Notify(); }, absl::Milliseconds(1));
    ASSERT_EQ(raise(SIGTERM), 0);
    EXPECT_TRUE(at_once.WaitForNotificationWithTimeout(absl::Seconds(60)));
  }
  {
    // No SIGTERM: nothing, however long.
    SigtermDeadline deadline(absl::ZeroDuration(), [&] { ran = true; }, absl::Milliseconds(1));
  }
  EXPECT_FALSE(ran.load());
}

// The launcher's stop for a restart (sigqueue with the stop-now value, from
// the parent) ends the worker at once with 143; the same value from anyone
// else, or a plain SIGTERM, is only counted.
TEST(Signals, TheLaunchersStopNowEndsTheWorkerAtOnce) {
  int pipe_fds[2];
  ASSERT_EQ(pipe(pipe_fds), 0);
  const pid_t child = fork();
  ASSERT_GE(child, 0);
  if (child == 0) {
    close(pipe_fds[0]);
    InstallSignalCounters();
    const int64_t before = SignalsReceived(SIGTERM);
    sigval value{};
    value.sival_int = kStopNowSignalValue;
    sigqueue(getpid(), SIGTERM, value);  // from itself, not its parent
    // SIGTERM blocked but while waiting (sigsuspend), so none is missed.
    sigset_t term, waiting;
    sigemptyset(&term);
    sigaddset(&term, SIGTERM);
    sigprocmask(SIG_BLOCK, &term, &waiting);
    sigdelset(&waiting, SIGTERM);
    if (SignalsReceived(SIGTERM) != before + 1 || write(pipe_fds[1], "r", 1) != 1) _exit(2);
    bool told = false;
    for (;;) {
      if (!told && SignalsReceived(SIGTERM) == before + 2) {
        if (write(pipe_fds[1], "c", 1) != 1) _exit(3);
        told = true;
      }
      sigsuspend(&waiting);
    }
  }
  close(pipe_fds[1]);
  char c = 0;
  ASSERT_EQ(read(pipe_fds[0], &c, 1), 1);
  EXPECT_EQ(c, 'r') << "a stop-now value not from the parent is only counted";
  ASSERT_EQ(kill(child, SIGTERM), 0);
  ASSERT_EQ(read(pipe_fds[0], &c, 1), 1);
  EXPECT_EQ(c, 'c') << "a plain SIGTERM is counted, and the worker goes on";
  sigval value{};
  value.sival_int = kStopNowSignalValue;
  ASSERT_EQ(sigqueue(child, SIGTERM, value), 0);
  int status = 0;
  ASSERT_EQ(waitpid(child, &status, 0), child);
  ASSERT_TRUE(WIFEXITED(status));
  EXPECT_EQ(WEXITSTATUS(status), 128 + SIGTERM);
  close(pipe_fds[0]);
}

}  // namespace
}  // namespace cpptorchrun::worker
