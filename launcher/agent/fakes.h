// Test fakes for the elastic agent's dependencies: a process launcher whose
// processes exit when a test says (on a FakeClock), a round monitor a test
// ends by hand, a scripted rendezvous client, and a fixed port finder.
#ifndef CPPTORCHRUN_LAUNCHER_FAKES_H_
#define CPPTORCHRUN_LAUNCHER_FAKES_H_

#include <deque>
#include <functional>
#include <map>
#include <set>
#include <string>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/synchronization/mutex.h"
#include "launcher/agent/round_monitor.h"
#include "launcher/workers/ports.h"
#include "launcher/workers/process.h"
#include "rendezvous/client.h"
#include "base/clock.h"

namespace cpptorchrun::launcher {

// Processes that live on a FakeClock. A test schedules what happens (exits,
// received signals, any callback) at fake times; Wait jumps the clock to the
// next scheduled moment (or the deadline) and returns what happened.
// Thread-safe.
class FakeProcessLauncher final : public ProcessLauncher {
 public:
  explicit FakeProcessLauncher(base::FakeClock* clock) : clock_(clock) {}

  struct Started {
    pid_t pid;
    ProcessSpec spec;
    absl::Time time;
  };
  // Called on each Start (under no lock): schedule the new process's fate.
  std::function<void(FakeProcessLauncher&, const Started&)> on_start;
  // Starts fail with this error when set (for the next `fail_starts` calls).
  int fail_starts = 0;

  absl::StatusOr<pid_t> Start(const ProcessSpec& spec) override;
  void SignalGroup(pid_t pid, int signo) override;
  // The process alone: SIGKILL, SIGABRT and SIGTERM (unless ignored) end
  // it, after `on_signal` (under no lock: what it writes as it dies).
  void Signal(pid_t pid, int signo) override;
  std::function<void(FakeProcessLauncher&, pid_t, int)> on_signal;
  std::vector<ProcessEvent> Wait(absl::Time deadline) override;
  void Wakeup() override;
  void DrainOutput(absl::Time) override {}
  void PrepareNextStart() override;
  // How often the agent asked to prepare the next start, and when.
  std::vector<absl::Time> prepared() const;
  // Spares for slots left empty: WantSpare says `spares_come` (and records
  // the slot); SpareReady says whether the test made it ready.
  bool spares_come = false;
  bool WantSpare(int slot) override;
  bool SpareReady(int slot) override;
  void MakeSpareReady(int slot);
  std::vector<int> spares_wanted() const;

  // Scheduling.
  void ExitAt(pid_t pid, absl::Time t, ExitStatus status);
  // `sender`: the sender's command name as the real launcher reads it.
  void SignalLauncherAt(absl::Time t, int signo, const std::string& sender = "");
  void CallAt(absl::Time t, std::function<void()> fn);
  // The process ignores SIGTERM (only SIGKILL ends it).
  void IgnoreSigterm(pid_t pid);
  // State says `state` for the process (a fake /proc) while it lives.
  void SetState(pid_t pid, const std::string& state);
  // The kernel holds the process (uninterruptible sleep): no signal ends
  // it, and State says `state` until it exits by schedule.
  void Unkillable(pid_t pid, const std::string& state);
  // What a test set; else "running" while alive; "gone" after.
  std::string State(pid_t pid) override;
  // CpuTicks says `ticks` for the process from now on (none set: unknown).
  void SetCpuTicks(pid_t pid, int64_t ticks);
  std::optional<int64_t> CpuTicks(pid_t pid) override;

  std::vector<Started> started() const;
  // Group signals and process signals alike, in order.
  std::vector<std::pair<pid_t, int>> signals_sent() const;
  std::set<pid_t> alive() const;

 private:
  struct Scheduled {
    absl::Time t;
    int seq = 0;
    enum class Kind { kExit, kSignal, kCall } kind = Kind::kCall;
    pid_t pid = 0;
    ExitStatus status;
    int signo = 0;
    std::string sender;
    std::function<void()> call;  // run with the lock released
  };
  void ExitLocked(pid_t pid, ExitStatus status, std::vector<ProcessEvent>* out)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // Queues `s` to happen at `t`, after whatever is already queued for `t`.
  void Schedule(absl::Time t, Scheduled s) ABSL_LOCKS_EXCLUDED(mu_);

  base::FakeClock* clock_;
  mutable absl::Mutex mu_;
  pid_t next_pid_ ABSL_GUARDED_BY(mu_) = 1000;
  int seq_ ABSL_GUARDED_BY(mu_) = 0;
  std::vector<Scheduled> schedule_ ABSL_GUARDED_BY(mu_);
  std::vector<ProcessEvent> ready_ ABSL_GUARDED_BY(mu_);
  std::vector<Started> started_ ABSL_GUARDED_BY(mu_);
  std::set<pid_t> alive_ ABSL_GUARDED_BY(mu_);
  std::set<pid_t> ignore_term_ ABSL_GUARDED_BY(mu_);
  std::set<pid_t> unkillable_ ABSL_GUARDED_BY(mu_);
  std::map<pid_t, std::string> states_ ABSL_GUARDED_BY(mu_);
  std::map<pid_t, int64_t> cpu_ticks_ ABSL_GUARDED_BY(mu_);
  std::vector<std::pair<pid_t, int>> signals_ ABSL_GUARDED_BY(mu_);
  int wakeups_ ABSL_GUARDED_BY(mu_) = 0;
  std::vector<absl::Time> prepared_ ABSL_GUARDED_BY(mu_);
  std::vector<int> spares_wanted_ ABSL_GUARDED_BY(mu_);
  std::set<int> spares_ready_ ABSL_GUARDED_BY(mu_);
};

// Ends when the test calls End. Thread-safe.
class FakeRoundMonitor final : public RoundMonitor {
 public:
  void Start(const rdzv::v1::Assignment& a, int restart_count, std::function<void()> on_end) override;
  void Stop() override;
  RoundEnd Poll() override;
  void End(const std::string& reason, bool run_closed);
  int starts() const;
  std::vector<int> restart_counts() const;

 private:
  mutable absl::Mutex mu_;
  RoundEnd end_ ABSL_GUARDED_BY(mu_);
  std::function<void()> on_end_ ABSL_GUARDED_BY(mu_);
  std::vector<int> restart_counts_ ABSL_GUARDED_BY(mu_);
};

// A rendezvous for one node of a job of `group_world_size` nodes: Join
// completes at once with this node at `group_rank`. Records every call.
// The store is in memory and shared by every OpenStore. Thread-safe.
class FakeRendezvousClient final : public rdzv::RendezvousClient {
 public:
  FakeRendezvousClient(int group_rank = 0, int group_world_size = 1);
  using rdzv::RendezvousClient::Join;
  absl::StatusOr<rdzv::v1::Assignment> Join(const rdzv::v1::JoinRequest& request,
                                            const rdzv::JoinHooks& hooks) override;
  absl::StatusOr<rdzv::v1::RunEvent> KeepAlive(const rdzv::v1::KeepAliveRequest& request) override;
  absl::StatusOr<rdzv::v1::RunEvent> Watch(const std::string& run_id, const std::string& node_id,
                                           int64_t round, int64_t version,
                                           absl::Duration timeout) override;
  absl::Status Leave(const std::string& run_id, const std::string& node_id, const std::string& reason,
                     const std::string& proof) override;
  absl::Status Close(const std::string& run_id, const std::string& reason, const std::string& node_id,
                     const std::string& proof) override;
  absl::StatusOr<rdzv::v1::RunStatusResponse> RunStatus(const std::string& run_id) override;
  std::unique_ptr<rdzv::Store> OpenStore(const std::string& run_id, int64_t round) override;

  // RunStatus answers these in turn, then the last one again and again;
  // none: UNIMPLEMENTED.
  void SetRunStatusAnswers(std::vector<absl::StatusOr<rdzv::v1::RunStatusResponse>> answers);
  int run_status_calls() const;

  // Join answers this error when set.
  absl::Status join_error;
  // Each Join first tells its hooks that the node is kept out this many
  // times, with this detail (then completes as usual).
  int quarantined_answers = 0;
  std::string quarantine_detail = "host 10.0.0.2 is kept out of the run for 9m59s more: test";
  // Join blocks until Cancel (then answers CANCELLED), as a real Join of a
  // round that cannot complete would.
  bool block_joins = false;
  // Leave blocks until Cancel too (an unreachable rendezvous retried for
  // the client's whole budget), after recording it.
  bool block_leaves = false;
  void Cancel() override;
  // Blocked Joins that have returned.
  int blocked_joins_returned() const;
  // Makes the round end (round_current false) from the next KeepAlive/Watch.
  void EndRound(const std::string& reason);

  std::vector<rdzv::v1::JoinRequest> joins() const;
  std::vector<rdzv::v1::KeepAliveRequest> keep_alives() const;
  // Waits (bounded) until at least `n` keep-alives arrived.
  bool WaitForKeepAlives(size_t n, absl::Duration timeout) const;
  std::vector<std::string> leaves() const;
  std::vector<std::string> closes() const;
  rdzv::Store* store() { return store_.get(); }

 private:
  int group_rank_, group_world_size_;
  mutable absl::Mutex mu_;
  int64_t round_ ABSL_GUARDED_BY(mu_) = 0;
  int64_t version_ ABSL_GUARDED_BY(mu_) = 0;
  bool ended_ ABSL_GUARDED_BY(mu_) = false;
  std::string reason_ ABSL_GUARDED_BY(mu_);
  std::vector<rdzv::v1::JoinRequest> joins_ ABSL_GUARDED_BY(mu_);
  std::vector<rdzv::v1::KeepAliveRequest> keep_alives_ ABSL_GUARDED_BY(mu_);
  std::vector<std::string> leaves_ ABSL_GUARDED_BY(mu_);
  std::vector<std::string> closes_ ABSL_GUARDED_BY(mu_);
  bool cancelled_ ABSL_GUARDED_BY(mu_) = false;
  int blocked_joins_returned_ ABSL_GUARDED_BY(mu_) = 0;
  std::vector<absl::StatusOr<rdzv::v1::RunStatusResponse>> run_status_answers_ ABSL_GUARDED_BY(mu_);
  int run_status_calls_ ABSL_GUARDED_BY(mu_) = 0;
  std::shared_ptr<rdzv::Store> store_;
};

class FixedPortFinder final : public PortFinder {
 public:
  explicit FixedPortFinder(int first) : next_(first) {}
  absl::StatusOr<int> FindFreePort(const std::string&) override {
    absl::MutexLock lock(&mu_);
    return next_++;
  }

 private:
  absl::Mutex mu_;
  int next_ ABSL_GUARDED_BY(mu_);
};

}  // namespace cpptorchrun::launcher

#endif  // CPPTORCHRUN_LAUNCHER_FAKES_H_
