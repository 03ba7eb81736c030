// What the rendezvous server exports to Prometheus: a snapshot of the
// service's state (copied under the service's lock, rendered outside it),
// the RPC counters and latencies (fed by a gRPC interceptor, server.cc),
// and the pure functions that turn them into the text format. No lock but
// RpcMetrics's own, no clock, no gRPC type.
//
// Cardinality is bounded: at most `MetricsBounds::max_runs` runs are
// exported (the most recently active first; the rest are counted in
// cpptorchrun_rdzv_runs_not_exported), each with at most `max_ranks` ranks
// and `max_ranks` nodes; causes are from fixed sets; RPC methods are the
// service's (others are "other") and codes gRPC's 17.
#ifndef CPPTORCHRUN_RENDEZVOUS_METRICS_H_
#define CPPTORCHRUN_RENDEZVOUS_METRICS_H_

#include <array>
#include <cstdint>
#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

#include "absl/strings/string_view.h"
#include "base/prometheus.h"

namespace cpptorchrun::rdzv {

struct MetricsBounds {
  int max_runs = 20;
  int max_ranks = 256;
};

struct RankSample {
  int32_t rank = 0;
  int64_t epoch = 0, step = 0;
  double loss = 0, samples_per_s = 0, heartbeat_age_s = 0;
};

struct NodeSample {
  int32_t group_rank = 0;
  double keep_alive_age_s = 0;
  int32_t restart_count = 0;
};

struct RunSample {
  std::string run_id;
  int64_t round = 0;
  std::string state;  // forming | active | closed
  int32_t world_size = 0;
  int nodes = 0, joining = 0, spares = 0;
  double round_age_s = 0;  // how long the standing round has stood (0: none)
  int64_t rounds_completed = 0;
  std::map<std::string, int64_t> restarts;  // by cause (RestartCause)
  std::vector<NodeSample> node_samples;     // by group rank, at most max_ranks
  std::vector<RankSample> ranks;            // by rank, at most max_ranks
  int64_t store_keys = 0, store_bytes = 0;
};

// A rank's progress over time, as the job page draws it: the service keeps
// up to kHistoryPoints points for each of a run's first kHistoryRanks
// ranks, halving their resolution when full (so the whole run stays drawn).
struct ProgressPoint {
  int64_t step = 0;
  double loss = 0, samples_per_s = 0;
};
using ProgressHistory = std::map<int32_t, std::vector<ProgressPoint>>;
inline constexpr int kHistoryRanks = 64;
inline constexpr int kHistoryPoints = 256;
// Adds `point` to `points` unless its step is the last one's; when full,
// keeps every other point first.
void AddProgressPoint(const ProgressPoint& point, std::vector<ProgressPoint>* points);

// The service's part, all of it values.
struct ServiceSnapshot {
  int runs = 0;  // every run held (exported or not)
  std::vector<RunSample> exported;
  int64_t store_bytes = 0, store_budget = 0;
  int held_calls = 0;
  int64_t node_joins = 0;   // Joins accepted (a node entering a forming round or waiting)
  int64_t node_losses = 0;  // participants declared dead (no keep-alive)
  std::map<std::string, int64_t> round_ends;  // by cause (RoundEndCause)
  base::prom::HistogramData round_duration;   // seconds a round stood
};

// The bounded label of a round's end reason (as rules.h words it):
// node_lost | node_left | node_rejoined | node_joined | closed | other.
std::string RoundEndCause(absl::string_view reason);
// The bounded label of a RestartPhases cause: worker_failed | membership | other.
std::string RestartCause(absl::string_view cause);
// Buckets for round durations, seconds: 1 s to 1 day.
std::vector<double> RoundDurationBuckets();

// Every RPC's outcome and latency. Thread-safe; cheap (a lock per call).
class RpcMetrics {
 public:
  RpcMetrics();
  // `method` as gRPC names it ("/pkg.Service/Join"); `code` gRPC's (0..16).
  void Record(absl::string_view method, int code, double seconds);
  void AppendTo(base::prom::Exposition* out) const;

 private:
  static constexpr int kCodes = 17;
  struct PerMethod {
    std::array<uint64_t, kCodes> codes{};
    std::unique_ptr<base::prom::BucketCounts> latency;
  };
  mutable std::mutex mu_;
  std::map<std::string, PerMethod, std::less<>> methods_;  // fixed at construction
};

// The service's snapshot as cpptorchrun_rdzv_* families.
void AppendServiceMetrics(const ServiceSnapshot& snapshot, base::prom::Exposition* out);

}  // namespace cpptorchrun::rdzv

#endif  // CPPTORCHRUN_RENDEZVOUS_METRICS_H_
