// Test fakes.
#include "launcher/agent/fakes.h"

#include <signal.h>

#include <algorithm>
#include <utility>

#include "absl/status/status.h"

namespace cpptorchrun::launcher {
namespace {

// Moves `clock` forward to `t`; never backwards. Only the fake launcher (under
// its lock) and the test's own thread move a test's clock, so reading then
// advancing does not race with another mover.
void AdvanceClockTo(base::FakeClock* clock, absl::Time t) {
  const absl::Time now = clock->Now();
  if (t > now) clock->Advance(t - now);
}

}  // namespace

// --- FakeProcessLauncher ------------------------------------------------------

absl::StatusOr<pid_t> FakeProcessLauncher::Start(const ProcessSpec& spec) {
  Started s;
  {
    absl::MutexLock lock(&mu_);
    if (fail_starts > 0) {
      --fail_starts;
      return absl::FailedPreconditionError("cannot exec " + spec.argv.at(0) + ": fake failure");
    }
    s.pid = next_pid_++;
    spares_ready_.erase(spec.slot);  // a ready spare becomes the worker
    s.spec = spec;
    s.time = clock_->Now();
    started_.push_back(s);
    alive_.insert(s.pid);
  }
  if (on_start) on_start(*this, s);
  return s.pid;
}

void FakeProcessLauncher::ExitLocked(pid_t pid, ExitStatus status, std::vector<ProcessEvent>* out) {
  if (alive_.erase(pid) == 0) return;
  // Its output ends with it (no children hold its pipes here).
  for (const Started& s : started_) {
    if (s.pid == pid && s.spec.stderr_sink.tail != nullptr) s.spec.stderr_sink.tail->Close();
  }
  ProcessEvent e;
  e.kind = ProcessEvent::Kind::kExited;
  e.pid = pid;
  e.status = status;
  out->push_back(e);
}

void FakeProcessLauncher::SignalGroup(pid_t pid, int signo) {
  absl::MutexLock lock(&mu_);
  signals_.push_back({pid, signo});
  if (alive_.count(pid) == 0 || unkillable_.count(pid) != 0) return;
  if (signo == SIGKILL || (signo == SIGTERM && ignore_term_.count(pid) == 0) || signo == SIGINT ||
      signo == SIGHUP || signo == SIGQUIT) {
    ExitLocked(pid, ExitStatus::Killed(signo), &ready_);
  }
}

void FakeProcessLauncher::Signal(pid_t pid, int signo) {
  std::function<void(FakeProcessLauncher&, pid_t, int)> hook;
  {
    absl::MutexLock lock(&mu_);
    signals_.push_back({pid, signo});
    if (alive_.count(pid) == 0 || unkillable_.count(pid) != 0) return;
    hook = on_signal;
  }
  if (hook) hook(*this, pid, signo);
  absl::MutexLock lock(&mu_);
  if (signo == SIGKILL || signo == SIGABRT || (signo == SIGTERM && ignore_term_.count(pid) == 0)) {
    ExitLocked(pid, ExitStatus::Killed(signo), &ready_);
  }
}

void FakeProcessLauncher::Schedule(absl::Time t, Scheduled s) {
  absl::MutexLock lock(&mu_);
  s.t = t;
  s.seq = seq_++;
  schedule_.push_back(std::move(s));
}

void FakeProcessLauncher::ExitAt(pid_t pid, absl::Time t, ExitStatus status) {
  Scheduled s;
  s.kind = Scheduled::Kind::kExit;
  s.pid = pid;
  s.status = status;
  Schedule(t, std::move(s));
}

void FakeProcessLauncher::SignalLauncherAt(absl::Time t, int signo, const std::string& sender) {
  Scheduled s;
  s.kind = Scheduled::Kind::kSignal;
  s.signo = signo;
  s.sender = sender;
  Schedule(t, std::move(s));
}

void FakeProcessLauncher::CallAt(absl::Time t, std::function<void()> fn) {
  Scheduled s;
  s.kind = Scheduled::Kind::kCall;
  s.call = std::move(fn);
  Schedule(t, std::move(s));
}

void FakeProcessLauncher::IgnoreSigterm(pid_t pid) {
  absl::MutexLock lock(&mu_);
  ignore_term_.insert(pid);
}

void FakeProcessLauncher::SetState(pid_t pid, const std::string& state) {
  absl::MutexLock lock(&mu_);
  states_[pid] = state;
}

void FakeProcessLauncher::Unkillable(pid_t pid, const std::string& state) {
  absl::MutexLock lock(&mu_);
  unkillable_.insert(pid);
  states_[pid] = state;
}

void FakeProcessLauncher::SetCpuTicks(pid_t pid, int64_t ticks) {
  absl::MutexLock lock(&mu_);
  cpu_ticks_[pid] = ticks;
}

std::optional<int64_t> FakeProcessLauncher::CpuTicks(pid_t pid) {
  absl::MutexLock lock(&mu_);
  auto it = cpu_ticks_.find(pid);
  if (alive_.count(pid) == 0 || it == cpu_ticks_.end()) return std::nullopt;
  return it->second;
}

std::string FakeProcessLauncher::State(pid_t pid) {
  absl::MutexLock lock(&mu_);
  if (alive_.count(pid) == 0) return "gone";
  auto it = states_.find(pid);
  return it != states_.end() ? it->second : "running";
}

std::vector<ProcessEvent> FakeProcessLauncher::Wait(absl::Time deadline) {
  std::vector<std::function<void()>> calls;
  {
    absl::MutexLock lock(&mu_);
    if (ready_.empty() && wakeups_ == 0) {
      auto earliest = std::min_element(schedule_.begin(), schedule_.end(),
                                       [](const Scheduled& a, const Scheduled& b) {
                                         return a.t != b.t ? a.t < b.t : a.seq < b.seq;
                                       });
      if (earliest == schedule_.end() || earliest->t > deadline) {
        AdvanceClockTo(clock_, deadline);
        return {};
      }
      const absl::Time t = earliest->t;
      AdvanceClockTo(clock_, t);
      std::vector<Scheduled> due, rest;
      for (Scheduled& s : schedule_) (s.t <= t ? due : rest).push_back(std::move(s));
      schedule_.swap(rest);
      std::sort(due.begin(), due.end(),
                [](const Scheduled& a, const Scheduled& b) { return a.seq < b.seq; });
      for (Scheduled& s : due) {
        if (s.kind == Scheduled::Kind::kExit) {
          ExitLocked(s.pid, s.status, &ready_);
        } else if (s.kind == Scheduled::Kind::kSignal) {
          ProcessEvent e;
          e.kind = ProcessEvent::Kind::kSignal;
          e.signo = s.signo;
          e.sender = s.sender;
          e.sender_pid = s.sender.empty() ? 0 : 4242;
          ready_.push_back(e);
        } else {
          calls.push_back(std::move(s.call));
        }
      }
    }
  }
  for (auto& c : calls) c();
  absl::MutexLock lock(&mu_);
  std::vector<ProcessEvent> out;
  out.swap(ready_);
  if (wakeups_ > 0) {
    wakeups_ = 0;
    out.push_back({ProcessEvent::Kind::kWakeup});
  }
  return out;
}

void FakeProcessLauncher::Wakeup() {
  absl::MutexLock lock(&mu_);
  ++wakeups_;
}

void FakeProcessLauncher::PrepareNextStart() {
  absl::MutexLock lock(&mu_);
  prepared_.push_back(clock_->Now());
}

bool FakeProcessLauncher::WantSpare(int slot) {
  absl::MutexLock lock(&mu_);
  spares_wanted_.push_back(slot);
  return spares_come;
}

bool FakeProcessLauncher::SpareReady(int slot) {
  absl::MutexLock lock(&mu_);
  return spares_ready_.count(slot) != 0;
}

void FakeProcessLauncher::MakeSpareReady(int slot) {
  absl::MutexLock lock(&mu_);
  spares_ready_.insert(slot);
}

std::vector<int> FakeProcessLauncher::spares_wanted() const {
  absl::MutexLock lock(&mu_);
  return spares_wanted_;
}

std::vector<absl::Time> FakeProcessLauncher::prepared() const {
  absl::MutexLock lock(&mu_);
  return prepared_;
}

std::vector<FakeProcessLauncher::Started> FakeProcessLauncher::started() const {
  absl::MutexLock lock(&mu_);
  return started_;
}

std::vector<std::pair<pid_t, int>> FakeProcessLauncher::signals_sent() const {
  absl::MutexLock lock(&mu_);
  return signals_;
}

std::set<pid_t> FakeProcessLauncher::alive() const {
  absl::MutexLock lock(&mu_);
  return alive_;
}

// --- FakeRoundMonitor ---------------------------------------------------------

void FakeRoundMonitor::Start(const rdzv::v1::Assignment&, int restart_count,
                             std::function<void()> on_end) {
  absl::MutexLock lock(&mu_);
  end_ = RoundEnd{};
  on_end_ = std::move(on_end);
  restart_counts_.push_back(restart_count);
}

void FakeRoundMonitor::Stop() {
  absl::MutexLock lock(&mu_);
  on_end_ = nullptr;
}

RoundEnd FakeRoundMonitor::Poll() {
  absl::MutexLock lock(&mu_);
  return end_;
}

void FakeRoundMonitor::End(const std::string& reason, bool run_closed) {
  std::function<void()> cb;
  {
    absl::MutexLock lock(&mu_);
    end_.ended = true;
    end_.run_closed = run_closed;
    end_.reason = reason;
    cb = on_end_;
  }
  if (cb) cb();
}

int FakeRoundMonitor::starts() const {
  absl::MutexLock lock(&mu_);
  return static_cast<int>(restart_counts_.size());
}

std::vector<int> FakeRoundMonitor::restart_counts() const {
  absl::MutexLock lock(&mu_);
  return restart_counts_;
}

// --- FakeRendezvousClient -----------------------------------------------------

FakeRendezvousClient::FakeRendezvousClient(int group_rank, int group_world_size)
    : group_rank_(group_rank), group_world_size_(group_world_size), store_(rdzv::NewInMemoryStore()) {}

absl::StatusOr<rdzv::v1::Assignment> FakeRendezvousClient::Join(const rdzv::v1::JoinRequest& request,
                                                                const rdzv::JoinHooks& hooks) {
  absl::MutexLock lock(&mu_);
  joins_.push_back(request);
  if (!join_error.ok()) return join_error;
  for (int i = 0; i < quarantined_answers && hooks.on_quarantined; ++i) hooks.on_quarantined(quarantine_detail);
  if (block_joins) {
    mu_.Await(absl::Condition(&cancelled_));
    ++blocked_joins_returned_;
    return absl::CancelledError("the client was cancelled");
  }
  round_ = std::max(round_, request.last_round()) + 1;
  ++version_;
  ended_ = false;
  const int lws = request.node().local_world_size();
  rdzv::v1::Assignment a;
  a.set_round(round_);
  a.set_group_rank(group_rank_);
  a.set_group_world_size(group_world_size_);
  a.set_rank_offset(group_rank_ * lws);
  a.set_world_size(group_world_size_ * lws);
  a.set_master_addr(group_rank_ == 0 ? request.node().host() : "10.9.9.9");
  a.set_master_port(request.node().free_port());
  return a;
}

absl::StatusOr<rdzv::v1::RunEvent> FakeRendezvousClient::KeepAlive(const rdzv::v1::KeepAliveRequest& request) {
  absl::MutexLock lock(&mu_);
  keep_alives_.push_back(request);
  rdzv::v1::RunEvent e;
  e.set_version(version_);
  e.set_current_round(round_);
  e.set_round_current(!ended_ && request.assignment().round() == round_);
  e.set_reason(reason_);
  return e;
}

absl::StatusOr<rdzv::v1::RunEvent> FakeRendezvousClient::Watch(const std::string&, const std::string&,
                                                               int64_t round, int64_t version,
                                                               absl::Duration timeout) {
  absl::MutexLock lock(&mu_);
  auto moved = [this, version]() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) { return version_ > version; };
  mu_.AwaitWithTimeout(absl::Condition(&moved), timeout);
  rdzv::v1::RunEvent e;
  e.set_version(version_);
  e.set_current_round(round_);
  e.set_round_current(!ended_ && round == round_);
  e.set_reason(reason_);
  return e;
}

void FakeRendezvousClient::EndRound(const std::string& reason) {
  absl::MutexLock lock(&mu_);
  ended_ = true;
  reason_ = reason;
  ++version_;
}

absl::Status FakeRendezvousClient::Leave(const std::string&, const std::string& node_id,
                                         const std::string& reason, const std::string&) {
  absl::MutexLock lock(&mu_);
  leaves_.push_back(reason);
  ++version_;
  if (block_leaves) {
    mu_.Await(absl::Condition(&cancelled_));
    return absl::CancelledError("cancelled");
  }
  return absl::OkStatus();
}

absl::Status FakeRendezvousClient::Close(const std::string&, const std::string& reason, const std::string&,
                                         const std::string&) {
  absl::MutexLock lock(&mu_);
  closes_.push_back(reason);
  ++version_;
  return absl::OkStatus();
}

absl::StatusOr<rdzv::v1::RunStatusResponse> FakeRendezvousClient::RunStatus(const std::string&) {
  absl::MutexLock lock(&mu_);
  if (run_status_answers_.empty()) return absl::UnimplementedError("fake");
  const size_t i = std::min<size_t>(run_status_calls_++, run_status_answers_.size() - 1);
  return run_status_answers_[i];
}

void FakeRendezvousClient::SetRunStatusAnswers(
    std::vector<absl::StatusOr<rdzv::v1::RunStatusResponse>> answers) {
  absl::MutexLock lock(&mu_);
  run_status_answers_ = std::move(answers);
  run_status_calls_ = 0;
}

int FakeRendezvousClient::run_status_calls() const {
  absl::MutexLock lock(&mu_);
  return run_status_calls_;
}

namespace {
// Shares one store among OpenStore callers.
class SharedStore final : public rdzv::Store {
 public:
  explicit SharedStore(std::shared_ptr<rdzv::Store> s) : s_(std::move(s)) {}
  absl::Status Set(const std::string& k, const std::string& v) override { return s_->Set(k, v); }
  absl::StatusOr<std::string> Get(const std::string& k, absl::Duration t) override { return s_->Get(k, t); }
  absl::StatusOr<int64_t> Add(const std::string& k, int64_t d) override { return s_->Add(k, d); }
  absl::StatusOr<std::string> CompareSet(const std::string& k, const std::optional<std::string>& e,
                                         const std::string& d, bool* sw) override {
    return s_->CompareSet(k, e, d, sw);
  }
  absl::StatusOr<bool> Delete(const std::string& k) override { return s_->Delete(k); }
  absl::StatusOr<std::vector<std::string>> MultiGet(const std::vector<std::string>& k,
                                                    absl::Duration t) override {
    return s_->MultiGet(k, t);
  }
  absl::Status MultiSet(const std::vector<std::pair<std::string, std::string>>& e) override {
    return s_->MultiSet(e);
  }

 private:
  std::shared_ptr<rdzv::Store> s_;
};
}  // namespace

std::unique_ptr<rdzv::Store> FakeRendezvousClient::OpenStore(const std::string&, int64_t) {
  return std::make_unique<SharedStore>(store_);
}

void FakeRendezvousClient::Cancel() {
  absl::MutexLock lock(&mu_);
  cancelled_ = true;
}

int FakeRendezvousClient::blocked_joins_returned() const {
  absl::MutexLock lock(&mu_);
  return blocked_joins_returned_;
}

std::vector<rdzv::v1::JoinRequest> FakeRendezvousClient::joins() const {
  absl::MutexLock lock(&mu_);
  return joins_;
}
std::vector<rdzv::v1::KeepAliveRequest> FakeRendezvousClient::keep_alives() const {
  absl::MutexLock lock(&mu_);
  return keep_alives_;
}
bool FakeRendezvousClient::WaitForKeepAlives(size_t n, absl::Duration timeout) const {
  absl::MutexLock lock(&mu_);
  auto enough = [this, n]() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) { return keep_alives_.size() >= n; };
  return mu_.AwaitWithTimeout(absl::Condition(&enough), timeout);
}

std::vector<std::string> FakeRendezvousClient::leaves() const {
  absl::MutexLock lock(&mu_);
  return leaves_;
}
std::vector<std::string> FakeRendezvousClient::closes() const {
  absl::MutexLock lock(&mu_);
  return closes_;
}

}  // namespace cpptorchrun::launcher
