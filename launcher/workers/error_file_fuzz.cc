// Fuzz target: a worker's error.json (torchrun's format, or anything a
// crashing worker left behind).
#include <cstddef>
#include <cstdint>
#include <string>

#include "launcher/workers/error_file.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  (void)cpptorchrun::launcher::ParseErrorJson(std::string(reinterpret_cast<const char*>(data), size));
  return 0;
}
