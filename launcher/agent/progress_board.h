// The progress board: what this node's workers last reported over the agent
// service (heartbeats and events), read by the elastic agent to find hung
// workers and by the keep-alive to carry progress to the rendezvous.
#ifndef CPPTORCHRUN_LAUNCHER_PROGRESS_BOARD_H_
#define CPPTORCHRUN_LAUNCHER_PROGRESS_BOARD_H_

#include <sys/types.h>

#include <cstdint>
#include <functional>
#include <map>
#include <optional>
#include <string>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/status/status.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"
#include "launcher/agent/event_log.h"
#include "launcher/agent/hang_policy.h"
#include "launcher/agent/straggler_policy.h"
#include "proto/agent.pb.h"
#include "proto/rendezvous.pb.h"
#include "base/clock.h"

namespace cpptorchrun::launcher {

// One local rank as the board knows it: the latest heartbeat as its worker
// sent it (the agent proto's Heartbeat: one type from the worker to the
// keep-alive), and what its events said.
struct RankReport {
  agent::v1::Heartbeat heartbeat;            // the latest (rank, pid, epoch, step, loss, ...)
  std::optional<absl::Time> last_heartbeat;  // when a heartbeat or STARTED came; none yet
  StepProgress progress;                     // its steps over time, for its hang deadline
  std::deque<double> compute;                // its heartbeats' compute_s (> 0), newest last
  bool finished = false;                     // sent FINISHED: silence is expected
  int64_t resumed_step = -1;                 // RESUMED: the checkpoint's step
  std::string failure;                       // FAILED: the worker's own message
  bool can_wait_warm = false;                // STARTED said it can start as a warm spare
  bool can_recover_in_place = false;         // STARTED said it can stay through a round change
  std::optional<absl::Time> recovering_at;   // RECOVERING: its communicator failed, it waits
  int64_t recovering_round = 0;              // RECOVERING: the round it failed in (0: none said)
  std::string recovering_why;                // RECOVERING: the worker's message
  // When the start-up events came (the board's clock); none yet.
  std::optional<absl::Time> started_at, comm_ready_at, resumed_at, first_step_at;
};

// A group's start-up, once every current worker has made its first step:
// for each phase the latest local rank's time. A worker that restored no
// checkpoint counts as restored when its communicator was ready.
struct GroupStartup {
  absl::Time comm_ready, restored, first_step;
};

// Thread-safe.
class ProgressBoard {
 public:
  // `events` (may be null) gets worker_resumed and worker_reported events.
  explicit ProgressBoard(base::Clock* clock, EventLog* events = nullptr) : clock_(clock), events_(events) {}

  // A new group: forgets all reports and any stop request; `pids[local_rank]`
  // are the workers.
  void Reset(const std::vector<int64_t>& pids);
  // The same in two steps, for workers that report before the last of
  // their group has started (a warm start answers in microseconds): Begin
  // opens `local_world_size` slots; until SetWorker fills a slot, reports
  // sent for it are held, and kept if they came from the pid it is filled
  // with.
  void Begin(int local_world_size);
  // The same for a group that keeps some workers through a round change
  // (in-place recovery): `kept[local_rank]` is a worker that stays; what
  // its STARTED said is kept, its steps and start-up times start afresh.
  void Begin(int local_world_size, const std::map<int, int64_t>& kept);
  // pid -1: the slot stays empty this round (a node running short under
  // in-place recovery): nobody reports for it, and nobody is waited for.
  void SetWorker(int local_rank, int64_t pid);

  // Records a heartbeat. Returns false (and records nothing) when its pid is
  // not the current worker at its local rank (a stale or foreign sender).
  bool Heartbeat(const agent::v1::Heartbeat& heartbeat);

  // Records an event, with the same check: STARTED is a sign of life (the
  // worker's hang clock starts), RESUMED keeps the step it resumed from,
  // FINISHED makes silence expected, FAILED keeps the worker's message (the
  // failure summary's when it wrote no error file). InvalidArgument for an
  // unspecified kind, FailedPrecondition for a foreign sender.
  absl::Status RecordEvent(const agent::v1::WorkerEvent& event);

  // The group's start-up phases, once every current worker has sent
  // FIRST_STEP (and COMMUNICATOR_READY before it); nullopt until then, or
  // for workers that send no events (Python scripts).
  std::optional<GroupStartup> Startup() const;
  // Every current worker's STARTED said it can start as a warm spare.
  bool AllCanWaitWarm() const;
  // The current worker at `local_rank` said it can recover in place.
  bool CanRecoverInPlace(int local_rank) const;

  // A current worker whose communicator of round `round` failed (RECOVERING
  // for that round) although the launcher began no change: a peer elsewhere
  // was lost. The lowest such local rank's; nullopt: none.
  struct Recovering {
    int local_rank = 0;
    int rank = 0;
    std::string why;
  };
  std::optional<Recovering> RecoveringIn(int64_t round) const;

  // Called (outside the board's lock) after each start-up event, so that a
  // waiting agent looks at once; null: nobody. Thread-safe.
  void SetOnStartupEvent(std::function<void()> fn);

  // The group is being stopped: heartbeat answers say stop_requested until
  // the next Reset.
  void RequestStop();
  bool StopRequested() const;

  std::vector<RankReport> Snapshot() const;
  // This node's last restart (the agent sets it; the keep-alive carries it).
  void SetLastRestart(const rdzv::v1::RestartPhases& phases);
  std::optional<rdzv::v1::RestartPhases> LastRestart() const;
  // This node's latest hang and straggler report (the agent sets them; the
  // keep-alive carries them to status and the job page).
  void SetLastHang(const rdzv::v1::HangReport& hang);
  void SetLastStraggler(const rdzv::v1::StragglerReport& straggler);
  std::optional<rdzv::v1::NodeFaults> Faults() const;
  std::optional<absl::Time> LastHeartbeat(int local_rank) const;
  // Every current worker's compute window (straggler_policy.h).
  std::map<int, std::deque<double>> ComputeWindows() const;
  // The local rank whose current worker is `pid`; nullopt: none.
  std::optional<int> LocalRankOf(int64_t pid) const;
  // The rank's steps as its heartbeats showed them (empty: none yet).
  StepProgress Progress(int local_rank) const;
  // Its flight recorder's newest collective, as its last heartbeat said (0: none).
  int64_t CollectiveSeq(int local_rank) const;
  bool Finished(int local_rank) const;
  // The FAILED event's message of the worker at `local_rank`; empty: none.
  std::string ReportedFailure(int local_rank) const;
  base::Clock* clock() const { return clock_; }

 private:
  bool IsCurrent(int local_rank, int64_t pid) const ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // The event log's record of a worker's event (resumed, recovering,
  // recovered, signal, failure), outside mu_.
  void LogEvent(const agent::v1::WorkerEvent& e);
  // Where a report from `pid` for `local_rank` goes: the current worker's,
  // the held one of a slot not filled yet, or none (a stale or foreign
  // sender).
  RankReport* Target(int local_rank, int64_t pid) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);

  base::Clock* clock_;
  EventLog* events_;
  mutable absl::Mutex mu_;
  bool stop_requested_ ABSL_GUARDED_BY(mu_) = false;
  // Its own lock: it is called outside mu_, and cleared while a call may run.
  absl::Mutex on_event_mu_;
  std::function<void()> on_startup_event_ ABSL_GUARDED_BY(on_event_mu_);
  std::vector<int64_t> pids_ ABSL_GUARDED_BY(mu_);
  std::map<int, RankReport> reports_ ABSL_GUARDED_BY(mu_);
  std::map<int, RankReport> held_ ABSL_GUARDED_BY(mu_);
  std::optional<rdzv::v1::RestartPhases> last_restart_ ABSL_GUARDED_BY(mu_);
  std::optional<rdzv::v1::NodeFaults> faults_ ABSL_GUARDED_BY(mu_);
};

}  // namespace cpptorchrun::launcher

#endif  // CPPTORCHRUN_LAUNCHER_PROGRESS_BOARD_H_
