// The agent service: the launcher's local gRPC service (callback API) on a
// Unix socket in the private run folder, where this node's workers send
// heartbeats (rank, epoch, step, loss, samples/s) and events (started,
// resumed at step S, finished, failed). Reports land on the ProgressBoard,
// which the elastic agent reads to find hung workers and the round monitor
// carries to the rendezvous. Workers that recover in place long-poll their
// round notices (AwaitRound) here too.
#ifndef CPPTORCHRUN_LAUNCHER_AGENT_SERVICE_H_
#define CPPTORCHRUN_LAUNCHER_AGENT_SERVICE_H_

#include <atomic>
#include <memory>
#include <string>

#include "absl/status/statusor.h"
#include "grpcpp/grpcpp.h"
#include "launcher/agent/progress_board.h"
#include "launcher/agent/round_notices.h"

namespace cpptorchrun::launcher {

class AgentService {
 public:
  // Listens on unix:`socket_path` (the folder must exist and be private).
  // `board` and `notices` are not owned and must outlive the service;
  // without notices AwaitRound is UNIMPLEMENTED. Errors: the socket cannot
  // be bound.
  static absl::StatusOr<std::unique_ptr<AgentService>> Start(const std::string& socket_path,
                                                             ProgressBoard* board,
                                                             RoundNotices* notices = nullptr);
  ~AgentService();

  // Stops serving (bounded wait for calls in flight). Idempotent.
  void Shutdown();
  const std::string& target() const { return target_; }

 private:
  class Impl;
  AgentService() = default;
  std::unique_ptr<Impl> impl_;
  std::unique_ptr<grpc::Server> server_;
  std::string target_;
  bool shut_down_ = false;
};

}  // namespace cpptorchrun::launcher

#endif  // CPPTORCHRUN_LAUNCHER_AGENT_SERVICE_H_
