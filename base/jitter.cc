#include "base/jitter.h"

#include <random>

#include "absl/base/const_init.h"
#include "absl/synchronization/mutex.h"

namespace cpptorchrun::base {

double Jitter() {
  static absl::Mutex mu(absl::kConstInit);
  static std::mt19937_64* engine = new std::mt19937_64(std::random_device{}());
  absl::MutexLock lock(&mu);
  return std::uniform_real_distribution<double>(0.5, 1.5)(*engine);
}

}  // namespace cpptorchrun::base
