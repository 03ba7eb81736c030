// The failure summary: torchrun's ChildFailedError report, the root cause
// (first failure in time) and then the other failures, each with rank,
// local rank, host, exit code or signal, pid, time, error file and message.
#ifndef CPPTORCHRUN_LAUNCHER_FAILURE_SUMMARY_H_
#define CPPTORCHRUN_LAUNCHER_FAILURE_SUMMARY_H_

#include <sys/types.h>

#include <string>
#include <vector>

#include "absl/time/time.h"
#include "launcher/workers/process.h"

namespace cpptorchrun::launcher {

struct FailureRecord {
  int rank = 0;
  int local_rank = 0;
  std::string host;
  ExitStatus status;
  pid_t pid = 0;
  absl::Time time;           // when the launcher saw it fail
  std::string error_file;    // empty: none written
  std::string message;       // from the error file, or what the launcher saw (hung)
  std::string traceback;
  int64_t error_timestamp = 0;  // from the error file (0: none)
  int sequence = 0;          // order in which the launcher reaped it
};

// Index of the root cause: the earliest failure (time, then the error
// file's timestamp, then reap order). -1 when empty. Pure.
int RootCauseIndex(const std::vector<FailureRecord>& failures);

// The report, multi-line, ending in a newline. Pure.
std::string FormatFailureSummary(const std::string& program,
                                 const std::vector<FailureRecord>& failures);

}  // namespace cpptorchrun::launcher

#endif  // CPPTORCHRUN_LAUNCHER_FAILURE_SUMMARY_H_
