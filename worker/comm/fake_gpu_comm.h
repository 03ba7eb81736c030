// The fake-GPU communicator (CPPTORCHRUN_FAKE_GPU): each worker plays "GPU
// i" but computes on the CPU. The NCCL bootstrap is exercised end to end
// (rank 0's 128-byte unique id through the round's store, checked on every
// rank), then collectives go through a CPU communicator: Gloo by default, or
// the one `make_inner` builds (the backend rule picks shared memory within a
// node and the hierarchical one across nodes, as NCCL's own transports do).
#ifndef CPPTORCHRUN_WORKER_COMM_FAKE_GPU_COMM_H_
#define CPPTORCHRUN_WORKER_COMM_FAKE_GPU_COMM_H_

#include <functional>
#include <memory>
#include <string>

#include "absl/status/statusor.h"
#include "worker/comm/comm.h"
#include "worker/comm/gloo_comm.h"
#include "worker/comm/nccl_bootstrap.h"

namespace cpptorchrun::worker {

struct FakeGpuOptions {
  // Store, rank, world, address and timeout, as for Gloo.
  GlooOptions gloo;
  // This worker's fake GPU index (CPPTORCHRUN_FAKE_GPU).
  int device = 0;
  // How rank 0 makes the unique id; tests may inject one.
  UniqueIdMaker make_id = RandomUniqueId;
  // Builds the communicator that carries the collectives once the id is
  // shared; empty: Gloo from `gloo` (keys under "fake_gpu/gloo/").
  std::function<absl::StatusOr<std::unique_ptr<Communicator>>()> make_inner;
};

// Errors: the bootstrap's (no id, a differing id) or the inner communicator's.
absl::StatusOr<std::unique_ptr<Communicator>> NewFakeGpuCommunicator(
    const FakeGpuOptions& options);

}  // namespace cpptorchrun::worker

#endif  // CPPTORCHRUN_WORKER_COMM_FAKE_GPU_COMM_H_
