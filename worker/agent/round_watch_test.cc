// The round watcher against a scripted agent: CHANGING reaches the abort
// callback from the watcher's thread, the assignment of a newer round reaches
// AwaitAssignment, STOP and an agent without notices end the wait with why.
#include "worker/agent/round_watch.h"

#include <atomic>
#include <deque>
#include <functional>
#include <string>
#include <vector>

#include "absl/synchronization/notification.h"
#include "gtest/gtest.h"
#include "proto/worker_contract.h"

namespace cpptorchrun::worker {
namespace {

// Answers AwaitRound from a script, one update per call once it is pushed;
// an empty script waits (bounded by the call's wait) like the real service.
class ScriptedAgent : public AgentClient {
 public:
  absl::StatusOr<agent_pb::HeartbeatAck> SendHeartbeat(const agent_pb::Heartbeat&) override {
    return agent_pb::HeartbeatAck();
  }
  absl::Status SendEvent(const agent_pb::WorkerEvent&) override { return absl::OkStatus(); }
  absl::StatusOr<agent_pb::RoundUpdate> AwaitRound(const agent_pb::RoundQuery& q, absl::Duration wait) override {
    absl::MutexLock lock(&mu_);
    queries_.push_back(q);
    auto ready = [this]() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) { return cancelled_ || !script_.empty(); };
    if (!mu_.AwaitWithTimeout(absl::Condition(&ready), wait)) return absl::DeadlineExceededError("wait");
    if (cancelled_) return absl::CancelledError("cancelled");
    absl::StatusOr<agent_pb::RoundUpdate> next = script_.front();
    script_.pop_front();
    return next;
  }
  void CancelWaits() override {
    absl::MutexLock lock(&mu_);
    cancelled_ = true;
  }
  void Push(absl::StatusOr<agent_pb::RoundUpdate> u) {
    absl::MutexLock lock(&mu_);
    script_.push_back(std::move(u));
  }
  std::vector<agent_pb::RoundQuery> queries() {
    absl::MutexLock lock(&mu_);
    return queries_;
  }

 private:
  absl::Mutex mu_;
  bool cancelled_ ABSL_GUARDED_BY(mu_) = false;
  std::deque<absl::StatusOr<agent_pb::RoundUpdate>> script_ ABSL_GUARDED_BY(mu_);
  std::vector<agent_pb::RoundQuery> queries_ ABSL_GUARDED_BY(mu_);
};

agent_pb::RoundUpdate Update(int64_t generation, agent_pb::RoundUpdate::State state, int64_t round = -1) {
  agent_pb::RoundUpdate u;
  u.set_generation(generation);
  u.set_state(state);
  u.set_reason("rank 1 failed");
  if (round >= 0) (*u.mutable_env())[contract::kRdzvRound] = std::to_string(round);
  if (round >= 0) (*u.mutable_env())["RANK"] = "0";
  return u;
}

TEST(RoundOf, ReadsTheRoundVariable) {
  EXPECT_EQ(RoundOf({{contract::kRdzvRound, "7"}}), 7);
  EXPECT_EQ(RoundOf({}), -1);
  EXPECT_EQ(RoundOf({{contract::kRdzvRound, "x"}}), -1);
  EXPECT_EQ(RoundOf({{contract::kRdzvRound, "-2"}}), -1);
}

TEST(RoundWatcher, ChangingAbortsThenTheNewRoundIsHandedOver) {
  ScriptedAgent agent;
  absl::Notification aborted;
  std::string why;
  RoundWatchOptions options;
  options.local_rank = 1;
  options.pid = 42;
  RoundWatcher watcher(&agent, options, [&](const std::string& reason) {
    why = reason;
    aborted.Notify();
  });
  agent.Push(Update(1, agent_pb::RoundUpdate::CHANGING));
  ASSERT_TRUE(aborted.WaitForNotificationWithTimeout(absl::Seconds(30)));
  EXPECT_EQ(why, "rank 1 failed");
  // An assignment of an older round is not this one's.
  agent.Push(Update(2, agent_pb::RoundUpdate::ASSIGNED, 3));
  EXPECT_TRUE(absl::IsDeadlineExceeded(watcher.AwaitAssignment(3, absl::Milliseconds(300)).status()));
  agent.Push(Update(3, agent_pb::RoundUpdate::ASSIGNED, 4));
  absl::StatusOr<std::map<std::string, std::string>> env = watcher.AwaitAssignment(3, absl::Seconds(30));
  ASSERT_TRUE(env.ok()) << env.status();
  EXPECT_EQ(env->at("RANK"), "0");
  // The queries name this worker and what it knows.
  std::vector<agent_pb::RoundQuery> q = agent.queries();
  ASSERT_GE(q.size(), 2u);
  EXPECT_EQ(q[0].local_rank(), 1);
  EXPECT_EQ(q[0].pid(), 42);
  EXPECT_EQ(q[0].known_generation(), 0);
  EXPECT_EQ(q[1].known_generation(), 1);
}

agent_pb::RoundUpdate AtBoundary(int64_t generation) {
  agent_pb::RoundUpdate u = Update(generation, agent_pb::RoundUpdate::CHANGING);
  u.set_reason("the spare of local rank 1 is ready");
  u.set_at_step_boundary(true);
  return u;
}

// Polls `done` until it holds or 30 s pass.
bool Eventually(const std::function<bool()>& done) {
  const absl::Time deadline = absl::Now() + absl::Seconds(30);
  while (!done()) {
    if (absl::Now() > deadline) return false;
    absl::SleepFor(absl::Milliseconds(1));
  }
  return true;
}

// A round is superseded once a newer round is assigned, or a change or a
// stop is announced after its assignment (a round that ends while its
// communicator forms is left for the next one).
TEST(RoundWatcher, ARoundIsSupersededByANewerAssignmentOrAChange) {
  ScriptedAgent agent;
  RoundWatchOptions options;
  RoundWatcher watcher(&agent, options, [](const std::string&) {});
  agent.Push(Update(1, agent_pb::RoundUpdate::ASSIGNED, 4));
  ASSERT_TRUE(watcher.AwaitAssignment(3, absl::Seconds(30)).ok());
  EXPECT_FALSE(watcher.Superseded(4));
  EXPECT_TRUE(watcher.Superseded(3));
  agent.Push(AtBoundary(2));
  EXPECT_TRUE(Eventually([&] { return watcher.Superseded(4); }));
  agent.Push(Update(3, agent_pb::RoundUpdate::ASSIGNED, 5));
  ASSERT_TRUE(watcher.AwaitAssignment(4, absl::Seconds(30)).ok());
  EXPECT_FALSE(watcher.Superseded(5));
}

// A change at a step boundary aborts nothing: the training thread sees it
// (ChangeAtBoundary) and takes it; nothing is aborted later either.
TEST(RoundWatcher, AChangeAtAStepBoundaryWaitsForTheTrainingThread) {
  ScriptedAgent agent;
  std::atomic<int> aborts{0};
  RoundWatchOptions options;
  options.boundary_bound = absl::Milliseconds(100);
  RoundWatcher watcher(&agent, options, [&](const std::string&) { ++aborts; });
  EXPECT_FALSE(watcher.ChangeAtBoundary(3));
  agent.Push(AtBoundary(1));
  ASSERT_TRUE(Eventually([&] { return watcher.ChangeAtBoundary(3); }));
  watcher.TakeChange();
  agent.Push(Update(2, agent_pb::RoundUpdate::ASSIGNED, 4));
  ASSERT_TRUE(watcher.AwaitAssignment(3, absl::Seconds(30)).ok());
  EXPECT_TRUE(watcher.ChangeAtBoundary(3)) << "the new round is there";
  EXPECT_FALSE(watcher.ChangeAtBoundary(4)) << "and taken";
  // Three bounds later, still nothing aborted.
  EXPECT_FALSE(watcher.AwaitAssignment(4, absl::Milliseconds(300)).ok());
  EXPECT_EQ(aborts.load(), 0);
}

// Not taken within its bound (a rank waits in a collective its peers left
// at their boundary): aborted after all, saying why.
TEST(RoundWatcher, AChangeAtAStepBoundaryNotTakenInTimeAborts) {
  ScriptedAgent agent;
  absl::Notification aborted;
  std::string why;
  RoundWatchOptions options;
  options.boundary_bound = absl::Milliseconds(50);
  RoundWatcher watcher(&agent, options, [&](const std::string& reason) {
    why = reason;
    aborted.Notify();
  });
  agent.Push(AtBoundary(1));
  ASSERT_TRUE(aborted.WaitForNotificationWithTimeout(absl::Seconds(30)));
  EXPECT_NE(why.find("the spare of local rank 1 is ready"), std::string::npos) << why;
  EXPECT_NE(why.find("no step boundary within 50ms"), std::string::npos) << why;
}

TEST(RoundWatcher, StopEndsTheWaitAsCancelled) {
  ScriptedAgent agent;
  int aborts = 0;
  absl::Notification stopped;
  RoundWatcher watcher(&agent, RoundWatchOptions{}, [&](const std::string&) {
    ++aborts;
    stopped.Notify();
  });
  agent.Push(Update(1, agent_pb::RoundUpdate::STOP));
  absl::StatusOr<std::map<std::string, std::string>> env = watcher.AwaitAssignment(0, absl::Seconds(30));
  EXPECT_TRUE(absl::IsCancelled(env.status())) << env.status();
  ASSERT_TRUE(stopped.WaitForNotificationWithTimeout(absl::Seconds(30)));
  EXPECT_EQ(aborts, 1);
}

TEST(RoundWatcher, ALauncherWithoutNoticesEndsTheWatchSayingSo) {
  ScriptedAgent agent;
  RoundWatcher watcher(&agent, RoundWatchOptions{}, nullptr);
  agent.Push(absl::UnimplementedError("this launcher recovers no worker in place"));
  absl::StatusOr<std::map<std::string, std::string>> env = watcher.AwaitAssignment(0, absl::Seconds(30));
  EXPECT_TRUE(absl::IsUnavailable(env.status())) << env.status();
  EXPECT_NE(env.status().message().find("recovers no worker in place"), std::string::npos);
}

TEST(RoundWatcher, DestroyingItEndsAPollInFlight) {
  ScriptedAgent agent;
  RoundWatchOptions options;
  options.poll = absl::Hours(1);
  { RoundWatcher watcher(&agent, options, nullptr); }
  SUCCEED();  // joined: CancelWaits ended the hour-long poll
}

}  // namespace
}  // namespace cpptorchrun::worker
