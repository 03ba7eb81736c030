// The NCCL communicator: rank 0's ncclGetUniqueId shared through the round's
// store (nccl_bootstrap.h), ncclCommInitRank, collectives on a CUDA stream of
// its own, ncclCommAbort on Abort. Buffers may live on the device or on the
// host (host buffers are staged through device memory, so a CPU-only
// LibTorch can still use it). Built only where CUDA and NCCL are present;
// elsewhere NcclBuilt() is false and NewNcclCommunicator answers
// Unimplemented.
#ifndef CPPTORCHRUN_WORKER_COMM_NCCL_COMM_H_
#define CPPTORCHRUN_WORKER_COMM_NCCL_COMM_H_

#include <memory>

#include "absl/status/statusor.h"
#include "absl/time/time.h"
#include "rendezvous/store.h"
#include "worker/comm/comm.h"

namespace cpptorchrun::worker {

struct NcclOptions {
  // Borrowed; used only during NewNcclCommunicator.
  rdzv::Store* store = nullptr;
  int rank = 0;
  int world_size = 1;
  // The CUDA device this rank drives (LOCAL_RANK).
  int device = 0;
  absl::Duration timeout = absl::Seconds(60);
};

// Whether this binary was built with CUDA and NCCL.
bool NcclBuilt();

// CUDA devices visible to this process; 0 without CUDA or without a GPU.
int CudaDeviceCount();

// Errors: Unimplemented without NCCL in the build; FailedPrecondition for a
// missing device; the bootstrap's and NCCL's errors, named.
absl::StatusOr<std::unique_ptr<Communicator>> NewNcclCommunicator(const NcclOptions& options);

}  // namespace cpptorchrun::worker

#endif  // CPPTORCHRUN_WORKER_COMM_NCCL_COMM_H_
