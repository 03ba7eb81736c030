// TorchRandperm over ATen's CPU generator.
#include "worker/data/torch_random.h"

#include <ATen/ATen.h>
#include <ATen/CPUGeneratorImpl.h>

namespace cpptorchrun::worker {

std::vector<int64_t> TorchRandperm(int64_t n, uint64_t seed) {
  at::Generator generator = at::detail::createCPUGenerator(seed);
  at::Tensor perm = at::randperm(n, generator, at::TensorOptions().dtype(at::kLong));
  const int64_t* data = perm.data_ptr<int64_t>();
  return std::vector<int64_t>(data, data + n);
}

}  // namespace cpptorchrun::worker
