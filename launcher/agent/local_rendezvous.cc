// The local single-node rendezvous.
#include "launcher/agent/local_rendezvous.h"

#include <map>

#include "absl/base/thread_annotations.h"
#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "absl/synchronization/mutex.h"

namespace cpptorchrun::launcher {
namespace {

class LocalRendezvous final : public rdzv::RendezvousClient {
 public:
  absl::StatusOr<rdzv::v1::Assignment> Join(const rdzv::v1::JoinRequest& request) override {
    if (request.options().min_nodes() > 1) {
      return absl::InvalidArgumentError(absl::StrCat(
          "the local rendezvous serves one node; --nnodes asks for ", request.options().min_nodes()));
    }
    absl::MutexLock lock(&mu_);
    round_ = std::max(round_, request.last_round()) + 1;
    ++version_;
    closed_ = false;
    node_ = request.node();
    rdzv::v1::Assignment a;
    a.set_round(round_);
    a.set_group_rank(0);
    a.set_group_world_size(1);
    a.set_rank_offset(0);
    a.set_world_size(request.node().local_world_size());
    auto* p = a.add_participants();
    p->set_node_id(request.node().node_id());
    p->set_host(request.node().host());
    p->set_group_rank(0);
    p->set_local_world_size(request.node().local_world_size());
    p->set_rank_offset(0);
    a.set_master_addr(request.node().host());
    a.set_master_port(request.node().free_port());
    restart_count_ = 0;
    return a;
  }

  absl::StatusOr<rdzv::v1::RunEvent> KeepAlive(const rdzv::v1::KeepAliveRequest& request) override {
    absl::MutexLock lock(&mu_);
    progress_.assign(request.progress().begin(), request.progress().end());
    restart_count_ = request.restart_count();
    return EventLocked(request.assignment().round());
  }

  absl::StatusOr<rdzv::v1::RunEvent> Watch(const std::string& run_id, const std::string& node_id,
                                           int64_t round, int64_t version,
                                           absl::Duration timeout) override {
    absl::MutexLock lock(&mu_);
    auto moved = [this, version]() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) { return version_ > version; };
    mu_.AwaitWithTimeout(absl::Condition(&moved), timeout);
    return EventLocked(round);
  }

  absl::Status Leave(const std::string&, const std::string&, const std::string& reason,
                     const std::string&) override {
    absl::MutexLock lock(&mu_);
    ++version_;
    reason_ = reason;
    return absl::OkStatus();
  }

  absl::Status Close(const std::string&, const std::string& reason, const std::string&,
                     const std::string&) override {
    absl::MutexLock lock(&mu_);
    ++version_;
    closed_ = true;
    reason_ = reason;
    return absl::OkStatus();
  }

  absl::StatusOr<rdzv::v1::RunStatusResponse> RunStatus(const std::string& run_id) override {
    absl::MutexLock lock(&mu_);
    rdzv::v1::RunStatusResponse r;
    r.set_run_id(run_id);
    r.set_round(round_);
    r.set_state(closed_ ? rdzv::v1::RunStatusResponse::CLOSED : rdzv::v1::RunStatusResponse::ACTIVE);
    auto* n = r.add_nodes();
    n->mutable_participant()->set_node_id(node_.node_id());
    n->mutable_participant()->set_host(node_.host());
    n->mutable_participant()->set_local_world_size(node_.local_world_size());
    n->set_restart_count(restart_count_);
    for (const auto& p : progress_) *n->add_progress() = p;
    r.set_version(version_);
    return r;
  }

  std::unique_ptr<rdzv::Store> OpenStore(const std::string&, int64_t) override {
    return rdzv::NewInMemoryStore();
  }

 private:
  rdzv::v1::RunEvent EventLocked(int64_t round) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) {
    rdzv::v1::RunEvent e;
    e.set_version(version_);
    e.set_current_round(round_);
    e.set_round_current(round == round_ && !closed_);
    e.set_run_closed(closed_);
    e.set_reason(reason_);
    return e;
  }

  absl::Mutex mu_;
  int64_t round_ ABSL_GUARDED_BY(mu_) = 0;
  int64_t version_ ABSL_GUARDED_BY(mu_) = 0;
  bool closed_ ABSL_GUARDED_BY(mu_) = false;
  std::string reason_ ABSL_GUARDED_BY(mu_);
  rdzv::v1::NodeInfo node_ ABSL_GUARDED_BY(mu_);
  int restart_count_ ABSL_GUARDED_BY(mu_) = 0;
  std::vector<rdzv::v1::RankProgress> progress_ ABSL_GUARDED_BY(mu_);
};

}  // namespace

std::unique_ptr<rdzv::RendezvousClient> NewLocalRendezvousClient() {
  return std::make_unique<LocalRendezvous>();
}

}  // namespace cpptorchrun::launcher
