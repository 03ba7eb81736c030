// Tests of the straggler rule on made-up compute times.
#include "launcher/agent/straggler_policy.h"

#include "gtest/gtest.h"

namespace cpptorchrun::launcher {
namespace {

std::deque<double> Window(double value, size_t n = 10) { return std::deque<double>(n, value); }

TEST(Stragglers, ARankTwiceAsSlowAsItsPeersIsOne) {
  StragglerOptions o;
  std::vector<Straggler> s = FindStragglers({{0, Window(0.010)}, {1, Window(0.021)}, {2, Window(0.011)}}, o);
  ASSERT_EQ(s.size(), 1u);
  EXPECT_EQ(s[0].local_rank, 1);
  EXPECT_NEAR(s[0].slowdown, 0.021 / 0.0105, 1e-9);
}

TEST(Stragglers, AnEvenJobHasNone) {
  StragglerOptions o;
  // Noise of +-20% from heartbeat to heartbeat, as on a shared machine.
  std::deque<double> a, b;
  for (int i = 0; i < 10; ++i) {
    a.push_back(i % 2 == 0 ? 0.012 : 0.008);
    b.push_back(i % 3 == 0 ? 0.008 : 0.012);
  }
  EXPECT_TRUE(FindStragglers({{0, a}, {1, b}}, o).empty());
}

TEST(Stragglers, OnlyPersistentSlownessCounts) {
  StragglerOptions o;
  // A few slow beats (a page-cache miss, a checkpoint) do not move a median.
  std::deque<double> spiky = Window(0.010);
  spiky[2] = spiky[5] = spiky[7] = 0.1;
  EXPECT_TRUE(FindStragglers({{0, Window(0.010)}, {1, spiky}}, o).empty());
}

TEST(Stragglers, WindowsNotFullAreNotJudged) {
  StragglerOptions o;
  EXPECT_TRUE(FindStragglers({{0, Window(0.010)}, {1, Window(0.05, 9)}}, o).empty());
  EXPECT_TRUE(FindStragglers({{0, Window(0.010)}}, o).empty()) << "a rank alone has no peers";
  o.factor = 0;
  EXPECT_TRUE(FindStragglers({{0, Window(0.010)}, {1, Window(0.05)}}, o).empty()) << "off";
}

// The other nodes' ranks are peers too: the one rank of a node whose peer
// is on another node, and a node whose every rank is slow, are seen; a
// node's ranks as fast as the others' are not accused.
TEST(Stragglers, TheOtherNodesRanksArePeers) {
  StragglerOptions o;
  std::vector<Straggler> alone = FindStragglers({{0, Window(0.030)}}, o, {0.010});
  ASSERT_EQ(alone.size(), 1u);
  EXPECT_EQ(alone[0].local_rank, 0);
  EXPECT_NEAR(alone[0].slowdown, 3.0, 1e-9);
  std::vector<Straggler> whole = FindStragglers({{0, Window(0.030)}, {1, Window(0.031)}}, o, {0.010, 0.011, 0.010});
  EXPECT_EQ(whole.size(), 2u) << "a node whose every rank is slow";
  EXPECT_TRUE(FindStragglers({{0, Window(0.010)}}, o, {0.030}).empty()) << "the slow one is the other node's to say";
  EXPECT_TRUE(FindStragglers({{0, Window(0.030, 9)}}, o, {0.010}).empty()) << "its window is not full";
  EXPECT_EQ(WindowMedian(Window(0.01, 9), 10), std::nullopt);
  EXPECT_EQ(WindowMedian({0.5, 0.01, 0.03, 0.02}, 3), 0.02);
}

TEST(Stragglers, TheWindowKeepsTheNewest) {
  std::deque<double> w;
  for (int i = 0; i < 15; ++i) AddToWindow(w, i, 10);
  ASSERT_EQ(w.size(), 10u);
  EXPECT_EQ(w.front(), 5);
  EXPECT_EQ(w.back(), 14);
}

TEST(Stragglers, PolicyNames) {
  StragglerPolicy p;
  ASSERT_TRUE(ParseStragglerPolicy("replace", &p));
  EXPECT_EQ(p, StragglerPolicy::kReplace);
  ASSERT_TRUE(ParseStragglerPolicy("warn", &p));
  EXPECT_EQ(p, StragglerPolicy::kWarn);
  EXPECT_FALSE(ParseStragglerPolicy("kill", &p));
}

}  // namespace
}  // namespace cpptorchrun::launcher
