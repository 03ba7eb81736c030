// Fuzz target: a become request as a warm process receives it (become.h).
#include <cstddef>
#include <cstdint>
#include <string>

#include "base/become.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::string bytes(reinterpret_cast<const char*>(data), size);
  (void)cpptorchrun::base::DecodeBecome(bytes);
  (void)cpptorchrun::base::DecodeBecomeAnswer(bytes);
  return 0;
}
