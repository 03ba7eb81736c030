#include "launcher/agent/round_notices.h"

#include <vector>

#include "gtest/gtest.h"

namespace cpptorchrun::launcher {
namespace {

using Update = RoundNotices::Update;

TEST(RoundNotices, AnUnknownWorkerIsRunningAtGenerationZero) {
  RoundNotices n;
  EXPECT_EQ(n.Current(0, 100).state(), Update::RUNNING);
  EXPECT_EQ(n.Current(0, 100).generation(), 0);
}

TEST(RoundNotices, AWaiterIsAnsweredAtTheNextChangeOfItsSlotOnly) {
  RoundNotices n;
  std::vector<Update> got0, got1;
  EXPECT_NE(n.Watch(0, 100, 0, [&](const Update& u) { got0.push_back(u); }), 0);
  EXPECT_NE(n.Watch(1, 200, 0, [&](const Update& u) { got1.push_back(u); }), 0);
  EXPECT_EQ(n.waiting(), 2);
  n.Set(0, 100, Update::CHANGING, "rank 1 failed");
  ASSERT_EQ(got0.size(), 1u);
  EXPECT_EQ(got0[0].state(), Update::CHANGING);
  EXPECT_EQ(got0[0].generation(), 1);
  EXPECT_EQ(got0[0].reason(), "rank 1 failed");
  EXPECT_TRUE(got1.empty());
  EXPECT_EQ(n.waiting(), 1);
}

TEST(RoundNotices, ANewerUpdateIsAnsweredAtOnceAndCarriesTheEnvironment) {
  RoundNotices n;
  n.Set(0, 100, Update::CHANGING, "x");
  n.Set(0, 100, Update::ASSIGNED, "round 3", {{"RANK", "0"}, {"WORLD_SIZE", "2"}});
  std::vector<Update> got;
  EXPECT_EQ(n.Watch(0, 100, 1, [&](const Update& u) { got.push_back(u); }), 0);
  ASSERT_EQ(got.size(), 1u);
  EXPECT_EQ(got[0].state(), Update::ASSIGNED);
  EXPECT_EQ(got[0].generation(), 2);
  EXPECT_EQ(got[0].env().at("WORLD_SIZE"), "2");
  // Known already: waits.
  EXPECT_NE(n.Watch(0, 100, 2, [&](const Update& u) { got.push_back(u); }), 0);
  EXPECT_EQ(got.size(), 1u);
}

TEST(RoundNotices, AnotherPidOfTheSlotIsNotTold) {
  RoundNotices n;
  std::vector<Update> got;
  n.Watch(0, 999, 0, [&](const Update& u) { got.push_back(u); });
  n.Set(0, 100, Update::CHANGING, "x");
  EXPECT_TRUE(got.empty());
  EXPECT_EQ(n.Current(0, 999).generation(), 0);
}

TEST(RoundNotices, UnwatchedWaitersAreNeverCalled) {
  RoundNotices n;
  int calls = 0;
  const int64_t id = n.Watch(0, 100, 0, [&](const Update&) { ++calls; });
  n.Unwatch(id);
  n.Set(0, 100, Update::CHANGING, "x");
  EXPECT_EQ(calls, 0);
  EXPECT_EQ(n.waiting(), 0);
}

TEST(RoundNotices, StopReachesEveryWaiterAndOutranksTheSlot) {
  RoundNotices n;
  n.Set(0, 100, Update::ASSIGNED, "r", {{"RANK", "0"}});
  std::vector<Update> got;
  n.Watch(0, 100, 1, [&](const Update& u) { got.push_back(u); });
  n.Watch(1, 200, 0, [&](const Update& u) { got.push_back(u); });
  n.StopAll("no in-place recovery: rank 2 never declared it");
  ASSERT_EQ(got.size(), 2u);
  for (const Update& u : got) {
    EXPECT_EQ(u.state(), Update::STOP);
    EXPECT_TRUE(u.env().empty());
  }
  EXPECT_GT(got[0].generation(), 1);
  EXPECT_EQ(n.Current(5, 1).state(), Update::STOP);
  n.Reset();
  EXPECT_EQ(n.Current(0, 100).state(), Update::RUNNING);
  EXPECT_EQ(n.Current(0, 100).generation(), 0);
}

TEST(RoundNotices, ResetAnswersWaitersWithStop) {
  RoundNotices n;
  std::vector<Update> got;
  n.Watch(0, 100, 0, [&](const Update& u) { got.push_back(u); });
  n.Reset();
  ASSERT_EQ(got.size(), 1u);
  EXPECT_EQ(got[0].state(), Update::STOP);
  EXPECT_EQ(n.waiting(), 0);
}

}  // namespace
}  // namespace cpptorchrun::launcher
