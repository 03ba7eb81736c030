// The rendezvous server's metrics (see metrics.h).
#include "rendezvous/metrics.h"

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"

namespace cpptorchrun::rdzv {
namespace {

using base::prom::Exposition;
using base::prom::Labels;
using base::prom::Type;

constexpr const char* kMethods[] = {"Join", "KeepAlive", "Watch",    "Leave",    "Close",
                                    "Set",  "Get",       "Add",      "CompareSet", "Delete",
                                    "MultiGet", "MultiSet", "RunStatus", "other"};

constexpr const char* kCodeNames[] = {
    "OK",        "CANCELLED",          "UNKNOWN",           "INVALID_ARGUMENT",
    "DEADLINE_EXCEEDED", "NOT_FOUND",  "ALREADY_EXISTS",    "PERMISSION_DENIED",
    "RESOURCE_EXHAUSTED", "FAILED_PRECONDITION", "ABORTED", "OUT_OF_RANGE",
    "UNIMPLEMENTED", "INTERNAL",       "UNAVAILABLE",       "DATA_LOSS",
    "UNAUTHENTICATED"};

absl::string_view ShortMethod(absl::string_view method) {
  const size_t slash = method.rfind('/');
  return slash == absl::string_view::npos ? method : method.substr(slash + 1);
}

}  // namespace

std::string RoundEndCause(absl::string_view reason) {
  if (absl::StrContains(reason, "sent no keep-alive")) return "node_lost";
  if (absl::StrContains(reason, "' left")) return "node_left";
  if (absl::StrContains(reason, "re-joined")) return "node_rejoined";
  if (absl::StrContains(reason, "waits to join") || absl::StrContains(reason, "nodes joined while")) {
    return "node_joined";
  }
  if (absl::StartsWith(reason, "run closed")) return "closed";
  return "other";
}

std::string RestartCause(absl::string_view cause) {
  if (cause == "worker_failed" || cause == "membership") return std::string(cause);
  return "other";
}

void AddProgressPoint(const ProgressPoint& point, std::vector<ProgressPoint>* points) {
  if (!points->empty() && points->back().step == point.step) return;
  if (static_cast<int>(points->size()) >= kHistoryPoints) {
    size_t kept = 0;
    for (size_t i = 0; i < points->size(); i += 2) (*points)[kept++] = (*points)[i];
    points->resize(kept);
  }
  points->push_back(point);
}

std::vector<double> RoundDurationBuckets() {
  return {1, 5, 15, 30, 60, 300, 900, 1800, 3600, 3 * 3600, 12 * 3600, 24 * 3600};
}

RpcMetrics::RpcMetrics() {
  for (const char* method : kMethods) {
    methods_[method].latency = std::make_unique<base::prom::BucketCounts>(base::prom::LatencyBuckets());
  }
}

void RpcMetrics::Record(absl::string_view method, int code, double seconds) {
  auto it = methods_.find(ShortMethod(method));
  if (it == methods_.end()) it = methods_.find("other");
  if (code < 0 || code >= kCodes) code = 2;  // UNKNOWN
  {
    std::lock_guard<std::mutex> lock(mu_);
    ++it->second.codes[code];
  }
  it->second.latency->Observe(seconds);
}

void RpcMetrics::AppendTo(Exposition* out) const {
  auto& calls = out->Get("cpptorchrun_rdzv_rpcs_total",
                         "RPCs answered, by method and gRPC status code.", Type::kCounter);
  auto& latency = out->Get("cpptorchrun_rdzv_rpc_duration_seconds",
                           "Time from an RPC's arrival to its answer (held calls: while held), by method.",
                           Type::kHistogram);
  std::map<std::string, std::array<uint64_t, kCodes>> codes;
  {
    std::lock_guard<std::mutex> lock(mu_);
    for (const auto& [method, per] : methods_) codes[method] = per.codes;
  }
  for (const auto& [method, per] : methods_) {
    for (int code = 0; code < kCodes; ++code) {
      if (codes[method][code] == 0) continue;
      calls.Add({{"method", method}, {"code", kCodeNames[code]}}, codes[method][code]);
    }
    const base::prom::HistogramData data = per.latency->Data();
    if (data.count > 0) latency.AddHistogram({{"method", method}}, data);
  }
}

namespace {

// The server as a whole.
void AppendServerWide(const ServiceSnapshot& s, Exposition* out) {
  out->Get("cpptorchrun_rdzv_runs", "Runs the server holds.", Type::kGauge).Add({}, s.runs);
  out->Get("cpptorchrun_rdzv_runs_not_exported",
           "Runs held but not exported (beyond the export bound; the least recently active).",
           Type::kGauge)
      .Add({}, s.runs - static_cast<int>(s.exported.size()));
  out->Get("cpptorchrun_rdzv_store_bytes", "Bytes of keys and values in every run's store.",
           Type::kGauge)
      .Add({}, s.store_bytes);
  out->Get("cpptorchrun_rdzv_store_budget_bytes", "The server's store budget (max_store_bytes).",
           Type::kGauge)
      .Add({}, s.store_budget);
  out->Get("cpptorchrun_rdzv_held_calls", "Calls held open (long-polled Joins and Watches, waiting reads).",
           Type::kGauge)
      .Add({}, s.held_calls);
  out->Get("cpptorchrun_rdzv_node_joins_total", "Joins accepted, all runs.", Type::kCounter)
      .Add({}, s.node_joins);
  out->Get("cpptorchrun_rdzv_node_losses_total",
           "Participants declared dead (no keep-alive within the deadline), all runs.", Type::kCounter)
      .Add({}, s.node_losses);
  auto& ends = out->Get("cpptorchrun_rdzv_round_ends_total", "Rounds ended, by cause, all runs.",
                        Type::kCounter);
  for (const auto& [cause, n] : s.round_ends) ends.Add({{"cause", cause}}, n);
  out->Get("cpptorchrun_rdzv_round_duration_seconds", "How long each ended round stood, all runs.",
           Type::kHistogram)
      .AddHistogram({}, s.round_duration);
}

// Each exported run's round, state, sizes, restarts and store.
void AppendRuns(const std::vector<RunSample>& runs, Exposition* out) {
  auto& round = out->Get("cpptorchrun_rdzv_round", "The run's latest completed round.", Type::kGauge);
  auto& state = out->Get("cpptorchrun_rdzv_run_state",
                         "1 for the run's state (forming, active, closed).", Type::kGauge);
  auto& world = out->Get("cpptorchrun_rdzv_world_size", "Workers in the run's round.", Type::kGauge);
  auto& nodes = out->Get("cpptorchrun_rdzv_nodes", "Nodes in the run's round.", Type::kGauge);
  auto& joining = out->Get("cpptorchrun_rdzv_joining_nodes", "Nodes joining the forming round.",
                           Type::kGauge);
  auto& spares = out->Get("cpptorchrun_rdzv_spare_nodes",
                          "Nodes waiting because the standing round is full.", Type::kGauge);
  auto& age = out->Get("cpptorchrun_rdzv_round_age_seconds",
                       "How long the run's standing round has stood (0: none).", Type::kGauge);
  auto& rounds = out->Get("cpptorchrun_rdzv_rounds_completed_total",
                          "Rounds completed in the run (since this server has known it).",
                          Type::kCounter);
  auto& restarts = out->Get("cpptorchrun_rdzv_restarts_total",
                            "Restarts the run's nodes reported, one per node and restart, by cause.",
                            Type::kCounter);
  auto& keys = out->Get("cpptorchrun_rdzv_run_store_keys", "Keys in the run's store.", Type::kGauge);
  auto& bytes = out->Get("cpptorchrun_rdzv_run_store_bytes", "Bytes in the run's store.", Type::kGauge);
  for (const RunSample& r : runs) {
    const Labels run = {{"run", r.run_id}};
    round.Add(run, r.round);
    for (const char* name : {"forming", "active", "closed"}) {
      state.Add({{"run", r.run_id}, {"state", name}}, r.state == name ? 1 : 0);
    }
    world.Add(run, r.world_size);
    nodes.Add(run, r.nodes);
    joining.Add(run, r.joining);
    spares.Add(run, r.spares);
    age.Add(run, r.round_age_s);
    rounds.Add(run, r.rounds_completed);
    for (const char* cause : {"worker_failed", "membership", "other"}) {
      auto it = r.restarts.find(cause);
      restarts.Add({{"run", r.run_id}, {"cause", cause}}, it == r.restarts.end() ? 0 : it->second);
    }
    keys.Add(run, r.store_keys);
    bytes.Add(run, r.store_bytes);
  }
}

// Each exported run's nodes (keep-alive age, restarts) and ranks (progress).
void AppendNodesAndRanks(const std::vector<RunSample>& runs, Exposition* out) {
  auto& keep_alive = out->Get("cpptorchrun_rdzv_keep_alive_age_seconds",
                              "Seconds since the node's last keep-alive, by group rank.", Type::kGauge);
  auto& node_restarts = out->Get("cpptorchrun_rdzv_node_restarts",
                                 "The restarts the node has spent (its --max_restarts count).",
                                 Type::kGauge);
  auto& step = out->Get("cpptorchrun_rdzv_rank_step", "The rank's latest step.", Type::kGauge);
  auto& epoch = out->Get("cpptorchrun_rdzv_rank_epoch", "The rank's latest epoch.", Type::kGauge);
  auto& loss = out->Get("cpptorchrun_rdzv_rank_loss", "The rank's latest loss.", Type::kGauge);
  auto& speed = out->Get("cpptorchrun_rdzv_rank_samples_per_second", "The rank's latest samples/s.",
                         Type::kGauge);
  auto& heartbeat = out->Get("cpptorchrun_rdzv_rank_heartbeat_age_seconds",
                             "Seconds since the rank's agent last heard from it (as of its keep-alive).",
                             Type::kGauge);
  for (const RunSample& r : runs) {
    for (const NodeSample& n : r.node_samples) {
      const Labels node = {{"run", r.run_id}, {"node_rank", absl::StrCat(n.group_rank)}};
      keep_alive.Add(node, n.keep_alive_age_s);
      node_restarts.Add(node, n.restart_count);
    }
    for (const RankSample& k : r.ranks) {
      const Labels rank = {{"run", r.run_id}, {"rank", absl::StrCat(k.rank)}};
      step.Add(rank, k.step);
      epoch.Add(rank, k.epoch);
      loss.Add(rank, k.loss);
      speed.Add(rank, k.samples_per_s);
      heartbeat.Add(rank, k.heartbeat_age_s);
    }
  }
}

}  // namespace

void AppendServiceMetrics(const ServiceSnapshot& s, Exposition* out) {
  AppendServerWide(s, out);
  AppendRuns(s.exported, out);
  AppendNodesAndRanks(s.exported, out);
}

}  // namespace cpptorchrun::rdzv
