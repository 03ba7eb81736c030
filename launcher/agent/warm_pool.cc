// The warm pool (warm_pool.h).
#include "launcher/agent/warm_pool.h"

#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>

#include "absl/strings/str_cat.h"
#include "base/become.h"
#include "base/files.h"
#include "launcher/agent/forkserver_py.h"
#include "spdlog/spdlog.h"

namespace cpptorchrun::launcher {
namespace {

// How long the destructor waits for the warm processes it killed.
constexpr absl::Duration kReapWait = absl::Seconds(5);

}  // namespace

absl::StatusOr<std::string> WriteForkserver(const std::string& dir) {
  const std::string path = dir + "/forkserver.py";
  const int fd = open(path.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC | O_NOFOLLOW, 0600);
  if (fd < 0) return absl::InternalError(absl::StrCat("cannot write ", path, ": ", strerror(errno)));
  absl::Status written = base::WriteAll(fd, kForkserverPy, path);
  close(fd);
  if (!written.ok()) return written;
  return path;
}

WarmPool::WarmPool(ProcessLauncher* inner, WarmPoolOptions options) : inner_(inner), o_(std::move(options)) {}

WarmPool::~WarmPool() {
  std::set<pid_t> waiting;
  for (auto& [lr, w] : spares_) {
    waiting.insert(w.pid);
    Discard(w);
  }
  if (forkserver_.pid > 0) {
    waiting.insert(forkserver_.pid);
    Discard(forkserver_);
  }
  const absl::Time deadline = absl::Now() + kReapWait;
  while (!waiting.empty() && absl::Now() < deadline) {
    for (const ProcessEvent& e : inner_->Wait(deadline)) {
      if (e.kind == ProcessEvent::Kind::kExited) waiting.erase(e.pid);
    }
  }
}

WarmPoolOptions::Before SparesBeforeRestart(int cpus, int local_world_size, int threads, bool idle_reversible) {
  using Before = WarmPoolOptions::Before;
  const int64_t busy = int64_t{local_world_size} * std::max(threads, 1);
  if (cpus <= busy) return Before::kNone;
  return idle_reversible ? Before::kIdle : Before::kNormal;
}

void WarmPool::Event(absl::string_view name, std::vector<EventField> fields) {
  if (o_.events != nullptr) o_.events->Record(name, std::move(fields));
}

std::map<int, pid_t> WarmPool::spares() const {
  std::map<int, pid_t> out;
  for (const auto& [lr, w] : spares_) out[lr] = w.pid;
  return out;
}

absl::StatusOr<WarmPool::Warm> WarmPool::StartWarmProcess(const std::vector<std::string>& argv,
                                                          std::map<std::string, std::string> env,
                                                          const std::vector<int>& cpus, int memory_node,
                                                          bool idle) {
  int sock[2];
  if (absl::Status s = base::WarmSocketPair(sock); !s.ok()) return s;
  ProcessSpec spec;
  spec.argv = argv;
  env[base::kWarmFdEnv] = absl::StrCat(base::kWarmFd);
  spec.env = std::move(env);
  // What a warm process says before it is a worker goes straight to the
  // launcher's stderr: no pipe that DrainOutput would wait for.
  spec.inherit_output = true;
  spec.cpus = cpus;
  spec.memory_node = memory_node;
  spec.pass_fd = sock[1];
  spec.idle_priority = idle;
  absl::StatusOr<pid_t> pid = inner_->Start(spec);
  close(sock[1]);
  if (!pid.ok()) {
    close(sock[0]);
    return pid.status();
  }
  return Warm{*pid, sock[0], false, idle};
}

void WarmPool::Discard(Warm& w) {
  if (w.pid > 0) {
    inner_->SignalGroup(w.pid, SIGKILL);
    discarded_.insert(w.pid);
  }
  if (w.socket >= 0) close(w.socket);
  w = Warm{};
}

bool WarmPool::Ready(Warm& w, const std::string& what, absl::Duration timeout) {
  if (w.ready) return true;
  absl::Status s = base::AwaitWarmReady(w.socket, absl::Now() + timeout);
  if (!s.ok()) {
    if (absl::IsInternal(s)) {
      spdlog::error("{} refused: {}", what, std::string(s.message()));
    } else {
      spdlog::warn("{} not ready: {}", what, s.ToString());
    }
    return false;
  }
  w.ready = true;
  return true;
}

void WarmPool::StartSpare(int local_rank) {
  const size_t lr = static_cast<size_t>(local_rank);
  absl::StatusOr<Warm> w = StartWarmProcess(o_.program_argv, o_.base_env,
                                            lr < o_.cpus.size() ? o_.cpus[lr] : std::vector<int>{},
                                            lr < o_.memory_node.size() ? o_.memory_node[lr] : -1,
                                            !restarted_ && o_.before_restart == WarmPoolOptions::Before::kIdle);
  if (!w.ok()) {
    spdlog::warn("cannot start a warm spare for local rank {}: {}; restarts exec afresh", local_rank,
                 w.status().ToString());
    spares_off_ = true;
    return;
  }
  spares_[local_rank] = *w;
  Event("spare_started", {{"local_rank", int64_t{local_rank}}, {"pid", int64_t{w->pid}},
                         {"priority", std::string(w->idle ? "idle" : "normal")}});
}

void WarmPool::StartForkserver() {
  // The forkserver's imports are on the first start's path: its priority.
  absl::StatusOr<Warm> w = StartWarmProcess(o_.forkserver_argv, o_.base_env, {}, -1, false);
  if (!w.ok()) {
    spdlog::warn("cannot start the forkserver: {}; workers are spawned", w.status().ToString());
    forkserver_off_ = true;
    return;
  }
  forkserver_ = *w;
  Event("forkserver_started", {{"pid", int64_t{w->pid}}});
}

void WarmPool::Begin() {
  if (!o_.forkserver_argv.empty() && forkserver_.pid == 0 && !forkserver_off_) StartForkserver();
}

void WarmPool::PrepareNextStart() {
  group_ran_ = true;
  if (!o_.spares || spares_off_) return;
  if (!restarted_ && o_.before_restart == WarmPoolOptions::Before::kNone) return;
  for (int lr = 0; lr < o_.local_world_size && !spares_off_; ++lr) {
    if (spares_.count(lr) == 0) StartSpare(lr);
  }
}

bool WarmPool::WantSpare(int slot) {
  if (!o_.spares || spares_off_ || !group_ran_ || slot < 0 || slot >= o_.local_world_size) return false;
  restarted_ = true;
  auto it = spares_.find(slot);
  if (it == spares_.end()) {
    // Started at the next Wait: the survivors' round comes first.
    wanted_.insert(slot);
    return true;
  }
  // One loading at SCHED_IDLE is wanted now: it loads at the workers' priority.
  if (it->second.idle && !it->second.ready) {
    if (absl::Status s = base::LeaveIdlePriority(it->second.pid); !s.ok()) {
      spdlog::warn("the warm spare of local rank {} stays at SCHED_IDLE: {}", slot, s.ToString());
    }
    it->second.idle = false;
  }
  return true;
}

bool WarmPool::SpareReady(int slot) {
  CheckSpares();
  auto it = spares_.find(slot);
  return it != spares_.end() && it->second.ready;
}

absl::StatusOr<pid_t> WarmPool::FromSpare(const ProcessSpec& spec, int local_rank) {
  Warm w = spares_[local_rank];
  spares_.erase(local_rank);
  if (w.idle && !w.ready) {
    // Needed now: it loads at the workers' priority (they are stopped).
    if (absl::Status s = base::LeaveIdlePriority(w.pid); !s.ok()) {
      spdlog::warn("the warm spare of local rank {} stays at SCHED_IDLE: {}", local_rank, s.ToString());
    }
  }
  // A spare still loading may finish; one that takes longer than a
  // hand-over may is given up (an exec would load just as long).
  if (!Ready(w, absl::StrCat("the warm spare of local rank ", local_rank), o_.become_timeout)) {
    Discard(w);
    return absl::UnavailableError("spare not ready");
  }
  ProcessSpec warm = spec;
  warm.warm_socket = w.socket;
  warm.warm_timeout = o_.become_timeout;
  absl::StatusOr<pid_t> pid = inner_->Start(warm);
  if (pid.ok() && *pid != w.pid) {
    // Only the spare itself may become the worker.
    inner_->SignalGroup(*pid, SIGKILL);
    discarded_.insert(*pid);
    pid = absl::InternalError(absl::StrCat("the spare (pid ", w.pid, ") answered for pid ", *pid));
  }
  if (!pid.ok()) {
    spdlog::warn("the warm spare of local rank {} did not take over: {}", local_rank, pid.status().ToString());
    Discard(w);
    return pid.status();
  }
  close(w.socket);
  spare_losses_ = 0;
  return pid;
}

absl::StatusOr<pid_t> WarmPool::FromForkserver(const ProcessSpec& spec) {
  if (!Ready(forkserver_, "the forkserver", o_.ready_timeout)) {
    Discard(forkserver_);
    forkserver_off_ = true;
    spdlog::warn("workers are spawned (--start_method spawn) from now on");
    return absl::UnavailableError("forkserver not ready");
  }
  ProcessSpec warm = spec;
  warm.warm_socket = forkserver_.socket;
  warm.warm_timeout = o_.become_timeout;
  absl::StatusOr<pid_t> pid = inner_->Start(warm);
  if (!pid.ok()) {
    // Its socket may now hold a late answer: a fresh forkserver for the next.
    spdlog::warn("the forkserver did not start a worker: {}; restarting it", pid.status().ToString());
    Discard(forkserver_);
    StartForkserver();
    return pid.status();
  }
  forkserver_losses_ = 0;
  return pid;
}

absl::StatusOr<pid_t> WarmPool::Start(const ProcessSpec& spec) {
  const int lr = spec.slot;
  if (lr >= 0 && group_ran_) restarted_ = true;
  absl::StatusOr<pid_t> pid = absl::UnavailableError("no warm process");
  std::string from;
  if (lr >= 0 && spares_.count(lr) != 0) {
    pid = FromSpare(spec, lr);
    from = "spare";
  } else if (forkserver_.pid > 0) {
    pid = FromForkserver(spec);
    from = "forkserver";
  }
  if (pid.ok()) {
    Event("warm_started", {{"local_rank", int64_t{lr}}, {"pid", int64_t{*pid}}, {"from", from}});
    return pid;
  }
  if (!from.empty()) {
    Event("warm_fallback", {{"local_rank", int64_t{lr}}, {"from", from}, {"reason", pid.status().ToString()}});
  }
  return inner_->Start(spec);
}

void WarmPool::CheckSpares() {
  std::vector<int> refused;
  for (auto& [lr, w] : spares_) {
    if (w.ready) continue;
    pollfd p{w.socket, POLLIN, 0};
    if (poll(&p, 1, 0) != 1) continue;
    absl::Status s = base::AwaitWarmReady(w.socket, absl::Now());
    if (s.ok()) {
      w.ready = true;
      Event("spare_ready", {{"local_rank", int64_t{lr}}, {"pid", int64_t{w.pid}}});
    } else {
      spdlog::warn("the warm spare of local rank {} refused: {}", lr, s.ToString());
      refused.push_back(lr);
    }
  }
  for (int lr : refused) {
    Event("spare_lost", {{"local_rank", int64_t{lr}}, {"pid", int64_t{spares_[lr].pid}}, {"status", std::string("refused")}});
    Discard(spares_[lr]);
    spares_.erase(lr);
    if (++spare_losses_ > o_.max_losses) {
      spares_off_ = true;
    } else {
      StartSpare(lr);
    }
  }
}

std::vector<ProcessEvent> WarmPool::Wait(absl::Time deadline) {
  for (int slot : wanted_) {
    if (!spares_off_ && spares_.count(slot) == 0) StartSpare(slot);
  }
  wanted_.clear();
  CheckSpares();
  std::vector<ProcessEvent> out;
  for (const ProcessEvent& e : inner_->Wait(deadline)) {
    if (e.kind != ProcessEvent::Kind::kExited) {
      out.push_back(e);
      continue;
    }
    if (discarded_.erase(e.pid) != 0) continue;
    if (e.pid == forkserver_.pid && e.pid > 0) {
      Event("forkserver_lost", {{"pid", int64_t{e.pid}}, {"status", e.status.ToString()}});
      close(forkserver_.socket);
      forkserver_ = Warm{};
      if (++forkserver_losses_ > o_.max_losses) {
        spdlog::warn("the forkserver died {} times in a row ({}): workers are spawned from now on",
                     forkserver_losses_, e.status.ToString());
        forkserver_off_ = true;
      } else {
        spdlog::warn("the forkserver died ({}): restarting it", e.status.ToString());
        StartForkserver();
      }
      continue;
    }
    bool spare = false;
    for (auto it = spares_.begin(); it != spares_.end(); ++it) {
      if (it->second.pid != e.pid) continue;
      const int lr = it->first;
      spare = true;
      close(it->second.socket);
      spares_.erase(it);
      Event("spare_lost", {{"local_rank", int64_t{lr}}, {"pid", int64_t{e.pid}}, {"status", e.status.ToString()}});
      if (++spare_losses_ > o_.max_losses) {
        spdlog::warn("warm spares died {} times in a row (last: local rank {}, {}): restarts exec afresh",
                     spare_losses_, lr, e.status.ToString());
        spares_off_ = true;
      } else {
        spdlog::warn("the warm spare of local rank {} died ({}): replacing it", lr, e.status.ToString());
        StartSpare(lr);
      }
      break;
    }
    if (!spare) out.push_back(e);
  }
  return out;
}

}  // namespace cpptorchrun::launcher
