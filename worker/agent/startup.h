// How long a worker took to start: the phases from exec to the first
// training step (the dynamic loader and LibTorch's static initialisers
// before main, the data, the rendezvous store and the communicator), so that
// a restart's cost can be read off the worker's first line and the metrics.
#ifndef CPPTORCHRUN_WORKER_AGENT_STARTUP_H_
#define CPPTORCHRUN_WORKER_AGENT_STARTUP_H_

#include <cstdint>
#include <optional>
#include <string>

namespace cpptorchrun::worker {

// Field 22 of a /proc/<pid>/stat line (the start time in clock ticks since
// boot), parsed after the last ')' so that a command name holding spaces or
// parentheses cannot shift the fields. nullopt on a malformed line. Pure.
std::optional<int64_t> ParseStartTicks(const std::string& stat_line);

// Seconds since this process was created (fork), from /proc/self/stat and
// CLOCK_BOOTTIME; resolution one clock tick (10 ms). nullopt where /proc is
// not readable.
std::optional<double> SecondsSinceProcessStart();

// Seconds on a monotonic clock.
double MonotonicSeconds();

// The phases, in seconds; a negative value: not measured.
struct StartupPhases {
  double before_main = -1;    // fork to main (loader, static initialisers)
  double data = -1;           // reading the data set
  double communicator = -1;   // store, bootstrap, communicator
  double total = -1;          // fork to the training loop
};

// "started in 1.23 s (before main 0.55 s, data 0.40 s, communicator 0.28 s)",
// leaving out the phases not measured.
std::string FormatStartup(const StartupPhases& phases);

}  // namespace cpptorchrun::worker

#endif  // CPPTORCHRUN_WORKER_AGENT_STARTUP_H_
