// The progress board.
#include "launcher/agent/progress_board.h"

#include <algorithm>
#include <utility>

#include "absl/strings/str_cat.h"

namespace cpptorchrun::launcher {

// The newest compute_s values kept per rank (more than any straggler window).
constexpr size_t kComputeWindowKept = 120;

void ProgressBoard::Reset(const std::vector<int64_t>& pids) {
  Begin(static_cast<int>(pids.size()));
  for (size_t lr = 0; lr < pids.size(); ++lr) SetWorker(static_cast<int>(lr), pids[lr]);
}

void ProgressBoard::Begin(int local_world_size) {
  absl::MutexLock lock(&mu_);
  pids_.assign(static_cast<size_t>(std::max(local_world_size, 0)), 0);
  reports_.clear();
  held_.clear();
  stop_requested_ = false;
}

void ProgressBoard::Begin(int local_world_size, const std::map<int, int64_t>& kept) {
  absl::MutexLock lock(&mu_);
  std::map<int, RankReport> carried;
  for (const auto& [lr, pid] : kept) {
    auto it = reports_.find(lr);
    if (it == reports_.end() || it->second.heartbeat.pid() != pid) continue;
    RankReport r;
    r.heartbeat.set_rank(it->second.heartbeat.rank());
    r.heartbeat.set_local_rank(lr);
    r.heartbeat.set_pid(pid);
    r.can_wait_warm = it->second.can_wait_warm;
    r.can_recover_in_place = it->second.can_recover_in_place;
    r.started_at = it->second.started_at;
    carried[lr] = std::move(r);
  }
  pids_.assign(static_cast<size_t>(std::max(local_world_size, 0)), 0);
  reports_.clear();
  held_ = std::move(carried);
  stop_requested_ = false;
}

std::optional<ProgressBoard::Recovering> ProgressBoard::RecoveringIn(int64_t round) const {
  if (round <= 0) return std::nullopt;
  absl::MutexLock lock(&mu_);
  for (const auto& [lr, r] : reports_) {
    if (!IsCurrent(lr, r.heartbeat.pid()) || !r.recovering_at.has_value() || r.recovering_round != round) continue;
    return Recovering{lr, r.heartbeat.rank(), r.recovering_why};
  }
  return std::nullopt;
}

void ProgressBoard::SetWorker(int local_rank, int64_t pid) {
  absl::MutexLock lock(&mu_);
  if (local_rank < 0 || local_rank >= static_cast<int>(pids_.size())) return;
  pids_[local_rank] = pid;
  auto it = held_.find(local_rank);
  if (it != held_.end()) {
    if (pid > 0 && it->second.heartbeat.pid() == pid) reports_[local_rank] = std::move(it->second);
    held_.erase(it);
  }
}

bool ProgressBoard::IsCurrent(int local_rank, int64_t pid) const {
  return local_rank >= 0 && local_rank < static_cast<int>(pids_.size()) && pids_[local_rank] == pid;
}

RankReport* ProgressBoard::Target(int local_rank, int64_t pid) {
  if (pid <= 0 || local_rank < 0 || local_rank >= static_cast<int>(pids_.size())) return nullptr;
  if (pids_[local_rank] == pid) return &reports_[local_rank];
  if (pids_[local_rank] != 0) return nullptr;
  RankReport& held = held_[local_rank];
  if (held.heartbeat.pid() != pid) {
    held = RankReport{};
    held.heartbeat.set_pid(pid);
  }
  return &held;
}

bool ProgressBoard::Heartbeat(const agent::v1::Heartbeat& heartbeat) {
  const absl::Time now = clock_->Now();
  absl::MutexLock lock(&mu_);
  RankReport* target = Target(heartbeat.local_rank(), heartbeat.pid());
  if (target == nullptr) return false;
  RankReport& r = *target;
  r.heartbeat = heartbeat;
  r.last_heartbeat = now;
  ObserveStep(r.progress, now, heartbeat.step(), heartbeat.total_steps());
  if (heartbeat.compute_s() > 0) AddToWindow(r.compute, heartbeat.compute_s(), kComputeWindowKept);
  return true;
}

absl::Status ProgressBoard::RecordEvent(const agent::v1::WorkerEvent& e) {
  using Kind = agent::v1::WorkerEvent;
  if (e.kind() != Kind::STARTED && e.kind() != Kind::RESUMED && e.kind() != Kind::FINISHED &&
      e.kind() != Kind::FAILED && e.kind() != Kind::COMMUNICATOR_READY && e.kind() != Kind::FIRST_STEP &&
      e.kind() != Kind::SIGNAL && e.kind() != Kind::SIGNAL_CHECKPOINT && e.kind() != Kind::RECOVERING &&
      e.kind() != Kind::RECOVERED) {
    return absl::InvalidArgumentError("event kind unspecified");
  }
  const absl::Time now = clock_->Now();
  {
    absl::MutexLock lock(&mu_);
    RankReport* target = Target(e.local_rank(), e.pid());
    if (target == nullptr) {
      return absl::FailedPreconditionError(
          absl::StrCat("pid ", e.pid(), " is not the worker at local rank ", e.local_rank()));
    }
    RankReport& r = *target;
    r.heartbeat.set_rank(e.rank());
    r.heartbeat.set_local_rank(e.local_rank());
    r.heartbeat.set_pid(e.pid());
    switch (e.kind()) {
      case Kind::STARTED:
        if (!r.last_heartbeat.has_value()) r.last_heartbeat = now;
        if (!r.progress.last_progress.has_value()) r.progress.last_progress = now;
        r.started_at = now;
        r.can_wait_warm = e.can_wait_warm();
        r.can_recover_in_place = e.can_recover_in_place();
        break;
      case Kind::RECOVERING:
        r.recovering_at = now;
        r.recovering_round = e.round();
        r.recovering_why = e.message().substr(0, 512);
        break;
      case Kind::RECOVERED:
        // The state transfer is this round's restore.
        r.resumed_step = e.step();
        r.resumed_at = now;
        r.recovering_at.reset();
        r.recovering_round = 0;
        break;
      case Kind::COMMUNICATOR_READY:
        r.comm_ready_at = now;
        break;
      case Kind::FIRST_STEP: {
        r.first_step_at = now;
        // The first step's time, from the latest of communicator ready and
        // checkpoint restored, is the first estimate of a step.
        std::optional<absl::Time> from = r.resumed_at.has_value() ? r.resumed_at : r.comm_ready_at;
        if (!from.has_value()) from = r.started_at;
        ObserveFirstStep(r.progress, now, e.step(), from.has_value() ? now - *from : absl::ZeroDuration());
        break;
      }
      case Kind::RESUMED:
        r.resumed_step = e.step();
        r.resumed_at = now;
        break;
      case Kind::FINISHED:
        r.finished = true;
        break;
      case Kind::SIGNAL:
      case Kind::SIGNAL_CHECKPOINT:
        break;
      default:
        r.failure = e.message().substr(0, 4096);
        break;
    }
  }
  if (e.kind() == Kind::STARTED || e.kind() == Kind::COMMUNICATOR_READY || e.kind() == Kind::RESUMED ||
      e.kind() == Kind::FIRST_STEP || e.kind() == Kind::RECOVERED || e.kind() == Kind::RECOVERING) {
    absl::MutexLock lock(&on_event_mu_);
    if (on_startup_event_) on_startup_event_();
  }
  LogEvent(e);
  return absl::OkStatus();
}

void ProgressBoard::LogEvent(const agent::v1::WorkerEvent& e) {
  using Kind = agent::v1::WorkerEvent;
  if (events_ == nullptr) return;
  if (e.kind() == Kind::RESUMED) {
    events_->Record("worker_resumed", {{"rank", int64_t{e.rank()}}, {"local_rank", int64_t{e.local_rank()}},
                                       {"pid", e.pid()}, {"step", e.step()}});
  }
  if (e.kind() == Kind::RECOVERING) {
    events_->Record("worker_recovering", {{"rank", int64_t{e.rank()}}, {"local_rank", int64_t{e.local_rank()}},
                                          {"pid", e.pid()}, {"step", e.step()},
                                          {"reason", e.message().substr(0, 512)}});
  }
  if (e.kind() == Kind::RECOVERED) {
    events_->Record("worker_recovered", {{"rank", int64_t{e.rank()}}, {"local_rank", int64_t{e.local_rank()}},
                                         {"pid", e.pid()}, {"step", e.step()},
                                         {"state_from", e.message().substr(0, 64)}});
  }
  // A scheduler's signal as each worker saw it, and the checkpoint it
  // wrote for it: one event each (docs/ENVIRONMENT.md, "Signals").
  if (e.kind() == Kind::SIGNAL) {
    events_->Record("worker_signal", {{"rank", int64_t{e.rank()}}, {"local_rank", int64_t{e.local_rank()}},
                                      {"pid", e.pid()}, {"signal", e.message().substr(0, 32)},
                                      {"step", e.step()}});
  }
  if (e.kind() == Kind::SIGNAL_CHECKPOINT) {
    events_->Record("worker_signal_checkpoint",
                    {{"rank", int64_t{e.rank()}}, {"local_rank", int64_t{e.local_rank()}}, {"pid", e.pid()},
                     {"step", e.step()}, {"then", e.message().substr(0, 32)}});
  }
  if (e.kind() == Kind::FAILED) {
    events_->Record("worker_reported_failure", {{"rank", int64_t{e.rank()}}, {"local_rank", int64_t{e.local_rank()}},
                                                {"pid", e.pid()}, {"message", e.message().substr(0, 4096)}});
  }
}

bool ProgressBoard::AllCanWaitWarm() const {
  absl::MutexLock lock(&mu_);
  if (pids_.empty()) return false;
  for (size_t lr = 0; lr < pids_.size(); ++lr) {
    if (pids_[lr] < 0) continue;  // an empty slot
    auto it = reports_.find(static_cast<int>(lr));
    if (it == reports_.end() || !it->second.can_wait_warm) return false;
  }
  return true;
}

bool ProgressBoard::CanRecoverInPlace(int local_rank) const {
  absl::MutexLock lock(&mu_);
  auto it = reports_.find(local_rank);
  return it != reports_.end() && it->second.can_recover_in_place;
}

std::optional<GroupStartup> ProgressBoard::Startup() const {
  absl::MutexLock lock(&mu_);
  if (pids_.empty()) return std::nullopt;
  GroupStartup g{absl::InfinitePast(), absl::InfinitePast(), absl::InfinitePast()};
  for (size_t lr = 0; lr < pids_.size(); ++lr) {
    if (pids_[lr] < 0) continue;  // an empty slot
    auto it = reports_.find(static_cast<int>(lr));
    if (it == reports_.end() || !it->second.first_step_at.has_value() || !it->second.comm_ready_at.has_value()) {
      return std::nullopt;
    }
    const RankReport& r = it->second;
    g.comm_ready = std::max(g.comm_ready, *r.comm_ready_at);
    g.restored = std::max(g.restored, r.resumed_at.value_or(*r.comm_ready_at));
    g.first_step = std::max(g.first_step, *r.first_step_at);
  }
  return g;
}

void ProgressBoard::SetOnStartupEvent(std::function<void()> fn) {
  absl::MutexLock lock(&on_event_mu_);
  on_startup_event_ = std::move(fn);
}

void ProgressBoard::RequestStop() {
  absl::MutexLock lock(&mu_);
  stop_requested_ = true;
}

bool ProgressBoard::StopRequested() const {
  absl::MutexLock lock(&mu_);
  return stop_requested_;
}

std::vector<RankReport> ProgressBoard::Snapshot() const {
  absl::MutexLock lock(&mu_);
  std::vector<RankReport> out;
  for (const auto& [lr, r] : reports_) out.push_back(r);
  return out;
}

std::optional<absl::Time> ProgressBoard::LastHeartbeat(int local_rank) const {
  absl::MutexLock lock(&mu_);
  auto it = reports_.find(local_rank);
  if (it == reports_.end()) return std::nullopt;
  return it->second.last_heartbeat;
}

std::map<int, std::deque<double>> ProgressBoard::ComputeWindows() const {
  absl::MutexLock lock(&mu_);
  std::map<int, std::deque<double>> out;
  for (const auto& [local_rank, r] : reports_) out[local_rank] = r.compute;
  return out;
}

std::optional<int> ProgressBoard::LocalRankOf(int64_t pid) const {
  absl::MutexLock lock(&mu_);
  for (int i = 0; i < static_cast<int>(pids_.size()); ++i) {
    if (pid > 0 && pids_[i] == pid) return i;
  }
  return std::nullopt;
}

StepProgress ProgressBoard::Progress(int local_rank) const {
  absl::MutexLock lock(&mu_);
  auto it = reports_.find(local_rank);
  if (it == reports_.end()) return {};
  return it->second.progress;
}

int64_t ProgressBoard::CollectiveSeq(int local_rank) const {
  absl::MutexLock lock(&mu_);
  auto it = reports_.find(local_rank);
  return it == reports_.end() ? 0 : it->second.heartbeat.collective_seq();
}

bool ProgressBoard::Finished(int local_rank) const {
  absl::MutexLock lock(&mu_);
  auto it = reports_.find(local_rank);
  return it != reports_.end() && it->second.finished;
}

std::string ProgressBoard::ReportedFailure(int local_rank) const {
  absl::MutexLock lock(&mu_);
  auto it = reports_.find(local_rank);
  return it == reports_.end() ? std::string() : it->second.failure;
}

void ProgressBoard::SetLastRestart(const rdzv::v1::RestartPhases& phases) {
  absl::MutexLock lock(&mu_);
  last_restart_ = phases;
}

std::optional<rdzv::v1::RestartPhases> ProgressBoard::LastRestart() const {
  absl::MutexLock lock(&mu_);
  return last_restart_;
}

void ProgressBoard::SetLastHang(const rdzv::v1::HangReport& hang) {
  absl::MutexLock lock(&mu_);
  if (!faults_.has_value()) faults_.emplace();
  *faults_->mutable_last_hang() = hang;
}

void ProgressBoard::SetLastStraggler(const rdzv::v1::StragglerReport& straggler) {
  absl::MutexLock lock(&mu_);
  if (!faults_.has_value()) faults_.emplace();
  *faults_->mutable_last_straggler() = straggler;
}

std::optional<rdzv::v1::NodeFaults> ProgressBoard::Faults() const {
  absl::MutexLock lock(&mu_);
  return faults_;
}

}  // namespace cpptorchrun::launcher
