// Checkpoints on disk: a small self-checking file format (magic, version,
// length, CRC-32) holding named integers, reals, strings and float tensors, written
// atomically (temporary file, fsync, rename, fsync of the folder), the last
// K kept, and the newest valid one found on start with a fallback past
// truncated or corrupt files. No LibTorch here: the trainer converts its
// model and optimizer state to and from CheckpointState.
#ifndef CPPTORCHRUN_WORKER_TRAINING_CHECKPOINT_H_
#define CPPTORCHRUN_WORKER_TRAINING_CHECKPOINT_H_

#include <cstdint>
#include <map>
#include <optional>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"

namespace cpptorchrun::worker {

struct TensorBlob {
  std::string name;
  std::vector<int64_t> shape;
  std::vector<float> data;
};

struct CheckpointState {
  std::map<std::string, int64_t> ints;
  std::map<std::string, double> reals;
  // Since version 2 (e.g. "optimizer"); a version-1 file reads back with none.
  std::map<std::string, std::string> strings;
  std::vector<TensorBlob> tensors;

  // NotFound naming the key when absent.
  absl::StatusOr<int64_t> Int(const std::string& key) const;
  // The string under `key`, or `otherwise` when absent.
  std::string StringOr(const std::string& key, const std::string& otherwise) const;
  const TensorBlob* Tensor(const std::string& name) const;
};

// Serialises (little-endian, as the machine; always the newest version,
// kCheckpointVersion) and parses the format (versions 1 and 2).
inline constexpr uint32_t kCheckpointVersion = 2;
std::string EncodeCheckpoint(const CheckpointState& state);
// Version 1 written as older builds did (no string table): for tests of
// compatibility.
std::string EncodeCheckpointV1(const CheckpointState& state);
// DataLoss naming `name` and what is wrong (magic, version, length, CRC,
// a record running past the end).
absl::StatusOr<CheckpointState> DecodeCheckpoint(const std::string& bytes, const std::string& name);

// The file name of checkpoint number `id` ("ckpt-<id, 12 digits>.bin").
std::string CheckpointFileName(int64_t id);

// Writes `state` as checkpoint `id` in `dir` (created if missing) through a
// temporary file, fsync and rename, then deletes all but the newest `keep`
// checkpoints. A crash at any point leaves either the old set or the new
// file complete. Errors name the path and the failing call.
absl::Status WriteCheckpoint(const std::string& dir, int64_t id, const CheckpointState& state,
                             int keep);

// Checkpoint files in `dir`, newest (highest id) first, as (id, path).
std::vector<std::pair<int64_t, std::string>> ListCheckpoints(const std::string& dir);

struct LoadedCheckpoint {
  int64_t id = 0;
  std::string path;
  CheckpointState state;
};

// The newest checkpoint that reads back whole, or nullopt when there is
// none (no folder, no files). Each unreadable newer file is skipped with a
// line in `warnings` naming it and why.
std::optional<LoadedCheckpoint> LoadNewestCheckpoint(const std::string& dir,
                                                     std::vector<std::string>* warnings);

}  // namespace cpptorchrun::worker

#endif  // CPPTORCHRUN_WORKER_TRAINING_CHECKPOINT_H_
