#include "base/signals.h"

#include <csignal>

#include "gtest/gtest.h"

namespace cpptorchrun {
namespace {

TEST(Signals, NamesAndNumbers) {
  EXPECT_EQ(SignalName(SIGKILL), "SIGKILL");
  EXPECT_EQ(SignalName(SIGSEGV), "SIGSEGV");
  EXPECT_EQ(*SignalFromName("usr1"), SIGUSR1);
  EXPECT_FALSE(SignalFromName("SIGNOPE").ok());
}

TEST(Signals, UnknownNumberIsNamedByItsValue) { EXPECT_EQ(SignalName(99), "SIG99"); }

}  // namespace
}  // namespace cpptorchrun
