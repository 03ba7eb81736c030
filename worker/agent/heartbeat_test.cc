// Tests of heartbeats: the stall rule, the reporter against a fake agent
// (waiting on counts, never sleeping), and the gRPC client against a real
// agent service on a Unix socket.
#include "worker/agent/heartbeat.h"

#include <grpcpp/grpcpp.h>
#include <stdlib.h>
#include <unistd.h>

#include <atomic>
#include <vector>

#include "absl/synchronization/mutex.h"
#include "gtest/gtest.h"
#include "proto/agent.grpc.pb.h"

namespace cpptorchrun::worker {
namespace {

namespace pb = ::cpptorchrun::agent::v1;

TEST(Heartbeat, StallRule) {
  absl::Time t = absl::FromUnixSeconds(1000);
  EXPECT_TRUE(ShouldHeartbeat(t, t, absl::Seconds(5)));
  EXPECT_TRUE(ShouldHeartbeat(t + absl::Seconds(4), t, absl::Seconds(5)));
  EXPECT_FALSE(ShouldHeartbeat(t + absl::Seconds(5), t, absl::Seconds(5)));
}

class FakeAgent final : public AgentClient {
 public:
  absl::StatusOr<pb::HeartbeatAck> SendHeartbeat(const pb::Heartbeat& heartbeat) override {
    absl::MutexLock lock(&mu);
    beats.push_back(heartbeat);
    pb::HeartbeatAck ack;
    ack.set_stop_requested(beats.size() >= 3);
    return ack;
  }
  absl::Status SendEvent(const pb::WorkerEvent& event) override {
    absl::MutexLock lock(&mu);
    events.emplace_back(event.kind(), event.step());
    messages.push_back(event.message());
    return absl::OkStatus();
  }
  bool WaitBeats(size_t n) {
    absl::MutexLock lock(&mu);
    auto enough = [&]() { return beats.size() >= n; };
    return mu.AwaitWithTimeout(absl::Condition(&enough), absl::Seconds(20));
  }
  absl::Mutex mu;
  std::vector<pb::Heartbeat> beats;
  std::vector<std::pair<pb::WorkerEvent::Kind, int64_t>> events;
  std::vector<std::string> messages;
};

TEST(Heartbeat, ReporterSendsProgressEventsAndTheStopRequest) {
  FakeAgent agent;
  HeartbeatOptions options;
  options.interval = absl::Milliseconds(5);
  options.rank = 2;
  options.pid = 99;
  {
    HeartbeatReporter reporter(&agent, options);
    reporter.OnCommunicatorReady();
    reporter.OnResumed(40);
    StepReport step;
    step.global_step = 41;
    step.loss = 0.25;
    reporter.OnStep(step);
    step.global_step = 42;
    reporter.OnStep(step);  // not a first step: no event
    step.global_step = 41;
    reporter.OnStep(step);
    // The third ack asks to stop; the reporter records an ack before it
    // sends the next beat, so after a fourth beat the request is recorded.
    ASSERT_TRUE(agent.WaitBeats(4));
    EXPECT_TRUE(reporter.stop_requested());
    reporter.OnFinished(TrainMetrics());
  }
  absl::MutexLock lock(&agent.mu);
  EXPECT_EQ(agent.beats.back().rank(), 2);
  EXPECT_EQ(agent.beats.back().pid(), 99);
  EXPECT_EQ(agent.beats.back().step(), 41);
  EXPECT_DOUBLE_EQ(agent.beats.back().loss(), 0.25);
  // The phases of a (re)start, in order, then the end.
  ASSERT_EQ(agent.events.size(), 5u);
  EXPECT_EQ(agent.events[0].first, pb::WorkerEvent::STARTED);
  EXPECT_EQ(agent.events[1].first, pb::WorkerEvent::COMMUNICATOR_READY);
  EXPECT_EQ(agent.events[2], std::make_pair(pb::WorkerEvent::RESUMED, int64_t{40}));
  EXPECT_EQ(agent.events[3], std::make_pair(pb::WorkerEvent::FIRST_STEP, int64_t{41}));
  EXPECT_EQ(agent.events[4].first, pb::WorkerEvent::FINISHED);
}

TEST(Heartbeat, ComputeSecondsAreTheMeanOfTheBatchesSinceTheLastBeat) {
  FakeAgent agent;
  HeartbeatOptions options;
  options.interval = absl::Milliseconds(5);
  {
    HeartbeatReporter reporter(&agent, options);
    StepReport step;
    step.compute_seconds = 0.2;
    for (int i = 1; i <= 3; ++i) {
      step.global_step = i;
      reporter.OnStep(step);
    }
    // Whichever beats carried the batches say 0.2; two beats composed
    // after the last batch was taken say 0 (the one sent as the count is
    // read may have been composed before the last batch, the next may
    // carry it, the one after cannot).
    size_t sent;
    {
      absl::MutexLock lock(&agent.mu);
      sent = agent.beats.size();
    }
    ASSERT_TRUE(agent.WaitBeats(sent + 3));
  }
  absl::MutexLock lock(&agent.mu);
  bool carried = false;
  for (const pb::Heartbeat& beat : agent.beats) {
    if (beat.compute_s() == 0) continue;
    EXPECT_DOUBLE_EQ(beat.compute_s(), 0.2);
    carried = true;
  }
  EXPECT_TRUE(carried);
  EXPECT_EQ(agent.beats.back().compute_s(), 0.0);
}

TEST(Heartbeat, BeatsCarryTheFlightRecordersNumbersOnceWatched) {
  FakeAgent agent;
  HeartbeatOptions options;
  options.interval = absl::Milliseconds(5);
  std::atomic<int64_t> issued{0};
  {
    HeartbeatReporter reporter(&agent, options);
    StepReport step;
    step.global_step = 1;
    reporter.OnStep(step);
    ASSERT_TRUE(agent.WaitBeats(1));
    issued = 7;
    reporter.WatchCollectives([&issued] { return CollectiveCount{issued.load(), 6}; });
    size_t sent;
    {
      absl::MutexLock lock(&agent.mu);
      sent = agent.beats.size();
    }
    ASSERT_TRUE(agent.WaitBeats(sent + 2));  // one may have been composed before the watch
  }
  absl::MutexLock lock(&agent.mu);
  EXPECT_EQ(agent.beats.front().collective_seq(), 0);
  EXPECT_EQ(agent.beats.back().collective_seq(), 7);
  EXPECT_EQ(agent.beats.back().collectives_finished(), 6);
}

TEST(Heartbeat, FailedCarriesTheErrorAndTheLastStep) {
  FakeAgent agent;
  HeartbeatOptions options;
  options.interval = absl::Hours(1);  // no beats: events only
  {
    HeartbeatReporter reporter(&agent, options);
    StepReport step;
    step.global_step = 12;
    reporter.OnStep(step);
    reporter.Failed("absl::Status(UNAVAILABLE): peer gone");
  }
  absl::MutexLock lock(&agent.mu);
  ASSERT_EQ(agent.events.size(), 3u);  // STARTED, FIRST_STEP, FAILED
  EXPECT_EQ(agent.events[2], std::make_pair(pb::WorkerEvent::FAILED, int64_t{12}));
  EXPECT_EQ(agent.messages[2], "absl::Status(UNAVAILABLE): peer gone");
}

// An agent that is never reached: every call fails.
class DeadAgent final : public AgentClient {
 public:
  absl::StatusOr<pb::HeartbeatAck> SendHeartbeat(const pb::Heartbeat&) override {
    return absl::UnavailableError("gone");
  }
  absl::Status SendEvent(const pb::WorkerEvent&) override {
    return absl::UnavailableError("gone");
  }
};

TEST(Heartbeat, UndeliveredEventsAreCountedNotFatal) {
  DeadAgent agent;
  HeartbeatOptions options;
  options.interval = absl::Hours(1);
  HeartbeatReporter reporter(&agent, options);
  reporter.OnResumed(3);
  reporter.Failed("boom");
  EXPECT_EQ(reporter.failures(), 3);  // STARTED, RESUMED, FAILED
  EXPECT_EQ(reporter.sent(), 0);
  EXPECT_FALSE(reporter.stop_requested());
}

class AgentService final : public pb::Agent::CallbackService {
 public:
  grpc::ServerUnaryReactor* SendHeartbeat(grpc::CallbackServerContext* context,
                                          const pb::Heartbeat* request,
                                          pb::HeartbeatAck* ack) override {
    {
      absl::MutexLock lock(&mu);
      last_step = request->step();
      ++beats;
    }
    ack->set_stop_requested(false);
    auto* reactor = context->DefaultReactor();
    reactor->Finish(grpc::Status::OK);
    return reactor;
  }
  grpc::ServerUnaryReactor* SendEvent(grpc::CallbackServerContext* context,
                                      const pb::WorkerEvent* request, pb::EventAck*) override {
    {
      absl::MutexLock lock(&mu);
      kinds.push_back(request->kind());
    }
    auto* reactor = context->DefaultReactor();
    reactor->Finish(grpc::Status::OK);
    return reactor;
  }
  absl::Mutex mu;
  int64_t last_step = -1;
  int beats = 0;
  std::vector<int> kinds;
};

TEST(Heartbeat, GrpcClientOverAUnixSocket) {
  // A Unix socket path has at most 107 characters, and Bazel's TEST_TMPDIR
  // can be longer than that: the socket lives in a short private folder.
  char dir_template[] = "/tmp/cpt-hb-XXXXXX";
  ASSERT_NE(::mkdtemp(dir_template), nullptr);
  std::string socket = std::string(dir_template) + "/agent.sock";
  ::unlink(socket.c_str());
  AgentService service;
  grpc::ServerBuilder builder;
  builder.AddListeningPort("unix:" + socket, grpc::InsecureServerCredentials());
  builder.RegisterService(&service);
  std::unique_ptr<grpc::Server> server = builder.BuildAndStart();
  ASSERT_NE(server, nullptr);
  std::unique_ptr<AgentClient> client = NewGrpcAgentClient(socket);
  pb::Heartbeat info;
  info.set_step(17);
  absl::StatusOr<pb::HeartbeatAck> ack = client->SendHeartbeat(info);
  ASSERT_TRUE(ack.ok()) << ack.status();
  EXPECT_FALSE(ack->stop_requested());
  pb::WorkerEvent event;
  event.set_pid(1);
  event.set_kind(pb::WorkerEvent::RESUMED);
  event.set_step(17);
  event.set_message("r");
  ASSERT_TRUE(client->SendEvent(event).ok());
  {
    absl::MutexLock lock(&service.mu);
    EXPECT_EQ(service.last_step, 17);
    ASSERT_EQ(service.kinds.size(), 1u);
    EXPECT_EQ(service.kinds[0], pb::WorkerEvent::RESUMED);
  }
  server->Shutdown();
  // With the agent gone, calls fail (bounded by the call timeout), not hang.
  std::unique_ptr<AgentClient> late = NewGrpcAgentClient(socket, absl::Milliseconds(200));
  EXPECT_FALSE(late->SendHeartbeat(info).ok());
  ::unlink(socket.c_str());
  ::rmdir(dir_template);
}

}  // namespace
}  // namespace cpptorchrun::worker
