// The round monitor: while a round runs, keeps this node alive at the
// rendezvous (KeepAlive every keep_alive_interval, carrying the node's
// progress) and long-polls Watch, so that the end of the round (a node died,
// left or waits to join; the run closed) is noticed within milliseconds.
#ifndef CPPTORCHRUN_LAUNCHER_ROUND_MONITOR_H_
#define CPPTORCHRUN_LAUNCHER_ROUND_MONITOR_H_

#include <functional>
#include <memory>
#include <string>
#include <thread>

#include "absl/base/thread_annotations.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"
#include "launcher/agent/progress_board.h"
#include "proto/rendezvous.pb.h"
#include "rendezvous/client.h"

namespace cpptorchrun::launcher {

struct RoundEnd {
  bool ended = false;
  bool run_closed = false;
  std::string reason;
};

// Start/Stop/Poll come from the agent's thread; the callback from the
// monitor's own thread.
class RoundMonitor {
 public:
  virtual ~RoundMonitor() = default;
  // Begins watching `assignment`'s round; `on_end` is called once when it
  // ends (it must be quick and thread-safe: the agent wakes up).
  virtual void Start(const rdzv::v1::Assignment& assignment, int restart_count,
                     std::function<void()> on_end) = 0;
  // Stops watching (asynchronously: a long poll in flight ends on its own).
  virtual void Stop() = 0;
  // Whether the watched round has ended, and why.
  virtual RoundEnd Poll() = 0;
};

struct RoundMonitorOptions {
  rdzv::RendezvousClient* client = nullptr;  // not owned; outlives the monitor
  ProgressBoard* progress = nullptr;         // may be null
  std::string run_id;
  rdzv::v1::NodeInfo node;
  rdzv::v1::RunOptions run_options;
  absl::Duration keep_alive_interval = absl::Seconds(5);
  // Each rank's compute median goes with its progress over this many of
  // its heartbeats (--straggler_window; straggler_policy.h).
  size_t straggler_window = 10;
};

// The gRPC-backed monitor: one thread per round. Joins the previous round's
// thread on Start and in its destructor.
std::unique_ptr<RoundMonitor> NewRoundMonitor(const RoundMonitorOptions& options);

}  // namespace cpptorchrun::launcher

#endif  // CPPTORCHRUN_LAUNCHER_ROUND_MONITOR_H_
