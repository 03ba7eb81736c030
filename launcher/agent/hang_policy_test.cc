// Tests of the adaptive hang deadline on made-up times (no sleeping).
#include "launcher/agent/hang_policy.h"

#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace cpptorchrun::launcher {
namespace {

const absl::Time kT0 = absl::FromUnixSeconds(1700000000);

// A rank whose heartbeats stopped at `last_heartbeat` (a culprit once that
// is 3 periods old), not frozen.
RankWatch Watch(const StepProgress& p, std::optional<absl::Time> last_heartbeat, bool frozen = false) {
  return RankWatch{p, last_heartbeat, frozen};
}

// Heartbeats every `period` for `beats` beats, `steps_per_beat` steps each,
// starting at step 0 at `*now`; advances `*now`.
void Beat(StepProgress& p, absl::Time* now, absl::Duration period, int beats, int64_t steps_per_beat,
          int64_t total = 100000) {
  for (int i = 0; i < beats; ++i) {
    *now += period;
    ObserveStep(p, *now, p.step < 0 ? 0 : p.step + steps_per_beat, total);
  }
}

TEST(HangPolicy, BeforeTheFirstStepTheStartupDeadline) {
  HangOptions o;
  StepProgress p;
  ObserveStep(p, kT0, 0, 1000);
  EXPECT_FALSE(p.stepping);
  EXPECT_EQ(HangDeadline(p, o), absl::Seconds(300));
  EXPECT_FALSE(IsHung(Watch(p, kT0), kT0 + absl::Seconds(299), o));
  EXPECT_TRUE(IsHung(Watch(p, kT0), kT0 + absl::Seconds(300), o));
}

TEST(HangPolicy, AFastJobIsHungAfterTheFloor) {
  HangOptions o;
  StepProgress p;
  absl::Time now = kT0;
  ObserveStep(p, now, 0, 100000);
  // 30 ms steps: about 33 per 1 s heartbeat.
  Beat(p, &now, absl::Seconds(1), 20, 33);
  ASSERT_TRUE(p.stepping);
  EXPECT_NEAR(p.recent_step_seconds.back(), 1.0 / 33, 1e-9);
  EXPECT_EQ(HangDeadline(p, o), absl::Seconds(10));
  EXPECT_FALSE(IsHung(Watch(p, now), now + absl::Seconds(9), o));
  EXPECT_TRUE(IsHung(Watch(p, now), now + absl::Seconds(10), o));
  EXPECT_EQ(HangTime(Watch(p, now), now + absl::Seconds(9), o), now + absl::Seconds(10));
}

TEST(HangPolicy, ASlowStepGetsAMultipleOfItself) {
  HangOptions o;
  StepProgress p;
  absl::Time now = kT0;
  ObserveStep(p, now, 0, 100);
  Beat(p, &now, absl::Seconds(60), 5, 1);
  // 10 x 60 s + two heartbeat periods.
  EXPECT_EQ(HangDeadline(p, o), absl::Seconds(602));
  EXPECT_FALSE(IsHung(Watch(p, now), now + absl::Seconds(601), o));
  // And never more than the ceiling.
  Beat(p, &now, absl::Minutes(10), 3, 1);
  EXPECT_EQ(HangDeadline(p, o), absl::Minutes(30));
}

TEST(HangPolicy, AGradualTenfoldSlowdownIsNeverHung) {
  HangOptions o;
  o.floor = absl::Seconds(1);  // so that the adaptive part, not the floor, decides
  StepProgress p;
  absl::Time now = kT0;
  ObserveStep(p, now, 0, 100000);
  // Steps of 0.5 s slowing by 1% per step to about 5 s.
  double step = 0.5;
  while (step < 5) {
    const absl::Time next = now + absl::Seconds(step);
    // Looked at just before each step completes: never hung.
    ASSERT_FALSE(IsHung(Watch(p, now), next - absl::Milliseconds(1), o)) << "step of " << step << " s";
    now = next;
    ObserveStep(p, now, p.step + 1, 100000);
    step *= 1.01;
  }
  EXPECT_GE(HangDeadline(p, o), absl::Seconds(45));
}

TEST(HangPolicy, AfterTheLastStepTheStartupDeadlineAgain) {
  HangOptions o;
  StepProgress p;
  absl::Time now = kT0;
  ObserveStep(p, now, 0, 40);
  Beat(p, &now, absl::Seconds(1), 4, 10, 40);
  EXPECT_EQ(p.step, 40);
  EXPECT_FALSE(p.stepping);  // evaluating, writing the last checkpoint
  EXPECT_EQ(HangDeadline(p, o), absl::Seconds(300));
}

TEST(HangPolicy, AStepGoingBackRestartsTheWindow) {
  HangOptions o;
  StepProgress p;
  absl::Time now = kT0;
  ObserveStep(p, now, 0, 1000);
  Beat(p, &now, absl::Seconds(1), 5, 1);
  ASSERT_FALSE(p.recent_step_seconds.empty());
  now += absl::Seconds(1);
  ObserveStep(p, now, 2, 1000);  // a restarted worker resumed from step 2
  EXPECT_TRUE(p.recent_step_seconds.empty());
  EXPECT_FALSE(p.stepping);
  EXPECT_EQ(HangDeadline(p, o), absl::Seconds(300));
}

TEST(HangPolicy, TheWindowKeepsOnlyRecentSteps) {
  HangOptions o;
  o.floor = absl::Seconds(1);
  StepProgress p;
  absl::Time now = kT0;
  ObserveStep(p, now, 0, 1000000);
  Beat(p, &now, absl::Seconds(1), 2, 1);   // 1 s steps, then...
  Beat(p, &now, absl::Seconds(1), 40, 10);  // ... 0.1 s steps push them out
  EXPECT_EQ(p.recent_step_seconds.size(), kStepWindow);
  EXPECT_EQ(HangDeadline(p, o), absl::Seconds(3));  // 10 x 0.1 s + 2 heartbeats
}

TEST(HangPolicy, AnExplicitWorkerTimeoutIsSilenceOnly) {
  HangOptions o;
  o.fixed_silence = absl::Seconds(60);
  StepProgress p;
  absl::Time now = kT0;
  ObserveStep(p, now, 0, 1000);
  Beat(p, &now, absl::Seconds(1), 5, 1);
  // No step for 59 s but heartbeats: not hung; the rule counts silence.
  EXPECT_FALSE(IsHung(Watch(p, now + absl::Seconds(50)), now + absl::Seconds(109), o));
  EXPECT_TRUE(IsHung(Watch(p, now + absl::Seconds(50)), now + absl::Seconds(110), o));
}

TEST(HangPolicy, ARankStillHeartbeatingWaitsTwiceAsLong) {
  HangOptions o;
  StepProgress p;
  absl::Time now = kT0;
  ObserveStep(p, now, 0, 100000);
  Beat(p, &now, absl::Seconds(1), 20, 33);
  const absl::Time stuck = now;
  // Heartbeats keep coming (it waits in a collective for a peer).
  RankWatch waiting = Watch(p, stuck + absl::Seconds(15));
  EXPECT_FALSE(IsCulprit(waiting, stuck + absl::Seconds(15), o));
  EXPECT_FALSE(IsHung(waiting, stuck + absl::Seconds(15), o));
  EXPECT_EQ(HangTime(waiting, stuck + absl::Seconds(15), o), stuck + absl::Seconds(20));
  // The same rank frozen (SIGSTOP, D state) is the culprit at the floor.
  RankWatch frozen = Watch(p, stuck + absl::Seconds(10), /*frozen=*/true);
  EXPECT_TRUE(IsCulprit(frozen, stuck + absl::Seconds(10), o));
  EXPECT_TRUE(IsHung(frozen, stuck + absl::Seconds(10), o));
  EXPECT_THAT(HungMessage(frozen, stuck + absl::Seconds(10), o), ::testing::HasSubstr("step 660 has not advanced for 10s"));
  EXPECT_THAT(HungMessage(Watch(p, stuck + absl::Seconds(20)), stuck + absl::Seconds(20), o),
              ::testing::HasSubstr("x2 while it still heartbeats"));
}

TEST(HangPolicy, TheFirstStepEventStartsTheStepClockWithItsOwnTime) {
  HangOptions o;
  StepProgress p;
  absl::Time now = kT0;
  ObserveStep(p, now, 0, 0);  // a heartbeat before the first step
  EXPECT_FALSE(p.stepping);
  now += absl::Seconds(3);
  ObserveFirstStep(p, now, 1, absl::Seconds(2));
  EXPECT_TRUE(p.stepping);
  EXPECT_EQ(p.step, 1);
  EXPECT_EQ(HangDeadline(p, o), absl::Seconds(22));  // 10 x 2 s + 2 heartbeats
  // Stopped right after it: hung 22 s later, not after the start-up 300 s.
  EXPECT_TRUE(IsHung(Watch(p, now), now + absl::Seconds(22), o));
  // The next heartbeats measure steps as usual.
  now += absl::Seconds(1);
  ObserveStep(p, now, 31, 1000);
  ASSERT_EQ(p.recent_step_seconds.size(), 1u);  // the measured step replaces the estimate
  EXPECT_NEAR(p.recent_step_seconds.back(), 1.0 / 30, 1e-9);
  EXPECT_EQ(HangDeadline(p, o), absl::Seconds(10));
}

TEST(HangPolicy, NoHeartbeatIsNeverHungForSlownessOnly) {
  HangOptions o;
  StepProgress p;
  EXPECT_FALSE(IsHung(Watch(p, std::nullopt), kT0 + absl::Hours(10), o));
  EXPECT_FALSE(HangTime(Watch(p, std::nullopt), kT0, o).has_value());
}

// A worker without heartbeats (a Python script) whose process is stopped
// (SIGSTOP) at every look for the floor is hung, and the culprit.
TEST(HangPolicy, NoHeartbeatButStoppedForTheFloorIsHung) {
  HangOptions o;
  RankWatch r;
  r.stopped_since = kT0;
  EXPECT_EQ(HangTime(r, kT0, o), kT0 + absl::Seconds(10));
  EXPECT_FALSE(IsHung(r, kT0 + absl::Seconds(9.9), o));
  EXPECT_TRUE(IsHung(r, kT0 + absl::Seconds(10), o));
  EXPECT_TRUE(IsCulprit(r, kT0 + absl::Seconds(10), o));
  EXPECT_EQ(HungMessage(r, kT0 + absl::Seconds(10.5), o),
            "hung: its process has been stopped (T) for 10.5s (a worker without heartbeats: 10s stopped is a "
            "hang); killed");
  // --worker_timeout (silence of heartbeats) does not change it.
  o.fixed_silence = absl::Seconds(60);
  EXPECT_EQ(HangTime(r, kT0, o), kT0 + absl::Seconds(10));
}

// Two ranks whose steps stalled at the same moment, both still heartbeating:
// the one whose flight recorder is behind the job's never issued the
// collective the other waits in. It is the culprit at its deadline; the
// other waits twice as long.
TEST(HangPolicy, ARankBehindTheJobsCollectivesIsTheCulprit) {
  HangOptions o;
  StepProgress p;
  absl::Time now = kT0;
  Beat(p, &now, absl::Seconds(1), 20, 30, 100000);
  const absl::Time stalled = now;
  RankWatch behind = Watch(p, stalled + absl::Seconds(9));
  behind.collective_seq = 41;
  behind.job_collective_seq = 42;
  RankWatch waiting = behind;
  waiting.collective_seq = 42;
  EXPECT_FALSE(BehindInCollectives(waiting));
  EXPECT_TRUE(BehindInCollectives(behind));
  const absl::Time at = stalled + HangDeadline(p, o);
  EXPECT_TRUE(IsHung(behind, at, o));
  EXPECT_FALSE(IsHung(waiting, at, o));
  EXPECT_TRUE(IsHung(waiting, stalled + 2 * HangDeadline(p, o), o));
  EXPECT_NE(HungMessage(behind, at, o).find("it never issued collective 42 that its peers wait in (its newest: 41)"),
            std::string::npos)
      << HungMessage(behind, at, o);
  // Whether the job's collectives are needed: only past the deadline, for a
  // rank that heartbeats and is not a culprit already.
  RankWatch unknown = waiting;
  unknown.job_collective_seq = 0;
  EXPECT_FALSE(NeedsJobCollectives(unknown, at - absl::Milliseconds(1), o));
  EXPECT_TRUE(NeedsJobCollectives(unknown, at, o));
  unknown.frozen = true;
  EXPECT_FALSE(NeedsJobCollectives(unknown, at, o));
}

}  // namespace
}  // namespace cpptorchrun::launcher
