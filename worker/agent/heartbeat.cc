// The agent client (gRPC over a Unix socket, or null) and the heartbeat
// reporter's thread.
#include "worker/agent/heartbeat.h"

#include <grpcpp/grpcpp.h>

#include <chrono>
#include <set>

#include "absl/strings/str_cat.h"
#include "base/signals.h"
#include "proto/agent.grpc.pb.h"

namespace cpptorchrun::worker {
namespace {

absl::Status FromGrpc(const grpc::Status& s, const char* what) {
  if (s.ok()) return absl::OkStatus();
  return absl::Status(static_cast<absl::StatusCode>(s.error_code()),
                      absl::StrCat("agent ", what, ": ", s.error_message()));
}

class GrpcAgentClient final : public AgentClient {
 public:
  GrpcAgentClient(const std::string& socket_path, absl::Duration timeout)
      : stub_(agent_pb::Agent::NewStub(
            grpc::CreateChannel("unix:" + socket_path, grpc::InsecureChannelCredentials()))),
        timeout_(timeout) {}

  absl::StatusOr<agent_pb::HeartbeatAck> SendHeartbeat(
      const agent_pb::Heartbeat& heartbeat) override {
    agent_pb::HeartbeatAck ack;
    grpc::ClientContext context;
    context.set_deadline(absl::ToChronoTime(absl::Now() + timeout_));
    absl::Status status = FromGrpc(stub_->SendHeartbeat(&context, heartbeat, &ack), "heartbeat");
    if (!status.ok()) return status;
    return ack;
  }

  absl::Status SendEvent(const agent_pb::WorkerEvent& event) override {
    agent_pb::EventAck ack;
    grpc::ClientContext context;
    context.set_deadline(absl::ToChronoTime(absl::Now() + timeout_));
    return FromGrpc(stub_->SendEvent(&context, event, &ack), "event");
  }

  absl::StatusOr<agent_pb::RoundUpdate> AwaitRound(const agent_pb::RoundQuery& query,
                                                   absl::Duration wait) override {
    grpc::ClientContext context;
    context.set_deadline(absl::ToChronoTime(absl::Now() + wait));
    {
      absl::MutexLock lock(&mu_);
      if (cancelled_) return absl::CancelledError("agent waits cancelled");
      waits_.insert(&context);
    }
    agent_pb::RoundUpdate update;
    const grpc::Status status = stub_->AwaitRound(&context, query, &update);
    {
      absl::MutexLock lock(&mu_);
      waits_.erase(&context);
    }
    absl::Status s = FromGrpc(status, "round");
    if (!s.ok()) return s;
    return update;
  }

  void CancelWaits() override {
    absl::MutexLock lock(&mu_);
    cancelled_ = true;
    for (grpc::ClientContext* c : waits_) c->TryCancel();
  }

 private:
  absl::Mutex mu_;
  bool cancelled_ ABSL_GUARDED_BY(mu_) = false;
  std::set<grpc::ClientContext*> waits_ ABSL_GUARDED_BY(mu_);
  std::unique_ptr<agent_pb::Agent::Stub> stub_;
  const absl::Duration timeout_;
};

class NullAgentClient final : public AgentClient {
 public:
  absl::StatusOr<agent_pb::HeartbeatAck> SendHeartbeat(const agent_pb::Heartbeat&) override {
    return agent_pb::HeartbeatAck();
  }
  absl::Status SendEvent(const agent_pb::WorkerEvent&) override { return absl::OkStatus(); }
};

}  // namespace

absl::StatusOr<agent_pb::RoundUpdate> AgentClient::AwaitRound(const agent_pb::RoundQuery&, absl::Duration) {
  return absl::UnimplementedError("this agent client has no round notices");
}

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
    latest_.set_rank(options_.rank);
    rank_ = options_.rank;
    latest_.set_local_rank(options_.local_rank);
    latest_.set_pid(options_.pid);
    last_progress_ = options_.now();
  }
  SendEvent(agent_pb::WorkerEvent::STARTED, 0, "");
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
  bool first = false;
  {
    absl::MutexLock lock(&mu_);
    latest_.set_epoch(report.epoch);
    latest_.set_step(report.global_step);
    latest_.set_total_steps(report.total_steps);
    latest_.set_loss(report.loss);
    latest_.set_samples_per_s(report.samples_per_s);
    compute_sum_ += report.compute_seconds;
    ++compute_count_;
    last_progress_ = options_.now();
    first = !first_step_sent_;
    first_step_sent_ = true;
  }
  if (first) SendEvent(agent_pb::WorkerEvent::FIRST_STEP, report.global_step, "");
}

void HeartbeatReporter::OnCommunicatorReady() {
  {
    absl::MutexLock lock(&mu_);
    last_progress_ = options_.now();
  }
  SendEvent(agent_pb::WorkerEvent::COMMUNICATOR_READY, 0, "");
}

void HeartbeatReporter::OnResumed(int64_t global_step) {
  {
    absl::MutexLock lock(&mu_);
    latest_.set_step(global_step);
    last_progress_ = options_.now();
  }
  SendEvent(agent_pb::WorkerEvent::RESUMED, global_step,
            absl::StrCat("resumed at step ", global_step));
}

void HeartbeatReporter::OnRecovering(const std::string& why, int64_t round) {
  SendEvent(agent_pb::WorkerEvent::RECOVERING, LatestStep(), why.substr(0, 512), round);
}

void HeartbeatReporter::OnRejoined(int rank) {
  absl::MutexLock lock(&mu_);
  rank_ = rank;
  latest_.set_rank(rank);
  first_step_sent_ = false;
  last_progress_ = options_.now();
}

void HeartbeatReporter::OnRecovered(int64_t global_step, const std::string& from) {
  {
    absl::MutexLock lock(&mu_);
    latest_.set_step(global_step);
    last_progress_ = options_.now();
  }
  SendEvent(agent_pb::WorkerEvent::RECOVERED, global_step, from);
}

void HeartbeatReporter::OnFinished(const TrainMetrics& metrics) {
  SendEvent(agent_pb::WorkerEvent::FINISHED, LatestStep(),
            absl::StrCat("test_accuracy ", metrics.test_accuracy, " samples_per_s ",
                         metrics.samples_per_s));
}

void HeartbeatReporter::Failed(const std::string& message) {
  SendEvent(agent_pb::WorkerEvent::FAILED, LatestStep(), message);
}

void HeartbeatReporter::OnSignal(int signo) {
  SendEvent(agent_pb::WorkerEvent::SIGNAL, LatestStep(), SignalName(signo));
}

void HeartbeatReporter::OnSignalCheckpoint(int64_t global_step, bool stopping) {
  SendEvent(agent_pb::WorkerEvent::SIGNAL_CHECKPOINT, global_step, stopping ? "stopping" : "going on");
}

void HeartbeatReporter::SendEvent(agent_pb::WorkerEvent::Kind kind, int64_t step,
                                  const std::string& message, int64_t round) {
  agent_pb::WorkerEvent event;
  {
    absl::MutexLock lock(&mu_);
    event.set_rank(rank_);
  }
  event.set_local_rank(options_.local_rank);
  event.set_pid(options_.pid);
  event.set_kind(kind);
  event.set_step(step);
  event.set_message(message);
  event.set_round(round);
  if (kind == agent_pb::WorkerEvent::STARTED) {
    event.set_can_wait_warm(options_.can_wait_warm);
    event.set_can_recover_in_place(options_.can_recover_in_place);
  }
  if (!client_->SendEvent(event).ok()) {
    absl::MutexLock lock(&mu_);
    ++failures_;
  }
}

int64_t HeartbeatReporter::LatestStep() const {
  absl::MutexLock lock(&mu_);
  return latest_.step();
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

void HeartbeatReporter::WatchCollectives(std::function<CollectiveCount()> collectives) {
  absl::MutexLock lock(&mu_);
  collectives_ = std::move(collectives);
}

void HeartbeatReporter::Loop() {
  while (true) {
    agent_pb::Heartbeat heartbeat;
    std::function<CollectiveCount()> collectives;
    {
      absl::MutexLock lock(&mu_);
      // Wakes at the interval, or at once when stopping.
      mu_.AwaitWithTimeout(absl::Condition(&stopping_), options_.interval);
      if (stopping_) return;
      if (!ShouldHeartbeat(options_.now(), last_progress_, options_.stall_after)) continue;
      heartbeat = latest_;
      heartbeat.set_compute_s(compute_count_ > 0 ? compute_sum_ / compute_count_ : 0);
      compute_sum_ = 0;
      compute_count_ = 0;
      collectives = collectives_;
    }
    if (collectives) {
      // Outside mu_: the recorder has its own lock.
      const CollectiveCount c = collectives();
      heartbeat.set_collective_seq(c.issued);
      heartbeat.set_collectives_finished(c.finished);
    }
    absl::StatusOr<agent_pb::HeartbeatAck> ack = client_->SendHeartbeat(heartbeat);
    absl::MutexLock lock(&mu_);
    if (ack.ok()) {
      ++sent_;
      stop_requested_ = stop_requested_ || ack->stop_requested();
    } else {
      ++failures_;
    }
  }
}

}  // namespace cpptorchrun::worker
