// Choosing and building the communicator for --backend auto|nccl|gloo|shm:
// the rule is a pure function (tested on its own); MakeCommunicator builds
// the chosen one over the round's store.
#ifndef CPPTORCHRUN_WORKER_COMM_BACKEND_H_
#define CPPTORCHRUN_WORKER_COMM_BACKEND_H_

#include <memory>
#include <optional>
#include <string>

#include "absl/status/statusor.h"
#include "absl/time/time.h"
#include "rendezvous/store.h"
#include "worker/comm/comm.h"

namespace cpptorchrun::worker {

enum class BackendKind { kGloo, kNccl, kFakeGpu, kShm, kHierarchical };

// What carries CPU collectives (for CPU ranks, and under fake GPUs once
// their NCCL id is shared): shared memory when every rank is on this node
// (world_size == local_world_size), hierarchical (shared memory within each
// node, Gloo among the nodes' leaders) when the ranks span nodes, the nodes
// are known (group_world_size > 1: GROUP_WORLD_SIZE was set) and some node
// has more than one rank, Gloo otherwise.
BackendKind CpuCollectives(int world_size, int local_world_size, int group_world_size);

// auto: fake GPUs when CPPTORCHRUN_FAKE_GPU is set (they keep their NCCL
// id bootstrap, the part of the NCCL path they exist to exercise, then
// CpuCollectives carries their collectives), NCCL when it is built and a GPU
// is visible, CpuCollectives otherwise. nccl: fake GPUs stand in for
// it when set; without NCCL in the build or without a GPU, an error saying
// which. gloo: Gloo. shm: shared memory, an error when the ranks span nodes.
// hierarchical: an error when the nodes are not known. Anything else:
// InvalidArgument naming the value.
absl::StatusOr<BackendKind> ChooseBackend(const std::string& flag, bool fake_gpu, bool nccl_built,
                                          int cuda_devices, int world_size, int local_world_size,
                                          int group_world_size = 0);

const char* BackendName(BackendKind kind);

struct CommSetup {
  BackendKind kind = BackendKind::kGloo;
  rdzv::Store* store = nullptr;  // borrowed
  int rank = 0;
  int world_size = 1;
  int local_rank = 0;
  // The process's GPU (NCCL); -1: local_rank. A worker kept through a round
  // change keeps its device while its LOCAL_RANK may change (a node running
  // short, docs/DESIGN.md "In-place recovery").
  int device = -1;
  // The node's ranks and the nodes (the hierarchical backend).
  int local_world_size = 1;
  int group_rank = 0;
  int group_world_size = 1;
  std::optional<int> fake_gpu;
  std::string local_addr = "127.0.0.1";
  absl::Duration timeout = absl::Seconds(60);
};

absl::StatusOr<std::unique_ptr<Communicator>> MakeCommunicator(const CommSetup& setup);

}  // namespace cpptorchrun::worker

#endif  // CPPTORCHRUN_WORKER_COMM_BACKEND_H_
