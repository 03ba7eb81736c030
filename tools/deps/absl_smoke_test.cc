// Smoke test: Abseil's Status/StatusOr link and behave.
#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/str_cat.h"
#include "gtest/gtest.h"

namespace {

absl::StatusOr<int> ParsePositive(int v) {
  if (v <= 0) return absl::InvalidArgumentError(absl::StrCat("not positive: ", v));
  return v * 2;
}

TEST(AbslSmoke, StatusOrCarriesValueOrError) {
  auto ok = ParsePositive(21);
  ASSERT_TRUE(ok.ok());
  EXPECT_EQ(*ok, 42);
  auto bad = ParsePositive(-1);
  ASSERT_FALSE(bad.ok());
  EXPECT_EQ(bad.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(bad.status().message(), "not positive: -1");
}

}  // namespace
