#include "launcher/agent/round_notices.h"

#include <algorithm>
#include <utility>
#include <vector>

namespace cpptorchrun::launcher {

RoundNotices::Update RoundNotices::CurrentLocked(int local_rank, int64_t pid) const {
  auto it = slots_.find(local_rank);
  Update u;
  if (it != slots_.end() && it->second.pid == pid) u = it->second.update;
  if (stop_generation_ > 0) {
    // A stop outranks whatever the slot said: its generation is newer
    // than any of the slot's.
    u.set_state(Update::STOP);
    u.set_reason(stop_reason_);
    u.clear_env();
    u.set_generation(std::max(u.generation(), int64_t{0}) + stop_generation_);
    return u;
  }
  if (u.state() == Update::STATE_UNSPECIFIED) {
    u.set_state(Update::RUNNING);
    u.set_generation(0);
  }
  return u;
}

void RoundNotices::AnswerLocked(int local_rank) {
  std::vector<int64_t> answered;
  for (auto& [id, w] : waiters_) {
    if (local_rank >= 0 && w.local_rank != local_rank) continue;
    Update u = CurrentLocked(w.local_rank, w.pid);
    if (u.generation() <= w.known) continue;
    w.done(u);
    answered.push_back(id);
  }
  for (int64_t id : answered) waiters_.erase(id);
}

void RoundNotices::Set(int local_rank, int64_t pid, Update::State state, const std::string& reason,
                       std::map<std::string, std::string> env, bool at_step_boundary) {
  absl::MutexLock lock(&mu_);
  Slot& slot = slots_[local_rank];
  const int64_t generation = slot.update.generation() + 1;
  slot.pid = pid;
  slot.update.Clear();
  slot.update.set_generation(generation);
  slot.update.set_state(state);
  slot.update.set_reason(reason);
  slot.update.set_at_step_boundary(at_step_boundary);
  for (auto& [k, v] : env) (*slot.update.mutable_env())[k] = std::move(v);
  AnswerLocked(local_rank);
}

void RoundNotices::StopAll(const std::string& reason) {
  absl::MutexLock lock(&mu_);
  ++stop_generation_;
  stop_reason_ = reason;
  AnswerLocked(-1);
}

void RoundNotices::Reset() {
  absl::MutexLock lock(&mu_);
  if (!waiters_.empty()) {
    ++stop_generation_;
    stop_reason_ = "the group is restarted";
    AnswerLocked(-1);
  }
  slots_.clear();
  stop_generation_ = 0;
  stop_reason_.clear();
}

RoundNotices::Update RoundNotices::Current(int local_rank, int64_t pid) const {
  absl::MutexLock lock(&mu_);
  return CurrentLocked(local_rank, pid);
}

int64_t RoundNotices::Watch(int local_rank, int64_t pid, int64_t known_generation, Done done) {
  absl::MutexLock lock(&mu_);
  Update u = CurrentLocked(local_rank, pid);
  if (u.generation() > known_generation) {
    done(u);
    return 0;
  }
  const int64_t id = next_id_++;
  waiters_[id] = Waiter{local_rank, pid, known_generation, std::move(done)};
  return id;
}

void RoundNotices::Unwatch(int64_t id) {
  absl::MutexLock lock(&mu_);
  waiters_.erase(id);
}

int RoundNotices::waiting() const {
  absl::MutexLock lock(&mu_);
  return static_cast<int>(waiters_.size());
}

}  // namespace cpptorchrun::launcher
