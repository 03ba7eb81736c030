// Heartbeats and events to the launcher's agent service
// (CPPTORCHRUN_AGENT_SOCKET): an AgentClient interface with a gRPC client
// over the Unix socket and a null one, and a HeartbeatReporter that sends
// the latest progress from a background thread every interval. The
// messages are the wire's own (proto/agent.proto): no mirror struct.
//
// The contract with the launcher:
// - Heartbeats go every `interval` while steps progress, and stop once no
//   step has completed for `stall_after` (CPPTORCHRUN_WORKER_TIMEOUT_S, the
//   launcher's --worker_timeout; 300 s without it), so a rank stuck in a
//   collective looks hung to the launcher.
// - Events: STARTED when the reporter is made, RESUMED (step = the restored
//   global step) when a checkpoint was restored, FINISHED when training
//   ended, FAILED (message = the error) from the binary's error path,
//   SIGNAL (message = "SIGUSR1", ...) for each scheduler's signal received
//   and SIGNAL_CHECKPOINT (step, "going on" or "stopping") after the
//   checkpoint it asked for (worker/agent/signals.h).
// - An ack with stop_requested is remembered (stop_requested()); the
//   trainer polls it at every batch boundary (TrainDeps::stop_requested)
//   and the binary then exits as a SIGTERM'd worker would (train_main.cc).
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
#include "proto/agent.pb.h"
#include "worker/training/metrics.h"

namespace cpptorchrun::worker {

namespace agent_pb = ::cpptorchrun::agent::v1;

// Thread-safe.
class AgentClient {
 public:
  virtual ~AgentClient() = default;
  virtual absl::StatusOr<agent_pb::HeartbeatAck> SendHeartbeat(
      const agent_pb::Heartbeat& heartbeat) = 0;
  virtual absl::Status SendEvent(const agent_pb::WorkerEvent& event) = 0;
  // The launcher's word on this worker's round (agent.proto's AwaitRound),
  // waiting at most `wait` (DeadlineExceeded then). Default: Unimplemented.
  virtual absl::StatusOr<agent_pb::RoundUpdate> AwaitRound(const agent_pb::RoundQuery& query,
                                                           absl::Duration wait);
  // Ends the AwaitRound calls in flight and every later one with Cancelled.
  virtual void CancelWaits() {}
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
  // WorkerEnv::worker_timeout in the binary.
  absl::Duration stall_after = absl::Seconds(300);
  int rank = 0;
  int local_rank = 0;
  int64_t pid = 0;
  // Said in STARTED: this program can start as a warm spare (base/become.h).
  bool can_wait_warm = false;
  // Said in STARTED: this worker can recover in place (docs/DESIGN.md).
  bool can_recover_in_place = false;
  // Injected clock; default absl::Now.
  std::function<absl::Time()> now;
};

// Observes the trainer and heartbeats from its own thread. Construction
// sends STARTED; OnResumed sends RESUMED, OnFinished FINISHED and Failed
// FAILED (on the calling thread, bounded by the client's timeout). Failures
// to reach the agent are counted, never fatal. The destructor stops and
// joins the thread.
// A flight recorder's newest numbers (worker/comm/flight_recorder.h).
struct CollectiveCount {
  int64_t issued = 0;
  int64_t finished = 0;
};

class HeartbeatReporter final : public TrainObserver {
 public:
  HeartbeatReporter(AgentClient* client, const HeartbeatOptions& options);
  ~HeartbeatReporter() override;

  void OnStep(const StepReport& report) override;
  void OnResumed(int64_t global_step) override;
  // Sends COMMUNICATOR_READY (the launcher times a restart's phases by it).
  void OnCommunicatorReady();
  void OnFinished(const TrainMetrics& metrics) override;
  // Reports a failure (from main's error path); `message` is the error.
  void Failed(const std::string& message);
  // Reports a scheduler's signal as it reached this worker (SIGNAL, one
  // event per delivery), and the checkpoint written for one
  // (SIGNAL_CHECKPOINT at `global_step`; `stopping`: the worker ends now).
  void OnSignal(int signo);
  void OnSignalCheckpoint(int64_t global_step, bool stopping);
  // In-place recovery: the communicator failed and the worker waits for
  // its next round (RECOVERING, `why`, the failed communicator's `round`); then it is rank `rank` of the new
  // round (heartbeats and events say so from now on, and the next step is
  // a first step again); then the state transfer is done (RECOVERED at
  // `global_step`, `from`: where the state came from).
  void OnRecovering(const std::string& why, int64_t round);
  void OnRejoined(int rank);
  void OnRecovered(int64_t global_step, const std::string& from);
  // From now on each heartbeat carries these collective numbers (asked
  // at each beat, from the reporter's thread).
  void WatchCollectives(std::function<CollectiveCount()> collectives);

  int64_t sent() const;
  int64_t failures() const;
  // Whether an ack has asked the worker to stop. Cheap; any thread.
  bool stop_requested() const;

 private:
  void Loop();
  // Sends an event of `kind` with this worker's identity, counting a
  // failure to deliver it.
  void SendEvent(agent_pb::WorkerEvent::Kind kind, int64_t step, const std::string& message, int64_t round = 0);
  int64_t LatestStep() const;

  AgentClient* const client_;
  const HeartbeatOptions options_;
  mutable absl::Mutex mu_;
  agent_pb::Heartbeat latest_ ABSL_GUARDED_BY(mu_);
  absl::Time last_progress_ ABSL_GUARDED_BY(mu_);
  bool stopping_ ABSL_GUARDED_BY(mu_) = false;
  bool stop_requested_ ABSL_GUARDED_BY(mu_) = false;
  bool first_step_sent_ ABSL_GUARDED_BY(mu_) = false;
  int rank_ ABSL_GUARDED_BY(mu_) = 0;  // options_.rank, then each new round's
  // Compute seconds of the batches since the last heartbeat (its compute_s).
  double compute_sum_ ABSL_GUARDED_BY(mu_) = 0;
  int64_t compute_count_ ABSL_GUARDED_BY(mu_) = 0;
  std::function<CollectiveCount()> collectives_ ABSL_GUARDED_BY(mu_);
  int64_t sent_ ABSL_GUARDED_BY(mu_) = 0;
  int64_t failures_ ABSL_GUARDED_BY(mu_) = 0;
  std::thread thread_;
};

}  // namespace cpptorchrun::worker

#endif  // CPPTORCHRUN_WORKER_AGENT_HEARTBEAT_H_
