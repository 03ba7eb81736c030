// torchrun's file-timer watchdog, served: with TORCHELASTIC_ENABLE_FILE_TIMER=1
// in the launcher's environment, a named pipe (TORCHELASTIC_TIMER_FILE, or
// one in the launcher's private folder) takes the requests that
// torch.distributed.elastic.timer.FileTimerClient writes, one JSON line
// each: {"version": 1, "pid": P, "scope_id": S, "expiration_time": T (unix
// seconds; negative: release), "signal": N}. A timer that expires has its
// worker reaped with its signal, as torch's FileTimerServer does, so an
// unchanged script that wraps a step in `expires(after=...)` gets it
// enforced. Unlike torch's, the server here wakes at the next expiry (not
// every 0.1 s), bounds what a line and the table may hold, and reaps only
// the pids the launcher says are its workers (the rest is refused with a
// warning: a pipe in a shared folder must not kill anyone else).
#ifndef CPPTORCHRUN_LAUNCHER_WORKERS_FILE_TIMER_H_
#define CPPTORCHRUN_LAUNCHER_WORKERS_FILE_TIMER_H_

#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <thread>
#include <utility>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"

namespace cpptorchrun::launcher {

struct FileTimerRequest {
  int64_t pid = 0;
  std::string scope_id;
  double expiration_time = 0;  // unix seconds; negative: release the timer
  int signal = 0;              // <= 0: expire without reaping
};

// One request line. InvalidArgument naming what is wrong (not JSON, a
// field missing or of the wrong type, an unknown version, a pid <= 0).
absl::StatusOr<FileTimerRequest> ParseFileTimerRequest(absl::string_view line);

// The timers, keyed by (pid, scope), as torch keeps them. Pure.
class FileTimers {
 public:
  // At most this many timers; a request for a new one beyond is dropped.
  static constexpr size_t kMaxTimers = 10000;

  // Sets, replaces or (negative expiration) releases a timer. False when
  // the table is full and the request was dropped.
  bool Apply(const FileTimerRequest& request);

  // For each pid with a timer expired at `now`: the earliest of its expired
  // timers that carries a signal (none: its timers expire, nobody is
  // reaped). Every timer of those pids is cleared, as torch does.
  std::vector<FileTimerRequest> TakeExpired(double now);

  // The earliest expiration time; nullopt when there is no timer.
  std::optional<double> NextExpiry() const;
  size_t size() const { return timers_.size(); }

 private:
  std::map<std::pair<int64_t, std::string>, FileTimerRequest> timers_;
};

// The named pipe and its thread. `reap` is called on that thread for each
// expired timer with a signal; it decides and acts (the launcher checks the
// pid is one of its workers, kills it and records the event). `warn` gets
// each refused line.
class FileTimerServer {
 public:
  using Reap = std::function<void(const FileTimerRequest&)>;
  using Warn = std::function<void(const std::string&)>;

  // Creates the FIFO at `path` (replacing a file already there), and
  // starts the thread. Errors name the path and the failing call.
  static absl::StatusOr<std::unique_ptr<FileTimerServer>> Start(const std::string& path, Reap reap, Warn warn);
  ~FileTimerServer();  // stops and joins the thread, removes the FIFO
  FileTimerServer(const FileTimerServer&) = delete;
  FileTimerServer& operator=(const FileTimerServer&) = delete;

  const std::string& path() const { return path_; }

 private:
  FileTimerServer(std::string path, int fifo_fd, int stop_fd, Reap reap, Warn warn);
  void Loop();
  void HandleLine(absl::string_view line);

  const std::string path_;
  const int fifo_fd_;
  const int stop_fd_;
  const Reap reap_;
  const Warn warn_;
  FileTimers timers_;  // the thread's own
  std::string partial_;   // a line not ended yet
  bool skipping_ = false;  // inside a line too long, until its end
  std::thread thread_;
};

}  // namespace cpptorchrun::launcher

#endif  // CPPTORCHRUN_LAUNCHER_WORKERS_FILE_TIMER_H_
