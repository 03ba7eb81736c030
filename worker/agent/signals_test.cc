#include "worker/agent/signals.h"

#include <signal.h>

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

}  // namespace
}  // namespace cpptorchrun::worker
