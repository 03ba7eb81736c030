// The NCCL unique-id exchange and its cross-rank check.
#include "worker/comm/nccl_bootstrap.h"

#include <algorithm>
#include <random>
#include <vector>

#include "absl/strings/escaping.h"
#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"

namespace cpptorchrun::worker {

absl::StatusOr<std::string> RandomUniqueId() {
  std::random_device device;
  std::string id(kNcclUniqueIdBytes, '\0');
  for (size_t i = 0; i < id.size(); i += 4) {
    uint32_t word = device();
    for (size_t j = 0; j < 4 && i + j < id.size(); ++j) {
      id[i + j] = static_cast<char>(word >> (8 * j));
    }
  }
  return id;
}

absl::StatusOr<std::string> ShareNcclUniqueId(rdzv::Store& store, int rank,
                                              const UniqueIdMaker& make, absl::Duration timeout) {
  std::string id;
  if (rank == 0) {
    absl::StatusOr<std::string> made = make();
    if (!made.ok()) return made.status();
    id = *std::move(made);
    if (id.size() != kNcclUniqueIdBytes) {
      return absl::InvalidArgumentError(absl::StrCat("NCCL unique id has ", id.size(),
                                                     " bytes, expected ", kNcclUniqueIdBytes));
    }
    absl::Status set = store.Set(kNcclUniqueIdKey, id);
    if (!set.ok()) {
      return absl::Status(set.code(),
                          absl::StrCat("publishing the NCCL unique id: ", set.message()));
    }
    return id;
  }
  absl::StatusOr<std::string> got = store.Get(kNcclUniqueIdKey, timeout);
  if (!got.ok()) {
    return absl::Status(got.status().code(),
                        absl::StrCat("rank ", rank, " waiting for rank 0's NCCL unique id (",
                                     kNcclUniqueIdKey, "): ", got.status().message()));
  }
  if (got->size() != kNcclUniqueIdBytes) {
    return absl::InvalidArgumentError(absl::StrCat("the store's NCCL unique id has ",
                                                   got->size(), " bytes, expected ",
                                                   kNcclUniqueIdBytes));
  }
  return *std::move(got);
}

absl::Status VerifySameUniqueId(rdzv::Store& store, int rank, int world_size,
                                const std::string& id, absl::Duration timeout) {
  // The full id is only 128 bytes: compare the bytes themselves.
  const std::string mine = absl::BytesToHexString(id);
  absl::Status set = store.Set(absl::StrCat(kNcclUniqueIdKey, "/held_by/", rank), mine);
  if (!set.ok()) return set;
  std::vector<std::string> keys;
  for (int r = 0; r < world_size; ++r) keys.push_back(absl::StrCat(kNcclUniqueIdKey, "/held_by/", r));
  // One key at a time, within one deadline (see WaitForKeys in gloo_store.h).
  const absl::Time deadline = absl::Now() + timeout;
  for (int r = 0; r < world_size; ++r) {
    absl::StatusOr<std::string> theirs =
        store.Get(keys[r], std::max(deadline - absl::Now(), absl::ZeroDuration()));
    if (!theirs.ok()) {
      return absl::Status(theirs.status().code(),
                          absl::StrCat("waiting for rank ", r, "'s copy of the NCCL unique id: ",
                                       theirs.status().message()));
    }
    if (*theirs != mine) {
      return absl::FailedPreconditionError(absl::StrCat(
          "rank ", r, " holds a different NCCL unique id than rank ", rank, " (",
          theirs->substr(0, 16), "... vs ", mine.substr(0, 16), "...)"));
    }
  }
  return absl::OkStatus();
}

}  // namespace cpptorchrun::worker
