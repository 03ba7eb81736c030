// Tests of the single-node local rendezvous.
#include "launcher/agent/local_rendezvous.h"

#include "gtest/gtest.h"

namespace cpptorchrun::launcher {
namespace {

TEST(LocalRendezvous, RoundsIncreaseAndAssignThisNode) {
  auto r = NewLocalRendezvousClient();
  rdzv::v1::JoinRequest req;
  req.set_run_id("j");
  req.mutable_node()->set_node_id("n");
  req.mutable_node()->set_host("127.0.0.1");
  req.mutable_node()->set_local_world_size(4);
  req.mutable_node()->set_free_port(5555);
  req.mutable_options()->set_min_nodes(1);
  auto a = r->Join(req);
  ASSERT_TRUE(a.ok());
  EXPECT_EQ(a->round(), 1);
  EXPECT_EQ(a->world_size(), 4);
  EXPECT_EQ(a->master_addr(), "127.0.0.1");
  EXPECT_EQ(a->master_port(), 5555);
  req.set_last_round(7);
  EXPECT_EQ(r->Join(req)->round(), 8);
  // Watch of the current round answers current; a Close ends it.
  auto e = r->Watch("j", "n", 8, 0, absl::ZeroDuration());
  ASSERT_TRUE(e.ok());
  EXPECT_TRUE(e->round_current());
  ASSERT_TRUE(r->Close("j", "done").ok());
  e = r->Watch("j", "n", 8, 0, absl::Seconds(30));
  EXPECT_FALSE(e->round_current());
  EXPECT_TRUE(e->run_closed());
  auto store = r->OpenStore("j", 8);
  EXPECT_EQ(*store->Add("k", 2), 2);
}

TEST(LocalRendezvous, RefusesMoreThanOneNode) {
  auto r = NewLocalRendezvousClient();
  rdzv::v1::JoinRequest req;
  req.mutable_options()->set_min_nodes(2);
  EXPECT_FALSE(r->Join(req).ok());
}

}  // namespace
}  // namespace cpptorchrun::launcher
