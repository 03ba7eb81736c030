#include "worker/agent/startup.h"

#include "gtest/gtest.h"

namespace cpptorchrun::worker {
namespace {

TEST(StartupTest, ParsesStartTicksAfterTheCommandName) {
  // The command name holds ") " and spaces: fields are counted after the last ')'.
  const std::string line =
      "4242 (a) b (c) S 1 4242 4242 0 -1 4194560 100 0 0 0 5 3 0 0 20 0 1 0 987654 1000 50 "
      "18446744073709551615";
  EXPECT_EQ(ParseStartTicks(line), 987654);
}

TEST(StartupTest, RejectsMalformedLines) {
  EXPECT_EQ(ParseStartTicks(""), std::nullopt);
  EXPECT_EQ(ParseStartTicks("12 (x) S 1 2 3"), std::nullopt);
  EXPECT_EQ(ParseStartTicks("12 x S 1 2 3 4 5 6 7 8 9 10 11 12 13 14 15 16 17 18 19 20"), std::nullopt);
  EXPECT_EQ(ParseStartTicks("1 (x) S 1 1 1 0 -1 0 0 0 0 0 0 0 0 0 20 0 1 0 notanumber 1"), std::nullopt);
}

TEST(StartupTest, ThisProcessStartedInThePast) {
  std::optional<double> since = SecondsSinceProcessStart();
  ASSERT_TRUE(since.has_value()) << "/proc/self/stat unreadable";
  EXPECT_GE(*since, 0.0);
  // A test process is younger than a day; a unit mix-up (ticks as seconds,
  // jiffies as ms) would be off by orders of magnitude.
  EXPECT_LT(*since, 86400.0);
}

TEST(StartupTest, FormatsTheMeasuredPhasesOnly) {
  StartupPhases p;
  EXPECT_EQ(FormatStartup(p), "started");
  p.total = 1.234;
  p.before_main = 0.5;
  p.communicator = 0.25;
  EXPECT_EQ(FormatStartup(p), "started in 1.23 s (before main 0.50 s, communicator 0.25 s)");
}

}  // namespace
}  // namespace cpptorchrun::worker
