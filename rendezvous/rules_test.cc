// Tests of the round rules with made-up times: every rule is driven by
// passing `now` in, never by sleeping.
#include "rendezvous/rules.h"

#include <limits>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/time/time.h"
#include "absl/strings/str_cat.h"
#include "gtest/gtest.h"

namespace cpptorchrun::rdzv {
namespace {

const absl::Time kT0 = absl::UnixEpoch() + absl::Hours(10);

v1::NodeInfo Node(const std::string& id, int local_world_size = 2, int static_rank = -1) {
  v1::NodeInfo n;
  n.set_node_id(id);
  n.set_host("host-" + id);
  n.set_local_world_size(local_world_size);
  n.set_static_node_rank(static_rank);
  n.set_free_port(1000 + static_cast<int>(id.size()));
  return n;
}

RoundOptions Options(int min_nodes, int max_nodes) {
  RoundOptions o;
  o.min_nodes = min_nodes;
  o.max_nodes = max_nodes;
  o.join_timeout = absl::Seconds(100);
  o.last_call_timeout = absl::Seconds(10);
  o.keep_alive_interval = absl::Seconds(5);
  o.keep_alive_max_attempt = 3;
  return o;
}

JoinResult Join(RunState* s, absl::Time now, const std::string& id, int64_t last_round = 0) {
  absl::StatusOr<JoinResult> r = ApplyJoin(now, s, Node(id), s->options, last_round);
  EXPECT_TRUE(r.ok()) << r.status();
  return r.ok() ? *r : JoinResult{};
}

std::vector<std::string> Ids(const RunState& s) {
  std::vector<std::string> ids;
  for (const ParticipantState& p : s.participants) ids.push_back(p.participant.node_id());
  return ids;
}

v1::KeepAliveRequest KeepAliveOf(const RunState& s, const std::string& id) {
  v1::KeepAliveRequest r;
  r.set_run_id(s.run_id);
  r.set_node_id(id);
  *r.mutable_assignment() = *AssignmentFor(s, id);
  return r;
}

// --- options -----------------------------------------------------------------

TEST(RoundOptionsFromProto, ZeroFieldsTakeTorchrunDefaults) {
  v1::RunOptions p;
  p.set_min_nodes(2);
  auto o = RoundOptionsFromProto(p, 100);
  ASSERT_TRUE(o.ok()) << o.status();
  EXPECT_EQ(o->max_nodes, 2);
  EXPECT_EQ(o->join_timeout, absl::Seconds(600));
  EXPECT_EQ(o->last_call_timeout, absl::Seconds(30));
  EXPECT_EQ(o->close_timeout, absl::Seconds(30));
  EXPECT_EQ(o->keep_alive_interval, absl::Seconds(5));
  EXPECT_EQ(o->keep_alive_max_attempt, 3);
  EXPECT_EQ(o->KeepAliveDeadline(), absl::Seconds(15));
}

TEST(RoundOptionsFromProto, RejectsEachBadFieldByName) {
  struct Case {
    int min, max;
    double join, last_call, interval;
    int attempts;
    std::string fragment;
  };
  const Case cases[] = {
      {0, 1, 0, 0, 0, 0, "min_nodes"},
      {3, 2, 0, 0, 0, 0, "below min_nodes"},
      {1, 101, 0, 0, 0, 0, "limit of 100"},
      {1, 1, -1, 0, 0, 0, "join_timeout_s"},
      {1, 1, 0, 0, -2, 0, "keep_alive_interval_s"},
      {1, 1, 0, 0, 0, -1, "keep_alive_max_attempt"},
  };
  for (const Case& c : cases) {
    v1::RunOptions p;
    p.set_min_nodes(c.min);
    p.set_max_nodes(c.max);
    p.set_join_timeout_s(c.join);
    p.set_last_call_timeout_s(c.last_call);
    p.set_keep_alive_interval_s(c.interval);
    p.set_keep_alive_max_attempt(c.attempts);
    auto o = RoundOptionsFromProto(p, 100);
    ASSERT_FALSE(o.ok()) << c.fragment;
    EXPECT_EQ(o.status().code(), absl::StatusCode::kInvalidArgument);
    EXPECT_NE(o.status().message().find(c.fragment), std::string::npos) << o.status();
  }
}

TEST(RoundOptionsFromProto, NegativeLastCallMeansNone) {
  v1::RunOptions p;
  p.set_min_nodes(1);
  p.set_last_call_timeout_s(-1);
  auto o = RoundOptionsFromProto(p, 10);
  ASSERT_TRUE(o.ok());
  EXPECT_EQ(o->last_call_timeout, absl::ZeroDuration());
}

// --- ranks -------------------------------------------------------------------

TEST(AssignRanks, NewcomersByNodeIdWithOffsets) {
  auto ranked = AssignRanks({Node("c", 4), Node("a", 1), Node("b", 2)}, {});
  ASSERT_TRUE(ranked.ok());
  ASSERT_EQ(ranked->size(), 3u);
  EXPECT_EQ((*ranked)[0].node_id(), "a");
  EXPECT_EQ((*ranked)[0].rank_offset(), 0);
  EXPECT_EQ((*ranked)[1].node_id(), "b");
  EXPECT_EQ((*ranked)[1].rank_offset(), 1);
  EXPECT_EQ((*ranked)[2].node_id(), "c");
  EXPECT_EQ((*ranked)[2].rank_offset(), 3);
  EXPECT_EQ((*ranked)[2].group_rank(), 2);
}

TEST(AssignRanks, AWorldSizeBeyondInt32IsRefusedNotWrapped) {
  auto ranked = AssignRanks({Node("a", 2147483647), Node("b", 2147483647)}, {});
  ASSERT_FALSE(ranked.ok());
  EXPECT_NE(ranked.status().message().find("world size would exceed"), std::string::npos);
  EXPECT_TRUE(AssignRanks({Node("a", 2147483646), Node("b", 1)}, {}).ok());
}

TEST(ApplyJoin, ALastRoundBeyondTheLimitIsRefusedAndChangesNothing) {
  RunState s = NewRun("run", Options(1, 2));
  for (int64_t bad : {std::numeric_limits<int64_t>::max(), kMaxLastRound + 1, int64_t{-1}}) {
    auto r = ApplyJoin(kT0, &s, Node("a"), s.options, bad);
    ASSERT_FALSE(r.ok()) << bad;
    EXPECT_EQ(r.status().code(), absl::StatusCode::kInvalidArgument);
    EXPECT_NE(r.status().message().find("last_round"), std::string::npos);
  }
  EXPECT_EQ(s.highest_round, 0);
  // A huge (but accepted) last_round cannot push the numbering past where
  // the agents' own re-Joins (last_round = the round they were given) pass.
  ASSERT_TRUE(ApplyJoin(kT0, &s, Node("a"), s.options, kMaxLastRound).ok());
  EXPECT_GT(s.forming_round, 0) << "round numbers stay positive";
  EXPECT_LE(s.forming_round, kMaxRound);
  ASSERT_TRUE(ApplyJoin(kT0, &s, Node("b"), s.options, s.forming_round).ok()) << "a re-Join still passes";
}

TEST(CheckJoin, NamesEachRefusalAndAcceptsAFittingJoin) {
  RunState s = NewRun("r", Options(2, 3));
  EXPECT_TRUE(CheckJoin(s, Node("a"), s.options, 0).ok());
  absl::Status nnodes = CheckJoin(s, Node("a"), Options(1, 3), 0);
  EXPECT_EQ(nnodes.code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_NE(nnodes.message().find("nnodes 2:3"), absl::string_view::npos) << nnodes;
  EXPECT_EQ(CheckJoin(s, Node("a", 2, 3), s.options, 0).code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(CheckJoin(s, Node("a"), s.options, -1).code(), absl::StatusCode::kInvalidArgument);
  ApplyClose(kT0, &s, "done");
  absl::Status closed = CheckJoin(s, Node("a"), s.options, 0);
  EXPECT_EQ(closed.code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_NE(closed.message().find("closed: done"), absl::string_view::npos) << closed;
}

TEST(ApplyJoin, AJoinerJoiningAgainIsRefreshedNotAddedTwice) {
  RunState s = NewRun("r", Options(3, 3));
  Join(&s, kT0, "a");
  const int64_t version = s.version;
  v1::NodeInfo moved = Node("a");
  moved.set_host("elsewhere");
  auto r = ApplyJoin(kT0 + absl::Seconds(1), &s, moved, s.options, 0);
  ASSERT_TRUE(r.ok()) << r.status();
  EXPECT_EQ(r->outcome, JoinResult::Outcome::kPending);
  ASSERT_EQ(s.joiners.size(), 1u);
  EXPECT_EQ(s.joiners[0].node.host(), "elsewhere");
  EXPECT_EQ(s.joiners[0].last_heard, kT0 + absl::Seconds(1));
  EXPECT_EQ(s.version, version);
}

TEST(AssignRanks, SurvivorsKeepRelativeOrderBeforeNewcomers) {
  std::vector<ParticipantState> previous(3);
  const char* old_order[] = {"z", "m", "b"};
  for (int i = 0; i < 3; ++i) {
    previous[i].participant.set_node_id(old_order[i]);
    previous[i].participant.set_group_rank(i);
  }
  // "m" died; "a" is new.
  auto ranked = AssignRanks({Node("a"), Node("b"), Node("z")}, previous);
  ASSERT_TRUE(ranked.ok());
  EXPECT_EQ((*ranked)[0].node_id(), "z");
  EXPECT_EQ((*ranked)[1].node_id(), "b");
  EXPECT_EQ((*ranked)[2].node_id(), "a");
}

TEST(AssignRanks, StaticRanksAreHonouredAndOthersFillGaps) {
  auto ranked = AssignRanks({Node("a", 1, 2), Node("b", 1), Node("c", 1, 0)}, {});
  ASSERT_TRUE(ranked.ok());
  EXPECT_EQ((*ranked)[0].node_id(), "c");
  EXPECT_EQ((*ranked)[1].node_id(), "b");
  EXPECT_EQ((*ranked)[2].node_id(), "a");
}

TEST(AssignRanks, RejectsStaticRanksThatDoNotFit) {
  EXPECT_EQ(AssignRanks({Node("a", 1, 5), Node("b", 1)}, {}).status().code(),
            absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(AssignRanks({Node("a", 1, 0), Node("b", 1, 0)}, {}).status().code(),
            absl::StatusCode::kInvalidArgument);
}

// --- forming -----------------------------------------------------------------

TEST(Forming, CompletesAtOnceWhenMaxJoined) {
  RunState s = NewRun("run", Options(2, 3));
  EXPECT_EQ(Join(&s, kT0, "a").outcome, JoinResult::Outcome::kPending);
  EXPECT_EQ(Join(&s, kT0, "b").outcome, JoinResult::Outcome::kPending);
  JoinResult r = Join(&s, kT0 + absl::Seconds(1), "c");
  EXPECT_EQ(r.outcome, JoinResult::Outcome::kComplete);
  EXPECT_TRUE(r.round_completed);
  EXPECT_EQ(s.active_round, 1);
  EXPECT_EQ(r.assignment.round(), 1);
  EXPECT_EQ(r.assignment.group_world_size(), 3);
  EXPECT_EQ(r.assignment.world_size(), 6);
  EXPECT_EQ(r.assignment.group_rank(), 2);
  EXPECT_EQ(r.assignment.master_addr(), "host-a");
  EXPECT_EQ(r.assignment.master_port(), 1001);
  EXPECT_EQ(Ids(s), (std::vector<std::string>{"a", "b", "c"}));
}

TEST(Forming, LastCallCompletesOnlyAfterItsTimeout) {
  RunState s = NewRun("run", Options(2, 4));
  Join(&s, kT0, "a");
  Join(&s, kT0 + absl::Seconds(3), "b");  // min reached at t0+3
  struct Step {
    absl::Duration at;
    bool completes;
  };
  const Step steps[] = {{absl::Seconds(3), false},
                        {absl::Seconds(12.9), false},
                        {absl::Seconds(13), true}};
  for (const Step& step : steps) {
    FormingDecision d = DecideForming(kT0 + step.at, s);
    EXPECT_EQ(d.complete, step.completes) << step.at;
  }
  EXPECT_EQ(NextDeadline(s), kT0 + absl::Seconds(13));
  TickResult t = ApplyTick(kT0 + absl::Seconds(13), &s);
  EXPECT_TRUE(t.round_completed);
  EXPECT_NE(t.reason.find("last call"), std::string::npos) << t.reason;
  EXPECT_EQ(s.active_round, 1);
}

TEST(Forming, ZeroLastCallCompletesAsSoonAsMinJoined) {
  RoundOptions o = Options(2, 4);
  o.last_call_timeout = absl::ZeroDuration();
  RunState s = NewRun("run", o);
  Join(&s, kT0, "a");
  EXPECT_EQ(Join(&s, kT0, "b").outcome, JoinResult::Outcome::kComplete);
}

TEST(Forming, JoinTimeoutPerJoinerWhenMinNeverArrives) {
  RunState s = NewRun("run", Options(3, 3));
  Join(&s, kT0, "a");
  Join(&s, kT0 + absl::Seconds(50), "b");
  SetPolling(kT0 + absl::Seconds(50), &s, "a", true);
  SetPolling(kT0 + absl::Seconds(50), &s, "b", true);
  EXPECT_TRUE(DecideForming(kT0 + absl::Seconds(99), s).timed_out.empty());
  TickResult t = ApplyTick(kT0 + absl::Seconds(100), &s);
  EXPECT_EQ(t.timed_out, (std::vector<std::string>{"a"}));
  EXPECT_NE(t.reason.find("did not complete within"), std::string::npos) << t.reason;
  t = ApplyTick(kT0 + absl::Seconds(150), &s);
  EXPECT_EQ(t.timed_out, (std::vector<std::string>{"b"}));
  EXPECT_TRUE(s.joiners.empty());
}

TEST(Forming, SilentJoinerIsDroppedButAPollingOneIsNot) {
  RunState s = NewRun("run", Options(3, 3));
  Join(&s, kT0, "a");
  Join(&s, kT0, "b");
  SetPolling(kT0, &s, "b", true);
  TickResult t = ApplyTick(kT0 + absl::Seconds(16), &s);
  EXPECT_EQ(t.dropped, (std::vector<std::string>{"a"}));
  EXPECT_EQ(s.joiners.size(), 1u);
}

TEST(Forming, DeadJoinerResetsTheLastCall) {
  RunState s = NewRun("run", Options(2, 4));
  Join(&s, kT0, "a");
  Join(&s, kT0, "b");
  SetPolling(kT0, &s, "b", true);
  ASSERT_TRUE(s.min_reached_at.has_value());
  // "a" silent past 15 s: dropped, and one node is below min.
  ApplyTick(kT0 + absl::Seconds(16), &s);
  EXPECT_FALSE(s.min_reached_at.has_value());
  EXPECT_EQ(s.active_round, 0);
}

TEST(Forming, StaticRanksNeedEnoughNodesAndMustNotCollide) {
  RunState s = NewRun("run", Options(1, 3));
  ASSERT_TRUE(ApplyJoin(kT0, &s, Node("a", 1, 2), s.options, 0).ok());
  EXPECT_EQ(NodesNeeded(s.joiners, s.options), 3);
  auto taken = ApplyJoin(kT0, &s, Node("b", 1, 2), s.options, 0);
  EXPECT_EQ(taken.status().code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_NE(taken.status().message().find("already taken by node 'a'"), std::string::npos);
  auto beyond = ApplyJoin(kT0, &s, Node("c", 1, 3), s.options, 0);
  EXPECT_EQ(beyond.status().code(), absl::StatusCode::kInvalidArgument);
  // One node with static rank 2 cannot complete even after the last call.
  EXPECT_FALSE(DecideForming(kT0 + absl::Seconds(50), s).complete);
}

TEST(Forming, NnodesMustAgreeWithTheRun) {
  RunState s = NewRun("run", Options(2, 3));
  auto r = ApplyJoin(kT0, &s, Node("a"), Options(2, 4), 0);
  EXPECT_EQ(r.status().code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_NE(r.status().message().find("has nnodes 2:3"), std::string::npos) << r.status();
}

// --- active rounds -----------------------------------------------------------

RunState ActiveRun(int min_nodes, int max_nodes, std::vector<std::string> ids) {
  RunState s = NewRun("run", Options(min_nodes, max_nodes));
  RoundOptions o = s.options;
  for (const std::string& id : ids) EXPECT_TRUE(ApplyJoin(kT0, &s, Node(id), o, 0).ok());
  if (s.active_round == 0) ApplyTick(kT0 + o.last_call_timeout, &s);
  EXPECT_EQ(s.active_round, 1);
  return s;
}

TEST(Active, KeepAlivesKeepParticipantsAlive) {
  RunState s = ActiveRun(2, 2, {"a", "b"});
  absl::Time t = kT0 + absl::Seconds(10);
  ApplyKeepAlive(t, &s, KeepAliveOf(s, "a"));
  ApplyKeepAlive(t, &s, KeepAliveOf(s, "b"));
  EXPECT_TRUE(FindDeadParticipants(t + absl::Seconds(15), s).empty());
  EXPECT_EQ(FindDeadParticipants(t + absl::Seconds(15.001), s).size(), 2u);
}

TEST(Active, DeadNodeEndsTheRoundAndSurvivorsFormTheNext) {
  RunState s = ActiveRun(2, 3, {"a", "b", "c"});
  absl::Time t = kT0 + absl::Seconds(14);
  ApplyKeepAlive(t, &s, KeepAliveOf(s, "a"));
  ApplyKeepAlive(t, &s, KeepAliveOf(s, "c"));
  int64_t version = s.version;
  TickResult tick = ApplyTick(kT0 + absl::Seconds(16), &s);
  EXPECT_TRUE(tick.round_ended);
  EXPECT_NE(tick.reason.find("node 'b'"), std::string::npos) << tick.reason;
  EXPECT_GT(s.version, version);
  v1::RunEvent e = EventFor(s, "a", 1);
  EXPECT_FALSE(e.round_current());
  EXPECT_NE(e.reason().find("'b'"), std::string::npos);
  EXPECT_EQ(s.forming_round, 2);
  // Survivors re-join (having seen round 1); c first, yet a keeps rank 0.
  absl::Time t2 = kT0 + absl::Seconds(17);
  Join(&s, t2, "c", 1);
  Join(&s, t2, "a", 1);
  ApplyTick(t2 + absl::Seconds(10), &s);
  EXPECT_EQ(s.active_round, 2);
  EXPECT_EQ(Ids(s), (std::vector<std::string>{"a", "c"}));
}

TEST(Active, NewcomerWithRoomEndsTheRound) {
  RunState s = ActiveRun(1, 3, {"a", "b"});
  JoinResult r = Join(&s, kT0 + absl::Seconds(1), "n");
  EXPECT_EQ(r.outcome, JoinResult::Outcome::kPending);
  v1::RunEvent e = EventFor(s, "a", 1);
  EXPECT_FALSE(e.round_current());
  EXPECT_NE(e.reason().find("'n' waits to join"), std::string::npos) << e.reason();
  EXPECT_EQ(s.forming_round, 2);
  Join(&s, kT0 + absl::Seconds(2), "b", 1);
  JoinResult last = Join(&s, kT0 + absl::Seconds(2), "a", 1);
  EXPECT_EQ(last.outcome, JoinResult::Outcome::kComplete);
  EXPECT_EQ(Ids(s), (std::vector<std::string>{"a", "b", "n"}));
}

TEST(Active, NewcomerToAFullRoundIsASpareAdmittedWhenANodeLeaves) {
  RunState s = ActiveRun(2, 2, {"a", "b"});
  JoinResult r = Join(&s, kT0 + absl::Seconds(1), "s");
  EXPECT_EQ(r.outcome, JoinResult::Outcome::kSpare);
  v1::RunEvent e = EventFor(s, "a", 1);
  EXPECT_TRUE(e.round_current());
  EXPECT_EQ(e.waiting_nodes(), 1);
  // Asking again keeps it a spare.
  EXPECT_EQ(Join(&s, kT0 + absl::Seconds(2), "s").outcome, JoinResult::Outcome::kSpare);
  EXPECT_TRUE(ApplyLeave(kT0 + absl::Seconds(3), &s, "b", "done"));
  EXPECT_FALSE(EventFor(s, "a", 1).round_current());
  EXPECT_EQ(s.joiners.size(), 1u);
  EXPECT_EQ(s.joiners[0].node.node_id(), "s");
  JoinResult done = Join(&s, kT0 + absl::Seconds(4), "a", 1);
  EXPECT_EQ(done.outcome, JoinResult::Outcome::kComplete);
  EXPECT_EQ(Ids(s), (std::vector<std::string>{"a", "s"}));
}

TEST(Active, ManySparesNeverMakeARoundAboveMaxNodesAndTheSurvivorStays) {
  // Issue 14: 2,000 spares and one Leave made a 2,000-node round in a 2:2
  // job, without its surviving node.
  RunState s = ActiveRun(2, 2, {"a", "b"});
  for (int i = 0; i < 2000; ++i) {
    EXPECT_EQ(Join(&s, kT0 + absl::Seconds(1), absl::StrCat("spare", i)).outcome, JoinResult::Outcome::kSpare);
  }
  ASSERT_TRUE(ApplyLeave(kT0 + absl::Seconds(2), &s, "b", "done"));
  EXPECT_EQ(s.joiners.size(), 1u) << "one place is free: the survivor's is kept for it";
  EXPECT_FALSE(ApplyTick(kT0 + absl::Seconds(2), &s).round_completed);
  JoinResult done = Join(&s, kT0 + absl::Seconds(3), "a", 1);
  ASSERT_EQ(done.outcome, JoinResult::Outcome::kComplete);
  ASSERT_EQ(s.participants.size(), 2u);
  EXPECT_EQ(s.world_size, 4);
  EXPECT_TRUE(s.participant_index.contains("a")) << "the surviving node keeps its place";
  EXPECT_TRUE(s.participant_index.contains("spare0")) << "then the spares in arrival order";
  EXPECT_EQ(s.spares.size(), 1999u) << "the others wait for the next round";
}

TEST(Active, WaitingNodesCountNewcomersNotSurvivors) {
  RunState s = ActiveRun(1, 3, {"a", "b"});
  Join(&s, kT0 + absl::Seconds(1), "n");  // ends round 1
  Join(&s, kT0 + absl::Seconds(1), "a", 1);
  EXPECT_EQ(WaitingNodes(s), 1);
  EXPECT_EQ(EventFor(s, "b", 1).waiting_nodes(), 1);
}

TEST(Active, LargeRoundsLeaveTheParticipantListOut) {
  RunState s = ActiveRun(3, 3, {"a", "b", "c"});
  EXPECT_EQ(AssignmentFor(s, "b", 3)->participants_size(), 3);
  std::optional<v1::Assignment> small = AssignmentFor(s, "b", 2);
  ASSERT_TRUE(small.has_value());
  EXPECT_EQ(small->participants_size(), 0);
  EXPECT_EQ(small->world_size(), 6);
  EXPECT_EQ(small->group_world_size(), 3);
  EXPECT_EQ(small->rank_offset(), 2);
  EXPECT_FALSE(AssignmentFor(s, "stranger").has_value());
}

TEST(Leave, RemovesJoinersAndSparesAndKnowsStrangers) {
  RunState s = NewRun("run", Options(3, 3));
  Join(&s, kT0, "a");
  Join(&s, kT0, "b");
  int64_t version = s.version;
  EXPECT_TRUE(ApplyLeave(kT0, &s, "a", "bye"));
  EXPECT_GT(s.version, version);
  ASSERT_EQ(s.joiners.size(), 1u);
  EXPECT_EQ(s.joiners[0].node.node_id(), "b");
  EXPECT_FALSE(ApplyLeave(kT0, &s, "nobody", "bye"));
  RunState full = ActiveRun(1, 1, {"p"});
  EXPECT_EQ(Join(&full, kT0, "spare").outcome, JoinResult::Outcome::kSpare);
  EXPECT_TRUE(ApplyLeave(kT0, &full, "spare", "bye"));
  EXPECT_TRUE(full.spares.empty());
  EXPECT_TRUE(EventFor(full, "p", 1).round_current());
}

TEST(Tick, SilentSpareIsDropped) {
  RunState s = ActiveRun(1, 1, {"p"});
  Join(&s, kT0, "spare");
  ApplyKeepAlive(kT0 + absl::Seconds(10), &s, KeepAliveOf(s, "p"));
  TickResult t = ApplyTick(kT0 + absl::Seconds(16), &s);
  EXPECT_EQ(t.dropped, (std::vector<std::string>{"spare"}));
  EXPECT_FALSE(t.round_ended);
  EXPECT_EQ(WaitingNodes(s), 0);
}

TEST(Active, RejoinWithTheCurrentRoundStartsTheNextOne) {
  RunState s = ActiveRun(1, 2, {"a", "b"});
  JoinResult r = Join(&s, kT0 + absl::Seconds(1), "a", 1);
  EXPECT_EQ(r.outcome, JoinResult::Outcome::kPending);
  EXPECT_EQ(s.forming_round, 2);
  EXPECT_NE(s.end_reason.find("'a' re-joined"), std::string::npos);
}

TEST(Active, RejoinFromAnEarlierRoundRepeatsTheLostAnswer) {
  RunState s = ActiveRun(1, 2, {"a", "b"});
  JoinResult r = Join(&s, kT0 + absl::Seconds(1), "b", 0);
  EXPECT_EQ(r.outcome, JoinResult::Outcome::kComplete);
  EXPECT_EQ(r.assignment.round(), 1);
  EXPECT_EQ(r.assignment.group_rank(), 1);
  EXPECT_TRUE(EventFor(s, "a", 1).round_current());
}

TEST(Active, RoundNumbersStayAboveTheHighestSeen) {
  RunState s = NewRun("run", Options(1, 1));
  Join(&s, kT0, "a", 41);
  EXPECT_EQ(s.active_round, 42);
}

TEST(Close, LaterJoinsFailNamingTheRun) {
  RunState s = ActiveRun(1, 2, {"a", "b"});
  ApplyClose(kT0 + absl::Seconds(1), &s, "training finished");
  v1::RunEvent e = EventFor(s, "a", 1);
  EXPECT_TRUE(e.run_closed());
  EXPECT_FALSE(e.round_current());
  auto r = ApplyJoin(kT0 + absl::Seconds(2), &s, Node("c"), s.options, 0);
  EXPECT_EQ(r.status().code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_NE(r.status().message().find("run 'run' is closed"), std::string::npos);
  EXPECT_EQ(NextDeadline(s), kT0 + absl::Seconds(1) + s.options.close_timeout);
}

// --- server restart ----------------------------------------------------------

TEST(ReRegister, RecreatesTheRoundFromAnAssignment) {
  RunState old = ActiveRun(2, 3, {"a", "b", "c"});
  v1::KeepAliveRequest ka = KeepAliveOf(old, "b");
  RunState fresh = NewRun("run", old.options);
  ASSERT_TRUE(ReRegister(kT0 + absl::Minutes(1), &fresh, ka));
  EXPECT_EQ(fresh.active_round, 1);
  EXPECT_EQ(Ids(fresh), Ids(old));
  EXPECT_EQ(fresh.world_size, 6);
  EXPECT_EQ(fresh.master_addr, "host-a");
  EXPECT_TRUE(EventFor(fresh, "c", 1).round_current());
  EXPECT_FALSE(ReRegister(kT0 + absl::Minutes(1), &fresh, ka));  // known now
  // Others count as alive until their own deadline.
  EXPECT_TRUE(FindDeadParticipants(kT0 + absl::Minutes(1) + absl::Seconds(15), fresh).empty());
  EXPECT_EQ(FindDeadParticipants(kT0 + absl::Minutes(1) + absl::Seconds(16), fresh).size(), 3u);
}

TEST(ApplyKeepAlive, KeepsTheNodesLastRestart) {
  RunState s = ActiveRun(1, 1, {"a"});
  v1::KeepAliveRequest ka = KeepAliveOf(s, "a");
  ka.mutable_last_restart()->set_cause("worker_failed");
  ka.mutable_last_restart()->set_total_s(0.5);
  ApplyKeepAlive(kT0, &s, ka);
  EXPECT_EQ(s.participants[0].last_restart.cause(), "worker_failed");
  EXPECT_EQ(s.participants[0].last_restart.total_s(), 0.5);
  ApplyKeepAlive(kT0, &s, KeepAliveOf(s, "a"));  // a keep-alive without one keeps it
  EXPECT_EQ(s.participants[0].last_restart.total_s(), 0.5);
}

// A node's latest hang and straggler go from its keep-alive to the run's
// status; a keep-alive without them keeps them.
TEST(ApplyKeepAlive, KeepsTheNodesFaultsForStatus) {
  RunState s = ActiveRun(1, 1, {"a"});
  v1::KeepAliveRequest ka = KeepAliveOf(s, "a");
  ka.mutable_faults()->mutable_last_hang()->add_culprit_ranks(1);
  ka.mutable_faults()->mutable_last_hang()->add_culprit_hosts("h2");
  ApplyKeepAlive(kT0, &s, ka);
  ApplyKeepAlive(kT0, &s, KeepAliveOf(s, "a"));
  v1::RunStatusResponse st;
  FillRunStatus(kT0, s, 10, &st);
  ASSERT_EQ(st.nodes_size(), 1);
  EXPECT_EQ(st.nodes(0).faults().last_hang().culprit_hosts(0), "h2");
  EXPECT_FALSE(st.nodes(0).faults().has_last_straggler());
}

TEST(ApplyKeepAlive, KeepsAtMostOneProgressRowPerLocalRank) {
  RunState s = ActiveRun(1, 1, {"a"});  // local_world_size 2
  v1::KeepAliveRequest ka = KeepAliveOf(s, "a");
  for (int i = 0; i < 1000; ++i) ka.add_progress()->set_rank(i);
  ApplyKeepAlive(kT0, &s, ka);
  EXPECT_EQ(s.participants[0].progress.size(), 2u);
}

TEST(ValidateAssignment, OnlyRoundsTheRulesCouldHaveFormed) {
  RunState s = ActiveRun(2, 3, {"a", "b", "c"});
  const v1::Assignment good = *AssignmentFor(s, "b");
  EXPECT_TRUE(ValidateAssignment(good, "b", s.options).ok());
  auto rejects = [&](const std::string& what, auto&& mutate, const std::string& node = "b") {
    v1::Assignment a = good;
    mutate(&a);
    absl::Status st = ValidateAssignment(a, node, s.options);
    EXPECT_EQ(st.code(), absl::StatusCode::kInvalidArgument) << what;
    return std::string(st.message());
  };
  EXPECT_NE(rejects("over max_nodes", [](v1::Assignment* a) {
              *a->add_participants() = a->participants(0);
            }).find("participants; the run allows 1..3"), std::string::npos);
  rejects("no participants", [](v1::Assignment* a) { a->clear_participants(); });
  rejects("round 0", [](v1::Assignment* a) { a->set_round(0); });
  rejects("repeated rank", [](v1::Assignment* a) { a->mutable_participants(1)->set_group_rank(0); });
  rejects("rank outside", [](v1::Assignment* a) { a->mutable_participants(2)->set_group_rank(7); });
  rejects("repeated id", [](v1::Assignment* a) {
    a->mutable_participants(1)->set_node_id(a->participants(0).node_id());
  });
  rejects("offsets", [](v1::Assignment* a) { a->mutable_participants(2)->set_rank_offset(1); });
  rejects("world size", [](v1::Assignment* a) { a->set_world_size(-2); });
  rejects("group world size", [](v1::Assignment* a) { a->set_group_world_size(9); });
  rejects("zero ranks", [](v1::Assignment* a) { a->mutable_participants(0)->set_local_world_size(0); });
  rejects("master port", [](v1::Assignment* a) { a->set_master_port(70000); });
  rejects("caller absent", [](v1::Assignment*) {}, "mallory");
  rejects("caller's own fields", [](v1::Assignment* a) { a->set_group_rank(0); });
  // Two nodes of 2^31-1 ranks: the world size would wrap to -2.
  EXPECT_NE(rejects("overflow", [](v1::Assignment* a) {
              a->mutable_participants()->DeleteSubrange(2, 1);
              a->set_group_world_size(2);
              for (int i = 0; i < 2; ++i) {
                a->mutable_participants(i)->set_local_world_size(2147483647);
                a->mutable_participants(i)->set_rank_offset(i == 0 ? 0 : 2147483647);
              }
              a->set_world_size(-2);
            }).find("overflows"), std::string::npos);
}

TEST(MayReRegister, OnlyAnIssuedOrUncheckableAssignmentChangesTheRound) {
  RunState s = NewRun("r", Options(1, 2));
  Join(&s, kT0, "a");
  Join(&s, kT0, "b");
  ASSERT_EQ(s.active_round, 1);
  v1::Assignment current = *AssignmentFor(s, "a");
  v1::Assignment newer = current;
  newer.set_round(5);
  auto may = [](const v1::Assignment& a, const RunState* known, int64_t unsigned_round,
                bool issued, bool durable) {
    return MayReRegister("r", a, known, unsigned_round, issued, durable);
  };
  // An issued assignment may, known run or not.
  EXPECT_TRUE(*may(newer, &s, 0, true, true));
  EXPECT_TRUE(*may(newer, nullptr, 0, true, true));
  // No round carried: liveness only.
  EXPECT_FALSE(*may(v1::Assignment(), nullptr, 0, true, false));
  // Unsigned, not above the active round: liveness only.
  EXPECT_FALSE(*may(current, &s, 0, false, true));
  // Unsigned and newer while a round is active, or under a durable key:
  // refused, naming the rule.
  absl::StatusOr<bool> forged = may(newer, &s, 0, false, false);
  EXPECT_EQ(forged.status().code(), absl::StatusCode::kPermissionDenied);
  EXPECT_NE(forged.status().message().find("rounds change only through Join"), std::string::npos);
  EXPECT_EQ(may(newer, nullptr, 0, false, true).status().code(), absl::StatusCode::kPermissionDenied);
  // A server with a key that is not durable cannot check: an unknown run,
  // or one with no active round, takes it; and the round it took so stays
  // trusted.
  EXPECT_TRUE(*may(newer, nullptr, 0, false, false));
  RunState forming = NewRun("r", Options(1, 2));
  EXPECT_TRUE(*may(newer, &forming, 0, false, false));
  EXPECT_TRUE(*may(newer, &s, 5, false, true));
}

TEST(ReRegister, AFormingRoundFromAJoinIsRenumberedAboveIt) {
  RunState old = ActiveRun(1, 3, {"a", "b"});
  for (int i = 0; i < 4; ++i) {  // reach round 5
    Join(&old, kT0, "a", old.active_round);
    Join(&old, kT0, "b", old.active_round);
    ApplyTick(kT0 + absl::Seconds(10), &old);
  }
  ASSERT_EQ(old.active_round, 5);
  RunState fresh = NewRun("run", old.options);
  Join(&fresh, kT0, "newcomer", 0);  // forms "round 1" before anyone re-registers
  ASSERT_TRUE(ReRegister(kT0, &fresh, KeepAliveOf(old, "a")));
  EXPECT_EQ(fresh.active_round, 5);
  EXPECT_TRUE(fresh.active_ended);
  EXPECT_EQ(fresh.forming_round, 6);
}

TEST(NextDeadline, IsTheEarliestPendingDeadline) {
  RunState s = NewRun("run", Options(3, 3));
  EXPECT_EQ(NextDeadline(s), absl::InfiniteFuture());
  Join(&s, kT0, "a");
  SetPolling(kT0, &s, "a", true);
  EXPECT_EQ(NextDeadline(s), kT0 + absl::Seconds(100));
  SetPolling(kT0 + absl::Seconds(1), &s, "a", false);
  EXPECT_EQ(NextDeadline(s), kT0 + absl::Seconds(16));
}

// --- quarantine ----------------------------------------------------------------

v1::NodeFailure FailedAt(int64_t round, absl::Time at, const std::string& reason = "exit 1") {
  v1::NodeFailure f;
  f.set_round(round);
  f.set_failed_at_unix_us(absl::ToUnixMicros(at));
  f.set_reason(reason);
  return f;
}

JoinResult JoinAfterFailure(RunState* s, absl::Time now, const std::string& id, absl::Time failed_at) {
  absl::StatusOr<JoinResult> r =
      ApplyJoin(now, s, Node(id), s->options, s->active_round, FailedAt(s->active_round, failed_at));
  EXPECT_TRUE(r.ok()) << r.status();
  return r.ok() ? *r : JoinResult{};
}

TEST(Quarantine, TheRoundsCauseIsTheNodeThatFailedFirstNotItsVictim) {
  RunState s = ActiveRun(1, 3, {"a", "b"});
  const absl::Time t = kT0 + absl::Seconds(5);
  // b's worker died at t; a's workers lost their peer 40 ms later, but a's
  // report arrives first.
  JoinAfterFailure(&s, t + absl::Milliseconds(300), "a", t + absl::Milliseconds(40));
  ASSERT_EQ(s.round_failures.count(1), 1u);
  EXPECT_EQ(s.round_failures[1].host, "host-a");
  const int64_t version = s.version;
  absl::StatusOr<JoinResult> b = ApplyJoin(t + absl::Milliseconds(310), &s, Node("b"), s.options, 1,
                                           FailedAt(1, t, "SIGKILL"));
  ASSERT_TRUE(b.ok());
  EXPECT_EQ(s.round_failures[1].host, "host-b");
  EXPECT_EQ(s.round_failures[1].reason, "SIGKILL");
  EXPECT_GT(s.version, version);
  // The first report's arrival stays the time the round's failure counts from.
  EXPECT_EQ(s.round_failures[1].reported_at, t + absl::Milliseconds(300));
  // A later report (a's again, each poll repeats it) changes nothing.
  const int64_t after = s.version;
  JoinAfterFailure(&s, t + absl::Milliseconds(320), "a", t + absl::Milliseconds(40));
  EXPECT_EQ(s.round_failures[1].host, "host-b");
  EXPECT_EQ(s.version, after);
}

TEST(Quarantine, ReportsOfRoundsNotReachedOrWithoutATimeAreIgnored) {
  RunState s = ActiveRun(1, 3, {"a", "b"});
  EXPECT_FALSE(NoteFailure(kT0, &s, Node("a"), FailedAt(7, kT0)));
  EXPECT_FALSE(NoteFailure(kT0, &s, Node("a"), FailedAt(0, kT0)));
  v1::NodeFailure untimed = FailedAt(1, kT0);
  untimed.set_failed_at_unix_us(0);
  EXPECT_FALSE(NoteFailure(kT0, &s, Node("a"), untimed));
  EXPECT_TRUE(s.round_failures.empty());
}

// Rounds of a and b in which b's workers fail first, every `gap`.
RunState FlappingB(int failures, absl::Duration gap, absl::Time* now, int min_nodes = 1, int max_nodes = 3) {
  RunState s = ActiveRun(min_nodes, max_nodes, {"a", "b"});
  absl::Time t = kT0 + absl::Seconds(1);
  for (int i = 0; i < failures; ++i) {
    t += gap;
    JoinAfterFailure(&s, t, "b", t - absl::Milliseconds(100));
    if (i + 1 == failures) break;
    Join(&s, t, "a", s.active_round);
    ApplyTick(t + s.options.last_call_timeout, &s);
  }
  *now = t;
  return s;
}

TEST(Quarantine, AHostCausingThreeRoundEndsIsKeptOutForTheCooldownAndTheOthersGoOn) {
  absl::Time t;
  RunState s = FlappingB(3, absl::Minutes(1), &t);
  // b's third report kept it out at once: no longer a joiner.
  EXPECT_FALSE(s.joiner_index.contains("b"));
  std::optional<Quarantine> q = QuarantineOf(t, s, "host-b");
  ASSERT_TRUE(q.has_value());
  EXPECT_EQ(q->failures, 3);
  EXPECT_EQ(q->until, t + absl::Minutes(10));
  EXPECT_NE(q->reason.find("failed first in 3 rounds within 10m"), std::string::npos) << q->reason;
  EXPECT_FALSE(QuarantineOf(t, s, "host-a").has_value());
  // Its Joins are answered kQuarantined, and a goes on alone.
  JoinResult again = Join(&s, t + absl::Seconds(1), "b", s.active_round);
  EXPECT_EQ(again.outcome, JoinResult::Outcome::kQuarantined);
  EXPECT_EQ(again.quarantine.until, t + absl::Minutes(10));
  Join(&s, t + absl::Seconds(1), "a", s.active_round);
  ApplyTick(t + absl::Seconds(1) + s.options.last_call_timeout, &s);
  EXPECT_EQ(Ids(s), (std::vector<std::string>{"a"}));
  v1::RunStatusResponse status;
  FillRunStatus(t + absl::Minutes(4), s, 10, &status);
  ASSERT_EQ(status.quarantined_size(), 1);
  EXPECT_EQ(status.quarantined(0).host(), "host-b");
  EXPECT_EQ(status.quarantined(0).failures(), 3);
  EXPECT_EQ(status.quarantined(0).remaining_ms(), absl::ToInt64Milliseconds(absl::Minutes(6)));
  // After the cool-down it is admitted again (ending a's round, which has room).
  EXPECT_FALSE(QuarantineOf(t + absl::Minutes(10), s, "host-b").has_value());
  JoinResult back = Join(&s, t + absl::Minutes(10), "b", 0);
  EXPECT_EQ(back.outcome, JoinResult::Outcome::kPending);
  EXPECT_TRUE(s.joiner_index.contains("b"));
  // One more failure after that is not a quarantine: the old ones are out of the window.
  Join(&s, t + absl::Minutes(10), "a", s.active_round);
  ApplyTick(t + absl::Minutes(10) + s.options.last_call_timeout, &s);
  const absl::Time later = t + absl::Minutes(11);
  EXPECT_EQ(JoinAfterFailure(&s, later, "b", later).outcome, JoinResult::Outcome::kPending);
}

TEST(Quarantine, FailuresSpreadWiderThanTheWindowDoNotCount) {
  absl::Time t;
  RunState s = FlappingB(3, absl::Minutes(6), &t);  // 12 minutes from the first to the third
  EXPECT_FALSE(QuarantineOf(t, s, "host-b").has_value());
  EXPECT_TRUE(s.joiner_index.contains("b"));
}

TEST(Quarantine, NeverInAFixedSizeRunNorWhenTurnedOff) {
  absl::Time t;
  RunState fixed = FlappingB(3, absl::Minutes(1), &t, /*min_nodes=*/2, /*max_nodes=*/2);
  ASSERT_EQ(fixed.round_failures.size(), 3u);
  EXPECT_FALSE(QuarantineOf(t, fixed, "host-b").has_value());
  RunState off = NewRun("run", Options(1, 3));
  off.options.quarantine_after = 0;
  off.round_failures = fixed.round_failures;
  EXPECT_FALSE(QuarantineOf(t, off, "host-b").has_value());
  EXPECT_TRUE(Quarantined(t, off).empty());
}

TEST(RoundOptionsFromProto, QuarantineDefaultsAndOffSurviveTheWire) {
  v1::RunOptions p;
  p.set_min_nodes(1);
  p.set_max_nodes(2);
  auto o = RoundOptionsFromProto(p, 100);
  ASSERT_TRUE(o.ok());
  EXPECT_EQ(o->quarantine_after, 3);
  EXPECT_EQ(o->quarantine_window, absl::Minutes(10));
  EXPECT_EQ(o->quarantine_cooldown, absl::Minutes(10));
  p.set_quarantine_after(-1);
  o = RoundOptionsFromProto(p, 100);
  ASSERT_TRUE(o.ok());
  EXPECT_EQ(o->quarantine_after, 0);
  auto back = RoundOptionsFromProto(RoundOptionsToProto(*o), 100);
  ASSERT_TRUE(back.ok());
  EXPECT_EQ(back->quarantine_after, 0);
  p.set_quarantine_cooldown_s(-5);
  EXPECT_NE(RoundOptionsFromProto(p, 100).status().message().find("quarantine_cooldown_s"), std::string::npos);
  p.set_quarantine_cooldown_s(0);
  p.set_job_max_restarts(-1);
  EXPECT_NE(RoundOptionsFromProto(p, 100).status().message().find("job_max_restarts"), std::string::npos);
  p.set_job_max_restarts(4);
  EXPECT_EQ(RoundOptionsFromProto(RoundOptionsToProto(*RoundOptionsFromProto(p, 100)), 100)->job_max_restarts, 4);
}

TEST(JobMaxRestarts, TheFailureAfterTheBudgetClosesTheRunSayingWhy) {
  RunState s = ActiveRun(1, 3, {"a", "b"});
  s.options.job_max_restarts = 2;
  absl::Time t = kT0;
  for (int failure = 1; failure <= 2; ++failure) {
    t += absl::Seconds(30);
    // b's and a's workers both report the round's failure: one failed round.
    EXPECT_EQ(JoinAfterFailure(&s, t, "b", t - absl::Seconds(1)).outcome, JoinResult::Outcome::kPending);
    EXPECT_EQ(JoinAfterFailure(&s, t, "a", t - absl::Milliseconds(500)).outcome, JoinResult::Outcome::kPending);
    ApplyTick(t + s.options.last_call_timeout, &s);
    ASSERT_EQ(Ids(s), (std::vector<std::string>{"a", "b"}));
    EXPECT_EQ(s.failed_rounds, failure);
    EXPECT_FALSE(JobRestartsExhausted(s).has_value());
  }
  t += absl::Seconds(30);
  JoinResult third = JoinAfterFailure(&s, t, "a", t - absl::Seconds(1));
  EXPECT_EQ(third.outcome, JoinResult::Outcome::kRunClosed);
  EXPECT_EQ(third.closed_reason, "the job's restart budget is spent: worker failures ended 3 rounds (job_max_restarts 2)");
  EXPECT_TRUE(s.closed);
  EXPECT_EQ(s.closed_reason, third.closed_reason);
  // Every other node learns it: its keep-alive says the run closed.
  EXPECT_TRUE(EventFor(s, "b", s.active_round).run_closed());
  // No bound: never closed for it.
  s.options.job_max_restarts = 0;
  EXPECT_FALSE(JobRestartsExhausted(s).has_value());
}

}  // namespace
}  // namespace cpptorchrun::rdzv
