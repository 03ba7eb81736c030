// Tests of the held-call registry alone, with made-up times.
#include "rendezvous/held_calls.h"

#include <vector>

#include "gtest/gtest.h"

namespace cpptorchrun::rdzv {
namespace {

const absl::Time kT0 = absl::UnixEpoch() + absl::Hours(1);

TEST(HeldCalls, CallsFallDueInDeadlineOrder) {
  HeldCalls calls;
  HeldCall late("a"), early("b"), same("a");
  calls.Hold(&late, kT0 + absl::Seconds(5));
  calls.Hold(&early, kT0 + absl::Seconds(1));
  calls.Hold(&same, kT0 + absl::Seconds(5));
  EXPECT_EQ(calls.size(), 3);
  EXPECT_EQ(calls.First(), &early);
  EXPECT_EQ(calls.Due(kT0), nullptr);
  EXPECT_EQ(calls.Due(kT0 + absl::Seconds(1)), &early);
  ASSERT_TRUE(calls.Release(&early));
  EXPECT_EQ(calls.Due(kT0 + absl::Seconds(4)), nullptr);
  HeldCall* next = calls.Due(kT0 + absl::Seconds(5));
  ASSERT_NE(next, nullptr);
  EXPECT_TRUE(next == &late || next == &same);
}

TEST(HeldCalls, ACallIsReleasedOnlyOnce) {
  HeldCalls calls;
  HeldCall call("run");
  EXPECT_FALSE(calls.Release(&call)) << "never held";
  calls.Hold(&call, kT0);
  EXPECT_TRUE(call.held);
  EXPECT_TRUE(calls.Release(&call));
  EXPECT_FALSE(call.held);
  EXPECT_FALSE(calls.Release(&call)) << "whoever released it first answers it";
  EXPECT_EQ(calls.size(), 0);
  EXPECT_EQ(calls.First(), nullptr);
}

TEST(HeldCalls, CountsAndListsTheCallsOfEachRun) {
  HeldCalls calls;
  HeldCall a1("a"), a2("a"), b("b");
  calls.Hold(&a2, kT0 + absl::Seconds(2));
  calls.Hold(&b, kT0);
  calls.Hold(&a1, kT0 + absl::Seconds(1));
  EXPECT_EQ(calls.HeldFor("a"), 2);
  EXPECT_EQ(calls.HeldFor("b"), 1);
  EXPECT_EQ(calls.HeldFor("c"), 0);
  EXPECT_EQ(calls.OfRun("a"), (std::vector<HeldCall*>{&a1, &a2}));
  EXPECT_TRUE(calls.OfRun("c").empty());
  calls.Release(&b);
  EXPECT_EQ(calls.HeldFor("b"), 0);
  EXPECT_TRUE(calls.OfRun("b").empty());
}

}  // namespace
}  // namespace cpptorchrun::rdzv
