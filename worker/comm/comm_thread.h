// CommThread: turns a backend's blocking collectives into asynchronous ones
// by running them, in submission order, on one dedicated thread. Gloo (and
// the fake-GPU communicator over it) use it so that DDP's all-reduces
// overlap the backward pass.
#ifndef CPPTORCHRUN_WORKER_COMM_COMM_THREAD_H_
#define CPPTORCHRUN_WORKER_COMM_COMM_THREAD_H_

#include <deque>
#include <functional>
#include <memory>
#include <string>
#include <thread>

#include "absl/base/thread_annotations.h"
#include "absl/status/status.h"
#include "absl/synchronization/mutex.h"
#include "worker/comm/comm.h"

namespace cpptorchrun::worker {

class CommThread {
 public:
  CommThread();
  // Fails what is still queued (Aborted) and joins the thread.
  ~CommThread();

  // Queues `op`; its status becomes the Work's. Thread-safe. After Abort()
  // the returned Work has already failed.
  std::shared_ptr<Work> Submit(std::function<absl::Status()> op);

  // Fails everything queued and everything submitted later with Aborted.
  // A task running then finishes on its own; no other runs after it.
  void Abort(const std::string& reason);
  // Called once after an Abort, when no task runs any more: at once on the
  // aborting thread when idle, else on the comm thread when the running
  // task ends. Set it before the first Submit.
  void SetAfterAbort(std::function<void()> fn);

 private:
  class Task;
  void Loop();

  absl::Mutex mu_;
  std::deque<std::shared_ptr<Task>> queue_ ABSL_GUARDED_BY(mu_);
  bool stopping_ ABSL_GUARDED_BY(mu_) = false;
  bool running_ ABSL_GUARDED_BY(mu_) = false;  // a task is running
  std::function<void()> after_abort_ ABSL_GUARDED_BY(mu_);
  // The after-abort call, taken by whoever makes it (once); null otherwise.
  std::function<void()> TakeAfterAbort() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  std::string abort_reason_ ABSL_GUARDED_BY(mu_);
  std::thread thread_;
};

}  // namespace cpptorchrun::worker

#endif  // CPPTORCHRUN_WORKER_COMM_COMM_THREAD_H_
