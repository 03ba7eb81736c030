// The agent service over gRPC's callback API: no handler blocks, so no
// thread is held per call. AwaitRound's reactor is answered by the round
// notices when the worker's state changes, or ends when its call is
// cancelled (the worker's deadline, the server's shutdown).
#include "launcher/agent/agent_service.h"

#include <unistd.h>

#include <atomic>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "proto/agent.grpc.pb.h"

namespace cpptorchrun::launcher {

namespace v1 = ::cpptorchrun::agent::v1;

namespace {

// One AwaitRound call: finished once, by the notices (the update) or by its
// cancellation; deletes itself when gRPC is done with it.
class AwaitRoundReactor final : public grpc::ServerUnaryReactor {
 public:
  AwaitRoundReactor(RoundNotices* notices, const v1::RoundQuery& query, v1::RoundUpdate* response)
      : notices_(notices), response_(response) {
    id_ = notices_->Watch(query.local_rank(), query.pid(), query.known_generation(),
                          [this](const v1::RoundUpdate& u) { Answer(u); });
  }

  void OnCancel() override {
    if (id_.load() != 0) notices_->Unwatch(id_.load());
    if (!finished_.exchange(true)) Finish(grpc::Status::CANCELLED);
  }
  void OnDone() override { delete this; }

 private:
  // Under the notices' lock: never after Unwatch has returned.
  void Answer(const v1::RoundUpdate& u) {
    if (finished_.exchange(true)) return;
    *response_ = u;
    Finish(grpc::Status::OK);
  }

  RoundNotices* const notices_;
  v1::RoundUpdate* const response_;
  std::atomic<int64_t> id_{0};
  std::atomic<bool> finished_{false};
};

}  // namespace

class AgentService::Impl final : public v1::Agent::CallbackService {
 public:
  Impl(ProgressBoard* board, RoundNotices* notices) : board_(board), notices_(notices) {}

  grpc::ServerUnaryReactor* AwaitRound(grpc::CallbackServerContext* ctx, const v1::RoundQuery* req,
                                       v1::RoundUpdate* resp) override {
    if (notices_ == nullptr) {
      auto* reactor = ctx->DefaultReactor();
      reactor->Finish(grpc::Status(grpc::StatusCode::UNIMPLEMENTED, "this launcher recovers no worker in place"));
      return reactor;
    }
    return new AwaitRoundReactor(notices_, *req, resp);
  }

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
  RoundNotices* notices_;
};

absl::StatusOr<std::unique_ptr<AgentService>> AgentService::Start(const std::string& socket_path,
                                                                  ProgressBoard* board,
                                                                  RoundNotices* notices) {
  unlink(socket_path.c_str());
  auto svc = std::unique_ptr<AgentService>(new AgentService());
  svc->impl_ = std::make_unique<Impl>(board, notices);
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
