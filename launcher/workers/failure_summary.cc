// The failure summary, laid out like torchrun's ChildFailedError.
#include "launcher/workers/failure_summary.h"

#include "absl/strings/str_cat.h"
#include "absl/strings/str_replace.h"
#include "base/signals.h"

namespace cpptorchrun::launcher {
namespace {

std::string Entry(const FailureRecord& f) {
  std::string out;
  absl::StrAppend(&out, "[", f.rank, "]:\n");
  absl::StrAppend(&out, "  time      : ", absl::FormatTime("%Y-%m-%d_%H:%M:%E3S", f.time, absl::UTCTimeZone()),
                  "\n");
  absl::StrAppend(&out, "  host      : ", f.host, "\n");
  absl::StrAppend(&out, "  rank      : ", f.rank, " (local_rank: ", f.local_rank, ")\n");
  absl::StrAppend(&out, "  exitcode  : ", f.status.TorchrunExitCode(), " (pid: ", f.pid, ")\n");
  if (f.status.signaled) {
    absl::StrAppend(&out, "  signal    : ", SignalName(f.status.signal), " (", f.status.signal, ")\n");
  }
  absl::StrAppend(&out, "  error_file: ", f.error_file.empty() ? "<N/A>" : f.error_file, "\n");
  std::string message = f.message;
  if (message.empty()) {
    message = f.status.signaled
                  ? absl::StrCat("Signal ", f.status.signal, " (", SignalName(f.status.signal),
                                 ") received by PID ", f.pid)
                  : "the worker wrote no error file (see its output above)";
  }
  absl::StrAppend(&out, "  message   : ", absl::StrReplaceAll(message, {{"\n", "\n              "}}),
                  "\n");
  if (!f.traceback.empty()) {
    absl::StrAppend(&out, "  traceback : ",
                    absl::StrReplaceAll(f.traceback, {{"\n", "\n              "}}), "\n");
  }
  return out;
}

}  // namespace

int RootCauseIndex(const std::vector<FailureRecord>& failures) {
  int best = -1;
  for (int i = 0; i < static_cast<int>(failures.size()); ++i) {
    if (best < 0) {
      best = i;
      continue;
    }
    const FailureRecord& a = failures[i];
    const FailureRecord& b = failures[best];
    if (a.time != b.time) {
      if (a.time < b.time) best = i;
      continue;
    }
    if (a.error_timestamp != 0 && b.error_timestamp != 0 && a.error_timestamp != b.error_timestamp) {
      if (a.error_timestamp < b.error_timestamp) best = i;
      continue;
    }
    if (a.sequence < b.sequence) best = i;
  }
  return best;
}

std::string FormatFailureSummary(const std::string& program,
                                 const std::vector<FailureRecord>& failures) {
  const std::string rule(60, '=');
  const std::string thin(60, '-');
  std::string out;
  absl::StrAppend(&out, rule, "\n", program, " FAILED\n", thin, "\n");
  int root = RootCauseIndex(failures);
  absl::StrAppend(&out, "Failures:\n");
  bool any_other = false;
  for (int i = 0; i < static_cast<int>(failures.size()); ++i) {
    if (i == root) continue;
    absl::StrAppend(&out, Entry(failures[i]));
    any_other = true;
  }
  if (!any_other) absl::StrAppend(&out, "  <NO_OTHER_FAILURES>\n");
  absl::StrAppend(&out, thin, "\nRoot Cause (first observed failure):\n");
  if (root >= 0) absl::StrAppend(&out, Entry(failures[root]));
  absl::StrAppend(&out, rule, "\n");
  return out;
}

}  // namespace cpptorchrun::launcher
