// The RendezvousClient contract (rendezvous/client.h, docs/RENDEZVOUS.md),
// run on every backend: the gRPC service over loopback, and the rules on
// etcd (rendezvous/etcd/etcd_rendezvous.h) on the in-memory Kv and on a real
// 3-member etcd cluster. Each node is its own client, as each node is its
// own launcher. Waiting is on the calls themselves (a Join that returns, a
// Watch that reports the round's end), never on sleeps.
#include <memory>
#include <set>
#include <string>
#include <thread>
#include <utility>
#include <vector>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"
#include "absl/time/time.h"
#include "gtest/gtest.h"
#include "rendezvous/client.h"
#include "rendezvous/etcd/etcd_cluster.h"
#include "rendezvous/etcd/etcd_kv.h"
#include "rendezvous/etcd/etcd_rendezvous.h"
#include "rendezvous/etcd/in_memory_kv.h"
#include "rendezvous/server.h"

namespace cpptorchrun::rdzv {
namespace {

enum class Backend { kGrpc, kEtcdInMemory, kEtcd };

std::string Name(const ::testing::TestParamInfo<Backend>& info) {
  switch (info.param) {
    case Backend::kGrpc: return "Grpc";
    case Backend::kEtcdInMemory: return "EtcdInMemory";
    case Backend::kEtcd: return "Etcd";
  }
  return "Unknown";
}

struct Node {
  std::unique_ptr<RendezvousClient> client;
  v1::JoinRequest join;
  v1::Assignment assignment;
};

class ClientContractTest : public ::testing::TestWithParam<Backend> {
 protected:
  void SetUp() override {
    const auto* info = ::testing::UnitTest::GetInstance()->current_test_info();
    run_id_ = absl::StrCat("contract-", info->name(), "-", absl::ToUnixMicros(absl::Now()));
    for (char& c : run_id_) {
      if (c == '/') c = '-';
    }
    if (GetParam() == Backend::kGrpc) {
      auto server = RendezvousServer::Start(ServerOptions());
      ASSERT_TRUE(server.ok()) << server.status();
      server_ = std::move(*server);
    } else if (GetParam() == Backend::kEtcdInMemory) {
      memory_kv_ = std::shared_ptr<etcd::Kv>(etcd::NewInMemoryKv(base::RealClock()));
    } else {
      std::string why_not;
      cluster_ = etcd::EtcdCluster::Shared(&why_not);
      if (cluster_ == nullptr) GTEST_SKIP() << "no etcd cluster: " << why_not;
    }
  }

  std::unique_ptr<RendezvousClient> NewClient() {
    if (GetParam() == Backend::kGrpc) {
      ClientOptions options;
      options.endpoint = server_->endpoint();
      return NewGrpcRendezvousClient(options);
    }
    etcd::EtcdRendezvousOptions options;
    options.prefix = "/contract-test";
    if (GetParam() == Backend::kEtcdInMemory) return etcd::NewEtcdRendezvousClient(memory_kv_, options);
    etcd::EtcdOptions kv_options;
    kv_options.endpoints = cluster_->Endpoints();
    auto kv = etcd::NewEtcdKv(kv_options);
    EXPECT_TRUE(kv.ok()) << kv.status();
    return etcd::NewEtcdRendezvousClient(std::shared_ptr<etcd::Kv>(std::move(*kv)), options);
  }

  // A node of this test's run with nnodes min:max and short keep-alives
  // (1 s x 2: a silent node is dead after 2 s).
  std::unique_ptr<Node> NewNode(const std::string& id, int min_nodes, int max_nodes) {
    auto node = std::make_unique<Node>();
    node->client = NewClient();
    node->join.set_run_id(run_id_);
    node->join.mutable_node()->set_node_id(id);
    node->join.mutable_node()->set_host("127.0.0.1");
    node->join.mutable_node()->set_local_world_size(2);
    node->join.mutable_node()->set_static_node_rank(-1);
    node->join.mutable_node()->set_free_port(29400);
    v1::RunOptions* o = node->join.mutable_options();
    o->set_min_nodes(min_nodes);
    o->set_max_nodes(max_nodes);
    o->set_join_timeout_s(30);
    o->set_last_call_timeout_s(0.2);
    o->set_close_timeout_s(5);
    o->set_keep_alive_interval_s(1);
    o->set_keep_alive_max_attempt(2);
    return node;
  }

  // Joins every node at once; each one's assignment, or the failure.
  void JoinAll(const std::vector<Node*>& nodes) {
    std::vector<absl::Status> results(nodes.size());
    std::vector<std::thread> threads;
    for (size_t i = 0; i < nodes.size(); ++i) {
      threads.emplace_back([&, i] {
        auto a = nodes[i]->client->Join(nodes[i]->join);
        results[i] = a.status();
        if (a.ok()) nodes[i]->assignment = *a;
      });
    }
    for (std::thread& t : threads) t.join();
    for (size_t i = 0; i < nodes.size(); ++i) {
      ASSERT_TRUE(results[i].ok()) << nodes[i]->join.node().node_id() << ": " << results[i];
    }
  }

  v1::KeepAliveRequest KeepAliveOf(const Node& n) {
    v1::KeepAliveRequest k;
    k.set_run_id(run_id_);
    k.set_node_id(n.join.node().node_id());
    *k.mutable_assignment() = n.assignment;
    *k.mutable_node() = n.join.node();
    *k.mutable_options() = n.join.options();
    return k;
  }

  // Keeps `n` alive and watches until its round ends (true) or `limit`
  // passes (false): the event that ended it in *ended.
  bool RoundEnds(Node& n, absl::Duration limit, v1::RunEvent* ended) {
    const absl::Time until = absl::Now() + limit;
    for (int i = 0; i < 1000 && absl::Now() < until; ++i) {
      auto kept = n.client->KeepAlive(KeepAliveOf(n));
      if (!kept.ok()) return false;
      if (!kept->round_current()) {
        *ended = *kept;
        return true;
      }
      auto event = n.client->Watch(run_id_, n.join.node().node_id(), n.assignment.round(), kept->version(),
                                   absl::Milliseconds(300));
      if (event.ok() && !event->round_current()) {
        *ended = *event;
        return true;
      }
    }
    return false;
  }

  // `failed`'s workers failed now in its round, for `reason`: its next Join
  // reports it; both it and `other` re-join having seen their round.
  static void FailedIn(Node& failed, Node& other, const std::string& reason) {
    v1::NodeFailure* f = failed.join.mutable_failure();
    f->set_round(failed.assignment.round());
    f->set_failed_at_unix_us(absl::ToUnixMicros(absl::Now()));
    f->set_reason(reason);
    for (Node* n : {&failed, &other}) n->join.set_last_round(n->assignment.round());
  }

  std::string run_id_;
  std::unique_ptr<RendezvousServer> server_;
  std::shared_ptr<etcd::Kv> memory_kv_;
  etcd::EtcdCluster* cluster_ = nullptr;
};

TEST_P(ClientContractTest, TwoNodesFormOneRoundWithDistinctRanks) {
  auto a = NewNode("node-a", 2, 2);
  auto b = NewNode("node-b", 2, 2);
  JoinAll({a.get(), b.get()});
  EXPECT_EQ(a->assignment.round(), b->assignment.round());
  EXPECT_EQ(a->assignment.world_size(), 4);
  EXPECT_EQ(a->assignment.group_world_size(), 2);
  std::set<int> ranks = {a->assignment.group_rank(), b->assignment.group_rank()};
  EXPECT_EQ(ranks, (std::set<int>{0, 1}));
  std::set<int> offsets = {a->assignment.rank_offset(), b->assignment.rank_offset()};
  EXPECT_EQ(offsets, (std::set<int>{0, 2}));
  EXPECT_EQ(a->assignment.master_addr(), b->assignment.master_addr());
  EXPECT_EQ(a->assignment.master_port(), b->assignment.master_port());
  EXPECT_FALSE(a->assignment.master_addr().empty());

  auto status = a->client->RunStatus(run_id_);
  ASSERT_TRUE(status.ok()) << status.status();
  EXPECT_EQ(status->state(), v1::RunStatusResponse::ACTIVE);
  EXPECT_EQ(status->nodes_size(), 2);
}

// What a node says about itself in its keep-alive (its last restart, its
// latest hang and straggler) is in the run's status, on every backend.
TEST_P(ClientContractTest, ANodesLastRestartAndFaultsAreInTheStatus) {
  auto a = NewNode("node-a", 2, 2);
  auto b = NewNode("node-b", 2, 2);
  JoinAll({a.get(), b.get()});
  v1::KeepAliveRequest ka = KeepAliveOf(*b);
  ka.mutable_last_restart()->set_cause("worker_failed");
  v1::HangReport* hang = ka.mutable_faults()->mutable_last_hang();
  hang->add_culprit_ranks(3);
  hang->add_culprit_hosts("host-b");
  ka.mutable_faults()->mutable_last_straggler()->set_slowdown(2.5);
  auto kept = b->client->KeepAlive(ka);
  ASSERT_TRUE(kept.ok()) << kept.status();
  auto status = a->client->RunStatus(run_id_);
  ASSERT_TRUE(status.ok()) << status.status();
  bool seen = false;
  for (const v1::NodeStatus& n : status->nodes()) {
    if (n.participant().node_id() != "node-b") continue;
    seen = true;
    EXPECT_EQ(n.last_restart().cause(), "worker_failed");
    ASSERT_EQ(n.faults().last_hang().culprit_ranks_size(), 1);
    EXPECT_EQ(n.faults().last_hang().culprit_ranks(0), 3);
    EXPECT_EQ(n.faults().last_hang().culprit_hosts(0), "host-b");
    EXPECT_EQ(n.faults().last_straggler().slowdown(), 2.5);
  }
  EXPECT_TRUE(seen);
}

TEST_P(ClientContractTest, TheRoundsStoreIsSharedBetweenItsNodes) {
  auto a = NewNode("node-a", 2, 2);
  auto b = NewNode("node-b", 2, 2);
  JoinAll({a.get(), b.get()});
  auto store_a = a->client->OpenStore(run_id_, a->assignment.round());
  auto store_b = b->client->OpenStore(run_id_, b->assignment.round());
  ASSERT_NE(store_a, nullptr);
  ASSERT_NE(store_b, nullptr);
  std::thread writer([&] { EXPECT_TRUE(store_a->Set("nccl_unique_id", "abc").ok()); });
  auto got = store_b->Get("nccl_unique_id", absl::Seconds(10));
  writer.join();
  ASSERT_TRUE(got.ok()) << got.status();
  EXPECT_EQ(*got, "abc");
}

TEST_P(ClientContractTest, AJoinWithoutItsAnswerGetsTheSameAssignmentBack) {
  auto a = NewNode("node-a", 2, 2);
  auto b = NewNode("node-b", 2, 2);
  JoinAll({a.get(), b.get()});
  // a's answer was "lost": it joins again as one that has not seen round 1.
  auto again = a->client->Join(a->join);
  ASSERT_TRUE(again.ok()) << again.status();
  EXPECT_EQ(again->round(), a->assignment.round());
  EXPECT_EQ(again->group_rank(), a->assignment.group_rank());
  auto kept = b->client->KeepAlive(KeepAliveOf(*b));
  ASSERT_TRUE(kept.ok()) << kept.status();
  EXPECT_TRUE(kept->round_current()) << kept->reason();
}

TEST_P(ClientContractTest, ALateNodeWaitsAsASpareAndIsAdmittedWhenAParticipantLeaves) {
  auto a = NewNode("node-a", 2, 2);
  auto b = NewNode("node-b", 2, 2);
  auto c = NewNode("node-c", 2, 2);
  JoinAll({a.get(), b.get()});
  absl::Status c_result;
  std::thread spare([&] {
    auto got = c->client->Join(c->join);
    c_result = got.status();
    if (got.ok()) c->assignment = *got;
  });
  // The spare does not end the full round: a's round is still current
  // once the status shows c waiting.
  bool waiting = false;
  for (int i = 0; i < 200 && !waiting; ++i) {
    auto status = a->client->RunStatus(run_id_);
    ASSERT_TRUE(status.ok()) << status.status();
    waiting = status->waiting_size() == 1;
    if (!waiting) {
      (void)a->client->Watch(run_id_, "node-a", a->assignment.round(), status->version(), absl::Milliseconds(100));
    }
  }
  ASSERT_TRUE(waiting);
  auto kept = a->client->KeepAlive(KeepAliveOf(*a));
  ASSERT_TRUE(kept.ok()) << kept.status();
  EXPECT_TRUE(kept->round_current()) << kept->reason();
  EXPECT_EQ(kept->waiting_nodes(), 1);

  ASSERT_TRUE(b->client->Leave(run_id_, "node-b", "test: b leaves", b->assignment.signature()).ok());
  v1::RunEvent ended;
  ASSERT_TRUE(RoundEnds(*a, absl::Seconds(10), &ended));
  a->join.set_last_round(a->assignment.round());
  JoinAll({a.get()});
  spare.join();
  ASSERT_TRUE(c_result.ok()) << c_result;
  EXPECT_EQ(a->assignment.round(), c->assignment.round());
  EXPECT_GT(a->assignment.round(), b->assignment.round());
  EXPECT_EQ(a->assignment.group_world_size(), 2);
}

TEST_P(ClientContractTest, ASilentNodeEndsItsRoundAfterTheKeepAliveDeadline) {
  auto a = NewNode("node-a", 1, 2);
  auto b = NewNode("node-b", 1, 2);
  a->join.mutable_options()->set_last_call_timeout_s(30);  // both, not the first alone
  b->join.mutable_options()->set_last_call_timeout_s(30);
  JoinAll({a.get(), b.get()});
  ASSERT_EQ(a->assignment.group_world_size(), 2);
  // b goes silent (its client is gone, as a killed launcher's would be).
  b->client.reset();
  v1::RunEvent ended;
  ASSERT_TRUE(RoundEnds(*a, absl::Seconds(20), &ended)) << "a's round did not end after b went silent";
  EXPECT_NE(ended.reason().find("node-b"), std::string::npos) << ended.reason();
  EXPECT_FALSE(ended.run_closed());
}

TEST_P(ClientContractTest, StaticNodeRanksAreKeptAndATakenOneIsRefused) {
  auto a = NewNode("node-a", 2, 2);
  auto b = NewNode("node-b", 2, 2);
  a->join.mutable_node()->set_static_node_rank(1);
  b->join.mutable_node()->set_static_node_rank(0);
  JoinAll({a.get(), b.get()});
  EXPECT_EQ(a->assignment.group_rank(), 1);
  EXPECT_EQ(b->assignment.group_rank(), 0);
  EXPECT_EQ(b->assignment.rank_offset(), 0);
  EXPECT_EQ(a->assignment.rank_offset(), 2);
  // Rank 2 of a 2-node run does not exist: named, not waited for.
  auto c = NewNode("node-c", 2, 2);
  c->join.mutable_node()->set_static_node_rank(2);
  auto got = c->client->Join(c->join);
  ASSERT_FALSE(got.ok());
  EXPECT_TRUE(absl::IsInvalidArgument(got.status())) << got.status();
  EXPECT_NE(got.status().message().find("max_nodes"), std::string::npos) << got.status();
}

TEST_P(ClientContractTest, TheLastCallCompletesARoundWithMinNodes) {
  auto a = NewNode("node-a", 1, 3);
  JoinAll({a.get()});
  EXPECT_EQ(a->assignment.group_world_size(), 1);
  EXPECT_EQ(a->assignment.world_size(), 2);
}

TEST_P(ClientContractTest, AJoinerAloneIsToldDeadlineExceededAfterJoinTimeout) {
  auto a = NewNode("node-a", 2, 2);
  a->join.mutable_options()->set_join_timeout_s(1);
  auto got = a->client->Join(a->join);
  ASSERT_FALSE(got.ok());
  EXPECT_TRUE(absl::IsDeadlineExceeded(got.status())) << got.status();
}

TEST_P(ClientContractTest, AClosedRunRefusesLaterJoinsAndSaysSo) {
  auto a = NewNode("node-a", 1, 1);
  JoinAll({a.get()});
  ASSERT_TRUE(a->client->Close(run_id_, "test: finished", "node-a", a->assignment.signature()).ok());
  auto status = a->client->RunStatus(run_id_);
  ASSERT_TRUE(status.ok()) << status.status();
  EXPECT_EQ(status->state(), v1::RunStatusResponse::CLOSED);
  auto late = NewNode("node-late", 1, 1);
  auto got = late->client->Join(late->join);
  ASSERT_FALSE(got.ok());
  EXPECT_TRUE(absl::IsFailedPrecondition(got.status())) << got.status();
  EXPECT_NE(got.status().message().find("closed"), std::string::npos) << got.status();
}

TEST_P(ClientContractTest, OtherNnodesThanTheRunsAreRefusedNamingBoth) {
  auto a = NewNode("node-a", 1, 1);
  JoinAll({a.get()});
  auto other = NewNode("node-b", 2, 4);
  other->join.mutable_options()->set_join_timeout_s(2);
  auto got = other->client->Join(other->join);
  ASSERT_FALSE(got.ok());
  EXPECT_TRUE(absl::IsFailedPrecondition(got.status())) << got.status();
  EXPECT_NE(got.status().message().find("2:4"), std::string::npos) << got.status();
}

// b's workers fail first twice in a row (quarantine_after 2): its host is
// kept out for the cool-down while a goes on alone; b's Join says why (its
// hooks), waits the cool-down out and is admitted after it.
TEST_P(ClientContractTest, AHostWhoseWorkersKeepFailingIsKeptOutForTheCooldown) {
  auto a = NewNode("node-a", 1, 2);
  auto b = NewNode("node-b", 1, 2);
  b->join.mutable_node()->set_host("127.0.0.2");
  for (Node* n : {a.get(), b.get()}) {
    n->join.mutable_options()->set_quarantine_after(2);
    n->join.mutable_options()->set_quarantine_cooldown_s(1.5);
  }
  JoinAll({a.get(), b.get()});
  auto fail_b = [&] { FailedIn(*b, *a, "rank 2 failed: signal SIGKILL (9)"); };
  fail_b();
  JoinAll({a.get(), b.get()});
  ASSERT_EQ(a->assignment.group_world_size(), 2);
  fail_b();
  std::vector<std::string> told;
  absl::StatusOr<v1::Assignment> b_result = absl::UnknownError("not joined");
  std::thread kept_out([&] {
    JoinHooks hooks;
    hooks.on_quarantined = [&told](const std::string& detail) { told.push_back(detail); };
    b_result = b->client->Join(b->join, hooks);
  });
  JoinAll({a.get()});  // a alone: b is neither a joiner nor a spare
  EXPECT_EQ(a->assignment.group_world_size(), 1);
  auto status = a->client->RunStatus(run_id_);
  ASSERT_TRUE(status.ok()) << status.status();
  ASSERT_EQ(status->quarantined_size(), 1) << status->DebugString();
  EXPECT_EQ(status->quarantined(0).host(), "127.0.0.2");
  EXPECT_EQ(status->quarantined(0).failures(), 2);
  EXPECT_NE(status->quarantined(0).reason().find("SIGKILL"), std::string::npos);
  // After the cool-down b is a newcomer with room: a's round ends, both meet.
  v1::RunEvent ended;
  ASSERT_TRUE(RoundEnds(*a, absl::Seconds(20), &ended));
  a->join.set_last_round(a->assignment.round());
  JoinAll({a.get()});
  kept_out.join();
  ASSERT_TRUE(b_result.ok()) << b_result.status();
  EXPECT_EQ(b_result->round(), a->assignment.round());
  EXPECT_EQ(a->assignment.group_world_size(), 2);
  ASSERT_FALSE(told.empty());
  EXPECT_NE(told[0].find("host 127.0.0.2 is kept out of the run"), std::string::npos) << told[0];
}

// job_max_restarts 1: the second round ended by a failure closes the run;
// the failing node is told why, the other learns the run closed.
TEST_P(ClientContractTest, TheJobsRestartBudgetClosesTheRunForEveryNode) {
  auto a = NewNode("node-a", 1, 2);
  auto b = NewNode("node-b", 1, 2);
  for (Node* n : {a.get(), b.get()}) n->join.mutable_options()->set_job_max_restarts(1);
  JoinAll({a.get(), b.get()});
  auto fail_b = [&] { FailedIn(*b, *a, "rank 2 failed: exit code 1"); };
  fail_b();
  JoinAll({a.get(), b.get()});  // one failed round: within the budget
  fail_b();
  auto got = b->client->Join(b->join);
  ASSERT_FALSE(got.ok());
  EXPECT_TRUE(absl::IsFailedPrecondition(got.status())) << got.status();
  EXPECT_NE(got.status().message().find("restart budget is spent: worker failures ended 2 rounds (job_max_restarts 1)"),
            std::string::npos)
      << got.status();
  v1::RunEvent ended;
  ASSERT_TRUE(RoundEnds(*a, absl::Seconds(10), &ended));
  EXPECT_TRUE(ended.run_closed()) << ended.reason();
}

TEST_P(ClientContractTest, AnUnknownRunsStatusIsNotFound) {
  auto client = NewClient();
  auto status = client->RunStatus(run_id_ + "-never");
  ASSERT_FALSE(status.ok());
  EXPECT_TRUE(absl::IsNotFound(status.status())) << status.status();
}

INSTANTIATE_TEST_SUITE_P(Backends, ClientContractTest,
                         ::testing::Values(Backend::kGrpc, Backend::kEtcdInMemory, Backend::kEtcd), Name);

}  // namespace
}  // namespace cpptorchrun::rdzv
