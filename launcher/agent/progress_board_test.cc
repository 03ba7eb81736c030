// The progress board: what workers report, checked against the current
// group's pids, with a fake clock.
#include "launcher/agent/progress_board.h"

#include <optional>
#include <string>
#include <vector>

#include "gtest/gtest.h"
#include "launcher/agent/event_log.h"

namespace cpptorchrun::launcher {
namespace {

const absl::Time kT0 = absl::FromUnixSeconds(1700000000);

TEST(ProgressBoard, IgnoresStaleSendersAndStampsTime) {
  base::FakeClock clock(kT0);
  ProgressBoard board(&clock);
  board.Reset({11, 12});
  agent::v1::Heartbeat r;
  r.set_local_rank(1);
  r.set_pid(99);  // not the worker at local rank 1
  EXPECT_FALSE(board.Heartbeat(r));
  r.set_pid(12);
  r.set_step(5);
  clock.Advance(absl::Seconds(2));
  EXPECT_TRUE(board.Heartbeat(r));
  EXPECT_EQ(*board.LastHeartbeat(1), kT0 + absl::Seconds(2));
  EXPECT_FALSE(board.LastHeartbeat(0).has_value());
  agent::v1::WorkerEvent finished;
  finished.set_local_rank(1);
  finished.set_pid(12);
  finished.set_kind(agent::v1::WorkerEvent::FINISHED);
  finished.set_step(5);
  EXPECT_TRUE(board.RecordEvent(finished).ok());
  EXPECT_TRUE(board.Finished(1));
  finished.set_local_rank(0);
  EXPECT_EQ(board.RecordEvent(finished).code(), absl::StatusCode::kFailedPrecondition);
  ASSERT_EQ(board.Snapshot().size(), 1u);
  EXPECT_EQ(board.Snapshot()[0].heartbeat.step(), 5);
  board.Reset({21, 22});
  EXPECT_TRUE(board.Snapshot().empty());
}

// A warm worker reports before the next of its group has started: its
// slot holds the report until the launcher fills it, and keeps it only if
// it came from the pid the slot is filled with.
TEST(ProgressBoard, ReportsBeforeTheSlotIsFilledAreHeldForThatPid) {
  base::FakeClock clock(kT0);
  ProgressBoard board(&clock);
  board.Begin(2);
  agent::v1::WorkerEvent started;
  started.set_kind(agent::v1::WorkerEvent::STARTED);
  started.set_can_wait_warm(true);
  started.set_local_rank(0);
  started.set_pid(11);
  EXPECT_TRUE(board.RecordEvent(started).ok());
  started.set_local_rank(1);
  started.set_pid(99);  // a sender that will not be the worker
  EXPECT_TRUE(board.RecordEvent(started).ok());
  EXPECT_FALSE(board.AllCanWaitWarm());
  board.SetWorker(0, 11);
  board.SetWorker(1, 12);
  EXPECT_EQ(*board.LastHeartbeat(0), kT0) << "the held STARTED is the worker's";
  EXPECT_FALSE(board.LastHeartbeat(1).has_value()) << "pid 99's report is dropped";
  EXPECT_FALSE(board.AllCanWaitWarm());
  started.set_pid(99);
  EXPECT_EQ(board.RecordEvent(started).code(), absl::StatusCode::kFailedPrecondition) << "the slot is filled";
  started.set_pid(12);
  EXPECT_TRUE(board.RecordEvent(started).ok());
  EXPECT_TRUE(board.AllCanWaitWarm());
}

TEST(ProgressBoard, EventsAreActedOn) {
  base::FakeClock clock(kT0);
  MemoryEventLog events;
  ProgressBoard board(&clock, &events);
  board.Reset({11, 12});
  agent::v1::WorkerEvent e;
  e.set_rank(4);
  e.set_local_rank(0);
  e.set_pid(11);
  EXPECT_EQ(board.RecordEvent(e).code(), absl::StatusCode::kInvalidArgument) << "kind unspecified";
  e.set_kind(agent::v1::WorkerEvent::STARTED);
  clock.Advance(absl::Seconds(3));
  ASSERT_TRUE(board.RecordEvent(e).ok());
  EXPECT_EQ(*board.LastHeartbeat(0), kT0 + absl::Seconds(3)) << "STARTED starts the worker's hang clock";
  e.set_kind(agent::v1::WorkerEvent::RESUMED);
  e.set_step(120);
  ASSERT_TRUE(board.RecordEvent(e).ok());
  EXPECT_EQ(board.Snapshot()[0].resumed_step, 120);
  e.set_kind(agent::v1::WorkerEvent::FAILED);
  e.set_message("CUDA error: out of memory");
  ASSERT_TRUE(board.RecordEvent(e).ok());
  EXPECT_EQ(board.ReportedFailure(0), "CUDA error: out of memory");
  EXPECT_EQ(board.ReportedFailure(1), "");
  EXPECT_EQ(events.names(), (std::vector<std::string>{"worker_resumed", "worker_reported_failure"}));
}

// RECOVERING for the current round is a peer lost elsewhere; for an older
// round (the worker heard its peers' abort after the launcher had moved on)
// it is not, nor from a worker that is no longer current, nor after
// RECOVERED.
TEST(ProgressBoard, RecoveringCountsOnlyForTheRoundAsked) {
  base::FakeClock clock(kT0);
  ProgressBoard board(&clock);
  board.Reset({11, 12});
  EXPECT_FALSE(board.RecoveringIn(3).has_value());
  agent::v1::WorkerEvent e;
  e.set_kind(agent::v1::WorkerEvent::RECOVERING);
  e.set_rank(5);
  e.set_local_rank(1);
  e.set_pid(12);
  e.set_round(2);
  e.set_message("gloo: connection closed by peer");
  ASSERT_TRUE(board.RecordEvent(e).ok());
  EXPECT_FALSE(board.RecoveringIn(3).has_value()) << "a stale round";
  EXPECT_FALSE(board.RecoveringIn(0).has_value()) << "round 0 is never one";
  e.set_round(3);
  ASSERT_TRUE(board.RecordEvent(e).ok());
  std::optional<ProgressBoard::Recovering> got = board.RecoveringIn(3);
  ASSERT_TRUE(got.has_value());
  EXPECT_EQ(got->local_rank, 1);
  EXPECT_EQ(got->rank, 5);
  EXPECT_EQ(got->why, "gloo: connection closed by peer");
  // Kept through the change: its RECOVERING is the old round's story.
  board.Begin(2, {{1, 12}});
  board.SetWorker(0, 21);
  board.SetWorker(1, 12);
  EXPECT_FALSE(board.RecoveringIn(3).has_value());
  ASSERT_TRUE(board.RecordEvent(e).ok());
  e.set_kind(agent::v1::WorkerEvent::RECOVERED);
  ASSERT_TRUE(board.RecordEvent(e).ok());
  EXPECT_FALSE(board.RecoveringIn(3).has_value()) << "recovered";
  e.set_kind(agent::v1::WorkerEvent::RECOVERING);
  e.set_pid(99);
  EXPECT_FALSE(board.RecordEvent(e).ok()) << "not the worker at local rank 1";
  EXPECT_FALSE(board.RecoveringIn(3).has_value());
}

// A node running short: its empty slot (-1) takes no report and is not
// waited for by the start-up or the warm spares' rule.
TEST(ProgressBoard, AnEmptySlotIsNotWaitedFor) {
  base::FakeClock clock(kT0);
  ProgressBoard board(&clock);
  board.Begin(2);
  board.SetWorker(0, 11);
  board.SetWorker(1, -1);
  agent::v1::WorkerEvent e;
  e.set_local_rank(0);
  e.set_pid(11);
  e.set_can_wait_warm(true);
  for (auto kind : {agent::v1::WorkerEvent::STARTED, agent::v1::WorkerEvent::COMMUNICATOR_READY,
                    agent::v1::WorkerEvent::FIRST_STEP}) {
    e.set_kind(kind);
    ASSERT_TRUE(board.RecordEvent(e).ok());
  }
  EXPECT_TRUE(board.Startup().has_value());
  EXPECT_TRUE(board.AllCanWaitWarm());
  e.set_local_rank(1);
  e.set_pid(-1);
  EXPECT_FALSE(board.RecordEvent(e).ok());
  board.SetWorker(1, 12);
  EXPECT_FALSE(board.Startup().has_value()) << "filled: local rank 1 has not started";
}

TEST(ProgressBoard, AStopRequestLastsUntilTheNextGroup) {
  base::FakeClock clock(kT0);
  ProgressBoard board(&clock);
  board.Reset({11});
  EXPECT_FALSE(board.StopRequested());
  board.RequestStop();
  EXPECT_TRUE(board.StopRequested());
  board.Reset({21});
  EXPECT_FALSE(board.StopRequested());
}

}  // namespace
}  // namespace cpptorchrun::launcher
