// The distributed sampler: PyTorch's DistributedSampler semantics without
// LibTorch. One shuffle per epoch, the same on every rank (seeded with
// seed + epoch through an injected permutation function: torch.randperm's in
// the trainer, so the lists equal PyTorch's); padding to a multiple of the
// world size, or dropping the tail; each rank a disjoint strided share.
//
// Resuming: a start position (samples the whole group consumed in the
// epoch) re-shards the rest of the epoch over a possibly different world
// size, so no sample is skipped or seen twice within the epoch.
#ifndef CPPTORCHRUN_WORKER_DATA_SAMPLER_H_
#define CPPTORCHRUN_WORKER_DATA_SAMPLER_H_

#include <cstdint>
#include <functional>
#include <vector>

#include "absl/status/status.h"

namespace cpptorchrun::worker {

// Returns a permutation of 0..n-1 determined by `seed` alone.
using PermutationFn = std::function<std::vector<int64_t>(int64_t n, uint64_t seed)>;

struct SamplerOptions {
  int64_t dataset_size = 0;
  int world_size = 1;
  int rank = 0;
  bool shuffle = true;
  uint64_t seed = 0;
  bool drop_last = false;
};

// The pure rule: this rank's share of `order[start:]`. Padding repeats
// elements from the front of `order` (as PyTorch pads), drop_last cuts the
// tail of the remainder to a multiple of `world_size`. With start = 0 this is
// exactly DistributedSampler's list. `start` past the end yields nothing.
std::vector<int64_t> ShardOrder(const std::vector<int64_t>& order, int64_t start, int world_size,
                                int rank, bool drop_last);

// Not thread-safe; one per rank.
class DistributedSampler {
 public:
  // `permutation` may be empty when options.shuffle is false.
  DistributedSampler(const SamplerOptions& options, PermutationFn permutation);

  // InvalidArgument for world_size < 1, rank outside [0, world_size),
  // negative size, or shuffle without a permutation function.
  static absl::Status Validate(const SamplerOptions& options, const PermutationFn& permutation);

  void SetEpoch(int64_t epoch) { epoch_ = epoch; }
  int64_t epoch() const { return epoch_; }

  // The epoch's global order: the permutation seeded with seed + epoch, or
  // 0..n-1 without shuffling.
  std::vector<int64_t> EpochOrder() const;

  // This rank's indices for the current epoch from global position `start`.
  std::vector<int64_t> Indices(int64_t start = 0) const;

  // Length of Indices(start) without computing the permutation.
  int64_t NumSamples(int64_t start = 0) const;

 private:
  SamplerOptions options_;
  PermutationFn permutation_;
  int64_t epoch_ = 0;
};

}  // namespace cpptorchrun::worker

#endif  // CPPTORCHRUN_WORKER_DATA_SAMPLER_H_
