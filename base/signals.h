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

// The launcher-worker contract for stopping a group: the launcher stopping
// its workers for a restart (a failure, a membership change) sends each
// worker's process a SIGTERM with this value (sigqueue, si_code SI_QUEUE)
// before the group's SIGTERM: "stop now, the group restarts". A worker that
// knows it (train) exits at once; any other SIGTERM (a scheduler's
// preemption, the launcher passing on its own stop signal) lets it write a
// checkpoint first. To a program that does not look, it is a SIGTERM.
inline constexpr int kStopNowSignalValue = 0x53544f50;  // "STOP"

}  // namespace cpptorchrun

#endif  // CPPTORCHRUN_BASE_SIGNALS_H_
