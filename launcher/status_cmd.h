// `cpptorchrun status`: asks the rendezvous service for a run's status and
// prints it as a table (nodes, ranks, round, restarts, each rank's last
// step and loss, and the age of its last heartbeat), or as one JSON object
// (--json); with --watch, again every --interval until the run ends.
//
// What is printed is decided by pure functions (the table, the JSON, what
// one refresh of --watch writes); the loop around them takes its clock and
// its wait from WatchIo, so tests drive it with a fake clock and a fake
// client instead of real time.
#ifndef CPPTORCHRUN_LAUNCHER_STATUS_CMD_H_
#define CPPTORCHRUN_LAUNCHER_STATUS_CMD_H_

#include <functional>
#include <map>
#include <optional>
#include <string>

#include "absl/status/statusor.h"
#include "absl/time/time.h"
#include "base/clock.h"
#include "launcher/config/cli.h"
#include "proto/rendezvous.pb.h"
#include "rendezvous/client.h"

namespace cpptorchrun::launcher {

// The table, one row per node and one per rank. Pure.
std::string FormatStatusTable(const rdzv::v1::RunStatusResponse& status);

// The status as one line of JSON (no newline), the schema of docs/FLAGS.md
// ("schema_version": 1). Every string from the service is escaped with
// base::JsonString, so the line is valid JSON and UTF-8 whatever it holds.
// Pure.
std::string FormatStatusJson(const rdzv::v1::RunStatusResponse& status);

// --watch: what one refresh prints.
struct WatchOptions {
  bool json = false;      // JSON lines instead of tables
  bool terminal = false;  // stdout is a terminal: redraw the table in place
  absl::Duration interval = absl::Seconds(1);
  // Exit 1 once the service has not answered for this long (from the first
  // failed call of a streak; a streak is at least two calls).
  absl::Duration unreachable_limit = absl::Seconds(30);
  std::string endpoint;  // as shown in messages
};

// What the watch loop remembers between refreshes.
struct WatchState {
  std::string last_body;       // the table or JSON last printed
  bool seen_run = false;       // the service has answered for the run
  bool seen_nodes = false;     // ... with nodes in it
  std::optional<absl::Time> failing_since;  // first failure of the streak
};

struct WatchTick {
  std::string out;  // for stdout (may be empty: nothing new)
  std::string err;  // for stderr
  bool done = false;
  int exit_code = 0;  // when done
  WatchState state;   // for the next refresh
};

// One refresh: the service's `answer` at `now`. Pure.
//  - A table in a terminal: cursor home, the table (each line erased to
//    its end), the rest of the screen erased; drawn every refresh.
//  - A table elsewhere: a block "-- <UTC time> --", the table, a blank
//    line; only when the table differs from the last one printed. No
//    escape codes.
//  - JSON: one line every refresh.
// The run is over when it is CLOSED, when it is past its first round with
// no node in it and none waiting (a finished job's nodes leave), or when
// the service no longer knows a run it knew: the last rendering is printed
// (when every node left, the last table that had them) and the loop ends
// with 0. An unknown
// run at the first call, or an error that retrying cannot cure (a bad
// token, a refused certificate), ends it with 1; UNAVAILABLE and the like
// are retried until `unreachable_limit`, then 1.
WatchTick DecideWatchTick(const WatchOptions& options, const WatchState& state, absl::Time now,
                          const absl::StatusOr<rdzv::v1::RunStatusResponse>& answer);

// The loop's ties to the outside.
struct WatchIo {
  base::Clock* clock = nullptr;
  // Waits up to `d`; true when a stop (SIGINT, SIGTERM) was asked for
  // before or during the wait.
  std::function<bool(absl::Duration)> wait;
  std::function<void(const std::string&)> out;
  std::function<void(const std::string&)> err;
};

// Refreshes until the run is over (0), a stop (0) or an error (1).
int WatchStatus(const std::string& run_id, const WatchOptions& options, rdzv::RendezvousClient* client,
                const WatchIo& io);

// Prints the table (or JSON) to stdout, once or with config.watch until
// the run is over: 0, or 1 with an error on stderr (unknown run,
// unreachable service). `client` null: a gRPC client of the endpoint (and
// with --watch, SIGINT and SIGTERM are blocked and waited for between
// refreshes). `io` null: stdout, stderr, the real clock and those signals.
int RunStatusCommand(const StatusConfig& config, const std::map<std::string, std::string>& env,
                     rdzv::RendezvousClient* client = nullptr, const WatchIo* io = nullptr);

}  // namespace cpptorchrun::launcher

#endif  // CPPTORCHRUN_LAUNCHER_STATUS_CMD_H_
