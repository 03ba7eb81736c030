// Signal names: "SIGTERM" <-> SIGTERM, one table for the command line's
// --signals_to_handle, the failure summary and process status text.
#ifndef CPPTORCHRUN_BASE_SIGNALS_H_
#define CPPTORCHRUN_BASE_SIGNALS_H_

#include <string>

#include "absl/status/statusor.h"

namespace cpptorchrun {

// Signal name to number: "SIGTERM", "sigterm" and "TERM" all give SIGTERM;
// InvalidArgument naming the text for anything else.
absl::StatusOr<int> SignalFromName(const std::string& name);
// Number to name ("SIGKILL"); "SIG<n>" when unknown.
std::string SignalName(int signo);

}  // namespace cpptorchrun

#endif  // CPPTORCHRUN_BASE_SIGNALS_H_
