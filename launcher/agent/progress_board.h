// The progress board: what this node's workers last reported over the agent
// service (heartbeats and events), read by the elastic agent to find hung
// workers and by the keep-alive to carry progress to the rendezvous.
#ifndef CPPTORCHRUN_LAUNCHER_PROGRESS_BOARD_H_
#define CPPTORCHRUN_LAUNCHER_PROGRESS_BOARD_H_

#include <sys/types.h>

#include <cstdint>
#include <map>
#include <optional>
#include <string>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"
#include "proto/rendezvous.pb.h"
#include "rendezvous/clock.h"

namespace cpptorchrun::launcher {

struct RankReport {
  int rank = 0;
  int local_rank = 0;
  int64_t pid = 0;
  int64_t epoch = 0;
  int64_t step = 0;
  int64_t total_steps = 0;
  double loss = 0;
  double samples_per_s = 0;
  std::optional<absl::Time> last_heartbeat;  // none yet
  bool finished = false;                     // sent FINISHED: silence is expected
  int64_t resumed_step = -1;                 // RESUMED event's step
};

// Thread-safe.
class ProgressBoard {
 public:
  explicit ProgressBoard(rdzv::Clock* clock) : clock_(clock) {}

  // A new group: forgets all reports; `pids[local_rank]` are the workers.
  void Reset(const std::vector<int64_t>& pids);

  // Records a heartbeat. Returns false (and records nothing) when `pid` is
  // not the current worker at `local_rank` (a stale or foreign sender).
  bool Heartbeat(const RankReport& report);

  enum class Event { kStarted, kResumed, kFinished, kFailed };
  bool RecordEvent(int local_rank, int64_t pid, Event event, int64_t step);

  std::vector<RankReport> Snapshot() const;
  // This node's last restart (the agent sets it; the keep-alive carries it).
  void SetLastRestart(const rdzv::v1::RestartPhases& phases);
  std::optional<rdzv::v1::RestartPhases> LastRestart() const;
  std::optional<absl::Time> LastHeartbeat(int local_rank) const;
  bool Finished(int local_rank) const;
  rdzv::Clock* clock() const { return clock_; }

 private:
  rdzv::Clock* clock_;
  mutable absl::Mutex mu_;
  std::vector<int64_t> pids_ ABSL_GUARDED_BY(mu_);
  std::map<int, RankReport> reports_ ABSL_GUARDED_BY(mu_);
  std::optional<rdzv::v1::RestartPhases> last_restart_ ABSL_GUARDED_BY(mu_);
};

}  // namespace cpptorchrun::launcher

#endif  // CPPTORCHRUN_LAUNCHER_PROGRESS_BOARD_H_
