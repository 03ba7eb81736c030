#include "base/flags.h"

#include "gtest/gtest.h"

namespace cpptorchrun::base {
namespace {

TEST(ParseBool, EveryTrueAndFalseSpelling) {
  for (const char* t : {"1", "true", "True", "TRUE", "yes", "on", "On"}) {
    auto b = ParseBool(t, "x");
    ASSERT_TRUE(b.ok()) << t;
    EXPECT_TRUE(*b) << t;
  }
  for (const char* f : {"0", "false", "False", "no", "off", ""}) {
    auto b = ParseBool(f, "x");
    ASSERT_TRUE(b.ok()) << f;
    EXPECT_FALSE(*b) << f;
  }
}

TEST(ParseBool, AnythingElseNamesTheFlag) {
  auto b = ParseBool("maybe", "--rdzv_conf is_host");
  ASSERT_FALSE(b.ok());
  EXPECT_EQ(b.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_NE(b.status().message().find("--rdzv_conf is_host"), std::string::npos);
  EXPECT_NE(b.status().message().find("maybe"), std::string::npos);
}

}  // namespace
}  // namespace cpptorchrun::base
