// Fuzz target: checkpoint files as a worker reads them at a resume (a
// truncated, corrupted or foreign file must be refused, never trusted).
#include <cstddef>
#include <cstdint>
#include <string>

#include "worker/training/checkpoint.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  auto state = cpptorchrun::worker::DecodeCheckpoint(std::string(reinterpret_cast<const char*>(data), size), "fuzz");
  if (state.ok()) {
    (void)state->Int("step");
    (void)state->StringOr("optimizer", "adam");
  }
  return 0;
}
