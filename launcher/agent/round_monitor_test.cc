// Tests of the round monitor against a fake rendezvous, in real time with
// short intervals: keep-alives carry progress, and the end of a round is
// noticed (through Watch) well before the next keep-alive is due.
#include "launcher/agent/round_monitor.h"

#include "absl/synchronization/notification.h"
#include "gtest/gtest.h"
#include "launcher/agent/fakes.h"

namespace cpptorchrun::launcher {
namespace {

RoundMonitorOptions Options(FakeRendezvousClient* client, ProgressBoard* board, absl::Duration ka) {
  RoundMonitorOptions o;
  o.client = client;
  o.progress = board;
  o.run_id = "job";
  o.node.set_node_id("n1");
  o.run_options.set_keep_alive_max_attempt(3);
  o.keep_alive_interval = ka;
  return o;
}

rdzv::v1::Assignment Round(FakeRendezvousClient& client) {
  rdzv::v1::JoinRequest req;
  req.mutable_node()->set_local_world_size(1);
  return *client.Join(req);
}

TEST(RoundMonitor, KeepAlivesCarryProgress) {
  FakeRendezvousClient client;
  ProgressBoard board(base::RealClock());
  board.Reset({77});
  agent::v1::Heartbeat r;
  r.set_rank(0);
  r.set_local_rank(0);
  r.set_pid(77);
  r.set_step(12);
  r.set_loss(0.25);
  ASSERT_TRUE(board.Heartbeat(r));
  rdzv::v1::RestartPhases phases;
  phases.set_cause("worker_failed");
  phases.set_total_s(0.25);
  board.SetLastRestart(phases);
  auto monitor = NewRoundMonitor(Options(&client, &board, absl::Milliseconds(20)));
  monitor->Start(Round(client), /*restart_count=*/2, [] {});
  ASSERT_TRUE(client.WaitForKeepAlives(3, absl::Seconds(30)));
  monitor->Stop();
  auto kas = client.keep_alives();
  ASSERT_GE(kas.size(), 3u);
  EXPECT_EQ(kas[0].restart_count(), 2);
  EXPECT_EQ(kas[0].assignment().round(), 1);
  ASSERT_EQ(kas[0].progress_size(), 1);
  EXPECT_EQ(kas[0].progress(0).step(), 12);
  EXPECT_DOUBLE_EQ(kas[0].progress(0).loss(), 0.25);
  EXPECT_GE(kas[0].progress(0).heartbeat_age_ms(), 0);
  // And the node's last restart, for `cpptorchrun status`.
  EXPECT_EQ(kas[0].last_restart().cause(), "worker_failed");
  EXPECT_DOUBLE_EQ(kas[0].last_restart().total_s(), 0.25);
  EXPECT_FALSE(monitor->Poll().ended);
}

TEST(RoundMonitor, RoundEndIsNoticedThroughWatch) {
  FakeRendezvousClient client;
  // Keep-alives an hour apart: only Watch can notice the end in time.
  auto monitor = NewRoundMonitor(Options(&client, nullptr, absl::Hours(1)));
  absl::Notification ended;
  monitor->Start(Round(client), 0, [&] { ended.Notify(); });
  client.EndRound("node n2 died");
  ASSERT_TRUE(ended.WaitForNotificationWithTimeout(absl::Seconds(30)));
  RoundEnd end = monitor->Poll();
  EXPECT_TRUE(end.ended);
  EXPECT_FALSE(end.run_closed);
  EXPECT_EQ(end.reason, "node n2 died");
}

TEST(RoundMonitor, StopSuppressesTheCallback) {
  FakeRendezvousClient client;
  auto monitor = NewRoundMonitor(Options(&client, nullptr, absl::Hours(1)));
  bool called = false;
  monitor->Start(Round(client), 0, [&] { called = true; });
  monitor->Stop();
  client.EndRound("late");
  monitor.reset();  // joins the thread
  EXPECT_FALSE(called);
}

}  // namespace
}  // namespace cpptorchrun::launcher
