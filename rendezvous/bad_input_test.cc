// Bad input against a live loopback server: one test per limit, for
// malformed fields, and for a missing or wrong token. Each asserts the
// status code and message, then that another client is still served.
#include <future>
#include <limits>
#include <memory>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"
#include "absl/time/time.h"
#include "gtest/gtest.h"
#include "rendezvous/client.h"
#include "rendezvous/server.h"

namespace cpptorchrun::rdzv {
namespace {

constexpr char kToken[] = "s3cret-token";

class BadInputTest : public ::testing::Test {
 protected:
  void SetUp() override {
    ServerOptions options;
    options.token = kToken;
    options.tick = absl::Milliseconds(5);
    options.limits.max_message_bytes = 64 << 10;
    options.limits.max_key_bytes = 16;
    options.limits.max_value_bytes = 100;
    options.limits.max_keys_per_run = 3;
    options.limits.max_runs = 3;
    options.limits.max_keys_per_call = 4;
    options.limits.max_nodes_per_run = 8;
    auto server = RendezvousServer::Start(options);
    ASSERT_TRUE(server.ok()) << server.status();
    server_ = std::move(*server);
    ASSERT_TRUE(Client()->Join(Join("healthy", "h", 1, 1)).ok());  // a job: never evicted
    ASSERT_TRUE(Client()->OpenStore("healthy", 0)->Set("k", "v").ok());
  }

  std::unique_ptr<RendezvousClient> Client(const std::string& token = kToken) {
    ClientOptions options;
    options.endpoint = server_->endpoint();
    options.token = token;
    options.call_timeout = absl::Seconds(5);
    options.retry_budget = absl::Seconds(2);
    return NewGrpcRendezvousClient(options);
  }

  // Another client is still served after the bad call.
  void ExpectStillServing() {
    auto value = Client()->OpenStore("healthy", 0)->Get("k", absl::ZeroDuration());
    ASSERT_TRUE(value.ok()) << value.status();
    EXPECT_EQ(*value, "v");
  }

  static void ExpectError(const absl::Status& status, absl::StatusCode code,
                          const std::string& fragment) {
    EXPECT_EQ(status.code(), code) << status;
    EXPECT_TRUE(absl::StrContains(status.message(), fragment)) << status;
  }

  static v1::JoinRequest Join(const std::string& run, const std::string& node, int min_nodes,
                              int max_nodes) {
    v1::JoinRequest r;
    r.set_run_id(run);
    r.mutable_node()->set_node_id(node);
    r.mutable_node()->set_host("127.0.0.1");
    r.mutable_node()->set_local_world_size(1);
    r.mutable_node()->set_static_node_rank(-1);
    r.mutable_options()->set_min_nodes(min_nodes);
    r.mutable_options()->set_max_nodes(max_nodes);
    r.mutable_options()->set_join_timeout_s(5);
    return r;
  }

  std::unique_ptr<RendezvousServer> server_;
};

TEST_F(BadInputTest, MissingTokenIsUnauthenticated) {
  auto status = Client("")->OpenStore("healthy", 0)->Get("k", absl::ZeroDuration()).status();
  ExpectError(status, absl::StatusCode::kUnauthenticated, "token");
  ExpectError(Client("")->Join(Join("run", "a", 1, 1)).status(),
              absl::StatusCode::kUnauthenticated, "token");
  ExpectStillServing();
}

TEST_F(BadInputTest, WrongTokenIsUnauthenticated) {
  for (const std::string& wrong : {std::string("s3cret-tokeN"), std::string("s3cret"),
                                   std::string("s3cret-token-and-more")}) {
    ExpectError(Client(wrong)->OpenStore("healthy", 0)->Set("k", "evil"),
                absl::StatusCode::kUnauthenticated, "token");
  }
  ExpectStillServing();
}

TEST_F(BadInputTest, RunIdCharacters) {
  ExpectError(Client()->OpenStore("bad/run", 0)->Set("k", "v"),
              absl::StatusCode::kInvalidArgument, "allowed are [A-Za-z0-9._-]");
  ExpectError(Client()->Join(Join("bad run", "a", 1, 1)).status(),
              absl::StatusCode::kInvalidArgument, "allowed are");
  ExpectError(Client()->OpenStore("", 0)->Set("k", "v"), absl::StatusCode::kInvalidArgument,
              "run_id is empty");
  ExpectStillServing();
}

TEST_F(BadInputTest, RunIdLength) {
  ExpectError(Client()->OpenStore(std::string(129, 'r'), 0)->Set("k", "v"),
              absl::StatusCode::kInvalidArgument, "the limit is 128");
  EXPECT_TRUE(Client()->OpenStore(std::string(128, 'r'), 0)->Set("k", "v").ok());
  ExpectStillServing();
}

TEST_F(BadInputTest, KeyBytes) {
  ExpectError(Client()->OpenStore("healthy", 0)->Set(std::string(17, 'k'), "v"),
              absl::StatusCode::kInvalidArgument, "max_key_bytes");
  ExpectError(Client()->OpenStore("healthy", 0)->Set("", "v"), absl::StatusCode::kInvalidArgument,
              "key is empty");
  ExpectStillServing();
}

TEST_F(BadInputTest, ValueBytes) {
  ExpectError(Client()->OpenStore("healthy", 0)->Set("big", std::string(101, 'x')),
              absl::StatusCode::kResourceExhausted, "max_value_bytes");
  ExpectStillServing();
}

TEST_F(BadInputTest, MessageBytes) {
  ExpectError(Client()->OpenStore("healthy", 0)->Set("huge", std::string(100 << 10, 'x')),
              absl::StatusCode::kResourceExhausted, "");
  ExpectStillServing();
}

TEST_F(BadInputTest, KeysPerRun) {
  auto store = Client()->OpenStore("full", 1);
  ASSERT_TRUE(store->Set("a", "1").ok());
  ASSERT_TRUE(store->Set("b", "2").ok());
  ASSERT_TRUE(store->Set("c", "3").ok());
  ExpectError(store->Set("d", "4"), absl::StatusCode::kResourceExhausted, "max_keys_per_run");
  ExpectError(store->Add("e", 1).status(), absl::StatusCode::kResourceExhausted,
              "max_keys_per_run");
  EXPECT_TRUE(store->Set("a", "overwrite is fine").ok());
  ExpectStillServing();
}

TEST_F(BadInputTest, RunsPerServer) {
  // Runs made by store calls alone (a Set is enough) give way, the least
  // recently used first: they cannot lock jobs out.
  ASSERT_TRUE(Client()->OpenStore("second", 0)->Set("k", "v").ok());
  ASSERT_TRUE(Client()->OpenStore("third", 0)->Set("k", "v").ok());
  ASSERT_TRUE(Client()->OpenStore("fourth", 0)->Set("k", "v").ok());
  EXPECT_EQ(Client()->OpenStore("second", 0)->Get("k", absl::ZeroDuration()).status().code(),
            absl::StatusCode::kNotFound)
      << "the oldest store-only run was forgotten";
  ASSERT_TRUE(Client()->Join(Join("fifth", "a", 1, 1)).ok());
  ASSERT_TRUE(Client()->Join(Join("sixth", "a", 1, 1)).ok());
  // Jobs are never forgotten to make room: now the server is full.
  ExpectError(Client()->Join(Join("seventh", "a", 1, 1)).status(),
              absl::StatusCode::kResourceExhausted, "max_runs");
  ExpectError(Client()->OpenStore("eighth", 0)->Set("k", "v"),
              absl::StatusCode::kResourceExhausted, "max_runs");
  ExpectStillServing();
}

TEST_F(BadInputTest, StoreBytesPerRunAndReadsThatCreateNothing) {
  // 3 keys of at most 100 bytes fit max_keys_per_run here; the byte budget
  // is the server's default (64 MiB per run), so check the accounting on a
  // server of its own with a tiny budget.
  ServerOptions options;
  options.limits.max_store_bytes_per_run = 100;
  options.limits.max_store_bytes = 150;
  auto server = RendezvousServer::Start(options);
  ASSERT_TRUE(server.ok());
  ClientOptions co;
  co.endpoint = (*server)->endpoint();
  co.retry_budget = absl::Seconds(2);
  auto client = NewGrpcRendezvousClient(co);
  auto a = client->OpenStore("a", 1);
  ASSERT_TRUE(a->Set("k1", std::string(40, 'x')).ok());  // 42 bytes
  ASSERT_TRUE(a->Set("k1", std::string(90, 'x')).ok());  // replaced: 92
  ExpectError(a->Set("k2", std::string(10, 'x')), absl::StatusCode::kResourceExhausted,
              "max_store_bytes_per_run");
  ASSERT_TRUE(a->Delete("k1").ok());
  ASSERT_TRUE(a->Set("k2", std::string(90, 'x')).ok());  // the bytes came back
  auto b = client->OpenStore("b", 1);
  ExpectError(b->Set("k", std::string(90, 'x')), absl::StatusCode::kResourceExhausted, "max_store_bytes");
  ASSERT_TRUE(b->Set("k", std::string(40, 'x')).ok());
  // The server reports its store against its budget.
  auto reported = client->RunStatus("a");
  ASSERT_TRUE(reported.ok()) << reported.status();
  EXPECT_EQ(reported->server_store_bytes(), 92 + 41);
  EXPECT_EQ(reported->server_store_budget(), 150);
  // A read that does not wait leaves no run behind.
  EXPECT_EQ(client->OpenStore("ghost", 1)->Get("k", absl::ZeroDuration()).status().code(),
            absl::StatusCode::kNotFound);
  EXPECT_EQ(client->RunStatus("ghost").status().code(), absl::StatusCode::kNotFound);
}

TEST_F(BadInputTest, KeysPerCall) {
  ExpectError(Client()->OpenStore("healthy", 0)
                  ->MultiGet({"a", "b", "c", "d", "e"}, absl::ZeroDuration())
                  .status(),
              absl::StatusCode::kInvalidArgument, "max_keys_per_call");
  ExpectStillServing();
}

TEST_F(BadInputTest, NodeInfo) {
  v1::JoinRequest no_id = Join("run", "", 1, 1);
  ExpectError(Client()->Join(no_id).status(), absl::StatusCode::kInvalidArgument,
              "node_id is empty");
  v1::JoinRequest no_host = Join("run", "a", 1, 1);
  no_host.mutable_node()->clear_host();
  ExpectError(Client()->Join(no_host).status(), absl::StatusCode::kInvalidArgument, "no host");
  v1::JoinRequest no_workers = Join("run", "a", 1, 1);
  no_workers.mutable_node()->set_local_world_size(0);
  ExpectError(Client()->Join(no_workers).status(), absl::StatusCode::kInvalidArgument,
              "local_world_size");
  v1::JoinRequest too_many_workers = Join("run", "a", 1, 1);
  too_many_workers.mutable_node()->set_local_world_size(2147483647);
  ExpectError(Client()->Join(too_many_workers).status(), absl::StatusCode::kInvalidArgument,
              "max_local_world_size");
  ExpectStillServing();
}

TEST_F(BadInputTest, ReasonsAndPrintedIdsAreBounded) {
  v1::JoinRequest escape = Join("run", "a\x1b]0;owned\x07", 1, 1);
  ExpectError(Client()->Join(escape).status(), absl::StatusCode::kInvalidArgument,
              "node_id has a control character at byte 1");
  v1::JoinRequest newline_host = Join("run", "a", 1, 1);
  newline_host.mutable_node()->set_host("h\nfake log line");
  ExpectError(Client()->Join(newline_host).status(), absl::StatusCode::kInvalidArgument,
              "control character");
  ExpectError(Client()->Leave("run", "a", std::string(2000, 'r')), absl::StatusCode::kInvalidArgument,
              "max_reason_bytes");
  ExpectError(Client()->Close("run", std::string(2000, 'r')), absl::StatusCode::kInvalidArgument,
              "max_reason_bytes");
  ExpectStillServing();
}

TEST(RunsPerClient, WithoutATokenOneClientCannotTakeEveryRun) {
  ServerOptions options;
  options.limits.max_runs_per_client = 2;
  auto server = RendezvousServer::Start(options);
  ASSERT_TRUE(server.ok());
  ClientOptions co;
  co.endpoint = (*server)->endpoint();
  co.retry_budget = absl::Seconds(2);
  auto client = NewGrpcRendezvousClient(co);
  ASSERT_TRUE(client->OpenStore("r1", 1)->Set("k", "v").ok());
  ASSERT_TRUE(client->OpenStore("r2", 1)->Set("k", "v").ok());
  absl::Status third = client->OpenStore("r3", 1)->Set("k", "v");
  EXPECT_EQ(third.code(), absl::StatusCode::kResourceExhausted) << third;
  EXPECT_TRUE(absl::StrContains(third.message(), "max_runs_per_client")) << third;
  EXPECT_TRUE(absl::StrContains(third.message(), "client 127.0.0.1")) << third << " (the address, through the acceptor)";
}

TEST_F(BadInputTest, AddNeverWraps) {
  auto store = Client()->OpenStore("run", 1);
  ASSERT_TRUE(store->Add("n", std::numeric_limits<int64_t>::max() - 1).ok());
  ExpectError(store->Add("n", 2).status(), absl::StatusCode::kOutOfRange, "would overflow int64");
  EXPECT_EQ(*store->Add("n", 0), std::numeric_limits<int64_t>::max() - 1) << "the value is kept";
  ASSERT_TRUE(store->Add("m", std::numeric_limits<int64_t>::min()).ok());
  ExpectError(store->Add("m", -1).status(), absl::StatusCode::kOutOfRange, "would overflow int64");
  ExpectStillServing();
}

TEST_F(BadInputTest, RunOptions) {
  ExpectError(Client()->Join(Join("run", "a", 0, 1)).status(), absl::StatusCode::kInvalidArgument,
              "min_nodes");
  ExpectError(Client()->Join(Join("run", "a", 3, 2)).status(), absl::StatusCode::kInvalidArgument,
              "below min_nodes");
  ExpectError(Client()->Join(Join("run", "a", 1, 9)).status(), absl::StatusCode::kInvalidArgument,
              "limit of 8 nodes");
  ExpectStillServing();
}

TEST_F(BadInputTest, SparesPerRun) {
  // A full round of 1 node (the limit of nodes per run is 8), then 8 spares.
  auto a = Client()->Join(Join("run", "a", 1, 1));
  ASSERT_TRUE(a.ok());
  std::vector<std::future<absl::StatusOr<v1::Assignment>>> spares;
  std::vector<std::unique_ptr<RendezvousClient>> clients;
  for (int i = 0; i < 8; ++i) {
    clients.push_back(Client());
    RendezvousClient* c = clients.back().get();
    spares.push_back(std::async(std::launch::async, [c, i] {
      return c->Join(Join("run", absl::StrCat("spare-", i), 1, 1));
    }));
  }
  bool all_waiting = false;
  for (int i = 0; i < 5000 && !all_waiting; ++i) {
    auto status = Client()->RunStatus("run");
    all_waiting = status.ok() && status->waiting_size() == 8;
    if (!all_waiting) absl::SleepFor(absl::Milliseconds(2));  // polling a condition, bounded
  }
  if (!all_waiting) {
    ASSERT_TRUE(Client()->Close("run", "test failed", "a", a->signature()).ok());  // frees the spares' Joins
    FAIL() << "the 8 spares did not all reach the server";
  }
  ExpectError(Client()->Join(Join("run", "one-too-many", 1, 1)).status(),
              absl::StatusCode::kResourceExhausted, "max_nodes_per_run");
  ExpectStillServing();
  // Only a participant closes a run whose round stands.
  ExpectError(Client()->Close("run", "test over"), absl::StatusCode::kPermissionDenied, "participants");
  ASSERT_TRUE(Client()->Close("run", "test over", "a", a->signature()).ok());
  for (auto& f : spares) {
    EXPECT_EQ(f.get().status().code(), absl::StatusCode::kFailedPrecondition);
  }
}

TEST_F(BadInputTest, NnodesDisagreeWithTheRun) {
  auto first = Client()->Join(Join("run", "a", 1, 1));
  ASSERT_TRUE(first.ok()) << first.status();
  ExpectError(Client()->Join(Join("run", "b", 2, 2)).status(),
              absl::StatusCode::kFailedPrecondition, "has nnodes 1:1");
  ExpectStillServing();
}

TEST_F(BadInputTest, StoreRoundThatIsOver) {
  auto client = Client();
  v1::JoinRequest r = Join("run", "a", 1, 1);
  for (int round = 1; round <= 3; ++round) {
    r.set_last_round(round - 1);
    auto a = client->Join(r);
    ASSERT_TRUE(a.ok()) << a.status();
    ASSERT_EQ(a->round(), round);
  }
  ExpectError(client->OpenStore("run", 1)->Set("k", "v"), absl::StatusCode::kFailedPrecondition,
              "round 1 of run 'run' is over");
  EXPECT_TRUE(client->OpenStore("run", 2)->Set("k", "v").ok());
  ExpectStillServing();
}

}  // namespace
}  // namespace cpptorchrun::rdzv
