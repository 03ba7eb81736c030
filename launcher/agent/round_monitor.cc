// The round monitor thread: KeepAlive when due, Watch in between.
#include "launcher/agent/round_monitor.h"

#include <utility>

#include "absl/strings/str_cat.h"
#include "base/printable.h"
#include "launcher/agent/straggler_policy.h"
#include "spdlog/spdlog.h"

namespace cpptorchrun::launcher {
namespace {

class GrpcRoundMonitor final : public RoundMonitor {
 public:
  explicit GrpcRoundMonitor(RoundMonitorOptions options) : options_(std::move(options)) {}
  ~GrpcRoundMonitor() override {
    Stop();
    if (thread_.joinable()) thread_.join();
  }

  void Start(const rdzv::v1::Assignment& assignment, int restart_count,
             std::function<void()> on_end) override {
    Stop();
    if (thread_.joinable()) thread_.join();
    {
      absl::MutexLock lock(&mu_);
      stop_ = false;
      end_ = RoundEnd{};
    }
    thread_ = std::thread([this, assignment, restart_count, on_end = std::move(on_end)] {
      Loop(assignment, restart_count, on_end);
    });
  }

  void Stop() override {
    absl::MutexLock lock(&mu_);
    stop_ = true;
  }

  RoundEnd Poll() override {
    absl::MutexLock lock(&mu_);
    return end_;
  }

 private:
  bool Stopped() {
    absl::MutexLock lock(&mu_);
    return stop_;
  }

  // True when the event ends the round (recorded, callback run).
  bool Handle(const rdzv::v1::RunEvent& e, const std::function<void()>& on_end) {
    if (e.round_current() && !e.run_closed()) return false;
    {
      absl::MutexLock lock(&mu_);
      if (stop_) return true;
      end_.ended = true;
      end_.run_closed = e.run_closed();
      end_.reason = e.reason().empty() ? (e.run_closed() ? "run closed" : "round ended") : base::Printable(e.reason());
    }
    on_end();
    return true;
  }

  void Loop(const rdzv::v1::Assignment& assignment, int restart_count,
            const std::function<void()>& on_end) {
    int64_t version = 0;
    absl::Time next_keep_alive = absl::Now();
    int failures = 0;
    const int max_attempts = std::max(1, options_.run_options.keep_alive_max_attempt());
    for (int iter = 0; !Stopped(); ++iter) {
      if (absl::Now() >= next_keep_alive) {
        rdzv::v1::KeepAliveRequest req;
        req.set_run_id(options_.run_id);
        req.set_node_id(options_.node.node_id());
        *req.mutable_assignment() = assignment;
        req.set_restart_count(restart_count);
        *req.mutable_node() = options_.node;
        *req.mutable_options() = options_.run_options;
        if (options_.progress != nullptr) {
          if (auto last = options_.progress->LastRestart(); last.has_value()) *req.mutable_last_restart() = *last;
          if (auto faults = options_.progress->Faults(); faults.has_value()) *req.mutable_faults() = *faults;
          absl::Time now = options_.progress->clock()->Now();
          for (const RankReport& r : options_.progress->Snapshot()) {
            auto* p = req.add_progress();
            const agent::v1::Heartbeat& hb = r.heartbeat;
            p->set_rank(hb.rank());
            p->set_local_rank(hb.local_rank());
            p->set_epoch(hb.epoch());
            p->set_step(hb.step());
            p->set_total_steps(hb.total_steps());
            p->set_loss(hb.loss());
            p->set_samples_per_s(hb.samples_per_s());
            p->set_collective_seq(hb.collective_seq());
            if (std::optional<double> m = WindowMedian(r.compute, options_.straggler_window)) {
              p->set_compute_median_s(*m);
            }
            p->set_heartbeat_age_ms(r.last_heartbeat ? absl::ToInt64Milliseconds(now - *r.last_heartbeat) : -1);
          }
        }
        auto ev = options_.client->KeepAlive(req);
        next_keep_alive = absl::Now() + options_.keep_alive_interval;
        if (ev.ok()) {
          failures = 0;
          if (ev->version() > version) version = ev->version();
          if (Handle(*ev, on_end)) return;
        } else {
          ++failures;
          spdlog::warn("keep-alive to the rendezvous failed ({} of {}): {}", failures, max_attempts,
                       ev.status().ToString());
          if (ev.status().code() == absl::StatusCode::kNotFound ||
              ev.status().code() == absl::StatusCode::kFailedPrecondition || failures >= max_attempts) {
            rdzv::v1::RunEvent lost;
            lost.set_round_current(false);
            lost.set_reason(absl::StrCat("keep-alive failed: ", ev.status().message()));
            Handle(lost, on_end);
            return;
          }
        }
      }
      absl::Duration wait = std::max(absl::Milliseconds(1), next_keep_alive - absl::Now());
      auto ev = options_.client->Watch(options_.run_id, options_.node.node_id(), assignment.round(),
                                       version, wait);
      if (ev.ok()) {
        if (ev->version() > version) version = ev->version();
        if (Handle(*ev, on_end)) return;
      } else if (!Stopped()) {
        // Watch errors are retried at the next keep-alive, which decides.
        absl::MutexLock lock(&mu_);
        mu_.AwaitWithTimeout(absl::Condition(&stop_), std::min(wait, absl::Milliseconds(200)));
      }
    }
  }

  RoundMonitorOptions options_;
  absl::Mutex mu_;
  bool stop_ ABSL_GUARDED_BY(mu_) = false;
  RoundEnd end_ ABSL_GUARDED_BY(mu_);
  std::thread thread_;
};

}  // namespace

std::unique_ptr<RoundMonitor> NewRoundMonitor(const RoundMonitorOptions& options) {
  return std::make_unique<GrpcRoundMonitor>(options);
}

}  // namespace cpptorchrun::launcher
