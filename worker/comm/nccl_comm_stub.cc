// The NCCL communicator where the build has no CUDA or NCCL: a clear error.
#include "worker/comm/nccl_comm.h"

namespace cpptorchrun::worker {

bool NcclBuilt() { return false; }

int CudaDeviceCount() { return 0; }

absl::StatusOr<std::unique_ptr<Communicator>> NewNcclCommunicator(const NcclOptions&) {
  return absl::UnimplementedError(
      "--backend nccl: this train was built without CUDA and NCCL (see README: NCCL and CUDA "
      "are taken from $CUDA_HOME or /usr/local/cuda at build time); use --backend gloo");
}

}  // namespace cpptorchrun::worker
