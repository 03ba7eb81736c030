// The warm pool: a ProcessLauncher over the real one that starts workers
// from warm processes instead of exec'ing them afresh (base/become.h):
//
// - Spares (`train`, and any program whose STARTED event says it can wait
//   warm): once a group is running, one spare per local rank is exec'd with
//   CPPTORCHRUN_WARM_FD; it loads LibTorch and its data set and waits. At the
//   next start of that local rank the spare is handed the worker's
//   environment and becomes the worker; the next spare follows when the new
//   group is running. A spare that dies while waiting is replaced at once
//   (after max_losses losses in a row, spares are turned off, with a
//   warning).
//   Before the job's first restart a spare costs a job that never fails
//   its start-up (LibTorch and the data set, about a CPU-second each), so:
//   where the node has CPUs its workers leave idle, spares start at
//   SCHED_IDLE (base/become.h) and load there; where the workers keep
//   every CPU busy, no spare starts and the first restart execs. A spare
//   needed while it is still loading is brought to the workers' priority
//   at once. Once the job has restarted, spares start at the workers'
//   priority: a job that failed once is the one likely to fail again, and
//   its spares are then ready for it (SparesBeforeRestart).
// - The forkserver (Python scripts under --start_method forkserver): one
//   per node, started with the pool, imports the preloaded modules once;
//   every worker is forked from it (launcher/agent/forkserver.py) and
//   reparented to the launcher, its child subreaper. A forkserver that dies
//   is restarted; one that cannot start (or refuses: a preload initialised
//   CUDA) leaves the workers spawned, with a warning.
//
// Whatever fails on the warm path, the worker is exec'd as without the
// pool: a warm start is an optimisation, never a new way to fail. Spares'
// and the forkserver's exits are the pool's business: Wait reports only the
// rest. Events (event_log.h): spare_started, spare_ready (seen at the next
// Wait after the spare said so), spare_lost, warm_started,
// forkserver_started, forkserver_lost, warm_fallback.
#ifndef CPPTORCHRUN_LAUNCHER_WARM_POOL_H_
#define CPPTORCHRUN_LAUNCHER_WARM_POOL_H_

#include <sys/types.h>

#include <map>
#include <memory>
#include <set>
#include <string>
#include <vector>

#include "absl/time/time.h"
#include "launcher/agent/event_log.h"
#include "launcher/workers/process.h"

namespace cpptorchrun::launcher {

struct WarmPoolOptions {
  // Spares: the workers' program and the environment they start with (the
  // launcher's; the round's comes at the hand-over), per local rank CPUs and
  // memory node as for the workers.
  bool spares = false;
  std::vector<std::string> program_argv;
  std::map<std::string, std::string> base_env;
  int local_world_size = 1;
  std::vector<std::vector<int>> cpus;
  std::vector<int> memory_node;
  // Spares before the job's first restart (SparesBeforeRestart).
  enum class Before { kNone, kIdle, kNormal };
  Before before_restart = Before::kNormal;
  // The forkserver: how to start it (python -u forkserver.py MODULES...),
  // with base_env. Empty: none.
  std::vector<std::string> forkserver_argv;
  // How long the forkserver's imports may take before a start gives up on
  // it; how long a hand-over may take (a spare still loading included).
  absl::Duration ready_timeout = absl::Seconds(120);
  absl::Duration become_timeout = absl::Seconds(10);
  // Losses in a row (dying before use) after which the pool stops
  // replacing spares, or restarting the forkserver.
  int max_losses = 3;
  // Not owned; may be null.
  EventLog* events = nullptr;
};

// The rule above, pure: `cpus` the launcher may run on, `threads` each
// worker's (OMP_NUM_THREADS), whether a SCHED_IDLE spare can be brought
// back (base::IdlePriorityReversible).
WarmPoolOptions::Before SparesBeforeRestart(int cpus, int local_world_size, int threads, bool idle_reversible);

// Writes the forkserver (forkserver.py, embedded) into `dir` (0600); its path.
absl::StatusOr<std::string> WriteForkserver(const std::string& dir);

// Used from one thread (the agent's), as ProcessLauncher.
class WarmPool final : public ProcessLauncher {
 public:
  // `inner` (not owned) starts, signals and reaps everything.
  WarmPool(ProcessLauncher* inner, WarmPoolOptions options);
  // Kills the spares and the forkserver and reaps them (bounded).
  ~WarmPool() override;
  WarmPool(const WarmPool&) = delete;
  WarmPool& operator=(const WarmPool&) = delete;

  // Starts the forkserver now (its imports overlap the rendezvous).
  void Begin();

  absl::StatusOr<pid_t> Start(const ProcessSpec& spec) override;
  void SignalGroup(pid_t pid, int signo) override { inner_->SignalGroup(pid, signo); }
  void Signal(pid_t pid, int signo) override { inner_->Signal(pid, signo); }
  void SignalGroupStopNow(pid_t pid, int signo) override { inner_->SignalGroupStopNow(pid, signo); }
  std::vector<ProcessEvent> Wait(absl::Time deadline) override;
  void Wakeup() override { inner_->Wakeup(); }
  void DrainOutput(absl::Time deadline) override { inner_->DrainOutput(deadline); }
  // Starts a spare for each local rank without one (when spares are on).
  void PrepareNextStart() override;
  // Only once a group has said its workers can wait warm (PrepareNextStart
  // came): the spare starts at the workers' priority.
  bool WantSpare(int slot) override;
  bool SpareReady(int slot) override;

  // For tests and status: the spares' pids by local rank; the forkserver's.
  std::map<int, pid_t> spares() const;
  pid_t forkserver() const { return forkserver_.pid; }

 private:
  // A warm process: its pid, the launcher's end of its socket, whether it
  // said ready.
  struct Warm {
    pid_t pid = 0;
    int socket = -1;
    bool ready = false;
    bool idle = false;  // started at SCHED_IDLE
  };
  absl::StatusOr<Warm> StartWarmProcess(const std::vector<std::string>& argv,
                                        std::map<std::string, std::string> env,
                                        const std::vector<int>& cpus, int memory_node, bool idle);
  void StartSpare(int local_rank);
  void StartForkserver();
  // Stops a warm process the pool gives up on: SIGKILL to its group; its
  // exit is dropped by Wait.
  void Discard(Warm& w);
  // Readies `w` (waits for its "ready" up to `timeout`); false, with a
  // warning naming `what`, when it is not.
  bool Ready(Warm& w, const std::string& what, absl::Duration timeout);
  // Notes the spares that said ready since the last look (no waiting); a
  // spare that said anything else is discarded and replaced.
  void CheckSpares();
  absl::StatusOr<pid_t> FromSpare(const ProcessSpec& spec, int local_rank);
  absl::StatusOr<pid_t> FromForkserver(const ProcessSpec& spec);
  void Event(absl::string_view name, std::vector<EventField> fields);

  ProcessLauncher* inner_;
  WarmPoolOptions o_;
  std::map<int, Warm> spares_;
  int spare_losses_ = 0;
  bool spares_off_ = false;
  // A group has run (PrepareNextStart), and a group started after it.
  bool group_ran_ = false;
  bool restarted_ = false;
  Warm forkserver_;
  int forkserver_losses_ = 0;
  bool forkserver_off_ = false;
  // Slots whose spare WantSpare asked for, started at the next Wait.
  std::set<int> wanted_;
  // Warm processes stopped by the pool: their exits are not reported.
  std::set<pid_t> discarded_;
};

}  // namespace cpptorchrun::launcher

#endif  // CPPTORCHRUN_LAUNCHER_WARM_POOL_H_
