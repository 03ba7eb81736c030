// What one launcher exports to Prometheus: its job as the event log tells
// it (rounds joined, worker groups started, workers failed by exit code or
// signal, restarts by cause with their phases, resumes) and its ranks as
// the progress board holds them (epoch, step, loss, samples/s, heartbeat
// age). `MetricsEventLog` is an EventLog that counts what passes through
// it and forwards it to the real log; rendering is a pure function of the
// counters and the board's snapshot, taken without the counters' lock.
//
// Cardinality: one series per local rank (bounded by --nproc_per_node),
// failure labels from fixed sets (code: 0..255, signal: the signal's name,
// hung), restart causes worker_failed | membership | other.
#ifndef CPPTORCHRUN_LAUNCHER_AGENT_LAUNCHER_METRICS_H_
#define CPPTORCHRUN_LAUNCHER_AGENT_LAUNCHER_METRICS_H_

#include <cstdint>
#include <map>
#include <string>
#include <utility>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"
#include "base/prometheus.h"
#include "launcher/agent/event_log.h"
#include "launcher/agent/progress_board.h"

namespace cpptorchrun::launcher {

struct LauncherCounters {
  int64_t rounds_joined = 0;
  int64_t round = 0, group_rank = -1, world_size = 0;
  int64_t group_starts = 0, workers_started = 0;
  int64_t round_ends = 0, resumes = 0;
  // (kind, value): ("code", "1"), ("signal", "SIGKILL"), ("hung", "").
  std::map<std::pair<std::string, std::string>, int64_t> worker_failures;
  std::map<std::string, int64_t> restarts;  // by cause
  std::map<std::string, int64_t> recoveries;  // by path (in_place, gang)
  std::map<std::string, double> last_restart_phases;  // phase -> seconds
  base::prom::HistogramData restart_seconds;
  int64_t exit_code = -1;  // -1: still running
  // Failure intelligence's events: hang_detected, straggler_detected,
  // file_timer_expired, health_check_failed.
  int64_t hangs = 0, stragglers = 0, file_timers_expired = 0, health_checks_failed = 0;
  int64_t quarantined = 0, workers_unkillable = 0;
};

// The bounded (kind, value) of an exit status as the event log words it
// ("exit code 1", "signal SIGKILL (9)", "hung").
std::pair<std::string, std::string> FailureLabels(const std::string& status);

// Counts the events it records. Thread-safe.
class MetricsEventLog final : public EventLog {
 public:
  // `next` (may be null, not owned) receives every event too.
  explicit MetricsEventLog(EventLog* next);
  void Record(absl::string_view event, std::vector<EventField> fields) override;
  LauncherCounters Counters() const;

 private:
  EventLog* next_;
  mutable absl::Mutex mu_;
  LauncherCounters counters_ ABSL_GUARDED_BY(mu_);
};

// cpptorchrun_launcher_* families from the counters and the board's ranks
// (heartbeat ages as of `now`).
void AppendLauncherMetrics(const LauncherCounters& counters, const std::vector<RankReport>& ranks,
                           absl::Time now, base::prom::Exposition* out);

}  // namespace cpptorchrun::launcher

#endif  // CPPTORCHRUN_LAUNCHER_AGENT_LAUNCHER_METRICS_H_
