// The signals a scheduler sends to every process of a job step, as `train`
// takes them (docs/ENVIRONMENT.md, "Signals"):
//   SIGUSR1, SIGUSR2  Slurm's warning before a preemption or the time limit
//                     (`#SBATCH --signal=USR1@90`, `scancel --signal=USR1`):
//                     write a checkpoint at the next optimizer step, go on.
//   SIGTERM           a preemption, `scancel`, the launcher stopping the
//                     group: write a checkpoint at the next optimizer step,
//                     then end as a SIGTERM'd process does.
// The handlers only count (async-signal-safe); the training loop polls the
// counts through a SignalCounter at every batch boundary. Every other
// signal keeps its default disposition.
#ifndef CPPTORCHRUN_WORKER_AGENT_SIGNALS_H_
#define CPPTORCHRUN_WORKER_AGENT_SIGNALS_H_

#include <cstdint>
#include <map>
#include <vector>

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

}  // namespace cpptorchrun::worker

#endif  // CPPTORCHRUN_WORKER_AGENT_SIGNALS_H_
