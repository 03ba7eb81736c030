// Tests of the status table.
#include "launcher/status_cmd.h"

#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace cpptorchrun::launcher {
namespace {

using ::testing::HasSubstr;

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
}

}  // namespace
}  // namespace cpptorchrun::launcher
