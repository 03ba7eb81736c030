#include "worker/agent/signals.h"

#include <signal.h>

#include <atomic>

namespace cpptorchrun::worker {
namespace {

// Lock-free on every target of ours, so safe in a signal handler.
std::atomic<int64_t> g_received[NSIG];
static_assert(std::atomic<int64_t>::is_always_lock_free);

void Count(int signo) {
  if (signo > 0 && signo < NSIG) g_received[signo].fetch_add(1, std::memory_order_relaxed);
}

}  // namespace

const std::vector<int>& SchedulerSignals() {
  static const auto* signals = new std::vector<int>{SIGUSR1, SIGUSR2, SIGTERM};
  return *signals;
}

void InstallSignalCounters() {
  struct sigaction sa {};
  sa.sa_handler = Count;
  sa.sa_flags = SA_RESTART;
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

}  // namespace cpptorchrun::worker
