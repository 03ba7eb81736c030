// A recording fake communicator for tests: a world of one whose every call
// is appended to a log (with a caller-supplied probe of outside state taken
// at the moment of the call), completing at once.
#ifndef CPPTORCHRUN_WORKER_COMM_RECORDING_COMM_H_
#define CPPTORCHRUN_WORKER_COMM_RECORDING_COMM_H_

#include <functional>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/synchronization/mutex.h"
#include "worker/comm/comm.h"

namespace cpptorchrun::worker {

class RecordingCommunicator final : public Communicator {
 public:
  // `log` receives "allreduce <count>", "broadcast <count>", "barrier".
  explicit RecordingCommunicator(std::function<void(const std::string&)> log) : log_(std::move(log)) {}

  int rank() const override { return 0; }
  int world_size() const override { return 1; }
  std::string backend() const override { return "recording"; }
  std::shared_ptr<Work> AllReduceAsync(void*, int64_t count, DType, ReduceOp) override {
    log_(absl::StrCat("allreduce ", count));
    return CompletedWork(allreduce_result ? allreduce_result() : absl::OkStatus());
  }
  std::shared_ptr<Work> BroadcastAsync(void*, int64_t count, DType, int) override {
    log_(absl::StrCat("broadcast ", count));
    return CompletedWork(absl::OkStatus());
  }
  absl::Status Barrier() override {
    log_("barrier");
    return absl::OkStatus();
  }
  void Abort(const std::string& reason) override { log_("abort " + reason); }

  // Optional: each all-reduce's outcome (a peer gone: Unavailable).
  std::function<absl::Status()> allreduce_result;

 private:
  std::function<void(const std::string&)> log_;
};

}  // namespace cpptorchrun::worker

#endif  // CPPTORCHRUN_WORKER_COMM_RECORDING_COMM_H_
