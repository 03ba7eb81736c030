// Tests of the health check's rules on made-up times.
#include "launcher/agent/health_check.h"

#include "gtest/gtest.h"

namespace cpptorchrun::launcher {
namespace {

TEST(HealthCheck, TheLastLineSaysWhy) {
  EXPECT_EQ(LastLine("checking GPUs\nGPU 3: 12 uncorrectable ECC errors\n"), "GPU 3: 12 uncorrectable ECC errors");
  EXPECT_EQ(LastLine("a\nb\r\n\n  \n"), "b");
  EXPECT_EQ(LastLine("only"), "only");
  EXPECT_EQ(LastLine(""), "");
  EXPECT_EQ(LastLine("\n\n"), "");
  EXPECT_EQ(LastLine(std::string(500, 'x')).size(), 200u);
}

TEST(HealthCheck, PassJoinsFailRetriesUntilGivingUp) {
  const absl::Time t0 = absl::FromUnixSeconds(1700000000);
  HealthCheckOptions o;  // retry every 10 s, give up after 10 min out
  EXPECT_EQ(DecideHealth(true, t0, t0 + absl::Hours(1), o), HealthNext::kJoin);
  EXPECT_EQ(DecideHealth(false, t0, t0, o), HealthNext::kRetry);
  EXPECT_EQ(DecideHealth(false, t0, t0 + absl::Seconds(590), o), HealthNext::kRetry);
  // The next try would come after 10 min out: give up now.
  EXPECT_EQ(DecideHealth(false, t0, t0 + absl::Seconds(591), o), HealthNext::kGiveUp);
}

}  // namespace
}  // namespace cpptorchrun::launcher
