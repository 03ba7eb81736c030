// Files, once for every part: reading a whole file (tokens, keys,
// certificates), making a folder with its parents (mkdir -p; the launcher's
// logs, the worker's checkpoints and data cache) and writing a whole buffer.
#ifndef CPPTORCHRUN_BASE_FILES_H_
#define CPPTORCHRUN_BASE_FILES_H_

#include <sys/types.h>

#include <string>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"

namespace cpptorchrun::base {

// The bytes of `path`. NotFound naming `what` ("token file", "TLS key"),
// the path and the system's reason when it cannot be read.
absl::StatusOr<std::string> ReadWholeFile(const std::string& path, absl::string_view what);

// mkdir -p: `dir` and every missing parent, with `mode`. An existing folder
// is fine; anything else in the way, or a refusal, is an error naming the
// path and the system's reason.
absl::Status MakeDirs(const std::string& dir, mode_t mode = 0755);

// Writes all of `data` to `fd`, retrying short writes and EINTR.
// InternalError naming `path` (for the message only).
absl::Status WriteAll(int fd, const std::string& data, const std::string& path);

}  // namespace cpptorchrun::base

#endif  // CPPTORCHRUN_BASE_FILES_H_
