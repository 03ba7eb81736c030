// Fuzz target: IDX image and label files (the data set a job is pointed at).
#include <cstddef>
#include <cstdint>
#include <string>

#include "worker/data/idx.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::string bytes(reinterpret_cast<const char*>(data), size);
  (void)cpptorchrun::worker::ParseIdxImages(bytes, "fuzz");
  (void)cpptorchrun::worker::ParseIdxLabels(bytes, "fuzz");
  return 0;
}
