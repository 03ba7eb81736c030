// Shared pieces of the communicator interface: dtype facts, the clock of
// WorkTimes, completed work, and the single-process communicator.
#include "worker/comm/comm.h"

#include <chrono>

namespace cpptorchrun::worker {

double SteadySeconds() {
  return std::chrono::duration<double>(std::chrono::steady_clock::now().time_since_epoch()).count();
}

namespace {

class DoneWork final : public Work {
 public:
  explicit DoneWork(absl::Status status) : status_(std::move(status)) {}
  absl::Status Wait() override { return status_; }
  bool IsCompleted() override { return true; }

 private:
  const absl::Status status_;
};

class SingleProcessCommunicator final : public Communicator {
 public:
  int rank() const override { return 0; }
  int world_size() const override { return 1; }
  std::string backend() const override { return "single"; }
  std::shared_ptr<Work> AllReduceAsync(void*, int64_t, DType, ReduceOp) override {
    return CompletedWork(Check());
  }
  std::shared_ptr<Work> BroadcastAsync(void*, int64_t, DType, int root) override {
    if (root != 0) return CompletedWork(absl::InvalidArgumentError("broadcast root must be 0"));
    return CompletedWork(Check());
  }
  absl::Status Barrier() override { return Check(); }
  void Abort(const std::string& reason) override { aborted_ = reason.empty() ? "aborted" : reason; }

 private:
  absl::Status Check() const {
    return aborted_.empty() ? absl::OkStatus() : absl::AbortedError(aborted_);
  }
  std::string aborted_;
};

}  // namespace

size_t DTypeSize(DType dtype) {
  switch (dtype) {
    case DType::kFloat32:
      return 4;
    case DType::kFloat64:
    case DType::kInt64:
      return 8;
    case DType::kUint8:
      return 1;
    case DType::kFloat16:
    case DType::kBFloat16:
      return 2;
  }
  return 1;
}

const char* DTypeName(DType dtype) {
  switch (dtype) {
    case DType::kFloat32:
      return "float32";
    case DType::kFloat64:
      return "float64";
    case DType::kInt64:
      return "int64";
    case DType::kUint8:
      return "uint8";
    case DType::kFloat16:
      return "float16";
    case DType::kBFloat16:
      return "bfloat16";
  }
  return "?";
}

std::shared_ptr<Work> CompletedWork(absl::Status status) {
  return std::make_shared<DoneWork>(std::move(status));
}

std::unique_ptr<Communicator> NewSingleProcessCommunicator() {
  return std::make_unique<SingleProcessCommunicator>();
}

}  // namespace cpptorchrun::worker
