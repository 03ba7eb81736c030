// Tests of the status table, its JSON, and --watch on a fake clock with a
// fake rendezvous client (no sleeping, no server).
#include "launcher/status_cmd.h"

#include <vector>

#include "absl/strings/str_split.h"
#include "base/clock.h"
#include "gmock/gmock.h"
#include "google/protobuf/struct.pb.h"
#include "google/protobuf/util/json_util.h"
#include "gtest/gtest.h"
#include "launcher/agent/fakes.h"

namespace cpptorchrun::launcher {
namespace {

using ::google::protobuf::Struct;
using ::google::protobuf::Value;
using ::testing::HasSubstr;
using ::testing::Not;

// A run of two nodes: node 0 (ranks 0-1) and node 1 (ranks 2-3), each with
// its ranks' progress; node 1 restarted once.
rdzv::v1::RunStatusResponse TwoNodes(int64_t step) {
  rdzv::v1::RunStatusResponse st;
  st.set_run_id("job7");
  st.set_round(2);
  st.set_version(11);
  st.set_state(rdzv::v1::RunStatusResponse::ACTIVE);
  st.set_server_store_bytes(4096);
  st.set_server_store_budget(1 << 30);
  for (int g = 0; g < 2; ++g) {
    auto* n = st.add_nodes();
    auto* p = n->mutable_participant();
    p->set_node_id("node" + std::to_string(g));
    p->set_host("10.0.0." + std::to_string(g + 1));
    p->set_group_rank(g);
    p->set_local_world_size(2);
    p->set_rank_offset(2 * g);
    n->set_heartbeat_age_ms(100 * (g + 1));
    n->set_restart_count(g);
    for (int l = 0; l < 2; ++l) {
      auto* r = n->add_progress();
      r->set_rank(2 * g + l);
      r->set_local_rank(l);
      r->set_epoch(1);
      r->set_step(step);
      r->set_total_steps(500);
      r->set_loss(0.5);
      r->set_samples_per_s(1000.5);
      r->set_heartbeat_age_ms(20 + l);
    }
    if (g == 1) {
      auto* last = n->mutable_last_restart();
      last->set_cause("worker_failed");
      last->set_round(2);
      last->set_total_s(0.25);
      last->set_detected_to_stopped_s(0.05);
      last->set_stopped_to_joined_s(0.125);
      last->set_joined_to_started_s(0.075);
    }
  }
  return st;
}

// Parses `json` as a JSON object with protobuf's parser (which refuses
// what is not JSON, or not UTF-8).
Struct Parsed(const std::string& json) {
  Struct out;
  auto status = google::protobuf::util::JsonStringToMessage(json, &out);
  EXPECT_TRUE(status.ok()) << status.ToString() << "\n" << json;
  return out;
}

const Value& Field(const Struct& s, const std::string& name) {
  static const Value kMissing;
  auto it = s.fields().find(name);
  EXPECT_NE(it, s.fields().end()) << name;
  return it == s.fields().end() ? kMissing : it->second;
}

TEST(StatusTable, NodesAndRanks) {
  rdzv::v1::RunStatusResponse st;
  st.set_run_id("job7");
  st.set_round(3);
  st.set_state(rdzv::v1::RunStatusResponse::ACTIVE);
  auto* n = st.add_nodes();
  n->mutable_participant()->set_node_id("hostb-12-ab");
  n->mutable_participant()->set_host("10.0.0.2");
  n->mutable_participant()->set_group_rank(1);
  n->mutable_participant()->set_local_world_size(2);
  n->mutable_participant()->set_rank_offset(2);
  n->set_restart_count(4);
  n->set_heartbeat_age_ms(1500);
  auto* r = n->add_progress();
  r->set_rank(3);
  r->set_local_rank(1);
  r->set_epoch(2);
  r->set_step(120);
  r->set_total_steps(900);
  r->set_loss(0.3125);
  r->set_samples_per_s(1450);
  r->set_heartbeat_age_ms(250);
  st.add_waiting()->set_node_id("hostc-1-cd");
  std::string t = FormatStatusTable(st);
  EXPECT_THAT(t, HasSubstr("run job7  round 3  state ACTIVE  nodes 1 (waiting 1)  ranks 2"));
  EXPECT_THAT(t, HasSubstr("hostb-12-ab"));
  EXPECT_THAT(t, HasSubstr("2-3"));
  EXPECT_THAT(t, HasSubstr("120/900"));
  EXPECT_THAT(t, HasSubstr("0.3125"));
  EXPECT_THAT(t, HasSubstr("0.2s"));
  EXPECT_THAT(t, HasSubstr("1.5s"));
  EXPECT_THAT(t, HasSubstr("hostc-1-cd"));
  EXPECT_THAT(t, Not(HasSubstr("LAST_RESTART"))) << "no restart, no table";
  // A node's last restart, phase by phase.
  auto* last = n->mutable_last_restart();
  last->set_cause("worker_failed");
  last->set_round(3);
  last->set_total_s(0.25);
  last->set_detected_to_stopped_s(0.05);
  last->set_stopped_to_joined_s(0.125);
  last->set_joined_to_started_s(0.075);
  st.set_server_store_bytes(1 << 20);
  st.set_server_store_budget(1 << 30);
  t = FormatStatusTable(st);
  EXPECT_THAT(t, HasSubstr("LAST_RESTART"));
  EXPECT_THAT(t, ::testing::ContainsRegex("1 +worker_failed +gang +3 +0\\.250 +0\\.050 +0\\.125 +0\\.075 +- +- +- +-"))
      << "the workers' part is '-' until every worker made its first step";
  last->set_path("in_place");
  EXPECT_THAT(FormatStatusTable(st), ::testing::ContainsRegex("1 +worker_failed +in_place +3 +0\\.250"));
  last->set_started_to_comm_ready_s(0.5);
  last->set_comm_ready_to_restored_s(0.125);
  last->set_restored_to_first_step_s(0.0625);
  last->set_total_to_first_step_s(0.9375);
  t = FormatStatusTable(st);
  EXPECT_THAT(t, ::testing::ContainsRegex("0\\.075 +0\\.500 +0\\.125 +0\\.062 +0\\.938"));
  EXPECT_THAT(t, HasSubstr("server store: 1.0 of 1024.0 MiB"));
}

TEST(StatusTable, OutsideTextCannotDriveTheTerminal) {
  rdzv::v1::RunStatusResponse st = TwoNodes(1);
  st.mutable_nodes(0)->mutable_participant()->set_host("h\x1b[2J");
  st.mutable_nodes(1)->mutable_participant()->set_node_id("n\x1b]0;x\x07");
  st.add_waiting()->set_host("w\r\n");
  const std::string t = FormatStatusTable(st);
  EXPECT_EQ(t.find('\x1b'), std::string::npos) << t;
  EXPECT_EQ(t.find('\r'), std::string::npos) << t;
  EXPECT_THAT(t, HasSubstr("h\\x1b[2J"));
}

TEST(StatusTable, HostsKeptOutAreListedWithWhy) {
  rdzv::v1::RunStatusResponse st = TwoNodes(1);
  EXPECT_THAT(FormatStatusTable(st), Not(HasSubstr("QUARANTINED_HOST")));
  auto* q = st.add_quarantined();
  q->set_host("10.0.0.9");
  q->set_failures(3);
  q->set_remaining_ms(420000);
  q->set_reason("its workers failed first in 3 rounds within 10m\x1b[2J");
  const std::string t = FormatStatusTable(st);
  EXPECT_THAT(t, HasSubstr("QUARANTINED_HOST"));
  EXPECT_THAT(t, HasSubstr("10.0.0.9               3         420s       its workers failed first in 3 rounds"));
  EXPECT_EQ(t.find('\x1b'), std::string::npos) << t;
  Struct s = Parsed(FormatStatusJson(st));
  const auto& kept_out = Field(s, "quarantined").list_value().values();
  ASSERT_EQ(kept_out.size(), 1);
  EXPECT_EQ(Field(kept_out[0].struct_value(), "host").string_value(), "10.0.0.9");
  EXPECT_EQ(Field(kept_out[0].struct_value(), "failures").number_value(), 3);
  EXPECT_EQ(Field(kept_out[0].struct_value(), "remaining_ms").number_value(), 420000);
}

// Each node's latest hang and straggler: two tables, in the table only when
// some node had one, and in the JSON (null when none); text from the
// nodes cannot drive the terminal.
TEST(StatusTable, HangsAndStragglersAreListedWithTheirCulprits) {
  rdzv::v1::RunStatusResponse st = TwoNodes(1);
  EXPECT_THAT(FormatStatusTable(st), Not(HasSubstr("LAST_HANG")));
  EXPECT_THAT(FormatStatusTable(st), Not(HasSubstr("LAST_STRAGGLER")));
  rdzv::v1::HangReport* hang = st.mutable_nodes(1)->mutable_faults()->mutable_last_hang();
  hang->set_unix_ms(1796677091412);
  hang->add_culprit_ranks(3);
  hang->add_culprit_hosts("h2\x1b[2J");
  hang->set_step(379);
  hang->set_collective_seq(760);
  hang->set_waited_s(2.5);
  hang->set_deadline_s(2.3);
  hang->set_process_states("rank 3: stopped (T)");
  rdzv::v1::StragglerReport* slow = st.mutable_nodes(0)->mutable_faults()->mutable_last_straggler();
  slow->set_unix_ms(1796677000000);
  slow->add_ranks(0);
  slow->add_ranks(1);
  slow->add_hosts("h1");
  slow->set_slowdown(2.75);
  slow->set_policy("warn");
  const std::string t = FormatStatusTable(st);
  EXPECT_THAT(t, ::testing::ContainsRegex("1 +2026-12-07T20:58:11Z +3 +h2\\\\x1b\\[2J +- +379 +760 +2\\.5 +rank 3: stopped \\(T\\)"));
  EXPECT_THAT(t, ::testing::ContainsRegex("0 +2026-12-07T20:56:40Z +0,1 +h1 +2\\.75 +warn"));
  EXPECT_EQ(t.find('\x1b'), std::string::npos) << t;
  Struct s = Parsed(FormatStatusJson(st));
  const auto& nodes = Field(s, "nodes").list_value().values();
  const Struct& h = Field(Field(nodes[1].struct_value(), "faults").struct_value(), "last_hang").struct_value();
  EXPECT_EQ(Field(h, "culprit_ranks").list_value().values(0).number_value(), 3);
  EXPECT_EQ(Field(h, "culprit_hosts").list_value().values(0).string_value(), "h2\x1b[2J");
  EXPECT_EQ(Field(h, "waiting_ranks").list_value().values_size(), 0);
  EXPECT_EQ(Field(h, "collective_seq").number_value(), 760);
  EXPECT_EQ(Field(h, "waited_s").number_value(), 2.5);
  EXPECT_TRUE(Field(Field(nodes[1].struct_value(), "faults").struct_value(), "last_straggler").has_null_value());
  const Struct& g = Field(Field(nodes[0].struct_value(), "faults").struct_value(), "last_straggler").struct_value();
  EXPECT_EQ(Field(g, "ranks").list_value().values_size(), 2);
  EXPECT_EQ(Field(g, "slowdown").number_value(), 2.75);
  EXPECT_EQ(Field(g, "policy").string_value(), "warn");
}

TEST(StatusJson, TheDocumentedSchema) {
  const std::string json = FormatStatusJson(TwoNodes(120));
  EXPECT_EQ(json.find('\n'), std::string::npos) << "one line";
  Struct s = Parsed(json);
  EXPECT_EQ(Field(s, "schema_version").number_value(), 1);
  EXPECT_EQ(Field(s, "run_id").string_value(), "job7");
  EXPECT_EQ(Field(s, "state").string_value(), "ACTIVE");
  EXPECT_EQ(Field(s, "round").number_value(), 2);
  EXPECT_EQ(Field(s, "version").number_value(), 11);
  EXPECT_EQ(Field(s, "closed_reason").string_value(), "");
  const Struct& store = Field(s, "server_store").struct_value();
  EXPECT_EQ(Field(store, "bytes").number_value(), 4096);
  EXPECT_EQ(Field(store, "budget").number_value(), 1 << 30);
  const auto& nodes = Field(s, "nodes").list_value().values();
  ASSERT_EQ(nodes.size(), 2);
  const Struct& n1 = nodes[1].struct_value();
  EXPECT_EQ(Field(n1, "group_rank").number_value(), 1);
  EXPECT_EQ(Field(n1, "node_id").string_value(), "node1");
  EXPECT_EQ(Field(n1, "host").string_value(), "10.0.0.2");
  EXPECT_EQ(Field(n1, "local_world_size").number_value(), 2);
  ASSERT_EQ(Field(n1, "ranks").list_value().values_size(), 2);
  EXPECT_EQ(Field(n1, "ranks").list_value().values(0).number_value(), 2);
  EXPECT_EQ(Field(n1, "ranks").list_value().values(1).number_value(), 3);
  EXPECT_EQ(Field(n1, "restart_count").number_value(), 1);
  EXPECT_EQ(Field(n1, "keepalive_age_ms").number_value(), 200);
  const Struct& last = Field(n1, "last_restart").struct_value();
  EXPECT_EQ(Field(last, "cause").string_value(), "worker_failed");
  EXPECT_EQ(Field(last, "path").string_value(), "gang") << "a launcher that says no path restarted whole";
  EXPECT_EQ(Field(last, "round").number_value(), 2);
  EXPECT_EQ(Field(last, "total_s").number_value(), 0.25);
  EXPECT_EQ(Field(last, "detected_to_stopped_s").number_value(), 0.05);
  EXPECT_EQ(Field(last, "stopped_to_joined_s").number_value(), 0.125);
  EXPECT_EQ(Field(last, "joined_to_started_s").number_value(), 0.075);
  EXPECT_TRUE(Field(nodes[0].struct_value(), "last_restart").has_null_value()) << "no restart: null";
  const auto& ranks = Field(s, "ranks").list_value().values();
  ASSERT_EQ(ranks.size(), 4);
  const Struct& r3 = ranks[3].struct_value();
  EXPECT_EQ(Field(r3, "rank").number_value(), 3);
  EXPECT_EQ(Field(r3, "local_rank").number_value(), 1);
  EXPECT_EQ(Field(r3, "group_rank").number_value(), 1);
  EXPECT_EQ(Field(r3, "epoch").number_value(), 1);
  EXPECT_EQ(Field(r3, "step").number_value(), 120);
  EXPECT_EQ(Field(r3, "total_steps").number_value(), 500);
  EXPECT_EQ(Field(r3, "loss").number_value(), 0.5);
  EXPECT_EQ(Field(r3, "samples_per_s").number_value(), 1000.5);
  EXPECT_EQ(Field(r3, "heartbeat_age_ms").number_value(), 21);
  EXPECT_EQ(Field(s, "waiting").list_value().values_size(), 0);
}

TEST(StatusJson, EmptyRunAndWaitingNodes) {
  rdzv::v1::RunStatusResponse st;
  st.set_run_id("r");
  st.set_state(rdzv::v1::RunStatusResponse::FORMING);
  auto* w = st.add_waiting();
  w->set_node_id("late");
  w->set_host("h");
  w->set_local_world_size(8);
  Struct s = Parsed(FormatStatusJson(st));
  EXPECT_EQ(Field(s, "state").string_value(), "FORMING");
  EXPECT_EQ(Field(s, "nodes").list_value().values_size(), 0);
  EXPECT_EQ(Field(s, "ranks").list_value().values_size(), 0);
  const auto& waiting = Field(s, "waiting").list_value().values();
  ASSERT_EQ(waiting.size(), 1);
  EXPECT_EQ(Field(waiting[0].struct_value(), "node_id").string_value(), "late");
  EXPECT_EQ(Field(waiting[0].struct_value(), "local_world_size").number_value(), 8);
}

TEST(StatusJson, HostileStringsStayValidJsonAndAreKeptAsText) {
  rdzv::v1::RunStatusResponse st = TwoNodes(1);
  st.set_state(rdzv::v1::RunStatusResponse::CLOSED);
  // A reason written by a client: quotes, a backslash, a newline, an
  // escape sequence that would clear a terminal, NUL, and bytes that are
  // not UTF-8 (protobuf's string fields do not check them on this path).
  st.set_closed_reason(std::string("bye\", \"state\": \"ACTIVE\\\n\x1b[2J\x00\xff\xc3(", 31));
  st.mutable_nodes(0)->mutable_participant()->set_host("h\"}]}");
  st.mutable_nodes(1)->mutable_last_restart()->set_cause("\x80\x1b]0;title\x07");
  st.mutable_nodes(0)->mutable_progress(0)->set_loss(std::nan(""));
  const std::string json = FormatStatusJson(st);
  for (unsigned char c : json) ASSERT_TRUE(c >= 0x20 && c != 0x7f) << "a raw control byte in " << json;
  Struct s = Parsed(json);
  EXPECT_EQ(Field(s, "state").string_value(), "CLOSED") << "the reason cannot forge a field";
  EXPECT_EQ(Field(s, "closed_reason").string_value(),
            std::string("bye\", \"state\": \"ACTIVE\\\n\x1b[2J\x00\xef\xbf\xbd\xef\xbf\xbd(", 35));
  EXPECT_EQ(Field(Field(s, "nodes").list_value().values(0).struct_value(), "host").string_value(), "h\"}]}");
  EXPECT_TRUE(Field(Field(s, "ranks").list_value().values(0).struct_value(), "loss").has_null_value())
      << "NaN is not JSON";
}

// --watch, one refresh at a time.
class WatchTickTest : public ::testing::Test {
 protected:
  WatchTick Tick(const absl::StatusOr<rdzv::v1::RunStatusResponse>& answer) {
    WatchTick t = DecideWatchTick(options_, state_, now_, answer);
    state_ = t.state;
    now_ += absl::Seconds(1);
    return t;
  }
  WatchOptions options_ = [] {
    WatchOptions o;
    o.endpoint = "rdzv:29400";
    return o;
  }();
  WatchState state_;
  absl::Time now_ = absl::FromCivil(absl::CivilSecond(2026, 12, 3, 0, 0, 0), absl::UTCTimeZone());
};

TEST_F(WatchTickTest, PlainBlocksWithATimeOnlyWhenTheTableChanges) {
  WatchTick t = Tick(TwoNodes(10));
  EXPECT_FALSE(t.done);
  EXPECT_EQ(t.out, "-- 2026-12-03T00:00:00Z --\n" + FormatStatusTable(TwoNodes(10)) + "\n");
  EXPECT_EQ(t.err, "");
  t = Tick(TwoNodes(10));
  EXPECT_EQ(t.out, "") << "unchanged: nothing new";
  t = Tick(TwoNodes(11));
  EXPECT_THAT(t.out, HasSubstr("-- 2026-12-03T00:00:02Z --\n"));
  EXPECT_THAT(t.out, HasSubstr("11/500"));
  EXPECT_EQ(t.out.find('\x1b'), std::string::npos) << "no escape codes off a terminal";
}

TEST_F(WatchTickTest, TerminalRedrawsInPlaceEveryRefresh) {
  options_.terminal = true;
  WatchTick t = Tick(TwoNodes(10));
  EXPECT_EQ(t.out.rfind("\x1b[H", 0), 0u) << "cursor home first";
  EXPECT_THAT(t.out, HasSubstr("every 1s  rdzv:29400  2026-12-03T00:00:00Z\x1b[K\n"));
  EXPECT_EQ(t.out.substr(t.out.size() - 3), "\x1b[J") << "the rest of the screen erased last";
  EXPECT_THAT(t.out, Not(HasSubstr("\x1b[2J"))) << "no full clear: no flicker";
  t = Tick(TwoNodes(10));
  EXPECT_THAT(t.out, HasSubstr("2026-12-03T00:00:01Z")) << "redrawn though unchanged: the time moves";
}

TEST_F(WatchTickTest, JsonLinesEveryRefreshAndNoEscapesEvenOnATerminal) {
  options_.json = true;
  options_.terminal = true;
  WatchTick t = Tick(TwoNodes(10));
  EXPECT_EQ(t.out, FormatStatusJson(TwoNodes(10)) + "\n");
  t = Tick(TwoNodes(10));
  EXPECT_EQ(t.out, FormatStatusJson(TwoNodes(10)) + "\n");
}

TEST_F(WatchTickTest, ClosedRunEndsWithItsLastTable) {
  rdzv::v1::RunStatusResponse closed = TwoNodes(10);
  closed.set_state(rdzv::v1::RunStatusResponse::CLOSED);
  closed.set_closed_reason("worker failed on node1");
  Tick(TwoNodes(10));
  WatchTick t = Tick(closed);
  EXPECT_TRUE(t.done);
  EXPECT_EQ(t.exit_code, 0);
  EXPECT_THAT(t.out, HasSubstr("closed: worker failed on node1"));
}

TEST_F(WatchTickTest, EveryNodeLeftEndsTheWatchButAFormingRunDoesNot) {
  rdzv::v1::RunStatusResponse forming;
  forming.set_run_id("job7");
  forming.set_state(rdzv::v1::RunStatusResponse::FORMING);
  EXPECT_FALSE(Tick(forming).done) << "no node yet: the job has not started";
  forming.add_waiting()->set_node_id("first");
  EXPECT_FALSE(Tick(forming).done);
  EXPECT_FALSE(Tick(TwoNodes(3)).done);
  forming.clear_waiting();
  forming.set_round(2);
  WatchTick t = Tick(forming);
  EXPECT_TRUE(t.done) << "the nodes it had have left: the job is over";
  EXPECT_EQ(t.exit_code, 0);
  EXPECT_THAT(t.out, HasSubstr("3/500")) << "the last table with the nodes, not an empty one";
  EXPECT_THAT(t.out, HasSubstr("every node has left the run: it is over"));
}

TEST_F(WatchTickTest, AWatchStartedAfterTheJobEndedEndsAtOnce) {
  rdzv::v1::RunStatusResponse left;
  left.set_run_id("job7");
  left.set_round(1);
  left.set_state(rdzv::v1::RunStatusResponse::FORMING);
  WatchTick t = Tick(left);
  EXPECT_TRUE(t.done);
  EXPECT_EQ(t.exit_code, 0);
  EXPECT_THAT(t.out, HasSubstr("run job7  round 1  state FORMING  nodes 0"));
}

TEST_F(WatchTickTest, JsonSaysTheEmptyRunAsItIs) {
  options_.json = true;
  Tick(TwoNodes(3));
  rdzv::v1::RunStatusResponse left;
  left.set_round(2);
  left.set_run_id("job7");
  left.set_state(rdzv::v1::RunStatusResponse::FORMING);
  WatchTick t = Tick(left);
  EXPECT_TRUE(t.done);
  EXPECT_EQ(t.out, FormatStatusJson(left) + "\n");
}

TEST_F(WatchTickTest, UnreachableIsRetriedThenFailsAfterTheLimit) {
  options_.unreachable_limit = absl::Seconds(3);
  Tick(TwoNodes(10));
  const absl::Status down = absl::UnavailableError("connection refused");
  WatchTick t = Tick(down);  // t=1: the streak starts
  EXPECT_FALSE(t.done);
  EXPECT_EQ(t.out, "");
  EXPECT_THAT(t.err, HasSubstr("no answer since 2026-12-03T00:00:01Z, retrying for up to 3s"));
  t = Tick(down);  // t=2
  EXPECT_FALSE(t.done);
  EXPECT_EQ(t.err, "") << "said once a streak";
  t = Tick(TwoNodes(11));  // t=3: back; the streak is over
  EXPECT_FALSE(t.done);
  EXPECT_FALSE(t.state.failing_since.has_value());
  EXPECT_FALSE(Tick(down).done);                                // t=4
  EXPECT_FALSE(Tick(absl::DeadlineExceededError("slow")).done);  // t=5
  EXPECT_FALSE(Tick(down).done);                                // t=6
  t = Tick(down);                                               // t=7: 3s since t=4
  EXPECT_TRUE(t.done);
  EXPECT_EQ(t.exit_code, 1);
  EXPECT_THAT(t.err, HasSubstr("rdzv:29400: no answer for 3s (more than 3s)"));
}

TEST_F(WatchTickTest, UnreachableOnATerminalKeepsTheLastTableUnderANote) {
  options_.terminal = true;
  Tick(TwoNodes(10));
  WatchTick t = Tick(absl::UnavailableError("connection refused"));
  EXPECT_EQ(t.err, "");
  EXPECT_EQ(t.out.rfind("\x1b[Hno answer since", 0), 0u) << t.out;
  EXPECT_THAT(t.out, HasSubstr("10/500"));
}

TEST_F(WatchTickTest, ErrorsThatRetryingCannotCureEndAtOnce) {
  WatchTick t = Tick(absl::NotFoundError("run 'job7' is not known"));
  EXPECT_TRUE(t.done);
  EXPECT_EQ(t.exit_code, 1) << "an unknown run at the first call";
  state_ = {};
  t = Tick(absl::UnauthenticatedError("bad token"));
  EXPECT_TRUE(t.done);
  EXPECT_EQ(t.exit_code, 1);
  EXPECT_THAT(t.err, HasSubstr("bad token"));
  state_ = {};
  Tick(TwoNodes(1));
  t = Tick(absl::NotFoundError("run 'job7' is not known"));
  EXPECT_TRUE(t.done);
  EXPECT_EQ(t.exit_code, 0) << "known before, forgotten now: over";
}

// The loop on a fake clock: the wait advances it, no real time passes.
struct FakeIo {
  base::FakeClock clock;
  std::string out, err;
  int waits = 0;
  int stop_after_waits = -1;  // -1: never
  WatchIo io() {
    WatchIo io;
    io.clock = &clock;
    io.wait = [this](absl::Duration d) {
      clock.Advance(d);
      return ++waits == stop_after_waits;
    };
    io.out = [this](const std::string& s) { out += s; };
    io.err = [this](const std::string& s) { err += s; };
    return io;
  }
};

StatusConfig WatchConfig(bool json) {
  StatusConfig c;
  c.rdzv_endpoint.host = "127.0.0.1";
  c.rdzv_endpoint.port = 29400;
  c.rdzv_id = "job7";
  c.watch = true;
  c.json = json;
  c.interval = absl::Milliseconds(500);
  return c;
}

TEST(WatchLoop, RunsUntilTheRunClosesThenExitsZero) {
  FakeRendezvousClient client;
  rdzv::v1::RunStatusResponse closed = TwoNodes(30);
  closed.set_state(rdzv::v1::RunStatusResponse::CLOSED);
  client.SetRunStatusAnswers({TwoNodes(10), TwoNodes(20), absl::UnavailableError("blip"), closed});
  FakeIo fake;
  WatchIo io = fake.io();
  EXPECT_EQ(RunStatusCommand(WatchConfig(/*json=*/true), {}, &client, &io), 0);
  EXPECT_EQ(client.run_status_calls(), 4);
  EXPECT_EQ(fake.waits, 3);
  const std::vector<std::string> lines = absl::StrSplit(fake.out, '\n', absl::SkipEmpty());
  ASSERT_EQ(lines.size(), 3u) << fake.out;
  EXPECT_EQ(Field(Parsed(lines[0]), "ranks").list_value().values(0).struct_value().fields().at("step").number_value(),
            10);
  EXPECT_EQ(Field(Parsed(lines[2]), "state").string_value(), "CLOSED");
  EXPECT_THAT(fake.err, HasSubstr("blip"));
}

TEST(WatchLoop, AStopEndsItWithZero) {
  FakeRendezvousClient client;
  client.SetRunStatusAnswers({TwoNodes(10)});
  FakeIo fake;
  fake.stop_after_waits = 5;
  WatchIo io = fake.io();
  EXPECT_EQ(RunStatusCommand(WatchConfig(/*json=*/false), {}, &client, &io), 0);
  EXPECT_EQ(client.run_status_calls(), 5);
  EXPECT_EQ(fake.out, "-- 1970-01-01T01:00:00Z --\n" + FormatStatusTable(TwoNodes(10)) + "\n")
      << "the same table is printed once";
}

TEST(WatchLoop, AnUnreachableServiceEndsItWithOneAfterTheLimit) {
  FakeRendezvousClient client;
  client.SetRunStatusAnswers({TwoNodes(10), absl::UnavailableError("connection refused")});
  FakeIo fake;
  WatchIo io = fake.io();
  EXPECT_EQ(RunStatusCommand(WatchConfig(/*json=*/false), {}, &client, &io), 1);
  // 30 s at 0.5 s a refresh: the streak's first failure, then 60 more.
  EXPECT_EQ(client.run_status_calls(), 62);
  EXPECT_THAT(fake.err, HasSubstr("no answer for 30s (more than 30s)"));
}

TEST(StatusOnce, JsonOrTableOnceAndOneForAnError) {
  FakeRendezvousClient client;
  client.SetRunStatusAnswers({TwoNodes(10)});
  FakeIo fake;
  WatchIo io = fake.io();
  StatusConfig c = WatchConfig(/*json=*/true);
  c.watch = false;
  EXPECT_EQ(RunStatusCommand(c, {}, &client, &io), 0);
  EXPECT_EQ(fake.out, FormatStatusJson(TwoNodes(10)) + "\n");
  EXPECT_EQ(fake.waits, 0);
  client.SetRunStatusAnswers({absl::NotFoundError("no such run")});
  EXPECT_EQ(RunStatusCommand(c, {}, &client, &io), 1);
  EXPECT_THAT(fake.err, HasSubstr("no such run"));
}

}  // namespace
}  // namespace cpptorchrun::launcher
