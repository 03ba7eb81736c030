// A hung Python worker's stack: Python's faulthandler, enabled by
// PYTHONFAULTHANDLER in the worker's environment, writes every thread's
// Python stack to stderr when the process gets SIGABRT, even while it is
// stuck in C code (a collective). The launcher sends it SIGABRT before it
// kills a hung worker and reads the stack from the end of its stderr.
#ifndef CPPTORCHRUN_LAUNCHER_PYTHON_STACK_H_
#define CPPTORCHRUN_LAUNCHER_PYTHON_STACK_H_

#include <map>
#include <optional>
#include <string>

#include "absl/strings/string_view.h"

namespace cpptorchrun::launcher {

// At most this much of a stack is kept (events, the failure summary).
inline constexpr size_t kMaxStackBytes = 8 * 1024;
inline constexpr int kMaxStackLines = 80;

// Whether a Python started with `env` enables its faulthandler (as Python
// reads PYTHONFAULTHANDLER: set and not empty).
bool FaultHandlerOn(const std::map<std::string, std::string>& env);

// The last faulthandler dump in `output` (the end of a worker's stderr):
// from its "Fatal Python error" line to its last stack line, without the
// list of extension modules; cut to kMaxStackLines lines and
// kMaxStackBytes. None when `output` holds no dump with a stack.
std::optional<std::string> PythonStackFromOutput(absl::string_view output);

}  // namespace cpptorchrun::launcher

#endif  // CPPTORCHRUN_LAUNCHER_PYTHON_STACK_H_
