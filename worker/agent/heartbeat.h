// Heartbeats and events to the launcher's agent service
// (CPPTORCHRUN_AGENT_SOCKET): an AgentClient interface with a gRPC client
// over the Unix socket and a null one, and a HeartbeatReporter that sends
// the latest progress from a background thread every interval.
//
// A worker whose training thread is stuck must look hung to the launcher,
// so the reporter stops heartbeating once no step has completed for
// `stall_after` (the launcher's --worker_timeout then applies).
#ifndef CPPTORCHRUN_WORKER_AGENT_HEARTBEAT_H_
#define CPPTORCHRUN_WORKER_AGENT_HEARTBEAT_H_

#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <thread>

#include "absl/base/thread_annotations.h"
#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"
#include "worker/training/metrics.h"

namespace cpptorchrun::worker {

struct HeartbeatInfo {
  int rank = 0;
  int local_rank = 0;
  int64_t pid = 0;
  int64_t epoch = 0;
  int64_t step = 0;
  int64_t total_steps = 0;
  double loss = 0;
  double samples_per_s = 0;
};

enum class WorkerEventKind { kStarted, kResumed, kFinished, kFailed };

// Thread-safe.
class AgentClient {
 public:
  virtual ~AgentClient() = default;
  // Returns whether the launcher asks the worker to stop.
  virtual absl::StatusOr<bool> SendHeartbeat(const HeartbeatInfo& info) = 0;
  virtual absl::Status SendEvent(int rank, int local_rank, int64_t pid, WorkerEventKind kind,
                                 int64_t step, const std::string& message) = 0;
};

// gRPC over "unix:<socket_path>"; each call has `call_timeout`.
std::unique_ptr<AgentClient> NewGrpcAgentClient(const std::string& socket_path,
                                                absl::Duration call_timeout = absl::Seconds(2));

// Accepts everything, sends nothing (no agent socket in the environment).
std::unique_ptr<AgentClient> NewNullAgentClient();

// The rule: send while steps progress; stay silent once the last step is
// older than `stall_after`. Pure.
bool ShouldHeartbeat(absl::Time now, absl::Time last_progress, absl::Duration stall_after);

struct HeartbeatOptions {
  absl::Duration interval = absl::Seconds(1);
  absl::Duration stall_after = absl::Minutes(5);
  int rank = 0;
  int local_rank = 0;
  int64_t pid = 0;
  // Injected clock; default absl::Now.
  std::function<absl::Time()> now;
};

// Observes the trainer and heartbeats from its own thread. Construction
// sends STARTED; OnResumed sends RESUMED and OnFinished FINISHED (on the
// calling thread, bounded by the client's timeout). Failures to reach the
// agent are counted, never fatal. The destructor stops and joins the thread.
class HeartbeatReporter final : public TrainObserver {
 public:
  HeartbeatReporter(AgentClient* client, const HeartbeatOptions& options);
  ~HeartbeatReporter() override;

  void OnStep(const StepReport& report) override;
  void OnResumed(int64_t global_step) override;
  void OnFinished(const TrainMetrics& metrics) override;
  // Reports a failure (from main's error path).
  void Failed(const std::string& message);

  int64_t sent() const;
  int64_t failures() const;
  bool stop_requested() const;

 private:
  void Loop();

  AgentClient* const client_;
  const HeartbeatOptions options_;
  mutable absl::Mutex mu_;
  HeartbeatInfo latest_ ABSL_GUARDED_BY(mu_);
  absl::Time last_progress_ ABSL_GUARDED_BY(mu_);
  bool stopping_ ABSL_GUARDED_BY(mu_) = false;
  bool stop_requested_ ABSL_GUARDED_BY(mu_) = false;
  int64_t sent_ ABSL_GUARDED_BY(mu_) = 0;
  int64_t failures_ ABSL_GUARDED_BY(mu_) = 0;
  std::thread thread_;
};

}  // namespace cpptorchrun::worker

#endif  // CPPTORCHRUN_WORKER_AGENT_HEARTBEAT_H_
