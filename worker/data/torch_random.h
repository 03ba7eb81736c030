// LibTorch's random permutation behind a torch-free header: the permutation
// the sampler uses, equal to torch.randperm(n, generator=torch.Generator()
// .manual_seed(seed)) in Python.
#ifndef CPPTORCHRUN_WORKER_DATA_TORCH_RANDOM_H_
#define CPPTORCHRUN_WORKER_DATA_TORCH_RANDOM_H_

#include <cstdint>
#include <vector>

namespace cpptorchrun::worker {

// A permutation of 0..n-1 from a CPU generator seeded with `seed`.
// Thread-safe (each call makes its own generator).
std::vector<int64_t> TorchRandperm(int64_t n, uint64_t seed);

}  // namespace cpptorchrun::worker

#endif  // CPPTORCHRUN_WORKER_DATA_TORCH_RANDOM_H_
