// The torchrun-compatible error file (TORCHELASTIC_ERROR_FILE): what a
// worker leaves behind on an uncaught error, in the format of PyTorch's
// torch.distributed.elastic.multiprocessing.errors.record.
#ifndef CPPTORCHRUN_WORKER_AGENT_ERROR_FILE_H_
#define CPPTORCHRUN_WORKER_AGENT_ERROR_FILE_H_

#include <cstdint>
#include <string>

#include "absl/status/status.h"

namespace cpptorchrun::worker {

// {"message": {"message": "<type>: <what>", "extraInfo": {"py_callstack":
// "<context>", "timestamp": "<unix seconds>"}}}
std::string ErrorJson(const std::string& type, const std::string& what, const std::string& context,
                      int64_t unix_seconds);

// Writes ErrorJson to `path` (through a temporary file and rename). Errors
// name the path.
absl::Status WriteErrorFile(const std::string& path, const std::string& type,
                            const std::string& what, const std::string& context,
                            int64_t unix_seconds);

}  // namespace cpptorchrun::worker

#endif  // CPPTORCHRUN_WORKER_AGENT_ERROR_FILE_H_
