// The distributed sampler's sharding rule and epoch bookkeeping.
#include "worker/data/sampler.h"

#include <algorithm>
#include <numeric>

#include "absl/strings/str_cat.h"

namespace cpptorchrun::worker {
namespace {

// Elements of order[start:] a rank group of `world` processes walks through:
// padded up (or cut down, drop_last) to a multiple of the world size.
int64_t TotalFrom(int64_t n, int64_t start, int world, bool drop_last) {
  int64_t remaining = std::max<int64_t>(0, n - start);
  if (drop_last) return remaining / world * world;
  return (remaining + world - 1) / world * world;
}

}  // namespace

std::vector<int64_t> ShardOrder(const std::vector<int64_t>& order, int64_t start, int world_size,
                                int rank, bool drop_last) {
  const int64_t n = static_cast<int64_t>(order.size());
  start = std::max<int64_t>(0, start);
  const int64_t total = TotalFrom(n, start, world_size, drop_last);
  std::vector<int64_t> out;
  if (total == 0 || n == 0) return out;
  out.reserve(total / world_size);
  for (int64_t i = rank; i < total; i += world_size) {
    int64_t pos = start + i;
    // Past the end: PyTorch's padding, which cycles through the list's front.
    out.push_back(pos < n ? order[pos] : order[(pos - n) % n]);
  }
  return out;
}

DistributedSampler::DistributedSampler(const SamplerOptions& options, PermutationFn permutation)
    : options_(options), permutation_(std::move(permutation)) {}

absl::Status DistributedSampler::Validate(const SamplerOptions& options,
                                          const PermutationFn& permutation) {
  if (options.world_size < 1) {
    return absl::InvalidArgumentError(
        absl::StrCat("sampler: world size ", options.world_size, " is below 1"));
  }
  if (options.rank < 0 || options.rank >= options.world_size) {
    return absl::InvalidArgumentError(absl::StrCat("sampler: rank ", options.rank,
                                                   " is outside [0, ", options.world_size, ")"));
  }
  if (options.dataset_size < 0) {
    return absl::InvalidArgumentError("sampler: negative data set size");
  }
  if (options.shuffle && !permutation) {
    return absl::InvalidArgumentError("sampler: shuffling needs a permutation function");
  }
  return absl::OkStatus();
}

std::vector<int64_t> DistributedSampler::EpochOrder() const {
  if (options_.shuffle) {
    return permutation_(options_.dataset_size, options_.seed + static_cast<uint64_t>(epoch_));
  }
  std::vector<int64_t> order(options_.dataset_size);
  std::iota(order.begin(), order.end(), 0);
  return order;
}

std::vector<int64_t> DistributedSampler::Indices(int64_t start) const {
  return ShardOrder(EpochOrder(), start, options_.world_size, options_.rank, options_.drop_last);
}

int64_t DistributedSampler::NumSamples(int64_t start) const {
  int64_t total = TotalFrom(options_.dataset_size, std::max<int64_t>(0, start),
                            options_.world_size, options_.drop_last);
  return total / options_.world_size;
}

}  // namespace cpptorchrun::worker
