// The etcd backend's stored form of a run: a state survives encoding (with
// liveness left to ApplyLiveness), liveness does not change the bytes, bad
// bytes are refused naming the key; key parts are escaped so no id reaches
// outside its own keys.
#include "rendezvous/etcd/run_record.h"

#include <string>

#include "absl/time/time.h"
#include "gtest/gtest.h"
#include "rendezvous/etcd/keys.h"

namespace cpptorchrun::rdzv::etcd {
namespace {

RunState TwoNodeRound(absl::Time now) {
  RoundOptions options;
  options.min_nodes = 2;
  options.max_nodes = 3;
  RunState s = NewRun("run-1", options);
  s.version = 7;
  for (const char* id : {"a", "b"}) {
    v1::NodeInfo node;
    node.set_node_id(id);
    node.set_host("10.0.0.1");
    node.set_local_world_size(2);
    node.set_static_node_rank(-1);
    EXPECT_TRUE(ApplyJoin(now, &s, node, options, 0).ok());
  }
  CompleteRound(now, &s);
  return s;
}

TEST(RunRecordTest, AStateRoundTripsWithItsRoundAndParticipants) {
  const absl::Time now = absl::FromUnixSeconds(1000);
  RunState s = TwoNodeRound(now);
  auto back = DecodeRun(EncodeRun(s), "k");
  ASSERT_TRUE(back.ok()) << back.status();
  EXPECT_EQ(back->run_id, "run-1");
  EXPECT_EQ(back->active_round, s.active_round);
  EXPECT_EQ(back->world_size, 4);
  ASSERT_EQ(back->participants.size(), 2u);
  EXPECT_EQ(back->participants[1].participant.node_id(), s.participants[1].participant.node_id());
  EXPECT_TRUE(back->participant_index.contains("a"));
  EXPECT_EQ(back->options.max_nodes, 3);
  EXPECT_EQ(EncodeRun(*back), EncodeRun(s));
}

TEST(RunRecordTest, TheRoundsFailureCausesAndTheQuarantineOptionsRoundTrip) {
  const absl::Time now = absl::FromUnixSeconds(1000);
  RunState s = TwoNodeRound(now);
  s.options.quarantine_after = 0;  // off must stay off
  s.options.quarantine_cooldown = absl::Seconds(42);
  v1::NodeInfo b;
  b.set_node_id("b");
  b.set_host("10.0.0.2");
  v1::NodeFailure f;
  f.set_round(1);
  f.set_failed_at_unix_us(absl::ToUnixMicros(now) - 5);
  f.set_reason("rank 2 failed: SIGSEGV");
  ASSERT_TRUE(NoteFailure(now, &s, b, f));
  s.options.job_max_restarts = 7;
  auto back = DecodeRun(EncodeRun(s), "k");
  ASSERT_TRUE(back.ok()) << back.status();
  ASSERT_EQ(back->round_failures.count(1), 1u);
  const RoundFailure& cause = back->round_failures.at(1);
  EXPECT_EQ(cause.host, "10.0.0.2");
  EXPECT_EQ(cause.node_id, "b");
  EXPECT_EQ(cause.reason, "rank 2 failed: SIGSEGV");
  EXPECT_EQ(cause.failed_at, now - absl::Microseconds(5));
  EXPECT_EQ(cause.reported_at, now);
  EXPECT_EQ(back->options.quarantine_after, 0);
  EXPECT_EQ(back->options.quarantine_cooldown, absl::Seconds(42));
  EXPECT_EQ(back->options.job_max_restarts, 7);
  EXPECT_EQ(back->failed_rounds, 1);
  EXPECT_EQ(EncodeRun(*back), EncodeRun(s));
}

TEST(RunRecordTest, LivenessDecidesWhoIsDeadAndDoesNotChangeTheBytes) {
  const absl::Time now = absl::FromUnixSeconds(1000);
  RunState s = TwoNodeRound(now);
  const std::string bytes = EncodeRun(s);
  auto back = DecodeRun(bytes, "k");
  ASSERT_TRUE(back.ok());
  Liveness live;
  live.alive.insert("a");
  live.reports["a"].set_restart_count(3);
  ApplyLiveness(now, live, &*back);
  EXPECT_EQ(EncodeRun(*back), bytes);
  EXPECT_EQ(back->participants[back->participant_index["a"]].restart_count, 3);
  EXPECT_EQ(FindDeadParticipants(now, *back), std::vector<std::string>{"b"});
}

TEST(RunRecordTest, BytesThatAreNotARunAreRefusedNamingTheKey) {
  auto bad = DecodeRun("\xff\xff garbage", "/p/runs/x/live/state");
  ASSERT_FALSE(bad.ok());
  EXPECT_TRUE(absl::IsDataLoss(bad.status()));
  EXPECT_NE(bad.status().message().find("/p/runs/x/live/state"), std::string::npos);
  record::StoredRun other;
  other.set_format(kRunRecordFormat + 1);
  auto newer = DecodeRun(other.SerializeAsString(), "k");
  ASSERT_FALSE(newer.ok());
  EXPECT_NE(newer.status().message().find("format"), std::string::npos);
}

TEST(KeysTest, IdsAreEscapedSoNoneReachesAnotherRunsKeys) {
  EXPECT_EQ(EscapeKeyPart("node-1_a.b"), "node-1_a.b");
  EXPECT_EQ(EscapeKeyPart("../x/y"), "..%2Fx%2Fy");
  RunKeys k("/p", "a/b");
  EXPECT_EQ(k.State(), "/p/runs/a%2Fb/live/state");
  EXPECT_EQ(k.Store(3), "/p/runs/a%2Fb/rounds/3/store/");
  for (const std::string& id : std::vector<std::string>{"x", "a b/c%", std::string("\0\xff", 2)}) {
    auto back = UnescapeKeyPart(EscapeKeyPart(id));
    ASSERT_TRUE(back.ok());
    EXPECT_EQ(*back, id);
  }
  EXPECT_FALSE(UnescapeKeyPart("ab%2").ok());
  EXPECT_FALSE(UnescapeKeyPart("ab%zz").ok());
}

TEST(KeysTest, PrefixesMustBeAFolderOfTheKeySpace) {
  EXPECT_EQ(*ParsePrefix("/cpptorchrun/"), "/cpptorchrun");
  EXPECT_EQ(*ParsePrefix("/jobs/a"), "/jobs/a");
  for (const char* bad : {"", "/", "jobs", "//"}) {
    auto p = ParsePrefix(bad);
    EXPECT_FALSE(p.ok()) << bad;
  }
}

}  // namespace
}  // namespace cpptorchrun::rdzv::etcd
