#include "worker/agent/signals.h"

#include <signal.h>
#include <unistd.h>

#include <atomic>
#include <optional>
#include <utility>

#include "base/signals.h"

namespace cpptorchrun::worker {
namespace {

// Lock-free on every target of ours, so safe in a signal handler.
std::atomic<int64_t> g_received[NSIG];
static_assert(std::atomic<int64_t>::is_always_lock_free);

void Count(int signo, siginfo_t* info, void*) {
  // The launcher stopping the group for a restart (base/signals.h): at
  // once, as a SIGTERM'd process (nothing to save that a restart reads).
  if (signo == SIGTERM && info != nullptr && info->si_code == SI_QUEUE &&
      info->si_value.sival_int == kStopNowSignalValue && info->si_pid == ::getppid()) {
    ::_exit(128 + SIGTERM);
  }
  if (signo > 0 && signo < NSIG) g_received[signo].fetch_add(1, std::memory_order_relaxed);
}

}  // namespace

const std::vector<int>& SchedulerSignals() {
  static const auto* signals = new std::vector<int>{SIGUSR1, SIGUSR2, SIGTERM};
  return *signals;
}

void InstallSignalCounters() {
  struct sigaction sa {};
  sa.sa_sigaction = Count;
  sa.sa_flags = SA_RESTART | SA_SIGINFO;
  sigemptyset(&sa.sa_mask);
  for (int s : SchedulerSignals()) sigaction(s, &sa, nullptr);
}

int64_t SignalsReceived(int signo) {
  return signo > 0 && signo < NSIG ? g_received[signo].load(std::memory_order_relaxed) : 0;
}

SignalCounter::SignalCounter() {
  for (int s : SchedulerSignals()) seen_[s] = SignalsReceived(s);
}

std::vector<int> SignalCounter::TakeNew() {
  std::vector<int> out;
  for (auto& [signo, seen] : seen_) {
    const int64_t now = SignalsReceived(signo);
    for (; seen < now; ++seen) out.push_back(signo);
  }
  return out;
}

SigtermDeadline::SigtermDeadline(absl::Duration bound, std::function<void()> on_stuck, absl::Duration poll)
    : bound_(bound), on_stuck_(std::move(on_stuck)), poll_(poll), baseline_(SignalsReceived(SIGTERM)) {
  boundary_term_count_ = baseline_;
  thread_ = std::thread([this] { Loop(); });
}

SigtermDeadline::~SigtermDeadline() {
  {
    absl::MutexLock lock(&mu_);
    stopping_ = true;
  }
  thread_.join();
}

void SigtermDeadline::TrainingStarted() {
  absl::MutexLock lock(&mu_);
  training_ = true;
}

void SigtermDeadline::AtBoundary() {
  const int64_t now = SignalsReceived(SIGTERM);
  absl::MutexLock lock(&mu_);
  boundary_term_count_ = now;
}

void SigtermDeadline::Loop() {
  std::optional<absl::Time> seen;  // when a SIGTERM was first noticed
  auto stopping = [this]() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) { return stopping_; };
  absl::MutexLock lock(&mu_);
  while (!mu_.AwaitWithTimeout(absl::Condition(&stopping), poll_)) {
    if (!seen.has_value()) {
      if (SignalsReceived(SIGTERM) > baseline_) seen = absl::Now();
      continue;
    }
    // A boundary passed since the signal: the loop is acting on it.
    if (boundary_term_count_ > baseline_) return;
    if (!training_ || absl::Now() - *seen >= bound_) {
      on_stuck_();
      return;
    }
  }
}

}  // namespace cpptorchrun::worker
