#include "worker/agent/round_watch.h"

#include <algorithm>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "proto/worker_contract.h"

namespace cpptorchrun::worker {

int64_t RoundOf(const std::map<std::string, std::string>& env) {
  auto it = env.find(contract::kRdzvRound);
  int64_t round = -1;
  if (it == env.end() || !absl::SimpleAtoi(it->second, &round) || round < 0) return -1;
  return round;
}

RoundWatcher::RoundWatcher(AgentClient* client, const RoundWatchOptions& options,
                           std::function<void(const std::string&)> on_changing)
    : client_(client), options_(options), on_changing_(std::move(on_changing)) {
  thread_ = std::thread([this] { Loop(); });
}

RoundWatcher::~RoundWatcher() {
  {
    absl::MutexLock lock(&mu_);
    stopping_ = true;
  }
  client_->CancelWaits();
  thread_.join();
}

void RoundWatcher::Loop() {
  int64_t known = 0;
  int failures = 0;
  for (;;) {
    {
      absl::MutexLock lock(&mu_);
      if (stopping_) return;
    }
    absl::Duration wait = options_.poll;
    {
      // A change at a step boundary the training thread has not taken in
      // time: abort the collective in flight after all (under mu_, so that
      // TakeChange, and with it a next round's communicator, comes after).
      absl::MutexLock lock(&mu_);
      if (boundary_since_.has_value()) {
        const absl::Duration left = *boundary_since_ + options_.boundary_bound - absl::Now();
        if (left <= absl::ZeroDuration()) {
          boundary_since_.reset();
          if (on_changing_) {
            on_changing_(absl::StrCat(latest_.reason(), " (no step boundary within ",
                                      absl::FormatDuration(options_.boundary_bound), ")"));
          }
        } else {
          wait = std::min(wait, left);
        }
      }
    }
    agent_pb::RoundQuery query;
    query.set_local_rank(options_.local_rank);
    query.set_pid(options_.pid);
    query.set_known_generation(known);
    absl::StatusOr<agent_pb::RoundUpdate> got = client_->AwaitRound(query, wait);
    if (!got.ok()) {
      if (absl::IsDeadlineExceeded(got.status())) {
        failures = 0;
        continue;
      }
      absl::MutexLock lock(&mu_);
      if (stopping_) return;
      // No notices at this launcher, or it cannot be reached for long: the
      // worker cannot recover in place.
      if (absl::IsUnimplemented(got.status()) || absl::IsCancelled(got.status()) ||
          ++failures >= options_.max_failures) {
        ended_ = true;
        end_ = std::string(got.status().message());
        return;
      }
      mu_.AwaitWithTimeout(absl::Condition(&stopping_), options_.retry);
      continue;
    }
    failures = 0;
    if (got->generation() <= known) continue;
    known = got->generation();
    const bool at_boundary = got->state() == agent_pb::RoundUpdate::CHANGING && got->at_step_boundary();
    const bool changing = !at_boundary && (got->state() == agent_pb::RoundUpdate::CHANGING ||
                                           got->state() == agent_pb::RoundUpdate::STOP);
    {
      absl::MutexLock lock(&mu_);
      latest_ = *got;
      latest_round_ = RoundOf(std::map<std::string, std::string>(got->env().begin(), got->env().end()));
      if (at_boundary) boundary_since_ = absl::Now();
      if (changing) boundary_since_.reset();
    }
    if (changing && on_changing_) on_changing_(got->reason());
  }
}

bool RoundWatcher::ChangeAtBoundary(int64_t current_round) const {
  absl::MutexLock lock(&mu_);
  if (latest_.state() == agent_pb::RoundUpdate::CHANGING) return latest_.at_step_boundary();
  // Polled at every optimizer step: the round was read once, on arrival.
  return latest_.state() == agent_pb::RoundUpdate::ASSIGNED && latest_round_ > current_round;
}

void RoundWatcher::TakeChange() {
  absl::MutexLock lock(&mu_);
  boundary_since_.reset();
}

bool RoundWatcher::Superseded(int64_t round) const {
  absl::MutexLock lock(&mu_);
  // The newest notice: a newer round's assignment, or any notice but an
  // assignment (CHANGING, STOP: they came after the last one).
  return latest_.state() != agent_pb::RoundUpdate::ASSIGNED || latest_round_ > round;
}

absl::StatusOr<std::map<std::string, std::string>> RoundWatcher::AwaitAssignment(int64_t after_round,
                                                                                 absl::Duration timeout) {
  absl::MutexLock lock(&mu_);
  auto settled = [&]() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) {
    if (stopping_ || ended_ || latest_.state() == agent_pb::RoundUpdate::STOP) return true;
    return latest_.state() == agent_pb::RoundUpdate::ASSIGNED && latest_round_ > after_round;
  };
  if (!mu_.AwaitWithTimeout(absl::Condition(&settled), timeout)) {
    return absl::DeadlineExceededError(absl::StrCat("the launcher assigned no round after round ", after_round,
                                                    " within ", absl::FormatDuration(timeout)));
  }
  if (latest_.state() == agent_pb::RoundUpdate::STOP) {
    return absl::CancelledError(absl::StrCat("the launcher stops the group: ", latest_.reason()));
  }
  if (stopping_ || ended_) {
    return absl::UnavailableError(absl::StrCat("the launcher cannot be asked for the next round: ", end_));
  }
  return std::map<std::string, std::string>(latest_.env().begin(), latest_.env().end());
}

}  // namespace cpptorchrun::worker
