// Small POSIX file helpers the worker's writers share (checkpoints, the
// data cache, the sample log): `mkdir -p`, and a write of a whole buffer.
#ifndef CPPTORCHRUN_WORKER_UTIL_FILE_UTIL_H_
#define CPPTORCHRUN_WORKER_UTIL_FILE_UTIL_H_

#include <sys/types.h>

#include <string>

#include "absl/status/status.h"

namespace cpptorchrun::worker {

// Creates `dir` and its missing parents with `mode`; existing ones are
// fine. InternalError naming the folder that could not be made.
absl::Status MakeDirs(const std::string& dir, mode_t mode = 0755);

// Writes all of `data` to `fd`, retrying short writes and EINTR.
// InternalError naming `path` (for the message only).
absl::Status WriteAll(int fd, const std::string& data, const std::string& path);

}  // namespace cpptorchrun::worker

#endif  // CPPTORCHRUN_WORKER_UTIL_FILE_UTIL_H_
