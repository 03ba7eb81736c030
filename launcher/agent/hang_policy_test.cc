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

// A stepping rank whose process is stopped (SIGSTOP) at every look: hung
// once stopped at every look for `stopped_for` (1 s) and without an advance
// for 10 x its step plus two heartbeats, at least the stopped floor (2 s),
// not the floor (10 s).
TEST(HangPolicy, AStoppedRankIsHungAfterTheStoppedFloor) {
  HangOptions o;
  StepProgress p;
  absl::Time now = kT0;
  ObserveStep(p, now, 0, 100000);
  Beat(p, &now, absl::Seconds(1), 20, 33);  // 30 ms steps
  const absl::Time last = now;
  RankWatch r = Watch(p, last, /*frozen=*/true);
  r.stopped_since = last + absl::Milliseconds(500);
  // 10 x 1/33 s + 2 heartbeats = 2.3 s from the last advance, and stopped
  // at every look for 1 s.
  const absl::Duration deadline = absl::Seconds(10.0 / 33) + absl::Seconds(2);
  EXPECT_EQ(RankDeadline(r, o), deadline);
  EXPECT_EQ(HangTime(r, last + absl::Seconds(1), o), last + deadline);
  EXPECT_FALSE(IsHung(r, last + deadline - absl::Milliseconds(1), o));
  EXPECT_TRUE(IsHung(r, last + deadline, o));
  EXPECT_TRUE(IsCulprit(r, last + deadline, o));
  EXPECT_THAT(HungMessage(r, last + absl::Seconds(3), o),
              ::testing::HasSubstr("deadline 2.30303"));
  EXPECT_THAT(HungMessage(r, last + absl::Seconds(3), o),
              ::testing::HasSubstr("its process stopped (T) at every look for 2.5s"));
  // Seen stopped only now (a look after a run): 1 s more at every look.
  r.stopped_since = last + absl::Seconds(5);
  EXPECT_EQ(HangTime(r, last + absl::Seconds(5), o), last + absl::Seconds(6));
  // The same rank in uninterruptible sleep (D, maybe brief I/O): the floor.
  r.stopped_since.reset();
  EXPECT_EQ(HangTime(r, last + absl::Seconds(5), o), last + absl::Seconds(10));
}

// Stopped or not, a slow step keeps its own deadline (10 x 60 s + 2 s).
TEST(HangPolicy, AStoppedSlowStepKeepsItsMultiple) {
  HangOptions o;
  StepProgress p;
  absl::Time now = kT0;
  ObserveStep(p, now, 0, 100);
  Beat(p, &now, absl::Seconds(60), 5, 1);
  RankWatch r = Watch(p, now, /*frozen=*/true);
  r.stopped_since = now;
  EXPECT_EQ(RankDeadline(r, o), absl::Seconds(602));
  EXPECT_FALSE(IsHung(r, now + absl::Seconds(601), o));
  EXPECT_TRUE(IsHung(r, now + absl::Seconds(602), o));
}

// Before its first step a stopped rank is hung once stopped at every look
// for `stopped_for` (1 s), not after the start-up's 300 s.
TEST(HangPolicy, AStoppedRankBeforeItsFirstStep) {
  HangOptions o;
  StepProgress p;
  ObserveStep(p, kT0, 0, 1000);
  RankWatch r = Watch(p, kT0 + absl::Seconds(30), /*frozen=*/true);
  r.stopped_since = kT0 + absl::Seconds(31);
  EXPECT_EQ(HangTime(r, kT0 + absl::Seconds(31), o), kT0 + absl::Seconds(32));
}

// A throttled rank (a CPU quota: stopped and continued many times a
// second) still steps: whenever a look sees it stopped, its last advance
// is at most a heartbeat old, and it is never hung, even were every look
// to see it stopped.
TEST(HangPolicy, AThrottledRankThatStillStepsIsNeverHung) {
  HangOptions o;
  StepProgress p;
  absl::Time now = kT0;
  ObserveStep(p, now, 0, 100000);
  Beat(p, &now, absl::Seconds(1), 20, 33);
  const absl::Time since = now;
  for (int beat = 0; beat < 60; ++beat) {
    // Three times slower: 11 steps a heartbeat.
    for (int look = 1; look <= 4; ++look) {
      const absl::Time at = now + look * absl::Milliseconds(250);
      RankWatch r = Watch(p, now, /*frozen=*/true);
      r.stopped_since = since;
      ASSERT_FALSE(IsHung(r, at, o)) << "beat " << beat << " look " << look;
    }
    Beat(p, &now, absl::Seconds(1), 1, 11);
  }
}

// Time the agent itself did not run (the job suspended with it: Slurm's
// scontrol suspend) counts against nobody: the clocks start again at the
// look after the break.
TEST(HangPolicy, TimeTheAgentDidNotRunCountsAgainstNobody) {
  HangOptions o;
  StepProgress p;
  absl::Time now = kT0;
  ObserveStep(p, now, 0, 100000);
  Beat(p, &now, absl::Seconds(1), 20, 33);
  const absl::Time resumed = now + absl::Minutes(10);
  RankWatch r = Watch(p, now);
  r.watched_since = resumed;
  EXPECT_FALSE(IsCulprit(r, resumed + absl::Seconds(1), o));  // not silent: the watch just began
  EXPECT_FALSE(IsHung(r, resumed + absl::Seconds(1), o));
  EXPECT_FALSE(NeedsJobCollectives(r, resumed + absl::Seconds(1), o));
  // Its heartbeats do not come back: a culprit 3 periods after the watch
  // began, hung at its deadline from there.
  EXPECT_TRUE(IsCulprit(r, resumed + absl::Seconds(4), o));
  EXPECT_EQ(HangTime(r, resumed + absl::Seconds(4), o), resumed + absl::Seconds(10));
  // --worker_timeout counts the silence from there too.
  o.fixed_silence = absl::Seconds(60);
  EXPECT_EQ(HangTime(r, resumed, o), resumed + absl::Seconds(60));
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
// (SIGSTOP) at every look for the stopped floor is hung, and the culprit.
TEST(HangPolicy, NoHeartbeatButStoppedForTheStoppedFloorIsHung) {
  HangOptions o;
  RankWatch r;
  r.stopped_since = kT0;
  EXPECT_EQ(HangTime(r, kT0, o), kT0 + absl::Seconds(2));
  EXPECT_FALSE(IsHung(r, kT0 + absl::Seconds(1.9), o));
  EXPECT_TRUE(IsHung(r, kT0 + absl::Seconds(2), o));
  EXPECT_TRUE(IsCulprit(r, kT0 + absl::Seconds(2), o));
  EXPECT_EQ(HungMessage(r, kT0 + absl::Seconds(2.5), o),
            "hung: its process has been stopped (T) for 2.5s without using CPU time (a worker without heartbeats: "
            "2s stopped is a hang); killed");
  // --worker_timeout (silence of heartbeats) does not change it.
  o.fixed_silence = absl::Seconds(60);
  EXPECT_EQ(HangTime(r, kT0, o), kT0 + absl::Seconds(2));
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
