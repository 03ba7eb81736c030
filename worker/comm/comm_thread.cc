// CommThread: a queue of collectives and the thread that drains it.
#include "worker/comm/comm_thread.h"

#include <utility>

namespace cpptorchrun::worker {

class CommThread::Task final : public Work {
 public:
  explicit Task(std::function<absl::Status()> op) : op_(std::move(op)) {}

  absl::Status Wait() override {
    absl::MutexLock lock(&mu_);
    mu_.Await(absl::Condition(&done_));
    return status_;
  }
  bool IsCompleted() override {
    absl::MutexLock lock(&mu_);
    return done_;
  }
  std::optional<WorkTimes> Times() override {
    absl::MutexLock lock(&mu_);
    return done_ ? times_ : std::nullopt;
  }
  void Run() {
    const double started = SteadySeconds();
    absl::Status status = op_();
    Finish(std::move(status), WorkTimes{started, SteadySeconds()});
  }
  void Finish(absl::Status status, std::optional<WorkTimes> times = std::nullopt) {
    absl::MutexLock lock(&mu_);
    if (done_) return;
    status_ = std::move(status);
    if (status_.ok()) times_ = times;
    done_ = true;
  }

 private:
  std::function<absl::Status()> op_;
  absl::Mutex mu_;
  bool done_ ABSL_GUARDED_BY(mu_) = false;
  absl::Status status_ ABSL_GUARDED_BY(mu_);
  std::optional<WorkTimes> times_ ABSL_GUARDED_BY(mu_);
};

CommThread::CommThread() : thread_([this] { Loop(); }) {}

CommThread::~CommThread() {
  {
    absl::MutexLock lock(&mu_);
    stopping_ = true;
    for (auto& task : queue_) task->Finish(absl::AbortedError("communicator shut down"));
    queue_.clear();
  }
  thread_.join();
}

std::shared_ptr<Work> CommThread::Submit(std::function<absl::Status()> op) {
  auto task = std::make_shared<Task>(std::move(op));
  absl::MutexLock lock(&mu_);
  if (!abort_reason_.empty()) {
    task->Finish(absl::AbortedError(abort_reason_));
  } else if (stopping_) {
    task->Finish(absl::AbortedError("communicator shut down"));
  } else {
    queue_.push_back(task);
  }
  return task;
}

void CommThread::Abort(const std::string& reason) {
  std::function<void()> after;
  {
    absl::MutexLock lock(&mu_);
    abort_reason_ = reason.empty() ? "communicator aborted" : reason;
    for (auto& task : queue_) task->Finish(absl::AbortedError(abort_reason_));
    queue_.clear();
    if (!running_) after = TakeAfterAbort();
  }
  if (after) after();
}

void CommThread::SetAfterAbort(std::function<void()> fn) {
  absl::MutexLock lock(&mu_);
  after_abort_ = std::move(fn);
}

std::function<void()> CommThread::TakeAfterAbort() {
  if (abort_reason_.empty()) return nullptr;
  std::function<void()> fn = std::move(after_abort_);
  after_abort_ = nullptr;
  return fn;
}

void CommThread::Loop() {
  while (true) {
    std::shared_ptr<Task> task;
    {
      absl::MutexLock lock(&mu_);
      auto ready = [this]() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) {
        return stopping_ || !queue_.empty();
      };
      mu_.Await(absl::Condition(&ready));
      if (queue_.empty()) return;  // stopping
      task = std::move(queue_.front());
      queue_.pop_front();
      running_ = true;
    }
    task->Run();
    std::function<void()> after;
    {
      absl::MutexLock lock(&mu_);
      running_ = false;
      after = TakeAfterAbort();
    }
    if (after) after();
  }
}

}  // namespace cpptorchrun::worker
