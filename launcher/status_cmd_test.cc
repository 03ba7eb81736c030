// Tests of the status table.
#include "launcher/status_cmd.h"

#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace cpptorchrun::launcher {
namespace {

using ::testing::HasSubstr;
using ::testing::Not;

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
  EXPECT_THAT(t, ::testing::ContainsRegex("1 +worker_failed +3 +0\\.250 +0\\.050 +0\\.125 +0\\.075"));
  EXPECT_THAT(t, HasSubstr("server store: 1.0 of 1024.0 MiB"));
}

}  // namespace
}  // namespace cpptorchrun::launcher
