// The elastic agent's loop.
#include "launcher/agent/elastic_agent.h"

#include <signal.h>
#include <sys/random.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <memory>
#include <thread>

#include "absl/strings/escaping.h"
#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_join.h"
#include "absl/strings/str_replace.h"
#include "absl/synchronization/mutex.h"
#include "base/files.h"
#include "base/signals.h"
#include "launcher/agent/restart_policy.h"
#include "launcher/workers/error_file.h"
#include "launcher/workers/python_stack.h"
#include "launcher/workers/worker_env.h"
#include "spdlog/spdlog.h"

namespace cpptorchrun::launcher {
namespace {

// How a run given up for want of progress is closed (and recognised by
// the other nodes).
constexpr absl::string_view kNoProgressReason = "no progress: ";

// This machine's name as `hostname` prints it ("" when unknown).
std::string ThisHostname() {
  char name[256] = {0};
  return gethostname(name, sizeof(name) - 1) == 0 ? std::string(name) : std::string();
}

// Waits for SIGKILLed processes to be reaped at most this long.
constexpr absl::Duration kKillWait = absl::Seconds(10);
// A hung Python worker sent SIGABRT has this long to write its stack and end
// (a process the kernel holds never does: then it is killed without).
constexpr absl::Duration kStackWait = absl::Seconds(2);
// Output still held by a grandchild after the group is gone is dropped after this.
constexpr absl::Duration kDrainWait = absl::Seconds(2);
// A job may re-rendezvous this often at most (membership changes included).
constexpr int kMaxRounds = 100000;
constexpr char kExitBarrierKey[] = "cpptorchrun/exit_barrier";
// How often a node waiting in the exit barrier sets its key again.
constexpr absl::Duration kExitBarrierRefresh = absl::Seconds(1);
// How long a node whose round ended during the exit barrier looks for the
// other nodes' keys before it restarts (they may all be there).
constexpr absl::Duration kExitBarrierRecheck = absl::Seconds(1);
// A rendezvous call at exit after a stop signal gets at least this long,
// even when the workers took the whole grace.
constexpr absl::Duration kMinExitCall = absl::Milliseconds(200);
// How long a failed group waits to learn from the rendezvous whether its
// round had ended already (RoundEndedBeforeFailure); no answer: a failure.
constexpr absl::Duration kRoundCheckBound = absl::Seconds(2);
// How often a monitor that needs the job's collectives asks the rendezvous.
constexpr absl::Duration kJobCollectivesEvery = absl::Seconds(1);
// How often the other nodes' compute medians are asked for (stragglers
// need a window of heartbeats anyway).
constexpr absl::Duration kJobComputeEvery = absl::Seconds(5);

}  // namespace

std::string ExpandLinePrefix(const std::string& templ, const std::string& role, int rank,
                             int local_rank) {
  const std::string t = templ.empty() ? "[${role_name}${local_rank}]:" : templ;
  return absl::StrReplaceAll(t, {{"${role_name}", role},
                                 {"${local_rank}", absl::StrCat(local_rank)},
                                 {"${rank}", absl::StrCat(rank)},
                                 {"$role_name", role},
                                 {"$local_rank", absl::StrCat(local_rank)},
                                 {"$rank", absl::StrCat(rank)}});
}

namespace {
// How often a node running short looks whether a spare is ready.
constexpr absl::Duration kShortNodeLook = absl::Milliseconds(50);
// A look this much later than it was due means the launcher itself did not
// run (suspended with its workers, stopped, starved): the hang clocks
// restart (hang_policy.h, RankWatch::watched_since).
constexpr absl::Duration kLookBreak = absl::Seconds(1);

// 32 random bytes from the kernel, hex: this agent's JoinRequest.node_secret.
std::string NewNodeSecret() {
  unsigned char bytes[32] = {};
  size_t got = 0;
  while (got < sizeof(bytes)) {
    const ssize_t n = getrandom(bytes + got, sizeof(bytes) - got, 0);
    if (n > 0) got += static_cast<size_t>(n);
    else if (errno != EINTR) break;
  }
  return absl::BytesToHexString(absl::string_view(reinterpret_cast<const char*>(bytes), got));
}
}  // namespace

ElasticAgent::ElasticAgent(AgentOptions options) : o_(std::move(options)), node_secret_(NewNodeSecret()) {
  host_ = o_.node.host();
  hostname_ = ThisHostname();
  slots_ = AllSlots();
  // A worker's start-up event wakes the monitor loop, so a restart's
  // phases are recorded when the last worker makes its first step.
  if (o_.progress != nullptr && o_.processes != nullptr) {
    ProcessLauncher* processes = o_.processes;
    o_.progress->SetOnStartupEvent([processes] { processes->Wakeup(); });
  }
}

ElasticAgent::~ElasticAgent() {
  // Helpers still in a call: an exit barrier sees the flag within a second;
  // a Join ends when the owner cancels the rendezvous client (main does,
  // before the agent goes).
  cancelled_->store(true);
  for (std::thread& t : unfinished_) t.join();
  if (o_.progress != nullptr) o_.progress->SetOnStartupEvent(nullptr);
}

bool ForwardToWorkers(const ProcessEvent& e, bool inside_slurm_step) {
  return !(inside_slurm_step && e.sender == "slurmstepd");
}

bool ElasticAgent::IsStopSignal(int signo) const {
  return std::find(o_.stop_signals.begin(), o_.stop_signals.end(), signo) != o_.stop_signals.end();
}

void ElasticAgent::Event(absl::string_view name, std::vector<EventField> fields) {
  if (o_.events != nullptr) o_.events->Record(name, std::move(fields));
}

std::string ElasticAgent::Prefix(int local_rank, int rank) const {
  return ExpandLinePrefix(o_.log_line_prefix_template, o_.role, rank, local_rank);
}

WorkerEnvInputs ElasticAgent::EnvInputs(const rdzv::v1::Assignment& a, int slot, int index, int restart_count,
                                        const std::string& error_file) const {
  WorkerEnvInputs in;
  in.base = o_.base_env;
  in.role = o_.role;
  in.local_rank = index;
  in.slot = slot;
  in.local_world_size = static_cast<int>(slots_.size());
  in.group_rank = a.group_rank();
  in.group_world_size = a.group_world_size();
  in.rank_offset = a.rank_offset();
  in.world_size = a.world_size();
  in.master_addr = o_.fixed_master_addr.empty() ? a.master_addr() : o_.fixed_master_addr;
  in.master_port = a.master_port();
  in.round = a.round();
  in.restart_count = restart_count;
  in.max_restarts = o_.max_restarts;
  in.run_id = o_.run_id;
  in.error_file = error_file;
  in.agent_socket = o_.agent_socket;
  // The worker's own stall bound: a fixed --worker_timeout; under the
  // adaptive rule the worker keeps its default (the launcher judges steps).
  in.worker_timeout = o_.hang.fixed_silence.value_or(absl::ZeroDuration());
  in.rdzv_endpoint = o_.rdzv_endpoint_for_workers;
  in.rdzv_token_file = o_.rdzv_token_file;
  in.rdzv_ca_file = o_.rdzv_ca_file;
  in.rdzv_cert_file = o_.rdzv_cert_file;
  in.rdzv_key_file = o_.rdzv_key_file;
  in.local_addr = host_;
  in.fake_gpus = o_.fake_gpus;
  in.virtual_local_rank = o_.virtual_local_rank;
  in.in_place = o_.in_place && o_.notices != nullptr;
  in.python_faulthandler = o_.python_stacks;
  return in;
}

// Where one stream of a local rank goes: the console (unless filtered out
// or redirected), its file, and the attempt's filtered copy.
StreamSink ElasticAgent::Sink(int local_rank, int rank, int bit, const std::string& attempt_dir) const {
  const bool shown = o_.local_ranks_filter.empty() ||
                     std::find(o_.local_ranks_filter.begin(), o_.local_ranks_filter.end(), local_rank) !=
                         o_.local_ranks_filter.end();
  const int redirect = o_.redirects.ForLocalRank(local_rank);
  const int tee = o_.tee.ForLocalRank(local_rank);
  StreamSink s;
  s.prefix = Prefix(local_rank, rank);
  // torchrun: --tee wins over --redirects for the console.
  const int console_fd = bit == kStdOut ? 1 : 2;
  s.console_fd = (shown && (!(redirect & bit) || (tee & bit))) ? console_fd : -1;
  if ((redirect | tee) & bit) {
    s.file_path = absl::StrCat(attempt_dir, "/", local_rank, bit == kStdOut ? "/stdout.log" : "/stderr.log");
  }
  // torchrun 2.x: lines of tee'd streams that hold a filter string, of every
  // local rank, in one file of the attempt.
  const auto& filters = bit == kStdOut ? o_.duplicate_stdout_filters : o_.duplicate_stderr_filters;
  if ((tee & bit) && !filters.empty()) {
    s.duplicate_filters = filters;
    s.duplicate_path = absl::StrCat(attempt_dir, bit == kStdOut ? "/filtered_stdout.log" : "/filtered_stderr.log");
  }
  return s;
}

absl::StatusOr<pid_t> ElasticAgent::StartWorker(const rdzv::v1::Assignment& a, int restart_count,
                                                const std::string& attempt_dir, Worker* w) {
  const std::string dir = absl::StrCat(attempt_dir, "/", w->local_rank);
  w->error_file = dir + "/error.json";
  if (absl::Status made = base::MakeDirs(dir); !made.ok()) return made;
  unlink(w->error_file.c_str());
  ProcessSpec spec;
  spec.argv = o_.program_argv;
  spec.env = BuildWorkerEnv(EnvInputs(a, w->local_rank, w->index, restart_count, w->error_file));
  spec.slot = w->local_rank;
  spec.stdout_sink = Sink(w->local_rank, w->rank, kStdOut, attempt_dir);
  spec.stderr_sink = Sink(w->local_rank, w->rank, kStdErr, attempt_dir);
  const bool dumps_stack = o_.python_stacks && FaultHandlerOn(spec.env);
  w->stderr_tail = dumps_stack ? std::make_shared<StreamTail>() : nullptr;
  spec.stderr_sink.tail = w->stderr_tail;
  const size_t lr = static_cast<size_t>(w->local_rank);
  if (lr < o_.worker_cpus.size()) spec.cpus = o_.worker_cpus[lr];
  if (lr < o_.worker_memory_node.size()) spec.memory_node = o_.worker_memory_node[lr];
  return o_.processes->Start(spec);
}

ElasticAgent::Worker ElasticAgent::StartLocalRank(const rdzv::v1::Assignment& a, int restart_count,
                                                  const std::string& attempt_dir, int lr, int index) {
  Worker w;
  w.local_rank = lr;
  w.index = index;
  w.rank = a.rank_offset() + index;
  absl::StatusOr<pid_t> pid = StartWorker(a, restart_count, attempt_dir, &w);
  if (!pid.ok()) {
    // A worker that cannot start is a failed worker (exit 127, as a shell
    // reports a program it cannot run).
    spdlog::error("cannot start local rank {}: {}", lr, pid.status().ToString());
    w.exited = true;
    w.status = ExitStatus::Exited(127);
    w.failure = NewFailure(w, w.status, o_.clock->Now(), std::string(pid.status().message()));
  } else {
    w.pid = *pid;
  }
  if (o_.progress != nullptr) o_.progress->SetWorker(lr, w.pid);
  return w;
}

void ElasticAgent::StartWorkers(const rdzv::v1::Assignment& a, int restart_count, int attempt) {
  workers_.clear();
  if (o_.notices != nullptr) o_.notices->Reset();
  const std::string attempt_dir = absl::StrCat(o_.log_root, "/attempt_", attempt);
  // Each worker's slot is filled as it starts: a warm one may report before
  // the next has started.
  if (o_.progress != nullptr) o_.progress->Begin(o_.local_world_size);
  for (int lr = 0; lr < o_.local_world_size; ++lr) {
    workers_.push_back(StartLocalRank(a, restart_count, attempt_dir, lr, lr));
  }
  spdlog::debug("started {} workers (attempt {}, restart count {})", workers_.size(), attempt, restart_count);
}

std::optional<std::string> ElasticAgent::WhyNotInPlace() const {
  if (!o_.in_place) return std::string("--recovery gang");
  if (o_.notices == nullptr || o_.progress == nullptr) return std::string("no agent socket");
  int survivors = 0;
  for (const Worker& w : workers_) {
    if (!o_.progress->CanRecoverInPlace(w.local_rank)) {
      return absl::StrCat("local rank ", w.local_rank, " did not declare in-place recovery");
    }
    if (!w.exited && !w.failure.has_value() && !w.stopping) ++survivors;
  }
  if (survivors == 0) return std::string("no worker of this node survived");
  return std::nullopt;
}

bool ElasticAgent::HoldSurvivors(const std::string& reason, std::string* why, bool at_step_boundary) {
  if (std::optional<std::string> no = WhyNotInPlace(); no.has_value()) {
    *why = *no;
    return false;
  }
  // The lost ones (failed, hung, replaced) are gone before their local
  // ranks start again.
  auto lost = [](const Worker& w) { return w.failure.has_value() || w.stopping; };
  for (Worker& w : workers_) {
    if (w.exited || !lost(w)) continue;
    w.stopping = true;
    o_.processes->SignalGroup(w.pid, SIGKILL);
  }
  AwaitKilled(lost);
  std::vector<int64_t> ranks;
  for (Worker& w : workers_) {
    if (w.exited || w.failure.has_value() || w.stopping) continue;
    w.held = true;
    o_.notices->Set(w.local_rank, w.pid, RoundNotices::Update::CHANGING, reason, {}, at_step_boundary);
    ranks.push_back(w.rank);
  }
  if (ranks.empty()) {
    *why = "no worker of this node survived";
    return false;
  }
  slots_ = NextSlots();
  std::vector<int64_t> vacant;
  for (int lr = 0; lr < o_.local_world_size; ++lr) {
    if (std::find(slots_.begin(), slots_.end(), lr) == slots_.end()) vacant.push_back(lr);
  }
  if (vacant.empty()) {
    spdlog::info("in-place recovery: ranks {} keep running ({})", absl::StrJoin(ranks, ","), reason);
  } else {
    spdlog::info("in-place recovery: ranks {} keep running ({}); local ranks {} wait for their spares, the node "
                 "runs with {} of {} workers until then",
                 absl::StrJoin(ranks, ","), reason, absl::StrJoin(vacant, ","), slots_.size(), o_.local_world_size);
  }
  Event("survivors_held", {{"ranks", ranks}, {"reason", reason}, {"vacant", vacant}});
  return true;
}

std::vector<int> ElasticAgent::AllSlots() const {
  std::vector<int> all;
  for (int lr = 0; lr < o_.local_world_size; ++lr) all.push_back(lr);
  return all;
}

std::vector<int> ElasticAgent::NextSlots() {
  std::vector<int> next;
  for (int lr = 0; lr < o_.local_world_size; ++lr) {
    const bool held = std::any_of(workers_.begin(), workers_.end(),
                                  [lr](const Worker& w) { return w.local_rank == lr && w.held && !w.exited; });
    if (held || o_.processes->SpareReady(lr) || !o_.processes->WantSpare(lr)) next.push_back(lr);
  }
  return next;
}

std::optional<int> ElasticAgent::SpareReadyForVacant() {
  if (static_cast<int>(slots_.size()) == o_.local_world_size) return std::nullopt;
  for (int lr = 0; lr < o_.local_world_size; ++lr) {
    if (std::find(slots_.begin(), slots_.end(), lr) != slots_.end()) continue;
    if (o_.processes->SpareReady(lr)) return lr;
  }
  return std::nullopt;
}

bool ElasticAgent::AnyHeld() const {
  return std::any_of(workers_.begin(), workers_.end(), [](const Worker& w) { return w.held && !w.exited; });
}

void ElasticAgent::StopHeld(int signo, StopKind kind) {
  for (Worker& w : workers_) w.held = false;
  if (o_.notices != nullptr) o_.notices->StopAll("the launcher stops the workers");
  StopWorkers(signo, kind);
}

void ElasticAgent::ResumeRound(const rdzv::v1::Assignment& a, int restart_count, int attempt) {
  const std::string attempt_dir = absl::StrCat(o_.log_root, "/attempt_", attempt);
  std::map<int, int64_t> kept;
  for (const Worker& w : workers_) {
    if (w.held && !w.exited) kept[w.local_rank] = w.pid;
  }
  std::map<int, std::string> error_files;
  for (const Worker& w : workers_) error_files[w.local_rank] = w.error_file;
  if (o_.progress != nullptr) {
    o_.progress->Begin(o_.local_world_size, kept);
    // A slot left empty (its spare still loading) has no worker to wait for.
    for (int lr = 0; lr < o_.local_world_size; ++lr) {
      if (std::find(slots_.begin(), slots_.end(), lr) == slots_.end()) o_.progress->SetWorker(lr, -1);
    }
  }
  std::vector<Worker> next;
  for (int index = 0; index < static_cast<int>(slots_.size()); ++index) {
    const int lr = slots_[index];
    auto it = kept.find(lr);
    if (it == kept.end()) {
      next.push_back(StartLocalRank(a, restart_count, attempt_dir, lr, index));
      continue;
    }
    Worker w;
    w.local_rank = lr;
    w.index = index;
    w.rank = a.rank_offset() + index;
    w.pid = static_cast<pid_t>(it->second);
    w.error_file = error_files[lr];
    // Its whole environment in the new round, as a new worker would get it
    // (one rule: BuildWorkerEnv); its error file stays where it is.
    o_.notices->Set(lr, w.pid, RoundNotices::Update::ASSIGNED, absl::StrCat("round ", a.round()),
                    BuildWorkerEnv(EnvInputs(a, lr, index, restart_count, w.error_file)));
    if (o_.progress != nullptr) o_.progress->SetWorker(lr, w.pid);
    next.push_back(std::move(w));
  }
  workers_ = std::move(next);
  spdlog::debug("round {}: {} workers kept, {} started, {} slots waiting for spares (attempt {})", a.round(),
                kept.size(), slots_.size() - kept.size(), o_.local_world_size - static_cast<int>(slots_.size()),
                attempt);
}

FailureRecord ElasticAgent::NewFailure(const Worker& w, const ExitStatus& status, absl::Time when,
                                       std::string message) {
  FailureRecord f;
  f.rank = w.rank;
  f.local_rank = w.local_rank;
  f.host = host_;
  f.status = status;
  f.pid = w.pid;
  f.time = when;
  f.sequence = exit_sequence_++;
  f.message = std::move(message);
  return f;
}

bool ElasticAgent::RecordExit(pid_t pid, const ExitStatus& status) {
  for (Worker& w : workers_) {
    if (w.pid != pid || w.exited) continue;
    w.exited = true;
    w.status = status;
    if (!status.success() && !w.stopping) {
      FailureRecord f = NewFailure(w, status, o_.clock->Now(), "");
      auto err = ReadErrorFile(w.error_file);
      if (err.ok()) {
        f.error_file = w.error_file;
        f.message = err->message;
        f.traceback = err->traceback;
        f.error_timestamp = err->timestamp;
      } else if (err.status().code() != absl::StatusCode::kNotFound) {
        f.error_file = w.error_file;
        f.message = absl::StrCat("unreadable error file: ", err.status().message());
      } else if (o_.progress != nullptr) {
        // No error file: what the worker said in its FAILED event, if anything.
        f.message = o_.progress->ReportedFailure(w.local_rank);
      }
      w.failure = f;
      spdlog::warn("worker rank {} (local rank {}, pid {}) failed: {}", w.rank, w.local_rank, pid,
                   status.ToString());
      Event("worker_failed", {{"rank", int64_t{w.rank}}, {"local_rank", int64_t{w.local_rank}},
                              {"pid", int64_t{pid}}, {"status", status.ToString()}});
    }
    return true;
  }
  return false;
}

void ElasticAgent::KillHung(const GroupCheck& check, const std::vector<WorkerView>& views, absl::Time now) {
  std::vector<int64_t> culprit_ranks, waiting_ranks;
  std::vector<std::string> states;
  double waited_s = 0, deadline_s = 0;
  int64_t step = -1, collective_seq = 0;
  for (int lr : check.hung) {
    Worker& w = workers_[lr];
    const WorkerView& v = views[lr];
    const bool culprit = std::count(check.culprits.begin(), check.culprits.end(), lr) > 0;
    (culprit ? culprit_ranks : waiting_ranks).push_back(w.rank);
    const std::string state = o_.processes->State(w.pid);
    states.push_back(absl::StrCat("rank ", w.rank, ": ", state));
    if (!v.watch.last_heartbeat.has_value()) {
      // No heartbeats: stopped (T) for the stopped floor (hang_policy.h).
      waited_s = std::max(waited_s, absl::ToDoubleSeconds(now - v.watch.stopped_since.value_or(now)));
      deadline_s = std::max(deadline_s, absl::ToDoubleSeconds(o_.hang.stopped_floor));
    } else {
      waited_s = std::max(waited_s, absl::ToDoubleSeconds(now - v.watch.progress.last_progress.value_or(now)));
      deadline_s = std::max(deadline_s, absl::ToDoubleSeconds(o_.hang.fixed_silence.value_or(
                                            RankDeadline(v.watch, o_.hang))));
    }
    step = step < 0 ? v.watch.progress.step : std::min(step, v.watch.progress.step);
    collective_seq = std::max(collective_seq, v.watch.job_collective_seq);
    w.failure = NewFailure(w, ExitStatus::Killed(SIGKILL), now, HungMessage(v.watch, now, o_.hang));
    w.stopping = true;
    spdlog::warn("worker rank {} (local rank {}, pid {}, {}) is {}", w.rank, lr, w.pid, state, w.failure->message);
  }
  // The culprits: the ranks stuck themselves; when every hung rank here
  // still heartbeats (waiting on a peer no node named in time), none.
  const std::vector<std::string> culprit_hosts =
      culprit_ranks.empty() ? std::vector<std::string>{} : std::vector<std::string>{hostname_};
  const std::string process_states = absl::StrJoin(states, "; ");
  Event("hang_detected",
        {{"culprit_ranks", culprit_ranks}, {"culprit_hosts", culprit_hosts}, {"waiting_ranks", waiting_ranks},
         {"host", hostname_}, {"address", host_}, {"step", step}, {"waited_s", waited_s},
         {"deadline_s", deadline_s}, {"process_states", process_states}, {"collective_seq", collective_seq}});
  if (o_.progress != nullptr) {
    rdzv::v1::HangReport report;
    report.set_unix_ms(absl::ToUnixMillis(now));
    report.mutable_culprit_ranks()->Add(culprit_ranks.begin(), culprit_ranks.end());
    report.mutable_culprit_hosts()->Add(culprit_hosts.begin(), culprit_hosts.end());
    report.mutable_waiting_ranks()->Add(waiting_ranks.begin(), waiting_ranks.end());
    report.set_step(step);
    report.set_collective_seq(collective_seq);
    report.set_waited_s(waited_s);
    report.set_deadline_s(deadline_s);
    report.set_process_states(process_states);
    o_.progress->SetLastHang(report);
  }
  TakeStacks(check.hung);
  for (int lr : check.hung) {
    Worker& w = workers_[lr];
    Event("worker_failed", {{"rank", int64_t{w.rank}}, {"local_rank", int64_t{lr}}, {"pid", int64_t{w.pid}},
                            {"status", std::string("hung")}});
    o_.processes->SignalGroup(w.pid, SIGKILL);
  }
}

bool ElasticAgent::HandleStragglers(absl::Time now) {
  if (o_.progress == nullptr) return false;
  std::vector<int64_t> ranks;
  double slowdown = 0;
  // This node's ranks against each other and the other nodes' ranks.
  if (o_.stragglers.factor > 0) RefreshJob(now, kJobComputeEvery);
  std::vector<Straggler> found =
      FindStragglers(o_.progress->ComputeWindows(), o_.stragglers, job_compute_elsewhere_);
  for (const Straggler& s : found) {
    if (s.local_rank >= static_cast<int>(workers_.size()) || workers_[s.local_rank].exited) continue;
    if (!stragglers_reported_.insert(s.local_rank).second) continue;
    Worker& w = workers_[s.local_rank];
    ranks.push_back(w.rank);
    slowdown = std::max(slowdown, s.slowdown);
    const std::string what = absl::StrFormat("a straggler: computes %.1fx as long as its peers per batch", s.slowdown);
    spdlog::warn("worker rank {} (local rank {}, pid {}) is {}{}", w.rank, s.local_rank, w.pid, what,
                 o_.straggler_policy == StragglerPolicy::kReplace ? ": replacing it" : "");
    if (o_.straggler_policy != StragglerPolicy::kReplace) continue;
    w.failure =
        NewFailure(w, ExitStatus::Killed(SIGKILL), now, absl::StrCat(what, " (--straggler_policy replace); killed"));
    w.stopping = true;
    Event("worker_failed", {{"rank", int64_t{w.rank}}, {"local_rank", int64_t{s.local_rank}},
                            {"pid", int64_t{w.pid}}, {"status", std::string("straggler")}});
    o_.processes->SignalGroup(w.pid, SIGKILL);
  }
  if (ranks.empty()) return false;
  const std::string policy = o_.straggler_policy == StragglerPolicy::kReplace ? "replace" : "warn";
  Event("straggler_detected",
        {{"ranks", ranks}, {"hosts", std::vector<std::string>{hostname_}}, {"slowdown", slowdown}, {"policy", policy}});
  rdzv::v1::StragglerReport report;
  report.set_unix_ms(absl::ToUnixMillis(now));
  report.mutable_ranks()->Add(ranks.begin(), ranks.end());
  report.add_hosts(hostname_);
  report.set_slowdown(slowdown);
  report.set_policy(policy);
  o_.progress->SetLastStraggler(report);
  return o_.straggler_policy == StragglerPolicy::kReplace;
}

std::vector<WorkerView> ElasticAgent::LookAtWorkers(absl::Time now) {
  std::vector<WorkerView> views;
  for (Worker& w : workers_) {
    WorkerView v;
    v.exited = w.exited;
    v.status = w.status;
    if (!w.exited) {
      const std::string state = o_.processes->State(w.pid);
      const bool stopped = absl::StartsWith(state, "stopped");
      // Stopped at every look and no CPU time used since the last one (a
      // throttled process is stopped at many looks but runs between them).
      const std::optional<int64_t> ticks = o_.processes->CpuTicks(w.pid);
      const bool ran = ticks.has_value() && w.cpu_ticks.has_value() && *ticks != *w.cpu_ticks;
      w.cpu_ticks = ticks;
      if (!stopped) w.stopped_since.reset();
      else if (!w.stopped_since.has_value() || ran) w.stopped_since = now;
      v.watch.stopped_since = w.stopped_since;
      v.watch.watched_since = watched_since_;
      if (o_.progress != nullptr) {
        v.watch.last_heartbeat = o_.progress->LastHeartbeat(w.local_rank);
        v.watch.progress = o_.progress->Progress(w.local_rank);
        v.watch.frozen = v.watch.last_heartbeat.has_value() && (stopped || absl::StartsWith(state, "uninterruptible"));
        v.finished = o_.progress->Finished(w.local_rank);
        v.watch.collective_seq = o_.progress->CollectiveSeq(w.local_rank);
      }
    }
    views.push_back(v);
  }
  return views;
}

ElasticAgent::MonitorResult ElasticAgent::Monitor() {
  bool reaped_for_peer_lost = false;
  absl::Time look_due = absl::InfiniteFuture();
  for (;;) {
    RecordWorkerStartup();
    MaybePrepareNextStart();
    const absl::Time now = o_.clock->Now();
    if (now > look_due + kLookBreak) {
      spdlog::info("the launcher did not run for {} (the job suspended or the launcher stopped): the workers' hang "
                   "clocks start again",
                   absl::FormatDuration(now - look_due));
      watched_since_ = now;
      for (Worker& w : workers_) w.stopped_since.reset();
    }
    std::vector<WorkerView> views = LookAtWorkers(now);
    // A rank past its deadline that still heartbeats: waiting in a
    // collective, or the one that never issued it? The job's collectives say.
    const bool need_job = std::any_of(views.begin(), views.end(), [&](const WorkerView& v) {
      return !v.exited && NeedsJobCollectives(v.watch, now, o_.hang);
    });
    if (need_job) {
      const int64_t job = JobCollectiveSeq(views, now);
      for (WorkerView& v : views) v.watch.job_collective_seq = job;
    }
    GroupCheck check = CheckGroup(views, now, o_.hang, o_.monitor_interval);
    if (check.outcome == GroupOutcome::kFailed) {
      if (!check.hung.empty()) KillHung(check, views, now);
      return {Outcome::kFailed, 0, ""};
    }
    if (check.outcome == GroupOutcome::kSucceeded) return {Outcome::kSucceeded, 0, ""};
    if (HandleStragglers(now)) return {Outcome::kFailed, 0, ""};
    if (o_.round_monitor != nullptr) {
      RoundEnd end = o_.round_monitor->Poll();
      if (end.ended) {
        // Nothing of this node was lost: its workers leave at a step
        // boundary. Where a peer was lost their collective fails at once
        // anyway (or, a peer gone silent, their bound aborts it).
        return {end.run_closed ? Outcome::kRunClosed : Outcome::kMembership, 0, end.reason, false,
                /*at_step_boundary=*/true};
      }
    }
    if (std::optional<int> ready = SpareReadyForVacant(); ready.has_value()) {
      return {Outcome::kMembership, 0,
              absl::StrCat("the spare of local rank ", *ready, " is ready: the node grows back to ",
                           o_.local_world_size, " workers"),
              false, /*at_step_boundary=*/true};
    }
    if (std::optional<std::string> lost = PeerLost(); lost.has_value()) {
      // A worker of this node that died fails its local peers' collectives
      // too: that is this node's failure, so what has exited is reaped
      // (without waiting) and the group checked again first.
      if (!reaped_for_peer_lost) {
        reaped_for_peer_lost = true;
        if (std::optional<MonitorResult> stop = TakeProcessEvents(now); stop.has_value()) return *stop;
        continue;
      }
      return {Outcome::kMembership, 0, *lost};
    }
    // While the node runs short, its spares are looked at often (their
    // readiness wakes nothing).
    absl::Time until = check.next_check;
    if (static_cast<int>(slots_.size()) < o_.local_world_size) until = std::min(until, now + kShortNodeLook);
    look_due = until;
    if (std::optional<MonitorResult> stop = TakeProcessEvents(until); stop.has_value()) return *stop;
  }
}

std::optional<std::string> ElasticAgent::PeerLost() const {
  if (!o_.in_place || o_.progress == nullptr) return std::nullopt;
  std::optional<ProgressBoard::Recovering> r = o_.progress->RecoveringIn(round_);
  if (!r.has_value()) return std::nullopt;
  return absl::StrCat("rank ", r->rank, "'s collective failed with no failure on this node (", r->why,
                      "): a peer was lost");
}

std::optional<ElasticAgent::MonitorResult> ElasticAgent::TakeProcessEvents(absl::Time until) {
  for (const ProcessEvent& e : o_.processes->Wait(until)) {
    if (e.kind == ProcessEvent::Kind::kExited) {
      RecordExit(e.pid, e.status);
    } else if (e.kind == ProcessEvent::Kind::kSignal) {
      const bool forward = ForwardToWorkers(e, o_.inside_slurm_step);
      Event("signal_received", {{"signal", SignalName(e.signo)}, {"sender", e.sender},
                                {"sender_pid", int64_t{e.sender_pid}}, {"forwarded", int64_t{forward ? 1 : 0}}});
      if (IsStopSignal(e.signo)) return MonitorResult{Outcome::kSignal, e.signo, "", !forward};
      if (!forward) {
        spdlog::info("{} from {} (pid {}): Slurm signalled every process of the step, the workers too; not "
                     "forwarded",
                     SignalName(e.signo), e.sender, e.sender_pid);
        continue;
      }
      spdlog::info("forwarding {} to the workers", SignalName(e.signo));
      for (const Worker& w : workers_) {
        if (!w.exited) o_.processes->SignalGroup(w.pid, e.signo);
      }
    }
  }
  return std::nullopt;
}

void ElasticAgent::TakeStacks(const std::vector<int>& local_ranks) {
  std::vector<int> asked;
  for (int lr : local_ranks) {
    Worker& w = workers_[lr];
    if (w.stderr_tail == nullptr || w.exited || w.pid <= 0) continue;
    // SIGABRT first: a stopped process keeps it pending and takes it the
    // moment SIGCONT continues it, before it runs another line (continued
    // first, it could move on before the SIGABRT came).
    o_.processes->Signal(w.pid, SIGABRT);
    o_.processes->Signal(w.pid, SIGCONT);
    asked.push_back(lr);
  }
  if (asked.empty()) return;
  auto is_asked = [&asked](const Worker& w) {
    return std::find(asked.begin(), asked.end(), w.local_rank) != asked.end();
  };
  AwaitExits(is_asked, o_.clock->Now() + kStackWait);
  const absl::Time output_deadline = absl::Now() + kStackWait;
  for (int lr : asked) {
    Worker& w = workers_[lr];
    // Its stack is whole once its stderr has ended (a child of its may
    // hold the pipe: then what is there by the deadline).
    if (w.exited) w.stderr_tail->WaitClosed(output_deadline);
    std::optional<std::string> stack = PythonStackFromOutput(w.stderr_tail->Text());
    if (!stack.has_value()) {
      spdlog::warn("worker rank {} (local rank {}, pid {}) wrote no Python stack within {} of SIGABRT ({})", w.rank,
                   lr, w.pid, absl::FormatDuration(kStackWait),
                   w.exited ? std::string("it ended") : o_.processes->State(w.pid));
      continue;
    }
    if (w.failure.has_value()) w.failure->traceback = *stack;
    Event("worker_stack", {{"rank", int64_t{w.rank}}, {"local_rank", int64_t{lr}}, {"pid", int64_t{w.pid}},
                           {"host", hostname_}, {"stack", *stack}});
  }
}

void ElasticAgent::AwaitExits(const std::function<bool(const Worker&)>& which, absl::Time deadline) {
  auto live = [this, &which] {
    return std::any_of(workers_.begin(), workers_.end(),
                       [&which](const Worker& w) { return !w.exited && w.pid > 0 && which(w); });
  };
  while (live() && o_.clock->Now() < deadline) {
    for (const ProcessEvent& e : o_.processes->Wait(deadline)) {
      if (e.kind == ProcessEvent::Kind::kExited) RecordExit(e.pid, e.status);
    }
  }
}

void ElasticAgent::AwaitKilled(const std::function<bool(const Worker&)>& which) {
  AwaitExits(which, o_.clock->Now() + kKillWait);
  // What SIGKILL did not end, the kernel holds (uninterruptible sleep: a
  // driver, a hung file system): no signal ends it before the kernel lets
  // go. Waiting on would wedge the launcher and the job with it, so it goes
  // on without the worker, says where the kernel holds it, and reaps it
  // (Wait reaps every child) if it ever ends.
  for (Worker& w : workers_) {
    if (w.exited || w.pid <= 0 || !which(w)) continue;
    const std::string state = o_.processes->State(w.pid);
    spdlog::error("worker rank {} (local rank {}, pid {}) is still alive {} after SIGKILL, {}: going on without it",
                  w.rank, w.local_rank, w.pid, absl::FormatDuration(kKillWait), state);
    Event("worker_unkillable", {{"rank", int64_t{w.rank}}, {"local_rank", int64_t{w.local_rank}},
                                {"pid", int64_t{w.pid}}, {"state", state},
                                {"waited_s", absl::ToDoubleSeconds(kKillWait)}});
    w.exited = true;
  }
}

void ElasticAgent::StopWorkers(int signo, StopKind kind) {
  slots_ = AllSlots();  // the next group starts whole
  auto live = [this] {
    return std::any_of(workers_.begin(), workers_.end(), [](const Worker& w) { return !w.exited; });
  };
  // Heartbeat answers say stop_requested from now on (a worker between
  // steps stops cleanly even where the signal is not a stop signal to it).
  if (o_.progress != nullptr) o_.progress->RequestStop();
  for (Worker& w : workers_) {
    w.stopping = true;
    if (w.exited) continue;
    if (kind == StopKind::kForRestart) {
      o_.processes->SignalGroupStopNow(w.pid, signo);
    } else if (kind == StopKind::kPassOn) {
      o_.processes->SignalGroup(w.pid, signo);
    }
  }
  bool escalate = false;
  const absl::Time grace = o_.clock->Now() + o_.shutdown_timeout;
  while (live() && !escalate && o_.clock->Now() < grace) {
    for (const ProcessEvent& e : o_.processes->Wait(grace)) {
      if (e.kind == ProcessEvent::Kind::kExited) RecordExit(e.pid, e.status);
      // A second stop signal while stopping: no more grace.
      if (e.kind == ProcessEvent::Kind::kSignal && IsStopSignal(e.signo)) escalate = true;
    }
  }
  if (live()) {
    spdlog::warn("workers still alive after {}: sending SIGKILL", absl::FormatDuration(o_.shutdown_timeout));
  }
  for (Worker& w : workers_) {
    // Also sweeps what is left of the group (the worker's own children).
    if (w.pid > 0) o_.processes->SignalGroup(w.pid, SIGKILL);
  }
  AwaitKilled([](const Worker&) { return true; });
  o_.processes->DrainOutput(absl::Now() + kDrainWait);
}

std::vector<FailureRecord> ElasticAgent::Failures() const {
  std::vector<FailureRecord> out;
  for (const Worker& w : workers_) {
    if (w.failure.has_value()) out.push_back(*w.failure);
  }
  std::sort(out.begin(), out.end(),
            [](const FailureRecord& a, const FailureRecord& b) { return a.sequence < b.sequence; });
  return out;
}

ElasticAgent::WaitEnd ElasticAgent::Interruptible(const std::function<void()>& fn, int* signo,
                                                  bool stop_on_round_end) {
  struct Shared {
    absl::Mutex mu;
    bool done ABSL_GUARDED_BY(mu) = false;
    // Set when this call returns without the helper: the launcher (and the
    // process launcher it would wake) may be gone by the time fn returns.
    bool abandoned ABSL_GUARDED_BY(mu) = false;
  };
  auto shared = std::make_shared<Shared>();
  ProcessLauncher* processes = o_.processes;
  // The helper may outlive this call when a signal or a round end comes
  // first; it then wakes nobody, and the destructor joins it.
  std::thread helper([shared, fn, processes] {
    fn();
    absl::MutexLock lock(&shared->mu);
    shared->done = true;
    if (!shared->abandoned) processes->Wakeup();
  });
  auto abandon = [this, &shared, &helper] {
    {
      absl::MutexLock lock(&shared->mu);
      shared->abandoned = true;
    }
    unfinished_.push_back(std::move(helper));
  };
  auto is_done = [&shared]() ABSL_EXCLUSIVE_LOCKS_REQUIRED(shared->mu) { return shared->done; };
  {
    // Most calls answer at once: wait for that without touching the
    // launcher's events.
    absl::MutexLock lock(&shared->mu);
    shared->mu.AwaitWithTimeout(absl::Condition(&is_done), o_.blocking_call_grace);
  }
  for (;;) {
    {
      absl::MutexLock lock(&shared->mu);
      if (shared->done) break;
    }
    if (stop_on_round_end && o_.round_monitor != nullptr && o_.round_monitor->Poll().ended) {
      abandon();
      return WaitEnd::kRoundEnded;
    }
    for (const ProcessEvent& e : o_.processes->Wait(o_.clock->Now() + o_.monitor_interval)) {
      // A worker held for an in-place recovery may end while the round forms.
      if (e.kind == ProcessEvent::Kind::kExited) RecordExit(e.pid, e.status);
      if (e.kind == ProcessEvent::Kind::kSignal && IsStopSignal(e.signo)) {
        *signo = e.signo;
        abandon();
        return WaitEnd::kSignal;
      }
    }
  }
  helper.join();
  return WaitEnd::kDone;
}

bool ElasticAgent::ExitBarrier(rdzv::RendezvousClient* client, const std::string& run_id,
                               int64_t round, int group_rank, int group_world_size, absl::Duration timeout,
                               const std::atomic<bool>* cancelled) {
  if (group_world_size <= 1) return true;
  // One key per node, set again every kExitBarrierRefresh while waiting: a
  // rendezvous server restarted during the barrier (its store emptied)
  // regains every node's key, where a counter would be lost and every node
  // would wait out the timeout.
  std::unique_ptr<rdzv::Store> store = client->OpenStore(run_id, round);
  std::vector<std::string> keys;
  for (int r = 0; r < group_world_size; ++r) keys.push_back(absl::StrCat(kExitBarrierKey, "/", r));
  const absl::Time deadline = absl::Now() + timeout;
  absl::Status last;
  for (;;) {
    if (cancelled != nullptr && cancelled->load()) return false;
    if (absl::Status set = store->Set(keys[group_rank], "1"); !set.ok()) last = set;
    const absl::Duration left = deadline - absl::Now();
    if (left <= absl::ZeroDuration()) break;
    auto all = store->MultiGet(keys, std::min(left, kExitBarrierRefresh));
    if (all.ok()) return true;
    last = all.status();
    if (all.status().code() != absl::StatusCode::kDeadlineExceeded &&
        all.status().code() != absl::StatusCode::kUnavailable) {
      // A store call refused for good (the round is over): no waiting.
      break;
    }
  }
  spdlog::warn("exit barrier: not every node finished within {}: {}", absl::FormatDuration(timeout),
               last.ToString());
  return false;
}

void ElasticAgent::StopRoundMonitor() {
  if (o_.round_monitor != nullptr) o_.round_monitor->Stop();
}

void ElasticAgent::Leave(const std::string& reason) {
  rdzv::RendezvousClient* client = o_.rdzv;
  CallAtExit(
      [client, run_id = o_.run_id, node_id = o_.node.node_id(), reason, proof = run_.proof] {
        auto st = client->Leave(run_id, node_id, reason, proof);
        if (!st.ok()) spdlog::debug("leave: {}", st.ToString());
      },
      "leave");
}

void ElasticAgent::NoteStopSignal() {
  if (!stop_signalled_at_.has_value()) stop_signalled_at_ = o_.clock->Now();
}

void ElasticAgent::CallAtExit(const std::function<void()>& fn, absl::string_view what) {
  if (!stop_signalled_at_.has_value()) {
    fn();
    return;
  }
  const absl::Duration left =
      std::max(*stop_signalled_at_ + o_.shutdown_timeout - o_.clock->Now(), kMinExitCall);
  if (CallWithin(fn, left)) return;
  spdlog::warn("{}: the rendezvous did not answer within the shutdown grace ({}): exiting without it", std::string(what),
               absl::FormatDuration(o_.shutdown_timeout));
  Event("exit_call_abandoned", {{"call", std::string(what)}, {"waited_s", absl::ToDoubleSeconds(left)}});
}

bool ElasticAgent::CallWithin(const std::function<void()>& fn, absl::Duration bound) {
  struct Shared {
    absl::Mutex mu;
    bool done ABSL_GUARDED_BY(mu) = false;
  };
  auto shared = std::make_shared<Shared>();
  std::thread helper([shared, fn] {
    fn();
    absl::MutexLock lock(&shared->mu);
    shared->done = true;
  });
  bool done = false;
  {
    absl::MutexLock lock(&shared->mu);
    auto is_done = [&shared]() ABSL_EXCLUSIVE_LOCKS_REQUIRED(shared->mu) { return shared->done; };
    done = shared->mu.AwaitWithTimeout(absl::Condition(&is_done), bound);
  }
  if (done) {
    helper.join();
    return true;
  }
  unfinished_.push_back(std::move(helper));
  return false;
}

void ElasticAgent::RefreshJob(absl::Time now, absl::Duration every) {
  if (group_world_size_ <= 1 || o_.rdzv == nullptr) return;
  if (job_status_at_.has_value() && now - *job_status_at_ < every) return;
  job_status_at_ = now;
  auto status = std::make_shared<absl::StatusOr<rdzv::v1::RunStatusResponse>>(absl::UnknownError("no answer"));
  rdzv::RendezvousClient* client = o_.rdzv;
  const std::string run_id = o_.run_id;
  if (!CallWithin([status, client, run_id] { *status = client->RunStatus(run_id); }, kRoundCheckBound) ||
      !status->ok()) {
    return;
  }
  int64_t remote = 0;
  std::vector<double> compute;
  for (const auto& node : (*status)->nodes()) {
    const bool mine = node.participant().node_id() == o_.node.node_id();
    for (const auto& r : node.progress()) {
      remote = std::max(remote, r.collective_seq());
      if (!mine && r.compute_median_s() > 0) compute.push_back(r.compute_median_s());
    }
  }
  job_collectives_remote_ = remote;
  job_compute_elsewhere_ = std::move(compute);
}

int64_t ElasticAgent::JobCollectiveSeq(const std::vector<WorkerView>& views, absl::Time now) {
  int64_t job = 0;
  for (const WorkerView& v : views) job = std::max(job, v.watch.collective_seq);
  // The other nodes' ranks, as their keep-alives last told the rendezvous.
  RefreshJob(now, kJobCollectivesEvery);
  return std::max(job, job_collectives_remote_);
}

std::optional<std::string> ElasticAgent::RoundEndedBeforeFailure() {
  if (o_.round_monitor != nullptr) {
    RoundEnd end = o_.round_monitor->Poll();
    if (end.ended) return end.run_closed ? std::nullopt : std::optional<std::string>(end.reason);
  }
  // The monitor may not have heard yet: the rendezvous itself is asked
  // (a Watch from version 0 answers at once), within a bound.
  auto event = std::make_shared<absl::StatusOr<rdzv::v1::RunEvent>>(absl::UnknownError("no answer"));
  rdzv::RendezvousClient* client = o_.rdzv;
  const std::string node_id = o_.node.node_id();
  const int64_t round = run_.last_round;
  const std::string run_id = o_.run_id;
  if (!CallWithin([event, client, run_id, node_id, round] {
        *event = client->Watch(run_id, node_id, round, 0, absl::ZeroDuration());
      },
                  kRoundCheckBound)) {
    return std::nullopt;
  }
  if (!event->ok() || (*event)->round_current() || (*event)->run_closed()) return std::nullopt;
  return (*event)->reason();
}

std::optional<rdzv::v1::Assignment> ElasticAgent::JoinRound() {
  rdzv::v1::JoinRequest req;
  req.set_run_id(o_.run_id);
  *req.mutable_node() = o_.node;
  // A node running short (in-place recovery, a spare still loading) joins
  // with the workers it has.
  req.mutable_node()->set_local_world_size(static_cast<int>(slots_.size()));
  *req.mutable_options() = o_.run_options;
  req.set_last_round(run_.last_round);
  req.set_node_secret(node_secret_);
  if (run_.failure_report.round() > 0) *req.mutable_failure() = run_.failure_report;
  if (o_.fixed_master_port > 0) {
    req.mutable_node()->set_free_port(o_.fixed_master_port);
  } else {
    // The previous round's workers are gone: its port goes, and a new one
    // is held until the next round (ports.h).
    o_.ports->ReleaseHeld();
    auto port = o_.ports->FindFreePort(host_);
    if (!port.ok()) {
      Conclude(Stopped{StopCause::kAgentError, absl::StrCat("no free port on ", host_, ": ", port.status().ToString())},
               run_.last_round);
      return std::nullopt;
    }
    req.mutable_node()->set_free_port(*port);
  }
  auto joined = std::make_shared<absl::StatusOr<rdzv::v1::Assignment>>(absl::UnknownError("not joined"));
  int signo = 0;
  rdzv::RendezvousClient* client = o_.rdzv;
  // Kept out by the rendezvous (its workers kept failing): said once per
  // Join, from the Join's thread; the Join waits on.
  rdzv::JoinHooks hooks;
  hooks.on_quarantined = [this, said = std::make_shared<bool>(false)](const std::string& detail) {
    if (*said) return;
    *said = true;
    spdlog::warn("the rendezvous keeps this node out of run '{}': {}; waiting to be admitted", o_.run_id, detail);
    Event("quarantined", {{"detail", detail}});
  };
  if (Interruptible([joined, client, req, hooks] { *joined = client->Join(req, hooks); }, &signo,
                    /*stop_on_round_end=*/false) != WaitEnd::kDone) {
    NoteStopSignal();
    spdlog::warn("received {} while waiting for the rendezvous: exiting", SignalName(signo));
    Conclude(Stopped{StopCause::kStopSignal, absl::StrCat("signal ", SignalName(signo)), 128 + signo},
             run_.last_round);
    return std::nullopt;
  }
  if (!joined->ok()) {
    Conclude(Stopped{StopCause::kAgentError, absl::StrCat("rendezvous failed: ", joined->status().ToString())},
             run_.last_round);
    return std::nullopt;
  }
  run_.last_round = (*joined)->round();
  run_.proof = (*joined)->signature();
  run_.failure_report.Clear();
  if (restart_.has_value()) restart_->joined = o_.clock->Now();
  return **joined;
}

void ElasticAgent::RecordRestartPhases(const rdzv::v1::Assignment& a) {
  // The launcher's part of the restart, phase by phase.
  const absl::Time started = o_.clock->Now();
  const PendingRestart& r = *restart_;
  auto s = [](absl::Duration d) { return absl::ToDoubleSeconds(d); };
  Event("restart", {{"cause", r.cause}, {"path", r.path}, {"why_gang", r.why}, {"round", a.round()},
                    {"from_round", r.from_round},
                    {"restart_count", int64_t{run_.restart_count}}, {"max_restarts", int64_t{o_.max_restarts}},
                    {"counted", int64_t{r.counted ? 1 : 0}},
                    {"detected_to_stopped_s", s(r.stopped - r.detected)},
                    {"stopped_to_joined_s", s(r.joined - r.stopped)},
                    {"joined_to_started_s", s(started - r.joined)}, {"total_s", s(started - r.detected)}});
  spdlog::info("restart ({}) took {:.3f} s in the launcher: stop {:.3f} s, rendezvous {:.3f} s, start {:.3f} s",
               r.cause, s(started - r.detected), s(r.stopped - r.detected), s(r.joined - r.stopped),
               s(started - r.joined));
  if (o_.progress != nullptr) {
    rdzv::v1::RestartPhases phases;
    phases.set_cause(r.cause);
    phases.set_path(r.path);
    phases.set_round(a.round());
    phases.set_total_s(s(started - r.detected));
    phases.set_detected_to_stopped_s(s(r.stopped - r.detected));
    phases.set_stopped_to_joined_s(s(r.joined - r.stopped));
    phases.set_joined_to_started_s(s(started - r.joined));
    o_.progress->SetLastRestart(phases);
    // The workers' part follows when every one has made its first step.
    startup_pending_ = PendingStartup{phases, r.detected, started, r.path, r.why};
  }
  restart_.reset();
}

void ElasticAgent::RecordWorkerStartup() {
  if (!startup_pending_.has_value() || o_.progress == nullptr) return;
  const std::optional<GroupStartup> g = o_.progress->Startup();
  if (!g.has_value()) return;
  PendingStartup p = *std::move(startup_pending_);
  startup_pending_.reset();
  auto s = [](absl::Duration d) { return absl::ToDoubleSeconds(d); };
  p.phases.set_started_to_comm_ready_s(s(g->comm_ready - p.started));
  p.phases.set_comm_ready_to_restored_s(s(g->restored - g->comm_ready));
  p.phases.set_restored_to_first_step_s(s(g->first_step - g->restored));
  p.phases.set_total_to_first_step_s(s(g->first_step - p.detected));
  o_.progress->SetLastRestart(p.phases);
  Event("restart_completed",
        {{"cause", p.phases.cause()}, {"round", p.phases.round()},
         {"detected_to_stopped_s", p.phases.detected_to_stopped_s()},
         {"stopped_to_joined_s", p.phases.stopped_to_joined_s()},
         {"joined_to_started_s", p.phases.joined_to_started_s()},
         {"started_to_comm_ready_s", p.phases.started_to_comm_ready_s()},
         {"comm_ready_to_restored_s", p.phases.comm_ready_to_restored_s()},
         {"restored_to_first_step_s", p.phases.restored_to_first_step_s()},
         {"total_s", p.phases.total_to_first_step_s()}});
  // The breakdown of a recovery, whichever path it took.
  Event("recovered",
        {{"path", p.path}, {"why_gang", p.why}, {"cause", p.phases.cause()}, {"round", p.phases.round()},
         {"detected_to_aborted_s", p.phases.detected_to_stopped_s()},
         {"aborted_to_round_formed_s", p.phases.stopped_to_joined_s()},
         {"round_formed_to_started_s", p.phases.joined_to_started_s()},
         {"started_to_comm_ready_s", p.phases.started_to_comm_ready_s()},
         {"comm_ready_to_state_received_s", p.phases.comm_ready_to_restored_s()},
         {"state_received_to_next_step_s", p.phases.restored_to_first_step_s()},
         {"total_s", p.phases.total_to_first_step_s()}});
  spdlog::info("restart ({}) to every worker's first step: {:.3f} s (launcher {:.3f} s, communicator {:.3f} s, "
               "checkpoint {:.3f} s, first step {:.3f} s)",
               p.phases.cause(), p.phases.total_to_first_step_s(), p.phases.total_s(),
               p.phases.started_to_comm_ready_s(), p.phases.comm_ready_to_restored_s(),
               p.phases.restored_to_first_step_s());
}

void ElasticAgent::MaybePrepareNextStart() {
  // A node running short has asked for the spares it lacks (NextSlots); the
  // others' follow once it is whole again, so that they do not slow the
  // spares it waits for.
  if (next_start_prepared_ || o_.progress == nullptr || static_cast<int>(slots_.size()) < o_.local_world_size) {
    return;
  }
  if (!o_.progress->Startup().has_value() || !o_.progress->AllCanWaitWarm()) return;
  next_start_prepared_ = true;
  o_.processes->PrepareNextStart();
}

void ElasticAgent::BeginRound(const rdzv::v1::Assignment& a) {
  startup_pending_.reset();
  stragglers_reported_.clear();
  group_world_size_ = a.group_world_size();
  round_ = a.round();
  job_status_at_.reset();
  job_collectives_remote_ = 0;
  job_compute_elsewhere_.clear();
  next_start_prepared_ = false;
  Event("round_joined", {{"round", a.round()}, {"group_rank", int64_t{a.group_rank()}},
                         {"group_world_size", int64_t{a.group_world_size()}},
                         {"world_size", int64_t{a.world_size()}}, {"master_addr", a.master_addr()},
                         {"master_port", int64_t{a.master_port()}}, {"restart_count", int64_t{run_.restart_count}}});
  spdlog::info("round {}: node {} of {}, ranks {}..{} of {}, master {}:{}, restart count {}", a.round(),
               a.group_rank(), a.group_world_size(), a.rank_offset(),
               a.rank_offset() + static_cast<int>(slots_.size()) - 1,
               a.world_size(), a.master_addr(), a.master_port(), run_.restart_count);
  if (o_.round_monitor != nullptr) {
    ProcessLauncher* processes = o_.processes;
    o_.round_monitor->Start(a, run_.restart_count, [processes] { processes->Wakeup(); });
  }
  if (AnyHeld()) {
    ResumeRound(a, run_.restart_count, run_.attempt);
  } else {
    StartWorkers(a, run_.restart_count, run_.attempt);
  }
  std::vector<int64_t> pids;
  for (const Worker& w : workers_) pids.push_back(w.pid);
  Event("workers_started", {{"round", a.round()}, {"attempt", int64_t{run_.attempt}},
                            {"local_world_size", static_cast<int64_t>(slots_.size())}, {"pids", pids}});
  if (restart_.has_value()) RecordRestartPhases(a);
  ++run_.attempt;
  run_.result.attempts = run_.attempt;
  run_.result.restart_count = run_.restart_count;
}

ElasticAgent::Stopped ElasticAgent::StopOnSignal(int signo, bool delivered_to_workers) {
  NoteStopSignal();
  spdlog::warn("received {}{}: stopping the workers", SignalName(signo),
               delivered_to_workers ? " from Slurm, which signalled the workers too" : "");
  StopRoundMonitor();
  StopWorkers(signo, delivered_to_workers ? StopKind::kAlreadyDelivered : StopKind::kPassOn);
  return Stopped{StopCause::kStopSignal, absl::StrCat("signal ", SignalName(signo)), 128 + signo};
}

ElasticAgent::Stopped ElasticAgent::StopAfterSuccess(const rdzv::v1::Assignment& a) {
  if (a.group_world_size() > 1) {
    spdlog::info("local workers finished; waiting for the other nodes (exit barrier, at most {})",
                 absl::FormatDuration(o_.exit_barrier_timeout));
    Event("exit_barrier", {{"round", a.round()}});
  }
  rdzv::RendezvousClient* client = o_.rdzv;
  const std::string run_id = o_.run_id;
  const int64_t round = a.round();
  const int gws = a.group_world_size();
  const int group_rank = a.group_rank();
  const absl::Duration timeout = o_.exit_barrier_timeout;
  int sig = 0;
  WaitEnd end = Interruptible(
      [client, run_id, round, group_rank, gws, timeout, cancelled = cancelled_] {
        ExitBarrier(client, run_id, round, group_rank, gws, timeout, cancelled.get());
      },
      &sig, /*stop_on_round_end=*/true);
  if (end == WaitEnd::kSignal) {
    NoteStopSignal();
    StopRoundMonitor();
    return Stopped{StopCause::kStopSignal, absl::StrCat("signal ", SignalName(sig), " during the exit barrier"),
                   128 + sig};
  }
  if (end == WaitEnd::kRoundEnded) {
    RoundEnd re = o_.round_monitor->Poll();
    StopRoundMonitor();
    // The last node through the barrier leaves ("finished"), which can end
    // the round before this node's poll saw every key: one short look at
    // the keys first.
    if (!re.run_closed && !ExitBarrier(client, run_id, round, group_rank, gws, kExitBarrierRecheck)) {
      // Another node restarts the job: the whole job succeeds only in one
      // round, so this node joins the next one too.
      const absl::Time now = o_.clock->Now();
      return Stopped{StopCause::kMembershipChanged, absl::StrCat(re.reason, ", during the exit barrier"), 1,
                     now, now};
    }
    if (re.run_closed) spdlog::warn("the run was closed during the exit barrier: {}", re.reason);
  }
  StopRoundMonitor();
  return Stopped{StopCause::kSucceeded, "all workers finished", 0};
}

ElasticAgent::Stopped ElasticAgent::StopAfterFailure() {
  std::vector<FailureRecord> failures = Failures();
  run_.result.failures = failures;
  if (failures.empty()) {
    StopWorkers(SIGTERM, StopKind::kForRestart);
    StopRoundMonitor();
    // Not reachable by CheckGroup's rules; never index an empty list.
    return Stopped{StopCause::kAgentError, "worker group failed without a recorded failure"};
  }
  const FailureRecord& rc = failures[std::max(RootCauseIndex(failures), 0)];
  int code = rc.status.LauncherExitCode();
  const std::string what = absl::StrCat("rank ", rc.rank, " failed: ", rc.status.ToString());
  // A worker lost before the last in-place recovery was over (during the
  // state transfer, or before every worker's next step): said so. The
  // survivors still hold their state (a rank whose receipt broke off holds
  // none, train's SyncState), so this one is recovered in place too.
  if (startup_pending_.has_value() && startup_pending_->path == "in_place") {
    spdlog::warn("the in-place recovery of round {} was interrupted: {}", round_, what);
    Event("recovery_interrupted", {{"round", round_}, {"rank", int64_t{rc.rank}}, {"reason", what}});
  }
  // The survivors stay where they can (in-place recovery); else the group
  // stops whole.
  std::string why_gang;
  const bool in_place = HoldSurvivors(what, &why_gang);
  if (!in_place) StopWorkers(SIGTERM, StopKind::kForRestart);
  // Workers whose peers were stopped for a new round (a node joined, left
  // or failed) lose their connections and fail before this launcher hears
  // that the round ended: a membership change, not a failure of this node,
  // so no restart is spent and nothing is reported against it.
  std::optional<std::string> ended = RoundEndedBeforeFailure();
  StopRoundMonitor();
  if (ended.has_value()) {
    spdlog::warn("worker group failed ({}) after its round had ended ({}): a membership change", what, *ended);
    return Stopped{StopCause::kMembershipChanged, absl::StrCat(*ended, "; the workers failed with it: ", what), 1,
                   rc.time, o_.clock->Now(), in_place, why_gang};
  }
  // Detected when the launcher saw the first failure; stopped now.
  return Stopped{StopCause::kWorkerFailed, what, code == 0 ? 1 : code, rc.time, o_.clock->Now(), in_place, why_gang};
}

ElasticAgent::Stopped ElasticAgent::Stop(const rdzv::v1::Assignment& a, const MonitorResult& m) {
  switch (m.outcome) {
    case Outcome::kSignal:
      return StopOnSignal(m.signo, m.delivered_to_workers);
    case Outcome::kSucceeded:
      return StopAfterSuccess(a);
    case Outcome::kMembership: {
      const absl::Time detected = o_.clock->Now();
      StopRoundMonitor();
      std::string why_gang;
      const bool in_place = HoldSurvivors(m.reason, &why_gang, m.at_step_boundary);
      if (!in_place) StopWorkers(SIGTERM, StopKind::kForRestart);
      return Stopped{StopCause::kMembershipChanged, m.reason, 1, detected, o_.clock->Now(), in_place, why_gang};
    }
    case Outcome::kRunClosed:
      StopRoundMonitor();
      StopWorkers(SIGTERM, StopKind::kForRestart);
      // A run given up for want of progress: every node says so to its scheduler.
      return Stopped{StopCause::kRunClosed, absl::StrCat("the run was closed: ", m.reason),
                     absl::StrContains(m.reason, kNoProgressReason) ? kNoProgressExitCode : 1};
    case Outcome::kFailed:
      return StopAfterFailure();
  }
  return Stopped{StopCause::kAgentError, "unknown outcome"};
}

int64_t ElasticAgent::BestStepThisAttempt() const {
  int64_t best = -1;
  if (o_.progress == nullptr) return best;
  for (const Worker& w : workers_) best = std::max(best, o_.progress->Progress(w.local_rank).step);
  return best;
}

bool ElasticAgent::Conclude(const Stopped& s, int64_t round) {
  if (s.cause == StopCause::kWorkerFailed) NoteFailure(run_.ledger, BestStepThisAttempt());
  Stopped gave_up;               // kExitNoProgress's account of the stop
  const Stopped* ended = &s;     // what the launcher exits with
  const NextAction next =
      DecideNext(s.cause, run_.restart_count, o_.max_restarts, run_.ledger, o_.failures_without_progress);
  const bool restarts = next == NextAction::kRestartFree || next == NextAction::kRestartCounted;
  // Survivors held for an in-place recovery stop with the run.
  if (!restarts && AnyHeld()) StopHeld(SIGTERM, StopKind::kForRestart);
  const std::string path = s.in_place ? "in_place" : "gang";
  switch (next) {
    case NextAction::kRestartFree:
      spdlog::warn("round {} ended ({}): {} (restarts not consumed)", round, s.reason,
                   s.in_place ? "recovering in place" : "restarting the workers");
      Event("round_ended", {{"round", round}, {"reason", s.reason}});
      restart_ = PendingRestart{"membership", round, false, s.detected, s.stopped, {}, path, s.why_gang};
      return true;
    case NextAction::kRestartCounted:
      ++run_.restart_count;
      spdlog::warn("worker group failed ({}); {}, {} of {} restarts", s.reason,
                   s.in_place ? "recovering in place" : "restarting", run_.restart_count, o_.max_restarts);
      restart_ = PendingRestart{"worker_failed", round, true, s.detected, s.stopped, {}, path, s.why_gang};
      // The rendezvous judges from every node's report which one's failure
      // ended the round (a quarantine counts them, rendezvous/rules.h).
      run_.failure_report.set_round(round);
      run_.failure_report.set_failed_at_unix_us(absl::ToUnixMicros(s.detected));
      run_.failure_report.set_reason(s.reason.substr(0, 256));
      return true;
    case NextAction::kExitSuccess:
      Leave("finished");
      o_.processes->DrainOutput(absl::Now() + kDrainWait);
      spdlog::info("all {} workers finished", workers_.size());
      break;
    case NextAction::kExitFailure:
      ExitFailure(s);
      break;
    case NextAction::kExitNoProgress: {
      gave_up = s;
      gave_up.reason = absl::StrCat(kNoProgressReason, run_.ledger.failures_without_progress,
                                    " worker failures in a row, none past step ", run_.ledger.best_step,
                                    " (--failures_without_progress ", o_.failures_without_progress,
                                    "); the last: ", s.reason);
      gave_up.exit_code = kNoProgressExitCode;
      spdlog::error("{}", gave_up.reason);
      Event("no_progress", {{"failures_in_a_row", int64_t{run_.ledger.failures_without_progress}},
                            {"best_step", run_.ledger.best_step}, {"exit_code", int64_t{kNoProgressExitCode}}});
      ExitFailure(gave_up);
      ended = &gave_up;
      break;
    }
  }
  run_.result.exit_code = ended->exit_code;
  if (stop_signalled_at_.has_value()) run_.result.exit_by = *stop_signalled_at_ + o_.shutdown_timeout;
  Event("finished", {{"exit_code", int64_t{ended->exit_code}}, {"reason", ended->reason}});
  return false;
}

void ElasticAgent::ExitFailure(const Stopped& s) {
  switch (s.cause) {
    case StopCause::kWorkerFailed: {
      run_.result.summary = FormatFailureSummary(o_.program_name, run_.result.failures);
      if (o_.print_summary) o_.print_summary(run_.result.summary);
      rdzv::RendezvousClient* client = o_.rdzv;
      CallAtExit(
          [client, run_id = o_.run_id, reason = s.reason, node_id = o_.node.node_id(), proof = run_.proof] {
            auto st = client->Close(run_id, reason, node_id, proof);
            if (!st.ok()) spdlog::debug("close: {}", st.ToString());
          },
          "close");
      Leave("failed");
      return;
    }
    case StopCause::kRunClosed:
      spdlog::error("{}", s.reason);
      // Off the participant list: the node that serves the rendezvous waits
      // for the others to leave before it exits.
      Leave("the run was closed");
      return;
    case StopCause::kStopSignal:
      Leave(s.reason);
      return;
    default:
      spdlog::error("{}", s.reason);
      return;
  }
}

AgentResult ElasticAgent::Run() {
  run_ = RunState{};
  for (int rounds = 0; rounds < kMaxRounds; ++rounds) {
    if (!AwaitHealthy()) return run_.result;
    std::optional<rdzv::v1::Assignment> a = JoinRound();
    if (!a.has_value()) return run_.result;
    BeginRound(*a);
    const Stopped stopped = Stop(*a, Monitor());
    if (!Conclude(stopped, a->round())) return run_.result;
  }
  spdlog::error("gave up after {} rounds", kMaxRounds);
  run_.result.exit_code = 1;
  return run_.result;
}

}  // namespace cpptorchrun::launcher
