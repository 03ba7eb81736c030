// The NCCL bootstrap through the rendezvous store, shared by the NCCL
// communicator and the fake-GPU one: rank 0 makes the 128-byte unique id and
// publishes it under the round's scope; the others wait for it; then every
// rank checks that all ranks hold the same bytes. No CUDA here.
#ifndef CPPTORCHRUN_WORKER_COMM_NCCL_BOOTSTRAP_H_
#define CPPTORCHRUN_WORKER_COMM_NCCL_BOOTSTRAP_H_

#include <cstddef>
#include <functional>
#include <string>

#include "absl/status/statusor.h"
#include "absl/time/time.h"
#include "rendezvous/store.h"

namespace cpptorchrun::worker {

// sizeof(ncclUniqueId) (NCCL_UNIQUE_ID_BYTES).
inline constexpr size_t kNcclUniqueIdBytes = 128;
// Where rank 0 publishes the id in the round's store.
inline constexpr char kNcclUniqueIdKey[] = "nccl/unique_id";

// Makes a unique id (ncclGetUniqueId, or random bytes for fake GPUs).
using UniqueIdMaker = std::function<absl::StatusOr<std::string>()>;

// Random bytes from the system's generator: the fake GPUs' unique id.
absl::StatusOr<std::string> RandomUniqueId();

// Rank 0 calls `make` and stores the id; other ranks wait up to `timeout`.
// Errors: the store's (DeadlineExceeded when rank 0 never published),
// InvalidArgument for an id that is not kNcclUniqueIdBytes long.
absl::StatusOr<std::string> ShareNcclUniqueId(rdzv::Store& store, int rank,
                                              const UniqueIdMaker& make, absl::Duration timeout);

// Every rank publishes a fingerprint of its copy and compares everyone's
// with its own. FailedPrecondition names the first rank that differs.
absl::Status VerifySameUniqueId(rdzv::Store& store, int rank, int world_size,
                                const std::string& id, absl::Duration timeout);

}  // namespace cpptorchrun::worker

#endif  // CPPTORCHRUN_WORKER_COMM_NCCL_BOOTSTRAP_H_
