// Stragglers: a rank persistently slower than its peers drags every step of
// a data-parallel job, and nobody notices, because every rank's step takes
// as long as the slowest's. What tells it apart is each rank's compute time
// per batch without its wait for the gradients' all-reduce (the worker's
// heartbeats carry it, agent.proto compute_s): the straggler computes
// longer, its peers wait longer. Pure functions of the windows.
//
// A rank is a straggler when, over a full window of its recent heartbeats,
// the median of its compute time is at least `factor` x the median of its
// peers' medians: the other ranks this launcher watches and every rank of
// the other nodes (their keep-alives carry their medians to the
// rendezvous), so that a node whose every rank is slow, or a job of one
// rank per node, is seen too. Each launcher judges only its own ranks. An
// even job never gets there: its ranks' medians differ by noise, far
// below 1.5x.
#ifndef CPPTORCHRUN_LAUNCHER_AGENT_STRAGGLER_POLICY_H_
#define CPPTORCHRUN_LAUNCHER_AGENT_STRAGGLER_POLICY_H_

#include <deque>
#include <map>
#include <optional>
#include <string>
#include <vector>

namespace cpptorchrun::launcher {

struct StragglerOptions {
  double factor = 1.5;  // 0: off
  size_t window = 10;   // heartbeats (a second each by default)
};

enum class StragglerPolicy { kWarn, kReplace };

// "warn" or "replace"; false for anything else.
bool ParseStragglerPolicy(const std::string& text, StragglerPolicy* out);

struct Straggler {
  int local_rank = 0;
  double slowdown = 0;  // its median over the peers' median
};

// Keeps the newest `window` values.
void AddToWindow(std::deque<double>& window, double value, size_t size);

// The median of the newest `window` values; none when fewer.
std::optional<double> WindowMedian(const std::deque<double>& values, size_t window);

// The stragglers among `compute` (local rank -> its window, newest last),
// against each other and the other nodes' ranks' medians (`elsewhere`).
// Ranks with a window not yet full are neither judged nor peers; fewer than
// two medians in all: none.
std::vector<Straggler> FindStragglers(const std::map<int, std::deque<double>>& compute,
                                      const StragglerOptions& options, const std::vector<double>& elsewhere = {});

}  // namespace cpptorchrun::launcher

#endif  // CPPTORCHRUN_LAUNCHER_AGENT_STRAGGLER_POLICY_H_
