// The agent client (gRPC over a Unix socket, or null) and the heartbeat
// reporter's thread.
#include "worker/agent/heartbeat.h"

#include <grpcpp/grpcpp.h>

#include <chrono>

#include "absl/strings/str_cat.h"
#include "proto/agent.grpc.pb.h"

namespace cpptorchrun::worker {
namespace {

namespace pb = ::cpptorchrun::agent::v1;

absl::Status FromGrpc(const grpc::Status& s, const char* what) {
  if (s.ok()) return absl::OkStatus();
  return absl::Status(static_cast<absl::StatusCode>(s.error_code()),
                      absl::StrCat("agent ", what, ": ", s.error_message()));
}

class GrpcAgentClient final : public AgentClient {
 public:
  GrpcAgentClient(const std::string& socket_path, absl::Duration timeout)
      : stub_(pb::Agent::NewStub(
            grpc::CreateChannel("unix:" + socket_path, grpc::InsecureChannelCredentials()))),
        timeout_(timeout) {}

  absl::StatusOr<bool> SendHeartbeat(const HeartbeatInfo& info) override {
    pb::Heartbeat request;
    request.set_rank(info.rank);
    request.set_local_rank(info.local_rank);
    request.set_pid(info.pid);
    request.set_epoch(info.epoch);
    request.set_step(info.step);
    request.set_total_steps(info.total_steps);
    request.set_loss(info.loss);
    request.set_samples_per_s(info.samples_per_s);
    pb::HeartbeatAck ack;
    grpc::ClientContext context;
    context.set_deadline(absl::ToChronoTime(absl::Now() + timeout_));
    absl::Status status = FromGrpc(stub_->SendHeartbeat(&context, request, &ack), "heartbeat");
    if (!status.ok()) return status;
    return ack.stop_requested();
  }

  absl::Status SendEvent(int rank, int local_rank, int64_t pid, WorkerEventKind kind, int64_t step,
                         const std::string& message) override {
    pb::WorkerEvent request;
    request.set_rank(rank);
    request.set_local_rank(local_rank);
    request.set_pid(pid);
    switch (kind) {
      case WorkerEventKind::kStarted:
        request.set_kind(pb::WorkerEvent::STARTED);
        break;
      case WorkerEventKind::kResumed:
        request.set_kind(pb::WorkerEvent::RESUMED);
        break;
      case WorkerEventKind::kFinished:
        request.set_kind(pb::WorkerEvent::FINISHED);
        break;
      case WorkerEventKind::kFailed:
        request.set_kind(pb::WorkerEvent::FAILED);
        break;
    }
    request.set_step(step);
    request.set_message(message);
    pb::EventAck ack;
    grpc::ClientContext context;
    context.set_deadline(absl::ToChronoTime(absl::Now() + timeout_));
    return FromGrpc(stub_->SendEvent(&context, request, &ack), "event");
  }

 private:
  std::unique_ptr<pb::Agent::Stub> stub_;
  const absl::Duration timeout_;
};

class NullAgentClient final : public AgentClient {
 public:
  absl::StatusOr<bool> SendHeartbeat(const HeartbeatInfo&) override { return false; }
  absl::Status SendEvent(int, int, int64_t, WorkerEventKind, int64_t, const std::string&) override {
    return absl::OkStatus();
  }
};

}  // namespace

std::unique_ptr<AgentClient> NewGrpcAgentClient(const std::string& socket_path,
                                                absl::Duration call_timeout) {
  return std::make_unique<GrpcAgentClient>(socket_path, call_timeout);
}

std::unique_ptr<AgentClient> NewNullAgentClient() { return std::make_unique<NullAgentClient>(); }

bool ShouldHeartbeat(absl::Time now, absl::Time last_progress, absl::Duration stall_after) {
  return now - last_progress < stall_after;
}

HeartbeatReporter::HeartbeatReporter(AgentClient* client, const HeartbeatOptions& options)
    : client_(client), options_([&] {
        HeartbeatOptions o = options;
        if (!o.now) o.now = [] { return absl::Now(); };
        return o;
      }()) {
  {
    absl::MutexLock lock(&mu_);
    latest_.rank = options_.rank;
    latest_.local_rank = options_.local_rank;
    latest_.pid = options_.pid;
    last_progress_ = options_.now();
  }
  absl::Status started = client_->SendEvent(options_.rank, options_.local_rank, options_.pid,
                                            WorkerEventKind::kStarted, 0, "");
  if (!started.ok()) {
    absl::MutexLock lock(&mu_);
    ++failures_;
  }
  thread_ = std::thread([this] { Loop(); });
}

HeartbeatReporter::~HeartbeatReporter() {
  {
    absl::MutexLock lock(&mu_);
    stopping_ = true;
  }
  thread_.join();
}

void HeartbeatReporter::OnStep(const StepReport& report) {
  absl::MutexLock lock(&mu_);
  latest_.epoch = report.epoch;
  latest_.step = report.global_step;
  latest_.total_steps = report.total_steps;
  latest_.loss = report.loss;
  latest_.samples_per_s = report.samples_per_s;
  last_progress_ = options_.now();
}

void HeartbeatReporter::OnResumed(int64_t global_step) {
  {
    absl::MutexLock lock(&mu_);
    latest_.step = global_step;
    last_progress_ = options_.now();
  }
  absl::Status s = client_->SendEvent(options_.rank, options_.local_rank, options_.pid,
                                      WorkerEventKind::kResumed, global_step,
                                      absl::StrCat("resumed at step ", global_step));
  if (!s.ok()) {
    absl::MutexLock lock(&mu_);
    ++failures_;
  }
}

void HeartbeatReporter::OnFinished(const TrainMetrics& metrics) {
  int64_t step;
  {
    absl::MutexLock lock(&mu_);
    step = latest_.step;
  }
  absl::Status s = client_->SendEvent(
      options_.rank, options_.local_rank, options_.pid, WorkerEventKind::kFinished, step,
      absl::StrCat("test_accuracy ", metrics.test_accuracy, " samples_per_s ",
                   metrics.samples_per_s));
  if (!s.ok()) {
    absl::MutexLock lock(&mu_);
    ++failures_;
  }
}

void HeartbeatReporter::Failed(const std::string& message) {
  int64_t step;
  {
    absl::MutexLock lock(&mu_);
    step = latest_.step;
  }
  (void)client_->SendEvent(options_.rank, options_.local_rank, options_.pid,
                           WorkerEventKind::kFailed, step, message);
}

int64_t HeartbeatReporter::sent() const {
  absl::MutexLock lock(&mu_);
  return sent_;
}

int64_t HeartbeatReporter::failures() const {
  absl::MutexLock lock(&mu_);
  return failures_;
}

bool HeartbeatReporter::stop_requested() const {
  absl::MutexLock lock(&mu_);
  return stop_requested_;
}

void HeartbeatReporter::Loop() {
  while (true) {
    HeartbeatInfo info;
    {
      absl::MutexLock lock(&mu_);
      // Wakes at the interval, or at once when stopping.
      mu_.AwaitWithTimeout(absl::Condition(&stopping_), options_.interval);
      if (stopping_) return;
      if (!ShouldHeartbeat(options_.now(), last_progress_, options_.stall_after)) continue;
      info = latest_;
    }
    absl::StatusOr<bool> ack = client_->SendHeartbeat(info);
    absl::MutexLock lock(&mu_);
    if (ack.ok()) {
      ++sent_;
      stop_requested_ = stop_requested_ || *ack;
    } else {
      ++failures_;
    }
  }
}

}  // namespace cpptorchrun::worker
