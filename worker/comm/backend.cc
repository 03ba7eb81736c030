// The backend rule and the communicator factory.
#include "worker/comm/backend.h"

#include "absl/strings/str_cat.h"
#include "worker/comm/fake_gpu_comm.h"
#include "worker/comm/gloo_comm.h"
#include "worker/comm/hierarchical_comm.h"
#include "worker/comm/nccl_comm.h"
#include "worker/comm/shm_comm.h"

namespace cpptorchrun::worker {

BackendKind CpuCollectives(int world_size, int local_world_size, int group_world_size) {
  if (world_size == local_world_size) return BackendKind::kShm;
  // One rank per node: the leaders' Gloo alone is all there is.
  return group_world_size > 1 && world_size > group_world_size ? BackendKind::kHierarchical
                                                               : BackendKind::kGloo;
}

absl::StatusOr<BackendKind> ChooseBackend(const std::string& flag, bool fake_gpu, bool nccl_built,
                                          int cuda_devices, int world_size, int local_world_size,
                                          int group_world_size) {
  const bool one_node = world_size == local_world_size;
  const bool nodes_known = group_world_size > 1;
  if (flag == "gloo") return BackendKind::kGloo;
  if (flag == "auto") {
    if (fake_gpu) return BackendKind::kFakeGpu;
    if (nccl_built && cuda_devices > 0) return BackendKind::kNccl;
    return CpuCollectives(world_size, local_world_size, group_world_size);
  }
  if (flag == "hierarchical") {
    if (!one_node && !nodes_known) {
      return absl::FailedPreconditionError(
          "--backend hierarchical needs the nodes' layout (GROUP_RANK and GROUP_WORLD_SIZE, "
          "which cpptorchrun and torchrun set); use --backend gloo");
    }
    return one_node ? BackendKind::kShm : BackendKind::kHierarchical;
  }
  if (flag == "shm") {
    if (!one_node) {
      return absl::FailedPreconditionError(absl::StrCat(
          "--backend shm needs every rank on one node, but WORLD_SIZE is ", world_size,
          " and LOCAL_WORLD_SIZE ", local_world_size, "; use --backend gloo or auto"));
    }
    return BackendKind::kShm;
  }
  if (flag == "nccl") {
    if (fake_gpu) return BackendKind::kFakeGpu;
    if (!nccl_built) {
      return absl::FailedPreconditionError(
          "--backend nccl: this train was built without CUDA and NCCL; use --backend gloo");
    }
    if (cuda_devices == 0) {
      return absl::FailedPreconditionError(
          "--backend nccl: no CUDA device is visible; use --backend gloo (or the launcher's "
          "--fake_gpus)");
    }
    return BackendKind::kNccl;
  }
  return absl::InvalidArgumentError(
      absl::StrCat("--backend '", flag, "' is not one of auto, nccl, gloo, shm, hierarchical"));
}

const char* BackendName(BackendKind kind) {
  switch (kind) {
    case BackendKind::kGloo:
      return "gloo";
    case BackendKind::kNccl:
      return "nccl";
    case BackendKind::kFakeGpu:
      return "fake-gpu";
    case BackendKind::kShm:
      return "shm";
    case BackendKind::kHierarchical:
      return "hierarchical";
  }
  return "?";
}

namespace {

GlooOptions GlooFor(const CommSetup& setup, const std::string& key_prefix) {
  GlooOptions gloo;
  gloo.store = setup.store;
  gloo.rank = setup.rank;
  gloo.world_size = setup.world_size;
  gloo.hostname = setup.local_addr;
  gloo.key_prefix = key_prefix;
  gloo.timeout = setup.timeout;
  return gloo;
}

// A CPU communicator of `kind` (gloo, shm or hierarchical), its bootstrap
// keys under `prefix`.
absl::StatusOr<std::unique_ptr<Communicator>> MakeCpuCommunicator(BackendKind kind,
                                                                  const CommSetup& setup,
                                                                  const std::string& prefix) {
  if (kind == BackendKind::kShm) {
    ShmOptions shm;
    shm.store = setup.store;
    shm.rank = setup.rank;
    shm.world_size = setup.world_size;
    shm.key = absl::StrCat(prefix, "shm/segment");
    shm.timeout = setup.timeout;
    return NewShmCommunicator(shm);
  }
  if (kind == BackendKind::kHierarchical) {
    HierarchicalOptions h;
    h.store = setup.store;
    h.rank = setup.rank;
    h.world_size = setup.world_size;
    h.local_rank = setup.local_rank;
    h.local_world_size = setup.local_world_size;
    h.group_rank = setup.group_rank;
    h.group_world_size = setup.group_world_size;
    h.local_addr = setup.local_addr;
    h.key_prefix = absl::StrCat(prefix, "hier/");
    h.timeout = setup.timeout;
    return NewHierarchicalCommunicator(h);
  }
  return NewGlooCommunicator(GlooFor(setup, absl::StrCat(prefix, "gloo/")));
}

}  // namespace

absl::StatusOr<std::unique_ptr<Communicator>> MakeCommunicator(const CommSetup& setup) {
  switch (setup.kind) {
    case BackendKind::kGloo:
    case BackendKind::kShm:
    case BackendKind::kHierarchical:
      return MakeCpuCommunicator(setup.kind, setup, "");
    case BackendKind::kFakeGpu: {
      FakeGpuOptions fake;
      fake.gloo = GlooFor(setup, "fake_gpu/gloo/");
      fake.device = setup.fake_gpu.value_or(setup.local_rank);
      const BackendKind inner =
          CpuCollectives(setup.world_size, setup.local_world_size, setup.group_world_size);
      fake.make_inner = [inner, &setup] {
        return MakeCpuCommunicator(inner, setup, "fake_gpu/");
      };
      return NewFakeGpuCommunicator(fake);
    }
    case BackendKind::kNccl: {
      NcclOptions nccl;
      nccl.store = setup.store;
      nccl.rank = setup.rank;
      nccl.world_size = setup.world_size;
      nccl.device = setup.device >= 0 ? setup.device : setup.local_rank;
      nccl.timeout = setup.timeout;
      return NewNcclCommunicator(nccl);
    }
  }
  return absl::InternalError("unknown backend");
}

}  // namespace cpptorchrun::worker
