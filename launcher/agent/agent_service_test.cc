// Tests of the agent service over a real Unix socket: heartbeats and events
// reach the board; stale senders are refused.
#include "launcher/agent/agent_service.h"

#include <cstdlib>
#include <thread>

#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"
#include "grpcpp/grpcpp.h"
#include "gtest/gtest.h"
#include "proto/agent.grpc.pb.h"

namespace cpptorchrun::launcher {
namespace {

namespace v1 = ::cpptorchrun::agent::v1;

TEST(AgentService, HeartbeatsAndEventsReachTheBoard) {
  std::string dir = "/tmp/agentsvc_XXXXXX";
  ASSERT_NE(mkdtemp(dir.data()), nullptr);
  base::FakeClock clock(absl::FromUnixSeconds(1700000000));
  ProgressBoard board(&clock);
  board.Reset({100, 200});
  auto svc = AgentService::Start(dir + "/agent.sock", &board);
  ASSERT_TRUE(svc.ok()) << svc.status();
  auto channel = grpc::CreateChannel((*svc)->target(), grpc::InsecureChannelCredentials());
  auto stub = v1::Agent::NewStub(channel);

  v1::Heartbeat hb;
  hb.set_rank(1);
  hb.set_local_rank(1);
  hb.set_pid(200);
  hb.set_step(17);
  hb.set_loss(0.5);
  v1::HeartbeatAck ack;
  {
    grpc::ClientContext ctx;
    ctx.set_deadline(std::chrono::system_clock::now() + std::chrono::seconds(30));
    ASSERT_TRUE(stub->SendHeartbeat(&ctx, hb, &ack).ok());
  }
  EXPECT_FALSE(ack.stop_requested());
  ASSERT_TRUE(board.LastHeartbeat(1).has_value());
  EXPECT_EQ(board.Snapshot()[0].heartbeat.step(), 17);
  EXPECT_DOUBLE_EQ(board.Snapshot()[0].heartbeat.loss(), 0.5);

  board.RequestStop();  // the agent is stopping the group
  {
    grpc::ClientContext ctx;
    ASSERT_TRUE(stub->SendHeartbeat(&ctx, hb, &ack).ok());
    EXPECT_TRUE(ack.stop_requested());
  }
  hb.set_pid(999);  // not our worker
  {
    grpc::ClientContext ctx;
    EXPECT_EQ(stub->SendHeartbeat(&ctx, hb, &ack).error_code(), grpc::StatusCode::FAILED_PRECONDITION);
  }
  v1::WorkerEvent ev;
  ev.set_local_rank(1);
  ev.set_pid(200);
  ev.set_kind(v1::WorkerEvent::FINISHED);
  v1::EventAck eack;
  {
    grpc::ClientContext ctx;
    ASSERT_TRUE(stub->SendEvent(&ctx, ev, &eack).ok());
  }
  EXPECT_TRUE(board.Finished(1));
  ev.set_kind(v1::WorkerEvent::KIND_UNSPECIFIED);
  {
    grpc::ClientContext ctx;
    EXPECT_EQ(stub->SendEvent(&ctx, ev, &eack).error_code(), grpc::StatusCode::INVALID_ARGUMENT);
  }
  (*svc)->Shutdown();
  unlink((dir + "/agent.sock").c_str());
  rmdir(dir.c_str());
}

// A worker's long poll: answered when the launcher sets its notice, ended
// by its own deadline otherwise, and answered STOP at shutdown-time stops.
TEST(AgentService, AwaitRoundIsAnsweredWhenTheNoticeChanges) {
  std::string dir = "/tmp/agentsvc_XXXXXX";
  ASSERT_NE(mkdtemp(dir.data()), nullptr);
  base::FakeClock clock(absl::FromUnixSeconds(1700000000));
  ProgressBoard board(&clock);
  RoundNotices notices;
  auto svc = AgentService::Start(dir + "/agent.sock", &board, &notices);
  ASSERT_TRUE(svc.ok()) << svc.status();
  auto stub = v1::Agent::NewStub(grpc::CreateChannel((*svc)->target(), grpc::InsecureChannelCredentials()));
  v1::RoundQuery q;
  q.set_local_rank(0);
  q.set_pid(100);
  v1::RoundUpdate u;
  {
    // Nothing new: the call's own deadline ends it.
    grpc::ClientContext ctx;
    ctx.set_deadline(std::chrono::system_clock::now() + std::chrono::milliseconds(200));
    EXPECT_EQ(stub->AwaitRound(&ctx, q, &u).error_code(), grpc::StatusCode::DEADLINE_EXCEEDED);
  }
  {
    grpc::ClientContext ctx;
    ctx.set_deadline(std::chrono::system_clock::now() + std::chrono::seconds(30));
    grpc::Status status;
    std::thread caller([&] { status = stub->AwaitRound(&ctx, q, &u); });
    // Set once the call waits (bounded: 30 s of 1 ms looks).
    for (int i = 0; i < 30000 && notices.waiting() == 0; ++i) absl::SleepFor(absl::Milliseconds(1));
    ASSERT_EQ(notices.waiting(), 1);
    notices.Set(0, 100, v1::RoundUpdate::ASSIGNED, "round 2", {{"RANK", "1"}});
    caller.join();
    ASSERT_TRUE(status.ok()) << status.error_message();
    EXPECT_EQ(u.state(), v1::RoundUpdate::ASSIGNED);
    EXPECT_EQ(u.generation(), 1);
    EXPECT_EQ(u.env().at("RANK"), "1");
  }
  EXPECT_EQ(notices.waiting(), 0);
  (*svc)->Shutdown();
  unlink((dir + "/agent.sock").c_str());
  rmdir(dir.c_str());
}

TEST(AgentService, AwaitRoundWithoutNoticesIsUnimplemented) {
  std::string dir = "/tmp/agentsvc_XXXXXX";
  ASSERT_NE(mkdtemp(dir.data()), nullptr);
  base::FakeClock clock(absl::FromUnixSeconds(1700000000));
  ProgressBoard board(&clock);
  auto svc = AgentService::Start(dir + "/agent.sock", &board);
  ASSERT_TRUE(svc.ok()) << svc.status();
  auto stub = v1::Agent::NewStub(grpc::CreateChannel((*svc)->target(), grpc::InsecureChannelCredentials()));
  grpc::ClientContext ctx;
  ctx.set_deadline(std::chrono::system_clock::now() + std::chrono::seconds(30));
  v1::RoundQuery q;
  v1::RoundUpdate u;
  EXPECT_EQ(stub->AwaitRound(&ctx, q, &u).error_code(), grpc::StatusCode::UNIMPLEMENTED);
  (*svc)->Shutdown();
  unlink((dir + "/agent.sock").c_str());
  rmdir(dir.c_str());
}

}  // namespace
}  // namespace cpptorchrun::launcher
