// The launcher's event log: what happened to the job, one JSON object per
// line, for tools and tests to read instead of log wording. Each line has
// "time" (Unix seconds), "event" and the event's fields:
//   round_joined    round, group_rank, group_world_size, world_size,
//                   master_addr, master_port, restart_count
//   workers_started round, attempt, local_world_size, pids
//   worker_failed   rank, local_rank, pid, status (as the summary says it)
//   worker_resumed  rank, local_rank, pid, step (the worker restored its
//                   checkpoint; from its RESUMED event)
//   worker_reported_failure rank, local_rank, pid, message (its FAILED event)
//   round_ended     round, reason (a node lost, left, joined, ...)
//   restart         cause (worker_failed | membership), round, from_round,
//                   restart_count, max_restarts, counted,
//                   detected_to_stopped_s, stopped_to_joined_s,
//                   joined_to_started_s, total_s (the launcher's part of the
//                   restart, measured from the failure's detection)
//   restart_completed cause, round, the restart's phases as above plus
//                   started_to_comm_ready_s, comm_ready_to_restored_s,
//                   restored_to_first_step_s, and total_s from the
//                   failure's detection to every local worker's first step
//                   (only for workers that send start-up events: train)
//   spare_started   local_rank, pid (a warm spare: warm_pool.h)
//   spare_ready     local_rank, pid (it said it waits, seen at a Wait)
//   spare_lost      local_rank, pid, status (died or refused before use)
//   warm_started    local_rank, pid, from (spare | forkserver): a worker
//                   started warm
//   warm_fallback   local_rank, from, reason: exec'd after all
//   forkserver_started pid; forkserver_lost pid, status
//   exit_barrier    round
//   finished        exit_code, reason
// The real log appends lines to a file (O_APPEND, one write each), and
// optionally also to the console log (torchrun's --event_log_handler
// console).
#ifndef CPPTORCHRUN_LAUNCHER_EVENT_LOG_H_
#define CPPTORCHRUN_LAUNCHER_EVENT_LOG_H_

#include <cstdint>
#include <initializer_list>
#include <memory>
#include <string>
#include <utility>
#include <variant>
#include <vector>

#include "absl/strings/string_view.h"

namespace cpptorchrun::launcher {

using EventValue = std::variant<int64_t, double, std::string, std::vector<int64_t>, std::vector<std::string>>;
using EventField = std::pair<std::string, EventValue>;

// Thread-safe.
class EventLog {
 public:
  virtual ~EventLog() = default;
  virtual void Record(absl::string_view event, std::vector<EventField> fields) = 0;
};

// {"time": ..., "event": ..., fields...} without a newline. Pure but for
// `time`, which is passed in.
std::string EventJson(double time, absl::string_view event, const std::vector<EventField>& fields);

// Appends to `path` (created 0644); `console`: also logs each line at info
// level. A file that cannot be opened leaves a warning and the log silent.
std::unique_ptr<EventLog> NewFileEventLog(const std::string& path, bool console);

// Keeps what it is told, for tests.
class MemoryEventLog final : public EventLog {
 public:
  void Record(absl::string_view event, std::vector<EventField> fields) override;
  std::vector<std::pair<std::string, std::vector<EventField>>> events() const;
  // The names, in order.
  std::vector<std::string> names() const;

 private:
  mutable std::vector<std::pair<std::string, std::vector<EventField>>> events_;
};

}  // namespace cpptorchrun::launcher

#endif  // CPPTORCHRUN_LAUNCHER_EVENT_LOG_H_
