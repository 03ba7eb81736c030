// --health_check CMD: a node that is not fit to train stays out of the
// rendezvous and says why. The agent runs CMD (with /bin/sh -c, the
// workers' environment, its output in the log folder and on the console)
// before each join; a non-zero exit, a death by signal or a run past
// --health_check_timeout keeps the node out: a health_check_failed event
// with the status and the last line the command printed, then another try
// every retry interval, until it passes (the node joins) or the node has
// been out for give_up_after (the launcher exits 1 naming the last
// reason). The rules are pure functions here; the agent runs the command.
#ifndef CPPTORCHRUN_LAUNCHER_AGENT_HEALTH_CHECK_H_
#define CPPTORCHRUN_LAUNCHER_AGENT_HEALTH_CHECK_H_

#include <string>

#include "absl/strings/string_view.h"
#include "absl/time/time.h"

namespace cpptorchrun::launcher {

struct HealthCheckOptions {
  std::string command;  // empty: no check
  absl::Duration timeout = absl::Seconds(60);
  absl::Duration retry_interval = absl::Seconds(10);
  absl::Duration give_up_after = absl::Minutes(10);
};

// The last non-empty line of a command's output, without its line end and
// cut to 200 bytes ("" when it printed nothing): what says why.
std::string LastLine(absl::string_view output);

enum class HealthNext { kJoin, kRetry, kGiveUp };

// After a check at `now` that `passed` (or not), the node having been out
// since `out_since` (its first failed check of this wait): join, try again
// at now + retry_interval, or give up.
HealthNext DecideHealth(bool passed, absl::Time out_since, absl::Time now, const HealthCheckOptions& options);

}  // namespace cpptorchrun::launcher

#endif  // CPPTORCHRUN_LAUNCHER_AGENT_HEALTH_CHECK_H_
