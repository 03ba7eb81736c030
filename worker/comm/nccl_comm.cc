// The NCCL communicator over the CUDA runtime.
#include "worker/comm/nccl_comm.h"

#include <cuda_runtime_api.h>
#include <nccl.h>

#include <cstring>

#include "absl/strings/str_cat.h"
#include "absl/synchronization/mutex.h"
#include "worker/comm/nccl_bootstrap.h"

namespace cpptorchrun::worker {
namespace {

static_assert(sizeof(ncclUniqueId) == kNcclUniqueIdBytes, "NCCL unique id size");

absl::Status Cuda(cudaError_t e, const char* what) {
  if (e == cudaSuccess) return absl::OkStatus();
  return absl::InternalError(absl::StrCat("CUDA ", what, ": ", cudaGetErrorString(e)));
}

absl::Status Nccl(ncclResult_t r, const char* what) {
  if (r == ncclSuccess) return absl::OkStatus();
  return absl::UnavailableError(absl::StrCat("NCCL ", what, ": ", ncclGetErrorString(r)));
}

ncclDataType_t NcclType(DType dtype) {
  switch (dtype) {
    case DType::kFloat32:
      return ncclFloat32;
    case DType::kFloat64:
      return ncclFloat64;
    case DType::kInt64:
      return ncclInt64;
    case DType::kUint8:
      return ncclUint8;
    case DType::kFloat16:
      return ncclFloat16;
    case DType::kBFloat16:
      return ncclBfloat16;
  }
  return ncclUint8;
}

bool OnDevice(const void* p) {
  cudaPointerAttributes attributes;
  if (cudaPointerGetAttributes(&attributes, p) != cudaSuccess) {
    cudaGetLastError();  // clear the sticky "invalid value" for host pointers
    return false;
  }
  return attributes.type == cudaMemoryTypeDevice || attributes.type == cudaMemoryTypeManaged;
}

// A collective's completion: an event recorded on the stream, and the
// host copy-back when the buffer was staged.
class NcclWork final : public Work {
 public:
  NcclWork(cudaEvent_t event, absl::Status launch) : event_(event), launch_(std::move(launch)) {}
  ~NcclWork() override {
    if (event_ != nullptr) cudaEventDestroy(event_);
  }
  absl::Status Wait() override {
    absl::MutexLock lock(&mu_);
    if (!launch_.ok() || event_ == nullptr) return launch_;
    if (!waited_) {
      result_ = Cuda(cudaEventSynchronize(event_), "event synchronize");
      waited_ = true;
    }
    return result_;
  }
  bool IsCompleted() override {
    absl::MutexLock lock(&mu_);
    return !launch_.ok() || event_ == nullptr || waited_ || cudaEventQuery(event_) == cudaSuccess;
  }

 private:
  cudaEvent_t event_;
  const absl::Status launch_;
  absl::Mutex mu_;
  bool waited_ ABSL_GUARDED_BY(mu_) = false;
  absl::Status result_ ABSL_GUARDED_BY(mu_);
};

class NcclCommunicator final : public Communicator {
 public:
  NcclCommunicator(ncclComm_t comm, cudaStream_t stream, int rank, int world, int device)
      : comm_(comm), stream_(stream), rank_(rank), world_(world), device_(device) {}

  ~NcclCommunicator() override {
    cudaSetDevice(device_);
    cudaStreamSynchronize(stream_);
    if (!aborted_) ncclCommDestroy(comm_);
    for (auto& [size, ptr] : staging_) cudaFree(ptr);
    cudaStreamDestroy(stream_);
  }

  int rank() const override { return rank_; }
  int world_size() const override { return world_; }
  std::string backend() const override { return "nccl"; }

  std::shared_ptr<Work> AllReduceAsync(void* data, int64_t count, DType dtype,
                                       ReduceOp op) override {
    if (op == ReduceOp::kAverage && (dtype == DType::kInt64 || dtype == DType::kUint8)) {
      return CompletedWork(absl::InvalidArgumentError("average all-reduce of integers"));
    }
    return Launch(data, count, dtype, [&](void* buf, cudaStream_t s) {
      return ncclAllReduce(buf, buf, count, NcclType(dtype),
                           op == ReduceOp::kAverage ? ncclAvg : ncclSum, comm_, s);
    });
  }

  std::shared_ptr<Work> BroadcastAsync(void* data, int64_t count, DType dtype, int root) override {
    if (root < 0 || root >= world_) {
      return CompletedWork(absl::InvalidArgumentError(absl::StrCat("broadcast root ", root)));
    }
    return Launch(data, count, dtype, [&](void* buf, cudaStream_t s) {
      return ncclBroadcast(buf, buf, count, NcclType(dtype), root, comm_, s);
    });
  }

  absl::Status Barrier() override {
    // NCCL has no barrier: an all-reduce of one byte serves.
    uint8_t token = 0;
    return AllReduce(&token, 1, DType::kUint8, ReduceOp::kSum);
  }

  void Abort(const std::string& reason) override {
    absl::MutexLock lock(&mu_);
    if (aborted_) return;
    aborted_ = true;
    abort_reason_ = reason.empty() ? "aborted" : reason;
    ncclCommAbort(comm_);
  }

 private:
  template <typename Collective>
  std::shared_ptr<Work> Launch(void* data, int64_t count, DType dtype, Collective collective) {
    absl::MutexLock lock(&mu_);
    if (aborted_) return CompletedWork(absl::AbortedError(abort_reason_));
    const size_t bytes = static_cast<size_t>(count) * DTypeSize(dtype);
    absl::Status status = Cuda(cudaSetDevice(device_), "set device");
    void* buf = data;
    const bool staged = status.ok() && !OnDevice(data);
    if (staged) {
      auto& [size, slot] = staging_[next_staging_++ % kStagingSlots];
      if (size < bytes) {
        if (slot != nullptr) cudaFree(slot);
        slot = nullptr;
        size = 0;
        status = Cuda(cudaMalloc(&slot, bytes), "malloc");
        if (status.ok()) size = bytes;
      }
      buf = slot;
      if (status.ok()) {
        status = Cuda(cudaMemcpyAsync(buf, data, bytes, cudaMemcpyHostToDevice, stream_), "copy in");
      }
    }
    if (status.ok()) status = Nccl(collective(buf, stream_), "collective");
    if (status.ok() && staged) {
      status = Cuda(cudaMemcpyAsync(data, buf, bytes, cudaMemcpyDeviceToHost, stream_), "copy out");
    }
    cudaEvent_t event = nullptr;
    if (status.ok()) status = Cuda(cudaEventCreateWithFlags(&event, cudaEventDisableTiming), "event");
    if (status.ok()) status = Cuda(cudaEventRecord(event, stream_), "record");
    return std::make_shared<NcclWork>(status.ok() ? event : nullptr, status);
  }

  // Host buffers are copied in and out on the stream; a copy back into pageable
  // host memory makes the call wait for the collective.
  // Staging buffers in a ring: a slot is reused only after kStagingSlots
  // later collectives on the same in-order stream.
  static constexpr size_t kStagingSlots = 8;

  ncclComm_t comm_;
  cudaStream_t stream_;
  const int rank_;
  const int world_;
  const int device_;
  absl::Mutex mu_;
  bool aborted_ ABSL_GUARDED_BY(mu_) = false;
  std::string abort_reason_ ABSL_GUARDED_BY(mu_);
  std::pair<size_t, void*> staging_[kStagingSlots] ABSL_GUARDED_BY(mu_) = {};
  size_t next_staging_ ABSL_GUARDED_BY(mu_) = 0;
};

}  // namespace

bool NcclBuilt() { return true; }

int CudaDeviceCount() {
  int count = 0;
  if (cudaGetDeviceCount(&count) != cudaSuccess) {
    cudaGetLastError();
    return 0;
  }
  return count;
}

absl::StatusOr<std::unique_ptr<Communicator>> NewNcclCommunicator(const NcclOptions& options) {
  if (options.store == nullptr) return absl::InvalidArgumentError("nccl: no rendezvous store");
  const int devices = CudaDeviceCount();
  if (options.device < 0 || options.device >= devices) {
    return absl::FailedPreconditionError(absl::StrCat(
        "--backend nccl: CUDA device ", options.device, " is not there (", devices, " visible)"));
  }
  if (absl::Status s = Cuda(cudaSetDevice(options.device), "set device"); !s.ok()) return s;
  absl::StatusOr<std::string> id = ShareNcclUniqueId(
      *options.store, options.rank,
      []() -> absl::StatusOr<std::string> {
        ncclUniqueId made;
        if (absl::Status s = Nccl(ncclGetUniqueId(&made), "get unique id"); !s.ok()) return s;
        return std::string(made.internal, sizeof(made.internal));
      },
      options.timeout);
  if (!id.ok()) return id.status();
  absl::Status same =
      VerifySameUniqueId(*options.store, options.rank, options.world_size, *id, options.timeout);
  if (!same.ok()) return same;
  ncclUniqueId unique;
  std::memcpy(unique.internal, id->data(), sizeof(unique.internal));
  ncclComm_t comm;
  if (absl::Status s = Nccl(ncclCommInitRank(&comm, options.world_size, unique, options.rank),
                            "init rank");
      !s.ok()) {
    return s;
  }
  cudaStream_t stream;
  if (absl::Status s = Cuda(cudaStreamCreateWithFlags(&stream, cudaStreamNonBlocking), "stream");
      !s.ok()) {
    ncclCommDestroy(comm);
    return s;
  }
  return std::unique_ptr<Communicator>(std::make_unique<NcclCommunicator>(
      comm, stream, options.rank, options.world_size, options.device));
}

}  // namespace cpptorchrun::worker
