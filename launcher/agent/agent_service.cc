// The agent service over gRPC's callback API: every handler answers at once
// (no handler blocks), so no thread is held per call.
#include "launcher/agent/agent_service.h"

#include <unistd.h>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "proto/agent.grpc.pb.h"

namespace cpptorchrun::launcher {

namespace v1 = ::cpptorchrun::agent::v1;

class AgentService::Impl final : public v1::Agent::CallbackService {
 public:
  explicit Impl(ProgressBoard* board) : board_(board) {}

  grpc::ServerUnaryReactor* SendHeartbeat(grpc::CallbackServerContext* ctx, const v1::Heartbeat* req,
                                          v1::HeartbeatAck* resp) override {
    auto* reactor = ctx->DefaultReactor();
    if (!board_->Heartbeat(*req)) {
      reactor->Finish(grpc::Status(grpc::StatusCode::FAILED_PRECONDITION,
                                   absl::StrCat("pid ", req->pid(), " is not the worker at local rank ",
                                                req->local_rank())));
      return reactor;
    }
    resp->set_stop_requested(board_->StopRequested());
    reactor->Finish(grpc::Status::OK);
    return reactor;
  }

  grpc::ServerUnaryReactor* SendEvent(grpc::CallbackServerContext* ctx, const v1::WorkerEvent* req,
                                      v1::EventAck*) override {
    auto* reactor = ctx->DefaultReactor();
    const absl::Status recorded = board_->RecordEvent(*req);
    reactor->Finish(recorded.ok() ? grpc::Status::OK
                                  : grpc::Status(static_cast<grpc::StatusCode>(recorded.code()),
                                                 std::string(recorded.message())));
    return reactor;
  }

 private:
  ProgressBoard* board_;
};

absl::StatusOr<std::unique_ptr<AgentService>> AgentService::Start(const std::string& socket_path,
                                                                  ProgressBoard* board) {
  unlink(socket_path.c_str());
  auto svc = std::unique_ptr<AgentService>(new AgentService());
  svc->impl_ = std::make_unique<Impl>(board);
  svc->target_ = "unix:" + socket_path;
  grpc::ServerBuilder builder;
  builder.AddListeningPort(svc->target_, grpc::InsecureServerCredentials());
  builder.RegisterService(svc->impl_.get());
  svc->server_ = builder.BuildAndStart();
  if (svc->server_ == nullptr) {
    return absl::UnavailableError(absl::StrCat("cannot listen on ", svc->target_));
  }
  return svc;
}

AgentService::~AgentService() { Shutdown(); }

void AgentService::Shutdown() {
  if (shut_down_) return;
  shut_down_ = true;
  server_->Shutdown(std::chrono::system_clock::now() + std::chrono::milliseconds(200));
}

}  // namespace cpptorchrun::launcher
