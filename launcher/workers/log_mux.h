// The log multiplexer: reads every worker's stdout and stderr through pipes
// on one thread, splits them into whole lines and writes each line, with
// its rank prefix, to the console (never two workers' output within one
// line), and the raw bytes to the worker's log files (--redirects, --tee).
#ifndef CPPTORCHRUN_LAUNCHER_LOG_MUX_H_
#define CPPTORCHRUN_LAUNCHER_LOG_MUX_H_

#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/status/status.h"
#include "absl/strings/string_view.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"

namespace cpptorchrun::launcher {

// The last bytes of one stream, kept for the agent (a hung Python worker's
// stack, which its faulthandler writes to stderr before it dies). Written
// by the log mux's thread, read by the agent's; thread-safe.
class StreamTail {
 public:
  static constexpr size_t kMaxBytes = 64 * 1024;

  // Appends `data`, keeping the last kMaxBytes.
  void Append(absl::string_view data);
  // The stream reached its end (every writer closed it).
  void Close();
  // Waits until Close or `deadline`; true when closed.
  bool WaitClosed(absl::Time deadline);
  std::string Text();

 private:
  absl::Mutex mu_;
  std::string text_ ABSL_GUARDED_BY(mu_);
  bool closed_ ABSL_GUARDED_BY(mu_) = false;
};

// Where one worker stream goes.
struct StreamSink {
  std::string prefix;      // console line prefix, e.g. "[default0]:"
  int console_fd = -1;     // 1, 2, or -1: not shown on the console
  std::string file_path;   // empty: no file; else created (truncated)
  // torchrun's --duplicate_{stdout,stderr}_filters: the stream's lines that
  // contain any of `duplicate_filters` are appended, prefixed, to
  // `duplicate_path` (shared by the streams of one attempt; opened for
  // appending). Empty filters or path: none.
  std::vector<std::string> duplicate_filters;
  std::string duplicate_path;
  // Also keeps the stream's last bytes here; null: not kept.
  std::shared_ptr<StreamTail> tail;
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

// What the console shows of one worker stream: whole lines with their
// prefix, and a line being redrawn with carriage returns (a tqdm progress
// bar) as it is drawn: each chunk that leaves such a line unfinished emits
// "\r" + prefix + the current segment, so the terminal overwrites it in
// place; its newline ends it. "\r\n" is a plain line end, also when split
// across two reads.
struct ConsoleLine {
  std::string text;         // the current segment (since the last \n or \r)
  bool carriage = false;    // a \r was seen since the last \n
  bool pending_cr = false;  // the last read ended in \r (it may be \r\n)
};

// Appends to `*out` what the console shows for `data`. A segment longer
// than `max_line` is cut and ended as a line. Pure.
void RenderConsole(absl::string_view data, const std::string& prefix, size_t max_line,
                   ConsoleLine* line, std::string* out);
// The end of the stream: the unfinished segment, ended with a newline.
void FinishConsole(const std::string& prefix, ConsoleLine* line, std::string* out);

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
    int duplicate_fd = -1;
    StreamSink sink;
    ConsoleLine console;
    std::string duplicate_partial;
  };
  // Writes the lines of `data` that match a filter to the duplicate file.
  static void Duplicate(Stream& s, absl::string_view data, bool flush);
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
