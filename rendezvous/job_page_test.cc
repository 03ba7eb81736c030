#include "rendezvous/job_page.h"

#include <string>

#include "gtest/gtest.h"

namespace cpptorchrun::rdzv {
namespace {

TEST(JobPageTest, RunStatusJsonHasNodesRanksAndRestarts) {
  v1::RunStatusResponse s;
  s.set_run_id("job<1>");
  s.set_state(v1::RunStatusResponse::ACTIVE);
  s.set_round(3);
  s.mutable_options()->set_keep_alive_interval_s(0.5);
  v1::NodeStatus* n = s.add_nodes();
  n->mutable_participant()->set_node_id("n0");
  n->mutable_participant()->set_host("h0\"\n");
  n->mutable_participant()->set_local_world_size(2);
  n->set_heartbeat_age_ms(120);
  n->mutable_last_restart()->set_cause("worker_failed");
  n->mutable_last_restart()->set_round(3);
  n->mutable_last_restart()->set_total_s(0.75);
  v1::RankProgress* r = n->add_progress();
  r->set_rank(1);
  r->set_step(40);
  r->set_loss(0.5);
  const std::string json = RunStatusJson(s, {{1, {{10, 0.75, 100}, {20, 0.5, 110}}}});
  EXPECT_NE(json.find("\"run_id\":\"job<1>\""), std::string::npos) << json;
  EXPECT_NE(json.find("\"state\":\"active\",\"round\":3"), std::string::npos);
  EXPECT_NE(json.find("\"host\":\"h0\\\"\\n\""), std::string::npos) << json;
  EXPECT_NE(json.find("\"last_restart\":{\"cause\":\"worker_failed\",\"round\":3,\"total_s\":0.75"),
            std::string::npos);
  EXPECT_NE(json.find("{\"rank\":1,\"local_rank\":0,\"epoch\":0,\"step\":40"), std::string::npos);
  EXPECT_NE(json.find("\"world_size\":2,\"history\":{\"1\":[[10,0.75,100],[20,0.5,110]]}}"), std::string::npos)
      << json;
}

// A node's latest hang and straggler; null where none.
TEST(JobPageTest, NodeFaultsJson) {
  v1::NodeFaults f;
  EXPECT_EQ(NodeFaultsJson(f), "{\"last_hang\":null,\"last_straggler\":null}");
  v1::HangReport* h = f.mutable_last_hang();
  h->set_unix_ms(1700000000000);
  h->add_culprit_ranks(3);
  h->add_culprit_hosts("h\"2");
  h->add_waiting_ranks(1);
  h->set_step(40);
  h->set_collective_seq(80);
  h->set_waited_s(2.5);
  h->set_deadline_s(2.25);
  h->set_process_states("rank 3: stopped (T)");
  EXPECT_EQ(NodeFaultsJson(f),
            "{\"last_hang\":{\"unix_ms\":1700000000000,\"culprit_ranks\":[3],\"culprit_hosts\":[\"h\\\"2\"],"
            "\"waiting_ranks\":[1],\"step\":40,\"collective_seq\":80,\"waited_s\":2.5,\"deadline_s\":2.25,"
            "\"process_states\":\"rank 3: stopped (T)\"},\"last_straggler\":null}");
  v1::StragglerReport* g = f.mutable_last_straggler();
  g->set_unix_ms(1700000001000);
  g->add_ranks(0);
  g->add_hosts("h1");
  g->set_slowdown(2);
  g->set_policy("warn");
  EXPECT_NE(NodeFaultsJson(f).find("\"last_straggler\":{\"unix_ms\":1700000001000,\"ranks\":[0],\"hosts\":[\"h1\"],"
                                   "\"slowdown\":2,\"policy\":\"warn\"}"),
            std::string::npos)
      << NodeFaultsJson(f);
  v1::RunStatusResponse s;
  *s.add_nodes()->mutable_faults() = f;
  EXPECT_NE(RunStatusJson(s).find("\"faults\":{\"last_hang\":{\"unix_ms\":1700000000000"), std::string::npos);
}

TEST(JobPageTest, RunListJson) {
  ServiceSnapshot snapshot;
  snapshot.runs = 2;
  RunSample r;
  r.run_id = "a";
  r.state = "forming";
  r.restarts["membership"] = 2;
  r.restarts["worker_failed"] = 1;
  snapshot.exported.push_back(r);
  EXPECT_EQ(RunListJson(snapshot),
            "{\"runs\":[{\"run_id\":\"a\",\"state\":\"forming\",\"round\":0,\"nodes\":0,"
            "\"world_size\":0,\"restarts\":3}],\"not_shown\":1}");
}

TEST(JobPageTest, StaticFilesNeedNothingOutside) {
  for (absl::string_view file : {RunListHtml(), RunPageHtml(), PageScript(), PageStyle()}) {
    EXPECT_EQ(file.find("http://"), file.find("http://www.w3.org/2000/svg"));
    EXPECT_EQ(file.find("https://"), absl::string_view::npos);
  }
  EXPECT_EQ(PageScript().find("innerHTML"), absl::string_view::npos);
  // C++ never leaks into the script (a stray edit once turned Number( into base::JsonNumber().
  EXPECT_EQ(PageScript().find("::"), absl::string_view::npos);
}

}  // namespace
}  // namespace cpptorchrun::rdzv
