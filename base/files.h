// Reading a whole file, once for every part (tokens, keys, certificates).
#ifndef CPPTORCHRUN_BASE_FILES_H_
#define CPPTORCHRUN_BASE_FILES_H_

#include <string>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"

namespace cpptorchrun::base {

// The bytes of `path`. NotFound naming `what` ("token file", "TLS key"),
// the path and the system's reason when it cannot be read.
absl::StatusOr<std::string> ReadWholeFile(const std::string& path, absl::string_view what);

}  // namespace cpptorchrun::base

#endif  // CPPTORCHRUN_BASE_FILES_H_
