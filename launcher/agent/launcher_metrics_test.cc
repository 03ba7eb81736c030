#include "launcher/agent/launcher_metrics.h"

#include <string>

#include "absl/strings/match.h"
#include "gtest/gtest.h"

namespace cpptorchrun::launcher {
namespace {

TEST(LauncherMetricsTest, FailureLabelsAreBounded) {
  EXPECT_EQ(FailureLabels("exit code 3"), std::make_pair(std::string("code"), std::string("3")));
  EXPECT_EQ(FailureLabels("signal SIGKILL (9)"), std::make_pair(std::string("signal"), std::string("SIGKILL")));
  EXPECT_EQ(FailureLabels("signal SIGRTMIN+3 (37)"),
            std::make_pair(std::string("signal"), std::string("SIGRTMIN+3")));
  EXPECT_EQ(FailureLabels("hung"), std::make_pair(std::string("hung"), std::string("")));
  EXPECT_EQ(FailureLabels("exit code 999"), std::make_pair(std::string("other"), std::string("")));
  EXPECT_EQ(FailureLabels("signal SIG<script> (1)"), std::make_pair(std::string("other"), std::string("")));
}

TEST(LauncherMetricsTest, EventsAreCountedAndForwarded) {
  MemoryEventLog memory;
  MetricsEventLog log(&memory);
  log.Record("round_joined", {{"round", int64_t{2}}, {"group_rank", int64_t{1}}, {"world_size", int64_t{4}}});
  log.Record("workers_started", {{"round", int64_t{2}}, {"local_world_size", int64_t{2}}});
  log.Record("worker_failed", {{"rank", int64_t{0}}, {"status", std::string("signal SIGKILL (9)")}});
  log.Record("restart", {{"cause", std::string("worker_failed")}, {"total_s", 0.8},
                         {"detected_to_stopped_s", 0.1}, {"stopped_to_joined_s", 0.2},
                         {"joined_to_started_s", 0.5}});
  log.Record("recovered", {{"path", std::string("in_place")}, {"total_s", 0.9}});
  EXPECT_EQ(memory.names().size(), 5u);
  const LauncherCounters c = log.Counters();
  EXPECT_EQ(c.rounds_joined, 1);
  EXPECT_EQ(c.round, 2);
  EXPECT_EQ(c.workers_started, 2);
  EXPECT_EQ(c.restart_seconds.count, 1u);

  RankReport r;
  r.heartbeat.set_rank(3);
  r.heartbeat.set_local_rank(1);
  r.heartbeat.set_pid(77);
  r.heartbeat.set_step(42);
  r.heartbeat.set_loss(0.25);
  r.last_heartbeat = absl::FromUnixSeconds(100);
  RankReport silent;  // started, no heartbeat yet: not exported
  silent.last_heartbeat = absl::FromUnixSeconds(100);
  base::prom::Exposition e;
  AppendLauncherMetrics(c, {r, silent}, absl::FromUnixMillis(101500), &e);
  const std::string text = e.Text();
  EXPECT_TRUE(absl::StrContains(text, "cpptorchrun_launcher_rounds_joined_total 1\n")) << text;
  EXPECT_TRUE(absl::StrContains(text, "cpptorchrun_launcher_worker_failures_total{kind=\"signal\",value=\"SIGKILL\"} 1\n"));
  EXPECT_TRUE(absl::StrContains(text, "cpptorchrun_launcher_restarts_total{cause=\"worker_failed\"} 1\n"));
  EXPECT_TRUE(absl::StrContains(text, "cpptorchrun_launcher_restarts_total{cause=\"membership\"} 0\n"));
  EXPECT_TRUE(absl::StrContains(text, "cpptorchrun_launcher_recoveries_total{path=\"in_place\"} 1\n")) << text;
  EXPECT_TRUE(absl::StrContains(text, "cpptorchrun_launcher_recoveries_total{path=\"gang\"} 0\n"));
  EXPECT_TRUE(absl::StrContains(text, "cpptorchrun_launcher_restart_duration_seconds_bucket{le=\"1\"} 1\n"));
  EXPECT_TRUE(absl::StrContains(text, "cpptorchrun_launcher_last_restart_phase_seconds{phase=\"joined_to_started\"} 0.5\n"));
  EXPECT_TRUE(absl::StrContains(text, "cpptorchrun_launcher_rank_step{rank=\"3\",local_rank=\"1\"} 42\n"));
  EXPECT_TRUE(absl::StrContains(text, "cpptorchrun_launcher_rank_heartbeat_age_seconds{rank=\"3\",local_rank=\"1\"} 1.5\n"));
  EXPECT_FALSE(absl::StrContains(text, "rank=\"0\""));
}

TEST(LauncherMetricsTest, EachFailureJudgementIsCounted) {
  MetricsEventLog log(nullptr);
  for (const char* event : {"hang_detected", "straggler_detected", "straggler_detected", "file_timer_expired",
                            "health_check_failed", "quarantined", "worker_unkillable", "health_check_passed"}) {
    log.Record(event, {});
  }
  base::prom::Exposition e;
  AppendLauncherMetrics(log.Counters(), {}, absl::FromUnixSeconds(1), &e);
  const std::string text = e.Text();
  for (const char* line : {"cpptorchrun_launcher_hangs_detected_total 1\n",
                           "cpptorchrun_launcher_stragglers_detected_total 2\n",
                           "cpptorchrun_launcher_file_timers_expired_total 1\n",
                           "cpptorchrun_launcher_health_checks_failed_total 1\n",
                           "cpptorchrun_launcher_quarantined_total 1\n",
                           "cpptorchrun_launcher_workers_unkillable_total 1\n"}) {
    EXPECT_TRUE(absl::StrContains(text, line)) << line << text;
  }
}

TEST(LauncherMetricsTest, TheWorkersPartOfARestartFollowsAndANewRestartStartsAfresh) {
  MemoryEventLog memory;
  MetricsEventLog log(&memory);
  log.Record("restart", {{"cause", std::string("worker_failed")}, {"total_s", 0.8}});
  log.Record("restart_completed", {{"started_to_comm_ready_s", 0.25}, {"comm_ready_to_restored_s", 0.125},
                                   {"restored_to_first_step_s", 0.0625}, {"total_s", 1.25}});
  LauncherCounters c = log.Counters();
  EXPECT_DOUBLE_EQ(c.last_restart_phases.at("started_to_comm_ready_s"), 0.25);
  EXPECT_DOUBLE_EQ(c.last_restart_phases.at("total_to_first_step_s"), 1.25);
  log.Record("restart", {{"cause", std::string("membership")}, {"total_s", 0.5}});
  c = log.Counters();
  EXPECT_EQ(c.last_restart_phases.count("total_to_first_step_s"), 0u) << "not the previous restart's";
  EXPECT_DOUBLE_EQ(c.last_restart_phases.at("total_s"), 0.5);
}

}  // namespace
}  // namespace cpptorchrun::launcher
