// The progress board.
#include "launcher/agent/progress_board.h"

namespace cpptorchrun::launcher {

void ProgressBoard::Reset(const std::vector<int64_t>& pids) {
  absl::MutexLock lock(&mu_);
  pids_ = pids;
  reports_.clear();
}

bool ProgressBoard::Heartbeat(const RankReport& report) {
  absl::Time now = clock_->Now();
  absl::MutexLock lock(&mu_);
  if (report.local_rank < 0 || report.local_rank >= static_cast<int>(pids_.size()) ||
      pids_[report.local_rank] != report.pid) {
    return false;
  }
  RankReport& r = reports_[report.local_rank];
  bool finished = r.finished;
  int64_t resumed = r.resumed_step;
  r = report;
  r.finished = finished;
  r.resumed_step = resumed;
  r.last_heartbeat = now;
  return true;
}

bool ProgressBoard::RecordEvent(int local_rank, int64_t pid, Event event, int64_t step) {
  absl::MutexLock lock(&mu_);
  if (local_rank < 0 || local_rank >= static_cast<int>(pids_.size()) || pids_[local_rank] != pid) {
    return false;
  }
  RankReport& r = reports_[local_rank];
  r.local_rank = local_rank;
  r.pid = pid;
  if (event == Event::kFinished) r.finished = true;
  if (event == Event::kResumed) r.resumed_step = step;
  return true;
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

bool ProgressBoard::Finished(int local_rank) const {
  absl::MutexLock lock(&mu_);
  auto it = reports_.find(local_rank);
  return it != reports_.end() && it->second.finished;
}

void ProgressBoard::SetLastRestart(const rdzv::v1::RestartPhases& phases) {
  absl::MutexLock lock(&mu_);
  last_restart_ = phases;
}

std::optional<rdzv::v1::RestartPhases> ProgressBoard::LastRestart() const {
  absl::MutexLock lock(&mu_);
  return last_restart_;
}

}  // namespace cpptorchrun::launcher
