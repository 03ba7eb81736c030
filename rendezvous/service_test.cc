// End-to-end tests of the rendezvous service over a real loopback server:
// many concurrent clients (threads) joining, last call, join timeout, dead
// nodes, waiting nodes, spares, close, the store, and re-registration after
// a server restart. Every wait is on a result, bounded by the options'
// short timeouts; nothing sleeps to synchronise.
#include <algorithm>
#include <atomic>
#include <cstdint>
#include <future>
#include <optional>
#include <memory>
#include <set>
#include <string>
#include <thread>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "absl/synchronization/mutex.h"
#include "absl/synchronization/notification.h"
#include "absl/time/clock.h"
#include "absl/time/time.h"
#include "gtest/gtest.h"
#include "grpcpp/grpcpp.h"
#include "proto/rendezvous.grpc.pb.h"
#include "rendezvous/client.h"
#include "base/clock.h"
#include "rendezvous/server.h"

namespace cpptorchrun::rdzv {
namespace {

struct Conf {
  int min_nodes = 1;
  int max_nodes = 1;
  double join_timeout_s = 20;
  double last_call_s = 30;
  double keep_alive_interval_s = 5;
  int keep_alive_attempts = 3;
};

v1::JoinRequest Request(const std::string& run, const std::string& node, const Conf& conf,
                        int64_t last_round = 0) {
  v1::JoinRequest r;
  r.set_run_id(run);
  r.mutable_node()->set_node_id(node);
  r.mutable_node()->set_host("127.0.0.1");
  r.mutable_node()->set_local_world_size(2);
  r.mutable_node()->set_static_node_rank(-1);
  r.mutable_node()->set_free_port(20000);
  v1::RunOptions* o = r.mutable_options();
  o->set_min_nodes(conf.min_nodes);
  o->set_max_nodes(conf.max_nodes);
  o->set_join_timeout_s(conf.join_timeout_s);
  o->set_last_call_timeout_s(conf.last_call_s);
  o->set_keep_alive_interval_s(conf.keep_alive_interval_s);
  o->set_keep_alive_max_attempt(conf.keep_alive_attempts);
  r.set_last_round(last_round);
  return r;
}

v1::KeepAliveRequest KeepAliveOf(const std::string& run, const v1::Assignment& a,
                                 const std::string& node) {
  v1::KeepAliveRequest r;
  r.set_run_id(run);
  r.set_node_id(node);
  *r.mutable_assignment() = a;
  return r;
}

class ServiceTest : public ::testing::Test {
 protected:
  void SetUp() override { Start(0); }

  void Start(int port, std::optional<SigningKey> key = std::nullopt) {
    ServerOptions options;
    options.port = port;
    options.signing_key = key;
    options.tick = absl::Milliseconds(5);
    options.limits.long_poll_bound = absl::Milliseconds(500);
    auto server = RendezvousServer::Start(options);
    ASSERT_TRUE(server.ok()) << server.status();
    server_ = std::move(*server);
  }

  std::unique_ptr<RendezvousClient> Client() {
    ClientOptions options;
    options.endpoint = server_->endpoint();
    options.call_timeout = absl::Seconds(5);
    options.retry_budget = absl::Seconds(10);
    return NewGrpcRendezvousClient(options);
  }

  // Joins each node from its own thread and client; results in node order.
  std::vector<absl::StatusOr<v1::Assignment>> JoinAll(const std::string& run,
                                                      const std::vector<std::string>& nodes,
                                                      const Conf& conf, int64_t last_round = 0) {
    std::vector<std::future<absl::StatusOr<v1::Assignment>>> futures;
    for (const std::string& node : nodes) {
      futures.push_back(std::async(std::launch::async, [this, run, node, conf, last_round] {
        return Client()->Join(Request(run, node, conf, last_round));
      }));
    }
    std::vector<absl::StatusOr<v1::Assignment>> results;
    for (auto& f : futures) results.push_back(f.get());
    return results;
  }

  std::unique_ptr<RendezvousServer> server_;
};

// Sends keep-alives for `node` until stopped (bounded: at most 2000 beats).
class Heart {
 public:
  Heart(std::unique_ptr<RendezvousClient> client, v1::KeepAliveRequest request)
      : client_(std::move(client)), request_(std::move(request)) {
    thread_ = std::thread([this] {
      for (int beat = 0; beat < 2000 && !stop_.HasBeenNotified(); ++beat) {
        (void)client_->KeepAlive(request_);
        stop_.WaitForNotificationWithTimeout(absl::Milliseconds(20));
      }
    });
  }
  ~Heart() {
    stop_.Notify();
    thread_.join();
  }

 private:
  std::unique_ptr<RendezvousClient> client_;
  v1::KeepAliveRequest request_;
  absl::Notification stop_;
  std::thread thread_;
};

TEST_F(ServiceTest, RoundCompletesAtOnceWhenMaxJoined) {
  Conf conf{.min_nodes = 2, .max_nodes = 4, .last_call_s = 300};
  auto results = JoinAll("run", {"n0", "n1", "n2", "n3"}, conf);
  std::set<int> ranks;
  for (const auto& r : results) {
    ASSERT_TRUE(r.ok()) << r.status();
    EXPECT_EQ(r->round(), 1);
    EXPECT_EQ(r->group_world_size(), 4);
    EXPECT_EQ(r->world_size(), 8);
    EXPECT_EQ(r->rank_offset(), 2 * r->group_rank());
    ranks.insert(r->group_rank());
  }
  EXPECT_EQ(ranks, (std::set<int>{0, 1, 2, 3}));
  // Ranks follow node ids, whatever the arrival order.
  for (int i = 0; i < 4; ++i) EXPECT_EQ(results[i]->group_rank(), i);
}

TEST_F(ServiceTest, StaticNodeRanksAreHonoured) {
  Conf conf{.min_nodes = 3, .max_nodes = 3};
  std::vector<std::future<absl::StatusOr<v1::Assignment>>> futures;
  const int wanted[] = {2, 0, 1};  // for nodes a, b, c
  const char* names[] = {"a", "b", "c"};
  for (int i = 0; i < 3; ++i) {
    v1::JoinRequest r = Request("run", names[i], conf);
    r.mutable_node()->set_static_node_rank(wanted[i]);
    futures.push_back(std::async(std::launch::async, [this, r] { return Client()->Join(r); }));
  }
  for (int i = 0; i < 3; ++i) {
    auto a = futures[i].get();
    ASSERT_TRUE(a.ok()) << a.status();
    EXPECT_EQ(a->group_rank(), wanted[i]) << names[i];
  }
}

TEST_F(ServiceTest, ManyConcurrentClientsFormOneRound) {
  const int n = 48;
  std::vector<std::string> nodes;
  for (int i = 0; i < n; ++i) nodes.push_back(absl::StrCat("node-", 100 + i));
  auto results = JoinAll("many", nodes, Conf{.min_nodes = n, .max_nodes = n});
  std::set<int> ranks;
  for (const auto& r : results) {
    ASSERT_TRUE(r.ok()) << r.status();
    EXPECT_EQ(r->group_world_size(), n);
    ranks.insert(r->group_rank());
  }
  EXPECT_EQ(static_cast<int>(ranks.size()), n);
}

TEST_F(ServiceTest, LastCallCompletesWithMinNodes) {
  auto results = JoinAll("run", {"a", "b"}, Conf{.min_nodes = 2, .max_nodes = 5, .last_call_s = 0.2});
  for (const auto& r : results) {
    ASSERT_TRUE(r.ok()) << r.status();
    EXPECT_EQ(r->group_world_size(), 2);
  }
}

TEST_F(ServiceTest, JoinTimeoutWhenMinNeverArrives) {
  auto results =
      JoinAll("run", {"a", "b"}, Conf{.min_nodes = 3, .max_nodes = 3, .join_timeout_s = 0.3});
  for (const auto& r : results) {
    ASSERT_FALSE(r.ok());
    EXPECT_EQ(r.status().code(), absl::StatusCode::kDeadlineExceeded);
    EXPECT_NE(r.status().message().find("did not complete within"), std::string::npos)
        << r.status();
  }
}

TEST_F(ServiceTest, DeadNodeEndsTheRoundAndSurvivorsFormTheNext) {
  Conf conf{.min_nodes = 2,
            .max_nodes = 3,
            .last_call_s = 0.1,
            .keep_alive_interval_s = 0.25,
            .keep_alive_attempts = 2};
  auto results = JoinAll("run", {"a", "b", "c"}, conf);
  for (const auto& r : results) ASSERT_TRUE(r.ok()) << r.status();
  auto watcher = Client();
  v1::RunEvent first = *watcher->KeepAlive(KeepAliveOf("run", *results[0], "a"));
  ASSERT_TRUE(first.round_current());
  {
    // a and b stay alive; c is silent.
    Heart a(Client(), KeepAliveOf("run", *results[0], "a"));
    Heart b(Client(), KeepAliveOf("run", *results[1], "b"));
    int64_t version = first.version();
    absl::StatusOr<v1::RunEvent> event;
    for (int i = 0; i < 50; ++i) {
      event = watcher->Watch("run", "a", 1, version, absl::Seconds(5));
      ASSERT_TRUE(event.ok()) << event.status();
      if (!event->round_current()) break;
      version = event->version();
    }
    EXPECT_FALSE(event->round_current());
    EXPECT_NE(event->reason().find("'c'"), std::string::npos) << event->reason();
  }
  auto next = JoinAll("run", {"b", "a"}, conf, 1);
  ASSERT_TRUE(next[0].ok()) << next[0].status();
  ASSERT_TRUE(next[1].ok()) << next[1].status();
  EXPECT_EQ(next[1]->round(), 2);
  EXPECT_EQ(next[1]->group_rank(), 0);  // a keeps its place before b
  EXPECT_EQ(next[0]->group_rank(), 1);
  EXPECT_EQ(next[0]->group_world_size(), 2);
}

TEST_F(ServiceTest, WaitingNodeEndsARoundWithRoom) {
  Conf conf{.min_nodes = 2, .max_nodes = 3, .last_call_s = 0.1};
  auto first = JoinAll("run", {"a", "b"}, conf);
  ASSERT_TRUE(first[0].ok() && first[1].ok());
  auto watcher = Client();
  v1::RunEvent before = *watcher->KeepAlive(KeepAliveOf("run", *first[0], "a"));
  auto newcomer = std::async(std::launch::async,
                             [&] { return Client()->Join(Request("run", "c", conf)); });
  absl::StatusOr<v1::RunEvent> event =
      watcher->Watch("run", "a", 1, before.version(), absl::Seconds(10));
  ASSERT_TRUE(event.ok()) << event.status();
  EXPECT_FALSE(event->round_current());
  EXPECT_EQ(event->waiting_nodes(), 1);
  EXPECT_NE(event->reason().find("'c' waits to join"), std::string::npos) << event->reason();
  auto again = JoinAll("run", {"a", "b"}, conf, 1);
  ASSERT_TRUE(again[0].ok()) << again[0].status();
  auto c = newcomer.get();
  ASSERT_TRUE(c.ok()) << c.status();
  EXPECT_EQ(c->round(), 2);
  EXPECT_EQ(c->group_world_size(), 3);
  EXPECT_EQ(c->group_rank(), 2);
}

TEST_F(ServiceTest, NewcomerToAFullRoundIsASpareUntilANodeLeaves) {
  Conf conf{.min_nodes = 2, .max_nodes = 2};
  auto first = JoinAll("run", {"a", "b"}, conf);
  ASSERT_TRUE(first[0].ok() && first[1].ok());
  auto watcher = Client();
  v1::RunEvent before = *watcher->KeepAlive(KeepAliveOf("run", *first[0], "a"));
  auto spare = std::async(std::launch::async,
                          [&] { return Client()->Join(Request("run", "s", conf)); });
  absl::StatusOr<v1::RunEvent> event =
      watcher->Watch("run", "a", 1, before.version(), absl::Seconds(10));
  ASSERT_TRUE(event.ok());
  EXPECT_TRUE(event->round_current());
  EXPECT_EQ(event->waiting_nodes(), 1);
  // Anyone else speaking for b is refused; b itself, with its proof, leaves.
  auto forged = Client()->Leave("run", "b", "scaling down", "not b's");
  EXPECT_EQ(forged.code(), absl::StatusCode::kPermissionDenied) << forged;
  EXPECT_EQ(Client()->Leave("run", "b", "scaling down").code(), absl::StatusCode::kPermissionDenied);
  ASSERT_TRUE(Client()->Leave("run", "b", "scaling down", first[1]->signature()).ok());
  event = watcher->Watch("run", "a", 1, event->version(), absl::Seconds(10));
  ASSERT_TRUE(event.ok());
  EXPECT_FALSE(event->round_current());
  EXPECT_NE(event->reason().find("'b' left"), std::string::npos) << event->reason();
  auto a = Client()->Join(Request("run", "a", conf, 1));
  ASSERT_TRUE(a.ok()) << a.status();
  auto s = spare.get();
  ASSERT_TRUE(s.ok()) << s.status();
  EXPECT_EQ(s->round(), 2);
  EXPECT_EQ(a->group_rank(), 0);
  EXPECT_EQ(s->group_rank(), 1);
}

TEST_F(ServiceTest, ClosedRunRefusesJoinsAndWakesWatchers) {
  Conf conf{.min_nodes = 1, .max_nodes = 1};
  auto first = Client()->Join(Request("job-7", "a", conf));
  ASSERT_TRUE(first.ok());
  auto watcher = Client();
  v1::RunEvent before = *watcher->KeepAlive(KeepAliveOf("job-7", *first, "a"));
  auto watch = std::async(std::launch::async, [&] {
    return watcher->Watch("job-7", "a", 1, before.version(), absl::Seconds(10));
  });
  EXPECT_EQ(Client()->Close("job-7", "training finished", "a", "forged").code(),
            absl::StatusCode::kPermissionDenied);
  EXPECT_EQ(Client()->Close("never-was", "x").code(), absl::StatusCode::kNotFound)
      << "a run id cannot be closed before its job comes";
  ASSERT_TRUE(Client()->Close("job-7", "training finished", "a", first->signature()).ok());
  auto event = watch.get();
  ASSERT_TRUE(event.ok());
  EXPECT_TRUE(event->run_closed());
  auto late = Client()->Join(Request("job-7", "b", conf));
  EXPECT_EQ(late.status().code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_NE(late.status().message().find("run 'job-7' is closed"), std::string::npos)
      << late.status();
}

TEST_F(ServiceTest, StoreGetWaitsForALaterSet) {
  auto reader = Client()->OpenStore("run", 1);
  auto got = std::async(std::launch::async,
                        [&] { return reader->Get("nccl_id", absl::Seconds(20)); });
  auto writer = Client()->OpenStore("run", 1);
  ASSERT_TRUE(writer->Set("nccl_id", std::string("\0\1id", 4)).ok());
  auto value = got.get();
  ASSERT_TRUE(value.ok()) << value.status();
  EXPECT_EQ(*value, std::string("\0\1id", 4));
}

TEST_F(ServiceTest, StoreOperations) {
  auto store = Client()->OpenStore("run", 3);
  EXPECT_EQ(store->Get("absent", absl::ZeroDuration()).status().code(),
            absl::StatusCode::kNotFound);
  EXPECT_EQ(store->Get("absent", absl::Milliseconds(50)).status().code(),
            absl::StatusCode::kDeadlineExceeded);
  EXPECT_EQ(*store->Add("count", 5), 5);
  EXPECT_EQ(*store->Add("count", -2), 3);
  bool swapped = false;
  EXPECT_EQ(*store->CompareSet("cas", std::nullopt, "one", &swapped), "one");
  EXPECT_TRUE(swapped);
  EXPECT_EQ(*store->CompareSet("cas", std::nullopt, "two", &swapped), "one");
  EXPECT_FALSE(swapped);
  EXPECT_EQ(*store->CompareSet("cas", std::string("one"), "three", &swapped), "three");
  EXPECT_TRUE(swapped);
  EXPECT_TRUE(*store->Delete("cas"));
  EXPECT_FALSE(*store->Delete("cas"));
  auto multi = std::async(std::launch::async, [&] {
    return Client()->OpenStore("run", 3)->MultiGet({"x", "y", "count"}, absl::Seconds(20));
  });
  ASSERT_TRUE(store->MultiSet({{"x", "1"}, {"y", "2"}}).ok());
  auto values = multi.get();
  ASSERT_TRUE(values.ok()) << values.status();
  EXPECT_EQ(*values, (std::vector<std::string>{"1", "2", "3"}));
}

TEST_F(ServiceTest, KeysAreScopedToTheirRound) {
  ASSERT_TRUE(Client()->OpenStore("run", 1)->Set("nccl_id", "round-one").ok());
  auto round2 = Client()->OpenStore("run", 2);
  EXPECT_EQ(round2->Get("nccl_id", absl::ZeroDuration()).status().code(),
            absl::StatusCode::kNotFound);
  EXPECT_EQ(*Client()->OpenStore("run", 1)->Get("nccl_id", absl::ZeroDuration()), "round-one");
  EXPECT_EQ(Client()->OpenStore("other", 1)->Get("nccl_id", absl::ZeroDuration()).status().code(),
            absl::StatusCode::kNotFound);
}

// A reusable meeting point for `parties` threads; each Arrive waits at most
// `bound` for the others (false when they did not all come in time).
class Meeting {
 public:
  explicit Meeting(int parties) : parties_(parties) {}
  bool Arrive(absl::Duration bound) {
    absl::MutexLock lock(&mu_);
    const int64_t generation = generation_;
    if (++arrived_ == parties_) {
      arrived_ = 0;
      ++generation_;
      return true;
    }
    auto next = [this, generation]() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) {
      return generation_ != generation;
    };
    return mu_.AwaitWithTimeout(absl::Condition(&next), bound);
  }

 private:
  const int parties_;
  absl::Mutex mu_;
  int arrived_ ABSL_GUARDED_BY(mu_) = 0;
  int64_t generation_ ABSL_GUARDED_BY(mu_) = 0;
};

// The reported hang: two ranks each set their own key and at once read the
// other's (with or without their own; a MultiGet that may find its own key
// and wait on the other's). Every round uses fresh keys; each read must
// answer every value it asked for.
TEST_F(ServiceTest, ConcurrentSetThenMultiGetOfEachOthersKeysAnswersBoth) {
  constexpr int kRounds = 50;
  Meeting meeting(2);
  std::vector<std::vector<absl::StatusOr<std::vector<std::string>>>> got(2);
  auto rank = [&](int me) {
    auto store = Client()->OpenStore("pair", 1);
    for (int round = 0; round < kRounds; ++round) {
      if (!meeting.Arrive(absl::Seconds(30))) {
        got[me].push_back(absl::DeadlineExceededError("the other rank never arrived"));
        return;
      }
      const std::string mine = absl::StrCat("r", round, "/k", me);
      absl::Status set = store->Set(mine, absl::StrCat("v", round, "-", me));
      if (!set.ok()) {
        got[me].push_back(set);
        continue;
      }
      // Even rounds read both keys; odd rounds only the other rank's.
      std::vector<std::string> keys = {absl::StrCat("r", round, "/k0"),
                                       absl::StrCat("r", round, "/k1")};
      if (round % 2 == 1) keys = {keys[1 - me]};
      got[me].push_back(store->MultiGet(keys, absl::Seconds(5)));
    }
  };
  std::thread rank0(rank, 0);
  std::thread rank1(rank, 1);
  rank0.join();
  rank1.join();
  for (int me = 0; me < 2; ++me) {
    ASSERT_EQ(got[me].size(), static_cast<size_t>(kRounds)) << "rank " << me;
    for (int round = 0; round < kRounds; ++round) {
      const auto& values = got[me][round];
      ASSERT_TRUE(values.ok()) << "rank " << me << " round " << round << ": " << values.status();
      std::vector<std::string> want = {absl::StrCat("v", round, "-0"),
                                       absl::StrCat("v", round, "-1")};
      if (round % 2 == 1) want = {want[1 - me]};
      EXPECT_EQ(*values, want) << "rank " << me << " round " << round;
    }
  }
}

// A MultiGet held for two missing keys is answered once two separate Sets
// (from two other clients) have set both.
TEST_F(ServiceTest, MultiGetWaitsForTwoKeysSetByTwoCalls) {
  auto reader = Client()->OpenStore("run", 1);
  auto got = std::async(std::launch::async,
                        [&] { return reader->MultiGet({"a", "b"}, absl::Seconds(20)); });
  // Both keys still missing: the read is held (or not yet arrived).
  ASSERT_TRUE(Client()->OpenStore("run", 1)->Set("b", "2").ok());
  ASSERT_TRUE(Client()->OpenStore("run", 1)->Set("a", "1").ok());
  auto values = got.get();
  ASSERT_TRUE(values.ok()) << values.status();
  EXPECT_EQ(*values, (std::vector<std::string>{"1", "2"}));
}

// A MultiGet whose keys are partly present is answered by the server when
// its wait bound passes (DeadlineExceeded naming the missing key, which the
// server says and gRPC's own deadline error would not), not left held.
TEST_F(ServiceTest, MultiGetPartlyPresentAnswersAtTheServerWaitBound) {
  server_.reset();
  ServerOptions options;
  options.tick = absl::Milliseconds(5);
  options.limits.store_wait_bound = absl::Milliseconds(200);
  auto server = RendezvousServer::Start(options);
  ASSERT_TRUE(server.ok()) << server.status();
  server_ = std::move(*server);
  auto store = Client()->OpenStore("run", 1);
  ASSERT_TRUE(store->Set("present", "1").ok());
  // The client polls in server-bounded pieces until its own 1 s passes.
  auto got = store->MultiGet({"present", "missing"}, absl::Seconds(1));
  EXPECT_EQ(got.status().code(), absl::StatusCode::kDeadlineExceeded) << got.status();
  EXPECT_NE(got.status().message().find("'missing'"), std::string::npos) << got.status();
}

TEST_F(ServiceTest, RunStatusReportsParticipantsAndProgress) {
  auto a = Client()->Join(Request("run", "a", Conf{}));
  ASSERT_TRUE(a.ok());
  v1::KeepAliveRequest ka = KeepAliveOf("run", *a, "a");
  v1::RankProgress* p = ka.add_progress();
  p->set_rank(0);
  p->set_step(42);
  ka.set_restart_count(2);
  ka.mutable_last_restart()->set_cause("membership");
  ASSERT_TRUE(Client()->KeepAlive(ka).ok());
  auto status = Client()->RunStatus("run");
  ASSERT_TRUE(status.ok()) << status.status();
  EXPECT_EQ(status->state(), v1::RunStatusResponse::ACTIVE);
  ASSERT_EQ(status->nodes_size(), 1);
  EXPECT_EQ(status->nodes(0).restart_count(), 2);
  EXPECT_EQ(status->nodes(0).last_restart().cause(), "membership") << "RunStatus shows the node's last restart";
  ASSERT_EQ(status->nodes(0).progress_size(), 1);
  EXPECT_EQ(status->nodes(0).progress(0).step(), 42);
  EXPECT_EQ(Client()->RunStatus("nobody").status().code(), absl::StatusCode::kNotFound);
}

TEST_F(ServiceTest, StoreCallsBeforeTheKeepAliveDoNotEndTheRoundAfterARestart) {
  Conf conf{.min_nodes = 2, .max_nodes = 2};
  auto first = JoinAll("run", {"a", "b"}, conf);
  ASSERT_TRUE(first[0].ok() && first[1].ok());
  auto a = Client();
  v1::KeepAliveRequest ka = KeepAliveOf("run", *first[0], "a");
  *ka.mutable_options() = Request("run", "a", conf).options();
  auto old_event = a->KeepAlive(ka);
  ASSERT_TRUE(old_event.ok());
  int port = server_->port();
  server_->Shutdown();
  server_.reset();
  Start(port);
  // A worker's store call reaches the new server first.
  ASSERT_TRUE(Client()->OpenStore("run", 1)->Set("gloo/addr/0", "x").ok());
  // The agent's Watch must not hear "round over": the run has no round yet.
  auto watched = a->Watch("run", "a", 1, old_event->version(), absl::Seconds(1));
  ASSERT_FALSE(watched.ok());
  EXPECT_EQ(watched.status().code(), absl::StatusCode::kNotFound) << watched.status();
  // Its keep-alive re-registers the round, which stands.
  auto event = a->KeepAlive(ka);
  ASSERT_TRUE(event.ok()) << event.status();
  EXPECT_TRUE(event->round_current());
  EXPECT_EQ(event->current_round(), 1);
  auto after = a->Watch("run", "a", 1, 0, absl::Seconds(1));
  ASSERT_TRUE(after.ok()) << after.status();
  EXPECT_TRUE(after->round_current());
  // And the store key set before the re-registration is still there.
  EXPECT_EQ(*Client()->OpenStore("run", 1)->Get("gloo/addr/0", absl::ZeroDuration()), "x");
}

TEST_F(ServiceTest, AReaderWaitingInAnEmptyOldScopeIsAnsweredWhenItIsDropped) {
  // A Get held on a key nobody sets, in a round's scope that holds no key,
  // while two later rounds complete (which drops that scope): the reader is
  // answered, and the server goes on (this once freed the scope twice).
  Conf conf{.min_nodes = 1, .max_nodes = 1};
  auto r1 = JoinAll("run", {"a"}, conf);
  ASSERT_TRUE(r1[0].ok());
  auto reader = std::async(std::launch::async, [&] {
    return Client()->OpenStore("run", 1)->Get("never", absl::Seconds(20));
  });
  for (int i = 0; i < 2000 && server_->service()->HeldCalls() == 0; ++i) {
    absl::SleepFor(absl::Milliseconds(1));  // polling a condition, bounded
  }
  auto r2 = JoinAll("run", {"a"}, conf, 1);
  ASSERT_TRUE(r2[0].ok());
  auto r3 = JoinAll("run", {"a"}, conf, 2);
  ASSERT_TRUE(r3[0].ok()) << r3[0].status();
  auto got = reader.get();
  EXPECT_EQ(got.status().code(), absl::StatusCode::kFailedPrecondition) << got.status();
  EXPECT_TRUE(Client()->OpenStore("run", 3)->Set("k", "v").ok()) << "the server still serves";
}

TEST_F(ServiceTest, AJoinInAParticipantsNameNeedsItsNodeSecret) {
  // "a" and "b" join with their secrets; a Join in a's name with another
  // secret is neither handed a's assignment (a lost-answer repeat) nor ends
  // the round; with a's own secret it gets the assignment again.
  Conf conf{.min_nodes = 2, .max_nodes = 2};
  std::vector<std::future<absl::StatusOr<v1::Assignment>>> futures;
  for (const char* node : {"a", "b"}) {
    futures.push_back(std::async(std::launch::async, [this, node, conf] {
      v1::JoinRequest r = Request("run", node, conf);
      r.set_node_secret(absl::StrCat("secret of ", node));
      return Client()->Join(r);
    }));
  }
  auto a = futures[0].get();
  auto b = futures[1].get();
  ASSERT_TRUE(a.ok() && b.ok()) << a.status() << b.status();
  for (int64_t last_round : {int64_t{0}, a->round()}) {
    v1::JoinRequest forged = Request("run", "a", conf, last_round);
    forged.set_node_secret("guess");
    auto got = Client()->Join(forged);
    EXPECT_EQ(got.status().code(), absl::StatusCode::kPermissionDenied) << got.status();
    EXPECT_NE(got.status().message().find("node_secret"), std::string::npos) << got.status();
  }
  v1::JoinRequest empty = Request("run", "a", conf);  // no secret at all
  EXPECT_EQ(Client()->Join(empty).status().code(), absl::StatusCode::kPermissionDenied);
  v1::JoinRequest own = Request("run", "a", conf, 0);
  own.set_node_secret("secret of a");
  auto again = Client()->Join(own);
  ASSERT_TRUE(again.ok()) << again.status();
  EXPECT_EQ(again->round(), a->round()) << "the round still stands";
  EXPECT_EQ(again->signature(), a->signature());
  v1::JoinRequest huge = Request("run", "c", conf);
  huge.set_node_secret(std::string(257, 'x'));
  EXPECT_EQ(Client()->Join(huge).status().code(), absl::StatusCode::kInvalidArgument);
}

TEST_F(ServiceTest, AgentsReRegisterAfterAServerRestart) {
  Conf conf{.min_nodes = 2, .max_nodes = 2};
  auto first = JoinAll("run", {"a", "b"}, conf);
  ASSERT_TRUE(first[0].ok() && first[1].ok());
  auto a = Client();  // kept across the restart: it must reconnect
  v1::KeepAliveRequest ka = KeepAliveOf("run", *first[0], "a");
  *ka.mutable_options() = Request("run", "a", conf).options();
  auto old_event = a->KeepAlive(ka);  // to the old server
  ASSERT_TRUE(old_event.ok());
  int port = server_->port();
  server_->Shutdown();
  server_.reset();
  Start(port);
  ASSERT_EQ(server_->port(), port);

  auto event = a->KeepAlive(ka);
  ASSERT_TRUE(event.ok()) << event.status();
  EXPECT_TRUE(event->round_current());
  EXPECT_EQ(event->current_round(), 1);
  // A watcher holding the old server's version learns of the restart.
  auto watched = a->Watch("run", "a", 1, old_event->version(), absl::Seconds(30));
  ASSERT_TRUE(watched.ok()) << watched.status();
  EXPECT_NE(watched->version(), old_event->version());
  EXPECT_TRUE(watched->round_current());
  auto status = a->RunStatus("run");
  ASSERT_TRUE(status.ok());
  EXPECT_EQ(status->round(), 1);
  EXPECT_EQ(status->nodes_size(), 2);
  // b's keep-alive is accepted as a participant of the re-registered round.
  auto b_event = Client()->KeepAlive(KeepAliveOf("run", *first[1], "b"));
  ASSERT_TRUE(b_event.ok());
  EXPECT_TRUE(b_event->round_current());
  // The next round is numbered above the re-registered one.
  auto next = JoinAll("run", {"a", "b"}, conf, 1);
  ASSERT_TRUE(next[0].ok()) << next[0].status();
  EXPECT_EQ(next[0]->round(), 2);
}

// The attack of issue 14: a KeepAlive for a live run, its assignment one
// round ahead with other ranks and another MASTER_ADDR, re-registered as
// if the server had restarted.
v1::KeepAliveRequest Hijack(const v1::Assignment& real, const std::string& node) {
  v1::KeepAliveRequest ka = KeepAliveOf("run", real, node);
  v1::Assignment* a = ka.mutable_assignment();
  a->set_round(real.round() + 1);
  a->set_master_addr("6.6.6.6");
  for (v1::Participant& p : *a->mutable_participants()) {
    p.set_group_rank(0);
    p.set_rank_offset(0);
  }
  return ka;
}

TEST_F(ServiceTest, AForgedAssignmentCannotReplaceALiveRound) {
  Conf conf{.min_nodes = 2, .max_nodes = 2};
  auto first = JoinAll("run", {"a", "b"}, conf);
  ASSERT_TRUE(first[0].ok() && first[1].ok());
  EXPECT_FALSE(first[0]->signature().empty()) << "every assignment issued is signed";
  auto attacker = Client();
  for (const v1::KeepAliveRequest& forged :
       {Hijack(*first[0], "a"), Hijack(*first[0], "mallory"),
        [&] {  // the real signature, other fields
          v1::KeepAliveRequest ka = KeepAliveOf("run", *first[0], "a");
          ka.mutable_assignment()->set_round(2);
          ka.mutable_assignment()->set_master_addr("6.6.6.6");
          return ka;
        }()}) {
    auto event = attacker->KeepAlive(forged);
    ASSERT_EQ(event.status().code(), absl::StatusCode::kPermissionDenied) << event.status();
    EXPECT_NE(event.status().message().find("not issued by this server"), std::string::npos);
  }
  // The job is untouched: round 1 stands with its real master and ranks.
  auto status = attacker->RunStatus("run");
  ASSERT_TRUE(status.ok());
  EXPECT_EQ(status->round(), 1);
  EXPECT_EQ(status->nodes_size(), 2);
  auto a = Client()->KeepAlive(KeepAliveOf("run", *first[0], "a"));
  ASSERT_TRUE(a.ok()) << a.status();
  EXPECT_TRUE(a->round_current());
  EXPECT_EQ(a->current_round(), 1);
  // A re-join hands out the real assignment, not the forged one.
  auto next = JoinAll("run", {"a", "b"}, conf, 1);
  ASSERT_TRUE(next[0].ok() && next[1].ok());
  EXPECT_EQ(next[0]->master_addr(), first[0]->master_addr());
  EXPECT_NE(next[0]->group_rank(), next[1]->group_rank());
}

TEST_F(ServiceTest, WithADurableKeyOnlyIssuedAssignmentsReRegisterAfterARestart) {
  SigningKey key = SigningKeyFromToken("a-token");
  int port = server_->port();
  server_->Shutdown();
  server_.reset();
  Start(port, key);
  Conf conf{.min_nodes = 2, .max_nodes = 2};
  auto first = JoinAll("run", {"a", "b"}, conf);
  ASSERT_TRUE(first[0].ok() && first[1].ok());
  server_->Shutdown();
  server_.reset();
  Start(port, key);
  // A forged round for the run the restarted server does not know yet.
  auto forged = Client()->KeepAlive(Hijack(*first[0], "a"));
  EXPECT_EQ(forged.status().code(), absl::StatusCode::kPermissionDenied) << forged.status();
  // The real one re-registers, with no round spent.
  auto real = Client()->KeepAlive(KeepAliveOf("run", *first[1], "b"));
  ASSERT_TRUE(real.ok()) << real.status();
  EXPECT_TRUE(real->round_current());
  EXPECT_EQ(real->current_round(), 1);
}

TEST_F(ServiceTest, WithoutADurableKeyAnUnknownRunReRegistersOnlyAPossibleRound) {
  Conf conf{.min_nodes = 2, .max_nodes = 2};
  auto first = JoinAll("run", {"a", "b"}, conf);
  ASSERT_TRUE(first[0].ok() && first[1].ok());
  int port = server_->port();
  server_->Shutdown();
  server_.reset();
  Start(port);  // a new random key: it cannot verify its predecessor's
  v1::KeepAliveRequest huge = KeepAliveOf("run", *first[0], "a");
  *huge.mutable_options() = Request("run", "a", conf).options();
  for (int i = 0; i < 50; ++i) *huge.mutable_assignment()->add_participants() = first[0]->participants(1);
  auto refused = Client()->KeepAlive(huge);
  EXPECT_EQ(refused.status().code(), absl::StatusCode::kInvalidArgument) << refused.status();
  EXPECT_EQ(Client()->RunStatus("run").status().code(), absl::StatusCode::kNotFound)
      << "a refused re-registration leaves no run behind";
  v1::KeepAliveRequest real = KeepAliveOf("run", *first[0], "a");
  *real.mutable_options() = Request("run", "a", conf).options();
  auto event = Client()->KeepAlive(real);
  ASSERT_TRUE(event.ok()) << event.status();
  EXPECT_TRUE(event->round_current());
  // Once it has an active round, a forged later one is refused.
  auto forged = Client()->KeepAlive(Hijack(*first[0], "a"));
  EXPECT_EQ(forged.status().code(), absl::StatusCode::kPermissionDenied) << forged.status();
}

TEST_F(ServiceTest, KeepAliveForAnUnknownRunWithoutAssignmentIsNotFound) {
  v1::KeepAliveRequest ka;
  ka.set_run_id("ghost");
  ka.set_node_id("a");
  auto event = Client()->KeepAlive(ka);
  EXPECT_EQ(event.status().code(), absl::StatusCode::kNotFound);
  EXPECT_NE(event.status().message().find("ghost"), std::string::npos);
}

TEST_F(ServiceTest, ShutdownAnswersHeldCalls) {
  auto store = Client()->OpenStore("run", 1);
  ClientOptions options;
  options.endpoint = server_->endpoint();
  options.retry_budget = absl::Milliseconds(200);
  auto client = NewGrpcRendezvousClient(options);
  auto got = std::async(std::launch::async, [&] {
    return client->OpenStore("run", 1)->Get("never", absl::Seconds(20));
  });
  // Wait until the server holds the call, then shut down under it.
  for (int i = 0; i < 2000 && server_->service()->HeldCalls() == 0; ++i) {
    absl::SleepFor(absl::Milliseconds(1));  // polling a condition, bounded
  }
  ASSERT_EQ(server_->service()->HeldCalls(), 1);
  server_->Shutdown();
  auto result = got.get();
  EXPECT_EQ(result.status().code(), absl::StatusCode::kUnavailable) << result.status();
}

// Waits (bounded) until the server holds `n` calls.
bool AwaitHeld(RendezvousServer* server, int n) {
  for (int i = 0; i < 5000; ++i) {
    if (server->service()->HeldCalls() == n) return true;
    absl::SleepFor(absl::Milliseconds(1));  // polling a condition, bounded
  }
  return false;
}

// The reported interleaving made certain: rank 0 sets its key and its
// MultiGet of both keys is held on rank 1's; then rank 1 sets its key (which
// must wake rank 0) and reads both (answered at once).
TEST_F(ServiceTest, HeldMultiGetOfAPartlyPresentSetWakesOnTheOtherRanksSet) {
  auto rank0 = Client()->OpenStore("pair", 1);
  auto rank1 = Client()->OpenStore("pair", 1);
  ASSERT_TRUE(rank0->Set("k0", "v0").ok());
  auto got0 = std::async(std::launch::async,
                         [&] { return rank0->MultiGet({"k0", "k1"}, absl::Seconds(5)); });
  ASSERT_TRUE(AwaitHeld(server_.get(), 1));
  ASSERT_TRUE(rank1->Set("k1", "v1").ok());
  auto got1 = rank1->MultiGet({"k1", "k0"}, absl::Seconds(5));
  ASSERT_TRUE(got1.ok()) << got1.status();
  EXPECT_EQ(*got1, (std::vector<std::string>{"v1", "v0"}));
  auto values0 = got0.get();
  ASSERT_TRUE(values0.ok()) << values0.status();
  EXPECT_EQ(*values0, (std::vector<std::string>{"v0", "v1"}));
  EXPECT_TRUE(AwaitHeld(server_.get(), 0));
}

// A MultiSet naming one new key twice counts it once against
// max_keys_per_run (the later value wins).
TEST_F(ServiceTest, MultiSetOfARepeatedNewKeyCountsItOnce) {
  server_.reset();
  ServerOptions options;
  options.limits.max_keys_per_run = 2;
  auto server = RendezvousServer::Start(options);
  ASSERT_TRUE(server.ok()) << server.status();
  server_ = std::move(*server);
  auto store = Client()->OpenStore("run", 1);
  ASSERT_TRUE(store->MultiSet({{"d", "1"}, {"d", "2"}}).ok());
  EXPECT_EQ(*store->Get("d", absl::ZeroDuration()), "2");
  EXPECT_TRUE(store->Set("e", "3").ok());
  EXPECT_EQ(store->Set("f", "4").code(), absl::StatusCode::kResourceExhausted);
}

TEST_F(ServiceTest, ASecondServerCannotTakeAPortInUse) {
  ServerOptions options;
  options.port = server_->port();
  auto second = RendezvousServer::Start(options);
  ASSERT_FALSE(second.ok());
  EXPECT_EQ(second.status().code(), absl::StatusCode::kUnavailable);
  EXPECT_NE(second.status().message().find(absl::StrCat(":", server_->port())),
            std::string::npos)
      << second.status();
}

TEST_F(ServiceTest, CancelledCallsAreFinishedAndForgotten) {
  auto channel = grpc::CreateChannel(server_->endpoint(), grpc::InsecureChannelCredentials());
  auto stub = v1::Rendezvous::NewStub(channel);
  grpc::ClientContext ctx;
  v1::GetRequest request;
  request.mutable_scope()->set_run_id("run");
  request.mutable_scope()->set_round(1);
  request.set_key("never");
  request.set_timeout_ms(20000);
  v1::GetResponse response;
  absl::Notification done;
  grpc::Status status;
  stub->async()->Get(&ctx, &request, &response, [&](grpc::Status s) {
    status = s;
    done.Notify();
  });
  ASSERT_TRUE(AwaitHeld(server_.get(), 1));
  ctx.TryCancel();
  ASSERT_TRUE(done.WaitForNotificationWithTimeout(absl::Seconds(10)));
  EXPECT_EQ(status.error_code(), grpc::StatusCode::CANCELLED);
  EXPECT_TRUE(AwaitHeld(server_.get(), 0));
  // A later Set finds no stale reader and the key is readable.
  auto store = Client()->OpenStore("run", 1);
  ASSERT_TRUE(store->Set("never", "now").ok());
  EXPECT_EQ(*store->Get("never", absl::ZeroDuration()), "now");
}

TEST_F(ServiceTest, ClientRetriesUntilTheServerComesBack) {
  int port = server_->port();
  server_->Shutdown();
  server_.reset();
  ClientOptions options;
  options.endpoint = absl::StrCat("127.0.0.1:", port);
  options.retry_budget = absl::Seconds(20);
  auto client = NewGrpcRendezvousClient(options);
  auto set = std::async(std::launch::async,
                        [&] { return client->OpenStore("run", 1)->Set("k", "v"); });
  // The first attempts fail while nothing listens; then the server returns.
  EXPECT_EQ(set.wait_for(std::chrono::milliseconds(100)), std::future_status::timeout);
  Start(port);
  absl::Status status = set.get();
  EXPECT_TRUE(status.ok()) << status;
}

TEST_F(ServiceTest, RetryBudgetSpentNamesTheEndpoint) {
  int port = server_->port();
  server_->Shutdown();
  ClientOptions options;
  options.endpoint = absl::StrCat("127.0.0.1:", port);
  options.retry_budget = absl::Milliseconds(300);
  absl::Status status = NewGrpcRendezvousClient(options)->Close("run", "done");
  EXPECT_EQ(status.code(), absl::StatusCode::kUnavailable);
  EXPECT_NE(status.message().find(absl::StrCat("127.0.0.1:", port)), std::string::npos) << status;
}

// A server on a fake clock, and round 1 of "run" formed by nodes a and b
// (keep-alive deadline 15 s); `b` is b's assignment.
struct FakeClockRound {
  base::FakeClock clock;
  std::unique_ptr<RendezvousServer> server;
  std::unique_ptr<RendezvousClient> client;
  v1::Assignment b;
};

void FormTwoNodeRound(FakeClockRound* r) {
  ServerOptions options;
  options.clock = &r->clock;
  auto server = RendezvousServer::Start(options);
  ASSERT_TRUE(server.ok()) << server.status();
  r->server = *std::move(server);
  ClientOptions client_options;
  client_options.endpoint = r->server->endpoint();
  r->client = NewGrpcRendezvousClient(client_options);
  Conf conf{.min_nodes = 2, .max_nodes = 2};
  auto a = std::async(std::launch::async, [&] {
    return NewGrpcRendezvousClient(client_options)->Join(Request("run", "a", conf));
  });
  auto b = r->client->Join(Request("run", "b", conf));
  ASSERT_TRUE(b.ok()) << b.status();
  ASSERT_TRUE(a.get().ok());
  r->b = *b;
}

// The server's clock is injectable: deadlines move with a fake clock, and
// Tick() applies them without waiting.
TEST(ServiceFakeClock, DeadNodeFoundWhenTheClockPassesItsDeadline) {
  FakeClockRound r;
  ASSERT_NO_FATAL_FAILURE(FormTwoNodeRound(&r));
  base::FakeClock& clock = r.clock;
  auto& client = r.client;
  auto* server = &r.server;  // (*server)-> as before
  const v1::Assignment* b = &r.b;
  clock.Advance(absl::Seconds(10));
  ASSERT_TRUE(client->KeepAlive(KeepAliveOf("run", *b, "b")).ok());
  clock.Advance(absl::Seconds(6));  // a: 16 s silent; b: 6 s
  (*server)->service()->Tick();
  auto event = client->KeepAlive(KeepAliveOf("run", *b, "b"));
  ASSERT_TRUE(event.ok());
  EXPECT_FALSE(event->round_current());
  EXPECT_NE(event->reason().find("node 'a'"), std::string::npos) << event->reason();
  EXPECT_NE(event->reason().find("16s"), std::string::npos) << event->reason();
}

TEST(ServiceFakeClock, IdleRunsAreForgottenButHeldOnesAreNot) {
  base::FakeClock clock;
  ServerOptions options;
  options.clock = &clock;
  options.idle_run_timeout = absl::Minutes(10);
  auto server = RendezvousServer::Start(options);
  ASSERT_TRUE(server.ok()) << server.status();
  ClientOptions client_options;
  client_options.endpoint = (*server)->endpoint();
  auto client = NewGrpcRendezvousClient(client_options);
  ASSERT_TRUE(client->OpenStore("idle", 0)->Set("k", "v").ok());
  ASSERT_TRUE(client->OpenStore("busy", 0)->Set("k", "v").ok());
  clock.Advance(absl::Minutes(9));
  // "busy" gets a call held for longer than the idle timeout.
  auto waiting = std::async(std::launch::async, [&] {
    return NewGrpcRendezvousClient(client_options)->OpenStore("busy", 0)->Get("later",
                                                                                absl::Seconds(20));
  });
  ASSERT_TRUE(AwaitHeld(server->get(), 1));
  // Past the idle timeout. The held Get's piece expires on this clock too;
  // the client asks again, so "busy" keeps a held call.
  clock.Advance(absl::Minutes(11));
  (*server)->service()->Tick();
  EXPECT_EQ(client->OpenStore("idle", 0)->Get("k", absl::ZeroDuration()).status().code(),
            absl::StatusCode::kNotFound);
  ASSERT_TRUE(client->OpenStore("busy", 0)->Set("later", "now").ok());
  auto got = waiting.get();
  ASSERT_TRUE(got.ok()) << got.status();
  EXPECT_EQ(*got, "now");
}

// The metrics snapshot: joins, a lost node, the ended round and how long
// it stood, restarts counted once per node and round, progress history.
TEST(ServiceFakeClock, MetricsSnapshotCountsJoinsLossesRoundsAndRestarts) {
  FakeClockRound r;
  ASSERT_NO_FATAL_FAILURE(FormTwoNodeRound(&r));
  base::FakeClock& clock = r.clock;
  auto& client = r.client;
  auto* server = &r.server;  // (*server)-> as before
  const v1::Assignment* b = &r.b;
  v1::KeepAliveRequest ka = KeepAliveOf("run", *b, "b");
  ka.mutable_last_restart()->set_cause("worker_failed");
  ka.mutable_last_restart()->set_round(1);
  v1::RankProgress* p = ka.add_progress();
  p->set_rank(1);
  p->set_step(5);
  p->set_loss(0.5);
  ASSERT_TRUE(client->KeepAlive(ka).ok());
  ASSERT_TRUE(client->KeepAlive(ka).ok());  // the same restart and step again
  p->set_step(7);
  clock.Advance(absl::Seconds(10));
  ASSERT_TRUE(client->KeepAlive(ka).ok());
  clock.Advance(absl::Seconds(6));  // a: 16 s silent
  (*server)->service()->Tick();

  ServiceSnapshot s = (*server)->service()->MetricsSnapshot(MetricsBounds());
  EXPECT_EQ(s.runs, 1);
  EXPECT_EQ(s.node_joins, 2);
  EXPECT_EQ(s.node_losses, 1);
  EXPECT_EQ(s.round_ends["node_lost"], 1);
  EXPECT_EQ(s.round_duration.count, 1u);
  EXPECT_DOUBLE_EQ(s.round_duration.sum, 16);
  ASSERT_EQ(s.exported.size(), 1u);
  EXPECT_EQ(s.exported[0].rounds_completed, 1);
  EXPECT_EQ(s.exported[0].restarts["worker_failed"], 1);
  EXPECT_EQ(s.exported[0].state, "forming");
  v1::RunStatusResponse status;
  ProgressHistory history;
  ASSERT_TRUE((*server)->service()->RunStatusOf("run", &status, &history).ok());
  ASSERT_EQ(history[1].size(), 2u);
  EXPECT_EQ(history[1][1].step, 7);
  EXPECT_EQ((*server)->service()->MetricsSnapshot(MetricsBounds{.max_runs = 0}).exported.size(), 0u);
}

}  // namespace
}  // namespace cpptorchrun::rdzv
