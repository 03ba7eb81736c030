// The log multiplexer: reads every worker's stdout and stderr through pipes
// on one thread, splits them into whole lines and writes each line, with
// its rank prefix, to the console (never two workers' output within one
// line), and the raw bytes to the worker's log files (--redirects, --tee).
#ifndef CPPTORCHRUN_LAUNCHER_LOG_MUX_H_
#define CPPTORCHRUN_LAUNCHER_LOG_MUX_H_

#include <string>
#include <thread>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/status/status.h"
#include "absl/strings/string_view.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"

namespace cpptorchrun::launcher {

// Where one worker stream goes.
struct StreamSink {
  std::string prefix;      // console line prefix, e.g. "[default0]:"
  int console_fd = -1;     // 1, 2, or -1: not shown on the console
  std::string file_path;   // empty: no file; else created (truncated)
};

// The mutex that every whole-line console writer holds (the log mux and the
// launcher's own log sink), so lines never interleave.
absl::Mutex& ConsoleMutex();

// Writes all of `data` to `fd`, retrying short writes and EINTR.
void WriteAll(int fd, absl::string_view data);

// Appends to `*out` each complete line of `*partial` + `data`, prefixed, and
// keeps the incomplete tail in `*partial`. A tail longer than `max_line`
// bytes is cut and emitted as a line of its own. Pure.
void SplitLines(absl::string_view data, const std::string& prefix, size_t max_line,
                std::string* partial, std::string* out);

// Thread-safe. Owns one reader thread, started on the first Add.
class LogMux {
 public:
  static constexpr size_t kMaxLine = 64 * 1024;

  LogMux();
  ~LogMux();  // stops the thread; flushes tails; closes every fd
  LogMux(const LogMux&) = delete;
  LogMux& operator=(const LogMux&) = delete;

  // Takes ownership of `fd` (a pipe's read end) and reads it until EOF.
  // Errors: the log file cannot be created (the fd is closed).
  absl::Status Add(int fd, StreamSink sink);

  // Waits until every stream added so far reached EOF and was written out,
  // or `deadline`. Returns true when drained. Streams still open at the
  // deadline are flushed and closed (a grandchild may hold a pipe).
  bool WaitDrained(absl::Time deadline);

 private:
  struct Stream {
    int fd = -1;
    int file_fd = -1;
    StreamSink sink;
    std::string partial;
  };
  void Loop();
  void Finish(Stream& s);

  absl::Mutex mu_;
  std::vector<Stream> pending_ ABSL_GUARDED_BY(mu_);
  int open_streams_ ABSL_GUARDED_BY(mu_) = 0;  // added, not yet at EOF
  bool stop_ ABSL_GUARDED_BY(mu_) = false;
  bool close_all_ ABSL_GUARDED_BY(mu_) = false;
  int wake_fd_ = -1;  // eventfd
  std::thread thread_;
  bool started_ ABSL_GUARDED_BY(mu_) = false;
};

}  // namespace cpptorchrun::launcher

#endif  // CPPTORCHRUN_LAUNCHER_LOG_MUX_H_
