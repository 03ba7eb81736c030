// Worker error files: reading the error.json a worker writes on an uncaught
// error (TORCHELASTIC_ERROR_FILE, torchrun's format, docs/ENVIRONMENT.md).
#ifndef CPPTORCHRUN_LAUNCHER_ERROR_FILE_H_
#define CPPTORCHRUN_LAUNCHER_ERROR_FILE_H_

#include <cstdint>
#include <string>

#include "absl/status/statusor.h"

namespace cpptorchrun::launcher {

struct WorkerError {
  std::string message;    // "<Type>: <what>"
  std::string traceback;  // extraInfo.py_callstack
  int64_t timestamp = 0;  // extraInfo.timestamp, unix seconds (0: absent)
};

// Parses torchrun's error.json text:
//   {"message": {"message": M, "extraInfo": {"py_callstack": S, "timestamp": T}}}
// and the older flat {"message": M}. Errors: not JSON, no message.
absl::StatusOr<WorkerError> ParseErrorJson(const std::string& json);

// Reads and parses `path`. NotFound when the worker wrote none.
absl::StatusOr<WorkerError> ReadErrorFile(const std::string& path);

}  // namespace cpptorchrun::launcher

#endif  // CPPTORCHRUN_LAUNCHER_ERROR_FILE_H_
