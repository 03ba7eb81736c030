#include "rendezvous/metrics.h"

#include <string>

#include "gtest/gtest.h"

namespace cpptorchrun::rdzv {
namespace {

bool Has(const std::string& text, const std::string& line) {
  return text.find(line + "\n") != std::string::npos;
}

TEST(RdzvMetricsTest, CausesAreBounded) {
  EXPECT_EQ(RoundEndCause("node 'a' (h) sent no keep-alive for 1.2s"), "node_lost");
  EXPECT_EQ(RoundEndCause("node 'a' left: done"), "node_left");
  EXPECT_EQ(RoundEndCause("node 'a' re-joined"), "node_rejoined");
  EXPECT_EQ(RoundEndCause("node 'b' waits to join; round 2 has 1 of max_nodes 2"), "node_joined");
  EXPECT_EQ(RoundEndCause("nodes joined while round 3 was re-registered"), "node_joined");
  EXPECT_EQ(RoundEndCause("run closed: finished"), "closed");
  EXPECT_EQ(RoundEndCause("<script>"), "other");
  EXPECT_EQ(RestartCause("worker_failed"), "worker_failed");
  EXPECT_EQ(RestartCause("membership"), "membership");
  EXPECT_EQ(RestartCause("x\"y"), "other");
}

TEST(RdzvMetricsTest, SnapshotRendersEveryFamily) {
  ServiceSnapshot s;
  s.runs = 3;
  s.store_bytes = 10;
  s.node_joins = 4;
  s.node_losses = 1;
  s.round_ends["node_lost"] = 1;
  s.round_duration.bounds = {1, 5};
  s.round_duration.counts = {0, 1, 0};
  s.round_duration.sum = 2;
  s.round_duration.count = 1;
  RunSample r;
  r.run_id = "job\"</td><script>x</script>\n";
  r.round = 2;
  r.state = "active";
  r.nodes = 2;
  r.restarts["worker_failed"] = 1;
  r.node_samples.push_back({1, 0.25, 1});
  r.ranks.push_back({3, 1, 120, 0.5, 900, 0.1});
  s.exported.push_back(r);
  base::prom::Exposition e;
  AppendServiceMetrics(s, &e);
  const std::string text = e.Text();
  const std::string run = "run=\"job\\\"</td><script>x</script>\\n\"";
  EXPECT_TRUE(Has(text, "cpptorchrun_rdzv_runs 3")) << text;
  EXPECT_TRUE(Has(text, "cpptorchrun_rdzv_runs_not_exported 2"));
  EXPECT_TRUE(Has(text, "cpptorchrun_rdzv_node_losses_total 1"));
  EXPECT_TRUE(Has(text, "cpptorchrun_rdzv_round_ends_total{cause=\"node_lost\"} 1"));
  EXPECT_TRUE(Has(text, "cpptorchrun_rdzv_round_duration_seconds_bucket{le=\"5\"} 1"));
  EXPECT_TRUE(Has(text, "cpptorchrun_rdzv_round{" + run + "} 2"));
  EXPECT_TRUE(Has(text, "cpptorchrun_rdzv_run_state{" + run + ",state=\"active\"} 1"));
  EXPECT_TRUE(Has(text, "cpptorchrun_rdzv_restarts_total{" + run + ",cause=\"worker_failed\"} 1"));
  EXPECT_TRUE(Has(text, "cpptorchrun_rdzv_restarts_total{" + run + ",cause=\"membership\"} 0"));
  EXPECT_TRUE(Has(text, "cpptorchrun_rdzv_keep_alive_age_seconds{" + run + ",node_rank=\"1\"} 0.25"));
  EXPECT_TRUE(Has(text, "cpptorchrun_rdzv_rank_step{" + run + ",rank=\"3\"} 120"));
  EXPECT_TRUE(Has(text, "cpptorchrun_rdzv_rank_samples_per_second{" + run + ",rank=\"3\"} 900"));
  EXPECT_TRUE(Has(text, "# TYPE cpptorchrun_rdzv_rank_loss gauge"));
  // The run id's newline is escaped: no sample line starts with "<script>".
  EXPECT_EQ(text.find("\n<script>"), std::string::npos);
}

TEST(RdzvMetricsTest, ProgressHistoryIsBoundedAndKeepsTheWholeRun) {
  std::vector<ProgressPoint> points;
  AddProgressPoint({1, 1.0, 10}, &points);
  AddProgressPoint({1, 0.9, 10}, &points);  // same step: ignored
  EXPECT_EQ(points.size(), 1u);
  for (int step = 2; step <= 10 * kHistoryPoints; ++step) AddProgressPoint({step, 1.0 / step, 10}, &points);
  EXPECT_LE(static_cast<int>(points.size()), kHistoryPoints);
  EXPECT_GE(static_cast<int>(points.size()), kHistoryPoints / 2);
  EXPECT_EQ(points.front().step, 1);
  EXPECT_EQ(points.back().step, 10 * kHistoryPoints);
}

TEST(RdzvMetricsTest, RpcsByMethodAndCode) {
  RpcMetrics rpcs;
  rpcs.Record("/cpptorchrun.rdzv.v1.Rendezvous/Join", 0, 0.002);
  rpcs.Record("/cpptorchrun.rdzv.v1.Rendezvous/Join", 16, 0.0001);
  rpcs.Record("/evil/<method>", 99, 1);
  base::prom::Exposition e;
  rpcs.AppendTo(&e);
  const std::string text = e.Text();
  EXPECT_TRUE(Has(text, "cpptorchrun_rdzv_rpcs_total{method=\"Join\",code=\"OK\"} 1")) << text;
  EXPECT_TRUE(Has(text, "cpptorchrun_rdzv_rpcs_total{method=\"Join\",code=\"UNAUTHENTICATED\"} 1"));
  EXPECT_TRUE(Has(text, "cpptorchrun_rdzv_rpcs_total{method=\"other\",code=\"UNKNOWN\"} 1"));
  EXPECT_TRUE(Has(text, "cpptorchrun_rdzv_rpc_duration_seconds_count{method=\"Join\"} 2"));
  EXPECT_EQ(text.find("<method>"), std::string::npos);
}

}  // namespace
}  // namespace cpptorchrun::rdzv
