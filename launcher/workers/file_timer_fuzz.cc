// Fuzz target: a line on the file-timer pipe (anything a process that can
// open it may write), then the timer table fed with what parsed.
#include <cstddef>
#include <cstdint>
#include <string>

#include "launcher/workers/file_timer.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  auto request = cpptorchrun::launcher::ParseFileTimerRequest(
      std::string(reinterpret_cast<const char*>(data), size));
  if (request.ok()) {
    cpptorchrun::launcher::FileTimers timers;
    timers.Apply(*request);
    (void)timers.NextExpiry();
    (void)timers.TakeExpired(request->expiration_time);
  }
  return 0;
}
