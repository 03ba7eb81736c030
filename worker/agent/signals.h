// The signals a scheduler sends to every process of a job step, as `train`
// takes them (docs/ENVIRONMENT.md, "Signals"):
//   SIGUSR1, SIGUSR2  Slurm's warning before a preemption or the time limit
//                     (`#SBATCH --signal=USR1@90`, `scancel --signal=USR1`):
//                     write a checkpoint at the next optimizer step, go on.
//   SIGTERM           a preemption, `scancel`, the launcher stopping the
//                     group: write a checkpoint at the next optimizer step,
//                     then end as a SIGTERM'd process does.
//   SIGTERM sent by the launcher with base::kStopNowSignalValue (it stops
//   the group for a restart): exit 143 at once, in the handler.
// The handlers otherwise only count (async-signal-safe); the training loop
// polls the counts through a SignalCounter at every batch boundary. Every
// other signal keeps its default disposition.
#ifndef CPPTORCHRUN_WORKER_AGENT_SIGNALS_H_
#define CPPTORCHRUN_WORKER_AGENT_SIGNALS_H_

#include <cstdint>
#include <functional>
#include <map>
#include <thread>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"

namespace cpptorchrun::worker {

// SIGUSR1, SIGUSR2, SIGTERM.
const std::vector<int>& SchedulerSignals();

// Installs the counting handlers (SA_RESTART) for SchedulerSignals().
// Idempotent. Call it first thing in main: a warm spare too, which Slurm
// signals with every other process of the step (it ignores what came
// before it became a worker).
void InstallSignalCounters();

// How often `signo` arrived since InstallSignalCounters.
int64_t SignalsReceived(int signo);

// Not thread-safe: one poller.
class SignalCounter {
 public:
  // Counts from now: what arrived before is not this counter's.
  SignalCounter();
  // The signals that arrived since the last call (or the counter's making),
  // each as often as it came, by signal number.
  std::vector<int> TakeNew();

 private:
  std::map<int, int64_t> seen_;
};

// After SIGTERM a training worker has `bound` to reach a batch boundary (where it
// writes its checkpoint and stops). One stuck in a collective, waiting for
// a peer that is gone without closing its connections (a cut network, a
// GPU peer), would otherwise hold its launcher for the whole shutdown
// grace: `on_stuck` runs then (the binary's: exit 143, as a SIGTERM'd
// process, without a checkpoint). A thread of its own watches; thread-safe.
class SigtermDeadline {
 public:
  SigtermDeadline(absl::Duration bound, std::function<void()> on_stuck,
                  absl::Duration poll = absl::Milliseconds(20));
  ~SigtermDeadline();
  // Training has begun: from now on a SIGTERM gets `bound`. Before it
  // (loading, the communicator's bootstrap) there is nothing to checkpoint,
  // and `on_stuck` runs as soon as a SIGTERM is seen.
  void TrainingStarted();
  // The training loop passed a batch boundary: a SIGTERM that came before
  // is being acted on there.
  void AtBoundary();

 private:
  void Loop();

  const absl::Duration bound_;
  const std::function<void()> on_stuck_;
  const absl::Duration poll_;
  const int64_t baseline_;
  absl::Mutex mu_;
  bool stopping_ ABSL_GUARDED_BY(mu_) = false;
  bool training_ ABSL_GUARDED_BY(mu_) = false;
  int64_t boundary_term_count_ ABSL_GUARDED_BY(mu_) = 0;
  std::thread thread_;
};

}  // namespace cpptorchrun::worker

#endif  // CPPTORCHRUN_WORKER_AGENT_SIGNALS_H_
