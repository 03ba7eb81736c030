// The elastic agent: one node's supervision loop. It joins a rendezvous
// round, starts the node's workers with their environment, watches them
// (exits, hangs, the launcher's signals, the end of the round), stops the
// group (SIGTERM, --shutdown_timeout of grace, SIGKILL), and decides by
// restart_policy.h whether to re-rendezvous, succeed (after an exit barrier
// across nodes) or fail with the root cause's exit code and a summary.
//
// Every outside dependency comes in through AgentOptions: the clock, the
// process launcher, the rendezvous client, the port finder, the progress
// board and the round monitor, so tests drive the loop with fakes.
#ifndef CPPTORCHRUN_LAUNCHER_ELASTIC_AGENT_H_
#define CPPTORCHRUN_LAUNCHER_ELASTIC_AGENT_H_

#include <atomic>
#include <functional>
#include <map>
#include <memory>
#include <optional>
#include <set>
#include <string>
#include <thread>
#include <vector>

#include "absl/time/time.h"
#include "launcher/agent/event_log.h"
#include "launcher/agent/health_check.h"
#include "launcher/agent/progress_board.h"
#include "launcher/agent/restart_policy.h"
#include "launcher/agent/round_monitor.h"
#include "launcher/agent/round_notices.h"
#include "launcher/workers/failure_summary.h"
#include "launcher/workers/ports.h"
#include "launcher/workers/process.h"
#include "launcher/workers/std_spec.h"
#include "launcher/workers/worker_env.h"
#include "proto/rendezvous.pb.h"
#include "rendezvous/client.h"
#include "base/clock.h"

namespace cpptorchrun::launcher {

// Whether the launcher passes a signal it received on to its workers'
// process groups (SIGUSR1/SIGUSR2 of --signals_to_handle; a stop signal,
// before the grace): yes, unless Slurm's step daemon sent it inside a Slurm
// step, where Slurm signals every process of the step itself (scancel
// --signal, --signal=USR1@90, scancel's and a preemption's SIGTERM), so a
// copy would reach each worker twice. Pure.
bool ForwardToWorkers(const ProcessEvent& e, bool inside_slurm_step);

struct AgentOptions {
  std::string run_id = "none";
  std::string role = "default";
  int max_restarts = 0;
  // --failures_without_progress: worker failures in a row without a new
  // step before the launcher gives up with kNoProgressExitCode; 0: never.
  int failures_without_progress = 0;
  // --straggler_factor and --straggler_policy (straggler_policy.h).
  StragglerOptions stragglers;
  StragglerPolicy straggler_policy = StragglerPolicy::kWarn;
  // --health_check: run before each join (health_check.h); empty command: none.
  HealthCheckOptions health_check;
  absl::Duration monitor_interval = absl::Seconds(5);
  // When a worker is hung (--worker_timeout: its fixed_silence).
  HangOptions hang;
  absl::Duration shutdown_timeout = absl::Seconds(30);
  absl::Duration exit_barrier_timeout = absl::Seconds(300);
  StdSpec redirects;
  StdSpec tee;
  std::vector<int> local_ranks_filter;  // empty: all
  std::vector<std::string> duplicate_stdout_filters;
  std::vector<std::string> duplicate_stderr_filters;
  bool virtual_local_rank = false;
  // --numa_binding: per local rank, its CPUs and preferred memory node
  // (empty: no binding).
  std::vector<std::vector<int>> worker_cpus;
  std::vector<int> worker_memory_node;
  // torchrun's TORCHELASTIC_LOG_LINE_PREFIX_TEMPLATE; empty: "[${role_name}${local_rank}]:".
  std::string log_line_prefix_template;
  // Signals that stop the job (forwarded, then the group is stopped and the
  // launcher exits 128 + signal); others received are only forwarded.
  std::vector<int> stop_signals;
  // Inside a Slurm job step (launcher/config/slurm.h): a signal from
  // slurmstepd has reached every process of the step, the workers too.
  bool inside_slurm_step = false;

  std::vector<std::string> program_argv;  // argv[0] resolved
  std::string program_name;               // for the summary
  std::map<std::string, std::string> base_env;
  int local_world_size = 1;
  int fake_gpus = 0;

  // This node as the rendezvous sees it (node_id, host, local_world_size,
  // static_node_rank); free_port is filled in for each round.
  rdzv::v1::NodeInfo node;
  rdzv::v1::RunOptions run_options;
  // A fixed MASTER_PORT (--master_port given); 0: a free port each round.
  int fixed_master_port = 0;
  // MASTER_ADDR for the workers when set (static backend: --master_addr);
  // else the group-rank-0 node's address from the round.
  std::string fixed_master_addr;
  // Not owned; null: no event log (event_log.h).
  EventLog* events = nullptr;

  // Attempt folders go under here: <log_root>/attempt_<k>/<local_rank>/.
  std::string log_root;
  std::string agent_socket;               // empty: none
  std::string rdzv_endpoint_for_workers;  // empty: none
  std::string rdzv_token_file;            // empty: none
  std::string rdzv_ca_file;               // TLS to the rendezvous; empty: plaintext
  std::string rdzv_cert_file;             // etcd: the client certificate; empty: none
  std::string rdzv_key_file;              // and its key

  // Not owned; all must outlive the agent.
  base::Clock* clock = nullptr;
  ProcessLauncher* processes = nullptr;
  rdzv::RendezvousClient* rdzv = nullptr;
  PortFinder* ports = nullptr;
  ProgressBoard* progress = nullptr;
  RoundMonitor* round_monitor = nullptr;
  // --recovery in_place: when every worker of the group declared it (its
  // STARTED event), a failure or a round end keeps the surviving workers
  // running; they are told over `notices` (served by the agent service)
  // to abort their collectives and then their new round's environment, and
  // only the lost local ranks start again. Otherwise, or without notices,
  // the whole group restarts (torchrun's way).
  bool in_place = false;
  RoundNotices* notices = nullptr;
  // The workers are Python (a .py script, -m, --run_path): their
  // faulthandler is turned on in their environment (worker_env.h) and a
  // hung one writes its stack before it is killed (TakeStacks).
  bool python_stacks = false;
  // Blocking rendezvous calls (Join, the exit barrier) run on a helper
  // thread; for this long the agent just waits for them, after that it also
  // answers signals while waiting.
  absl::Duration blocking_call_grace = absl::Milliseconds(100);
  // Where the failure summary goes (stderr in main).
  std::function<void(const std::string&)> print_summary;
};

struct AgentResult {
  int exit_code = 0;
  int restart_count = 0;    // counted restarts (TORCHELASTIC_RESTART_COUNT of the last group)
  int attempts = 0;         // groups started
  std::vector<FailureRecord> failures;  // of the last failed group
  std::string summary;      // the failure summary printed, if any
  // When a stop signal came: by when the launcher should have exited (the
  // signal's time + --shutdown_timeout, on the agent's clock), so that what
  // main does after Run (lingering for other nodes) fits in the grace a
  // scheduler gives before its SIGKILL. InfiniteFuture without a signal.
  absl::Time exit_by = absl::InfiniteFuture();
};

// Used from one thread.
class ElasticAgent {
 public:
  explicit ElasticAgent(AgentOptions options);
  // Joins the helper threads whose blocking call outlived a signal or a
  // round end (see Interruptible). Cancel the rendezvous client first
  // (RendezvousClient::Cancel) so that a Join still waiting ends at once.
  ~ElasticAgent();
  ElasticAgent(const ElasticAgent&) = delete;
  ElasticAgent& operator=(const ElasticAgent&) = delete;
  // Runs the job to its end. Never throws; every failure is an exit code.
  AgentResult Run();

 private:
  struct Worker {
    int local_rank = 0;  // its slot on the node: device, logs, agent identity
    int index = 0;       // LOCAL_RANK in this round: local_rank but while the node runs short
    int rank = 0;
    pid_t pid = 0;
    bool exited = false;
    bool stopping = false;  // exits from now on are our doing, not failures
    bool held = false;      // kept through the round change (in-place recovery)
    // Its process stopped (T) at every look since, using no CPU time
    // between looks (cpu_ticks: at the last look).
    std::optional<absl::Time> stopped_since;
    std::optional<int64_t> cpu_ticks;
    ExitStatus status;
    std::string error_file;
    std::optional<FailureRecord> failure;
    // The end of its stderr, kept where its faulthandler is on (python_stacks
    // and its environment), so SIGABRT makes it write its stack there; null
    // otherwise.
    std::shared_ptr<StreamTail> stderr_tail;
  };
  enum class Outcome { kSucceeded, kFailed, kMembership, kRunClosed, kSignal };
  struct MonitorResult {
    Outcome outcome = Outcome::kSucceeded;
    int signo = 0;
    std::string reason;
    // kSignal: the stop signal has reached the workers already (Slurm's
    // step daemon sent it to every process of the step).
    bool delivered_to_workers = false;
    // kMembership with nothing lost (a spare ready, a node joining): held
    // workers leave at their next step boundary (RoundUpdate.at_step_boundary).
    bool at_step_boundary = false;
  };
  // How StopWorkers begins: kForRestart, the group failed or the round
  // ended (each worker is told to stop now, base::kStopNowSignalValue);
  // kPassOn, the launcher was told to stop and passes the signal on (the
  // workers may checkpoint first); kAlreadyDelivered, the workers have the
  // signal from the scheduler already, so none is sent: only the grace,
  // then SIGKILL.
  enum class StopKind { kForRestart, kPassOn, kAlreadyDelivered };

  std::string Prefix(int local_rank, int rank) const;
  void StartWorkers(const rdzv::v1::Assignment& a, int restart_count, int attempt);
  // One worker: its folder, environment, streams and CPUs; its pid.
  // StartWorker for local rank `lr`; a worker that cannot start is a failed one.
  // `index`: its LOCAL_RANK in this round (`lr` but while the node runs short).
  Worker StartLocalRank(const rdzv::v1::Assignment& a, int restart_count, const std::string& attempt_dir, int lr,
                        int index);
  absl::StatusOr<pid_t> StartWorker(const rdzv::v1::Assignment& a, int restart_count,
                                    const std::string& attempt_dir, Worker* w);
  // The environment of the worker of slot `slot` whose LOCAL_RANK is
  // `index` among the round's slots_.
  WorkerEnvInputs EnvInputs(const rdzv::v1::Assignment& a, int slot, int index, int restart_count,
                            const std::string& error_file) const;
  StreamSink Sink(int local_rank, int rank, int bit, const std::string& attempt_dir) const;
  MonitorResult Monitor();
  // Records what the process launcher reports until `until` (exits; signals
  // forwarded to the workers); a stop signal ends the monitoring.
  std::optional<MonitorResult> TakeProcessEvents(absl::Time until);
  // Under in-place recovery, why this node should leave the round at once:
  // one of its workers reported RECOVERING for the current round (a
  // collective failed) although nothing failed here and no change was begun
  // (the held workers' reports name the round before). A peer elsewhere was
  // lost (a crash, a hang its launcher killed, a node gone); joining the
  // next round now ends the round for every node, instead of waiting for
  // the round monitor to hear of it (for a lost node, at its keep-alive
  // deadline). nullopt: nothing of the kind.
  std::optional<std::string> PeerLost() const;
  // Kills the ranks CheckGroup found hung, records their failures and one
  // hang_detected event naming the culprits (hang_policy.h's IsCulprit).
  void KillHung(const GroupCheck& check, const std::vector<WorkerView>& views, absl::Time now);
  // Reports each new straggler of the group once (straggler_detected);
  // under --straggler_policy replace kills them as failures and returns
  // true (the group failed).
  bool HandleStragglers(absl::Time now);
  // The failure of worker `w` (its rank, local rank, pid, this host; the
  // next sequence number), the one way every failure is recorded.
  FailureRecord NewFailure(const Worker& w, const ExitStatus& status, absl::Time when, std::string message);
  // Records an exit event; false when the pid is not one of ours.
  bool RecordExit(pid_t pid, const ExitStatus& status);
  void StopWorkers(int signo, StopKind kind);
  // Waits (kKillWait at most) until the SIGKILLed workers `which` selects
  // have exited; the ones the kernel still holds are gone on without
  // (worker_unkillable).
  void AwaitKilled(const std::function<bool(const Worker&)>& which);
  // Waits until the workers `which` selects have exited or `deadline`.
  void AwaitExits(const std::function<bool(const Worker&)>& which, absl::Time deadline);
  // Before hung Python workers are killed: each whose faulthandler is on is
  // sent SIGABRT and SIGCONT, and its stack, read from the end of its
  // stderr within kStackWait, goes into its failure's traceback and a
  // worker_stack event (launcher/workers/python_stack.h).
  void TakeStacks(const std::vector<int>& local_ranks);
  // In-place recovery: whether the group can keep its survivors through
  // this round change (nullopt: yes; else why not, for the events).
  std::optional<std::string> WhyNotInPlace() const;
  // Makes sure the lost workers are gone (SIGKILL, bounded) and tells the
  // survivors the round is changing; true when they are held. Else `*why`.
  // The slots of the next round are chosen here (NextSlots).
  bool HoldSurvivors(const std::string& reason, std::string* why, bool at_step_boundary = false);
  // In-place recovery: the next round's slots. A held worker's, and a lost
  // one's where its spare is ready or none will come (the new worker is
  // exec'd, and the round waits for it); a lost slot whose spare is still
  // loading is left empty: the node runs short (a smaller world) and grows
  // back when the spare is ready (SpareReadyForVacant).
  std::vector<int> NextSlots();
  // 0..local_world_size-1: a whole node.
  std::vector<int> AllSlots() const;
  // A slot left empty whose spare is ready now: the node should join the
  // next round to grow back. nullopt: none.
  std::optional<int> SpareReadyForVacant();
  bool AnyHeld() const;
  // The held survivors stop after all (the run ends, or a stop signal).
  void StopHeld(int signo, StopKind kind);
  // Starts the lost local ranks and gives the held ones the new round.
  void ResumeRound(const rdzv::v1::Assignment& a, int restart_count, int attempt);
  std::vector<FailureRecord> Failures() const;
  enum class WaitEnd { kDone, kSignal, kRoundEnded };
  // Runs `fn` on a helper thread while still answering signals: kSignal
  // (with *signo) when a stop signal came first, kRoundEnded when the round
  // ended first and `stop_on_round_end`; the helper then finishes its call
  // on its own and the destructor joins it.
  WaitEnd Interruptible(const std::function<void()>& fn, int* signo, bool stop_on_round_end);
  // Sets this node's key in the round's store and waits (bounded) until
  // every node's key is there, setting its own again every second (a
  // restarted rendezvous server has an empty store); false at once when
  // `cancelled` (may be null) is set. Static: it runs on a helper thread.
  static bool ExitBarrier(rdzv::RendezvousClient* client, const std::string& run_id, int64_t round,
                          int group_rank, int group_world_size, absl::Duration timeout,
                          const std::atomic<bool>* cancelled = nullptr);
  bool IsStopSignal(int signo) const;

  // A restart on its way: when its failure was detected, the old workers
  // stopped, the new round joined (for the restart event's phases).
  struct PendingRestart {
    std::string cause;
    int64_t from_round = 0;
    bool counted = false;
    absl::Time detected, stopped, joined;
    // "in_place" (survivors kept) or "gang"; for gang, why not in place.
    std::string path = "gang";
    std::string why;
  };
  // How a worker group stopped, for the restart policy (DecideNext).
  struct Stopped {
    StopCause cause = StopCause::kAgentError;
    std::string reason;  // for the log, the events, Leave and Close
    int exit_code = 1;   // the launcher's, when the policy says exit
    absl::Time detected, stopped;
    // The survivors are held for an in-place recovery ("stopped" is when
    // they were told to abort); else why the group stopped whole.
    bool in_place = false;
    std::string why_gang;
  };
  // One Run's state across rounds.
  struct RunState {
    int restart_count = 0;
    int64_t last_round = 0;
    int attempt = 0;
    std::string proof;  // the current assignment's signature
    ProgressLedger ledger;  // steps gained across worker failures
    AgentResult result;
    // This node's own failure, told to the rendezvous by the Joins after it
    // (JoinRequest.failure: the round, the first failure's time, why);
    // round 0: none to tell.
    rdzv::v1::NodeFailure failure_report;
  };
  // The furthest step this node's current workers reported; -1: none.
  int64_t BestStepThisAttempt() const;
  // --health_check before a join: true to join; false when the node gave up
  // or a stop signal came (Conclude has run, run_.result says how).
  bool AwaitHealthy();
  struct HealthRun {
    bool passed = false;
    int stop_signal = 0;  // a stop signal came during the check
    std::string status;   // "exit code 3", "timed out after 1m"
    std::string why;      // the last line it printed (stderr first)
  };
  HealthRun RunHealthCheck();
  // A round: join it (nullopt: the run is over, run_.result says how),
  // start its workers, stop them (each outcome's way), then the policy.
  std::optional<rdzv::v1::Assignment> JoinRound();
  void BeginRound(const rdzv::v1::Assignment& a);
  void RecordRestartPhases(const rdzv::v1::Assignment& a);
  // The workers' part of the last restart, once every worker has made its
  // first step (from the progress board): a restart_completed event, the
  // log line and the keep-alive's RestartPhases.
  void RecordWorkerStartup();
  // Once the group is running and its workers can wait warm: the process
  // launcher may prepare the next start (ProcessLauncher::PrepareNextStart).
  void MaybePrepareNextStart();
  Stopped Stop(const rdzv::v1::Assignment& a, const MonitorResult& m);
  Stopped StopOnSignal(int signo, bool delivered_to_workers);
  Stopped StopAfterSuccess(const rdzv::v1::Assignment& a);
  Stopped StopAfterFailure();
  // Applies DecideNext: true to join the next round, false when the run is
  // over for this launcher (run_.result holds the exit code).
  bool Conclude(const Stopped& s, int64_t round);
  void ExitFailure(const Stopped& s);
  void StopRoundMonitor();
  void Leave(const std::string& reason);
  // Records the first stop signal's time (stop_signalled_at_).
  void NoteStopSignal();
  // Runs a rendezvous call made on the way out: at once without a stop
  // signal; after one, within what is left of the shutdown grace (at least
  // kMinExitCall), leaving a call that outlives it to the helpers the
  // destructor joins once the client is cancelled.
  void CallAtExit(const std::function<void()>& fn, absl::string_view what);
  // Runs `fn` on a helper thread and waits at most `bound`: false when it
  // has not returned by then (the helper is joined by the destructor).
  bool CallWithin(const std::function<void()>& fn, absl::Duration bound);
  // The reason the round of a group that just failed had ended already (at
  // the round monitor, or at the rendezvous asked directly); nullopt when it
  // stands, the run closed, or nobody answered within kRoundCheckBound.
  std::optional<std::string> RoundEndedBeforeFailure();
  // The newest collective any rank of the job issued, as far as known:
  // this node's ranks (`views`), and with several nodes the others' from
  // the rendezvous (RunStatus, their keep-alives), asked at most every
  // second within kRoundCheckBound.
  // Asks the rendezvous for the run's status unless it did less than
  // `every` ago (within kRoundCheckBound; one node: never).
  void RefreshJob(absl::Time now, absl::Duration every);
  int64_t JobCollectiveSeq(const std::vector<WorkerView>& views, absl::Time now);
  // What the hang rules see of each worker at `now`: its process state (and
  // since when it has been stopped), its heartbeats and steps.
  std::vector<WorkerView> LookAtWorkers(absl::Time now);
  void Event(absl::string_view name, std::vector<EventField> fields);

  AgentOptions o_;
  // This agent's JoinRequest.node_secret: the same on every Join of its run.
  const std::string node_secret_;
  std::vector<Worker> workers_;
  int exit_sequence_ = 0;
  // Local ranks of the current group already reported as stragglers.
  std::set<int> stragglers_reported_;
  std::string host_;
  std::string hostname_;  // as `hostname` prints it
  std::optional<PendingRestart> restart_;
  // A restart whose workers have not all made their first step yet.
  struct PendingStartup {
    rdzv::v1::RestartPhases phases;  // the launcher's part, filled
    absl::Time detected, started;
    std::string path, why;  // PendingRestart's
  };
  std::optional<PendingStartup> startup_pending_;
  bool next_start_prepared_ = false;
  RunState run_;
  int group_world_size_ = 1;  // nodes in the current round
  int64_t round_ = 0;         // the current round's number (0: none yet)
  // Since when the monitor has looked without a break (kLookBreak).
  absl::Time watched_since_ = absl::InfinitePast();
  // The node's slots with a worker in the current (or next) round, in order;
  // all of 0..local_world_size-1 but while it runs short.
  std::vector<int> slots_;
  // The run's status as the rendezvous last gave it (RefreshJob): when it
  // was asked, the newest collective of the other nodes' ranks, and their
  // compute medians (straggler_policy.h).
  std::optional<absl::Time> job_status_at_;
  int64_t job_collectives_remote_ = 0;
  std::vector<double> job_compute_elsewhere_;
  // Helpers whose call outlived Interruptible's wait; joined by the destructor.
  std::vector<std::thread> unfinished_;
  // When the first stop signal (SIGTERM, SIGINT, ...) was seen; from then
  // on every rendezvous call at exit (leave, close) is bounded by the
  // shutdown grace (CallAtExit).
  std::optional<absl::Time> stop_signalled_at_;
  // Set by the destructor: exit barriers still running stop.
  std::shared_ptr<std::atomic<bool>> cancelled_ = std::make_shared<std::atomic<bool>>(false);
};

// "[${role_name}${local_rank}]:" with ${role_name}, ${rank}, ${local_rank}
// substituted (also $name without braces). Pure.
std::string ExpandLinePrefix(const std::string& templ, const std::string& role, int rank,
                             int local_rank);

}  // namespace cpptorchrun::launcher

#endif  // CPPTORCHRUN_LAUNCHER_ELASTIC_AGENT_H_
