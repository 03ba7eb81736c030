// The log multiplexer: one poll() thread over every worker pipe.
#include "launcher/workers/log_mux.h"

#include <fcntl.h>
#include <poll.h>
#include <sys/eventfd.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"

namespace cpptorchrun::launcher {

absl::Mutex& ConsoleMutex() {
  static absl::Mutex* mu = new absl::Mutex();
  return *mu;
}

void WriteAll(int fd, absl::string_view data) {
  while (!data.empty()) {
    ssize_t n = write(fd, data.data(), data.size());
    if (n < 0) {
      if (errno == EINTR) continue;
      return;  // a closed console is not the workers' problem
    }
    data.remove_prefix(static_cast<size_t>(n));
  }
}

void SplitLines(absl::string_view data, const std::string& prefix, size_t max_line,
                std::string* partial, std::string* out) {
  while (!data.empty()) {
    size_t nl = data.find('\n');
    if (nl == absl::string_view::npos) {
      size_t room = max_line > partial->size() ? max_line - partial->size() : 0;
      if (data.size() < room) {
        partial->append(data.data(), data.size());
        return;
      }
      // An over-long line: cut it at max_line.
      partial->append(data.data(), room);
      data.remove_prefix(room);
      absl::StrAppend(out, prefix, *partial, "\n");
      partial->clear();
      continue;
    }
    absl::string_view line = data.substr(0, nl);
    if (partial->size() + line.size() > max_line) {
      size_t room = max_line > partial->size() ? max_line - partial->size() : 0;
      partial->append(line.data(), room);
      absl::StrAppend(out, prefix, *partial, "\n");
      partial->clear();
      data.remove_prefix(room);
      continue;
    }
    absl::StrAppend(out, prefix, *partial, line, "\n");
    partial->clear();
    data.remove_prefix(nl + 1);
  }
}

void RenderConsole(absl::string_view data, const std::string& prefix, size_t max_line,
                   ConsoleLine* line, std::string* out) {
  auto end_line = [&] {
    absl::StrAppend(out, line->carriage ? "\r" : "", prefix, line->text, "\n");
    line->text.clear();
    line->carriage = false;
  };
  auto carriage_return = [&] {
    // What was written before the first \r is shown before it is drawn over.
    if (!line->carriage && !line->text.empty()) absl::StrAppend(out, prefix, line->text);
    line->text.clear();
    line->carriage = true;
  };
  size_t i = 0;
  if (line->pending_cr && !data.empty()) {
    line->pending_cr = false;
    if (data[0] == '\n') {
      end_line();
      i = 1;
    } else {
      carriage_return();
    }
  }
  for (; i < data.size(); ++i) {
    const char c = data[i];
    if (c == '\n') {
      end_line();
    } else if (c == '\r') {
      if (i + 1 == data.size()) {
        line->pending_cr = true;  // decided by the next read
      } else if (data[i + 1] == '\n') {
        end_line();
        ++i;
      } else {
        carriage_return();
      }
    } else {
      line->text.push_back(c);
      if (line->text.size() >= max_line) end_line();
    }
  }
  if (line->carriage && !line->text.empty()) absl::StrAppend(out, "\r", prefix, line->text);
}

void FinishConsole(const std::string& prefix, ConsoleLine* line, std::string* out) {
  line->pending_cr = false;
  if (!line->text.empty() || line->carriage) {
    absl::StrAppend(out, line->carriage ? "\r" : "", prefix, line->text, "\n");
  }
  line->text.clear();
  line->carriage = false;
}

void LogMux::Duplicate(Stream& s, absl::string_view data, bool flush) {
  if (s.duplicate_fd < 0) return;
  std::string lines;
  SplitLines(data, "", kMaxLine, &s.duplicate_partial, &lines);
  if (flush && !s.duplicate_partial.empty()) {
    absl::StrAppend(&lines, s.duplicate_partial, "\n");
    s.duplicate_partial.clear();
  }
  std::string out;
  for (absl::string_view l : absl::StrSplit(lines, '\n', absl::SkipEmpty())) {
    for (const std::string& f : s.sink.duplicate_filters) {
      if (!f.empty() && absl::StrContains(l, f)) {
        absl::StrAppend(&out, s.sink.prefix, l, "\n");
        break;
      }
    }
  }
  // O_APPEND and one write per read: lines of different ranks do not mix.
  if (!out.empty()) WriteAll(s.duplicate_fd, out);
}

LogMux::LogMux() { wake_fd_ = eventfd(0, EFD_CLOEXEC | EFD_NONBLOCK); }

LogMux::~LogMux() {
  {
    absl::MutexLock lock(&mu_);
    stop_ = true;
  }
  uint64_t one = 1;
  (void)!write(wake_fd_, &one, sizeof(one));
  if (thread_.joinable()) thread_.join();
  {
    absl::MutexLock lock(&mu_);
    for (Stream& s : pending_) Finish(s);
    pending_.clear();
  }
  close(wake_fd_);
}

void StreamTail::Append(absl::string_view data) {
  absl::MutexLock lock(&mu_);
  if (data.size() >= kMaxBytes) {
    text_.assign(data.data() + data.size() - kMaxBytes, kMaxBytes);
    return;
  }
  if (text_.size() + data.size() > kMaxBytes) text_.erase(0, text_.size() + data.size() - kMaxBytes);
  text_.append(data.data(), data.size());
}

void StreamTail::Close() {
  absl::MutexLock lock(&mu_);
  closed_ = true;
}

bool StreamTail::WaitClosed(absl::Time deadline) {
  absl::MutexLock lock(&mu_);
  return mu_.AwaitWithDeadline(absl::Condition(&closed_), deadline);
}

std::string StreamTail::Text() {
  absl::MutexLock lock(&mu_);
  return text_;
}

absl::Status LogMux::Add(int fd, StreamSink sink) {
  Stream s;
  s.fd = fd;
  s.sink = std::move(sink);
  // A stream that is not read ends here: nobody waits for its tail.
  auto fail = [&s, fd](absl::Status why) {
    close(fd);
    if (s.file_fd >= 0) close(s.file_fd);
    if (s.sink.tail != nullptr) s.sink.tail->Close();
    return why;
  };
  if (!s.sink.file_path.empty()) {
    s.file_fd = open(s.sink.file_path.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_APPEND | O_CLOEXEC, 0644);
    if (s.file_fd < 0) {
      return fail(absl::InternalError(absl::StrCat("cannot create log file ", s.sink.file_path, ": ", strerror(errno))));
    }
  }
  if (!s.sink.duplicate_path.empty() && !s.sink.duplicate_filters.empty()) {
    s.duplicate_fd = open(s.sink.duplicate_path.c_str(), O_WRONLY | O_CREAT | O_APPEND | O_CLOEXEC, 0644);
    if (s.duplicate_fd < 0) {
      return fail(
          absl::InternalError(absl::StrCat("cannot create log file ", s.sink.duplicate_path, ": ", strerror(errno))));
    }
  }
  {
    absl::MutexLock lock(&mu_);
    pending_.push_back(std::move(s));
    ++open_streams_;
    if (!started_) {
      started_ = true;
      thread_ = std::thread([this] { Loop(); });
    }
  }
  uint64_t one = 1;
  (void)!write(wake_fd_, &one, sizeof(one));
  return absl::OkStatus();
}

bool LogMux::WaitDrained(absl::Time deadline) {
  absl::MutexLock lock(&mu_);
  auto drained = [this]() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) { return open_streams_ == 0; };
  if (mu_.AwaitWithDeadline(absl::Condition(&drained), deadline)) return true;
  close_all_ = true;
  uint64_t one = 1;
  (void)!write(wake_fd_, &one, sizeof(one));
  mu_.AwaitWithTimeout(absl::Condition(&drained), absl::Seconds(5));
  close_all_ = false;
  return false;
}

void LogMux::Finish(Stream& s) {
  std::string out;
  FinishConsole(s.sink.prefix, &s.console, &out);
  if (!out.empty() && s.sink.console_fd >= 0) {
    absl::MutexLock lock(&ConsoleMutex());
    WriteAll(s.sink.console_fd, out);
  }
  Duplicate(s, "", /*flush=*/true);
  if (s.sink.tail != nullptr) s.sink.tail->Close();
  if (s.fd >= 0) close(s.fd);
  if (s.file_fd >= 0) close(s.file_fd);
  if (s.duplicate_fd >= 0) close(s.duplicate_fd);
  s.fd = s.file_fd = s.duplicate_fd = -1;
}

void LogMux::Loop() {
  std::vector<Stream> streams;
  std::vector<pollfd> fds;
  std::string buf(64 * 1024, '\0');
  std::string out;
  for (;;) {
    bool close_all = false;
    {
      absl::MutexLock lock(&mu_);
      if (stop_) break;
      for (Stream& s : pending_) streams.push_back(std::move(s));
      pending_.clear();
      close_all = close_all_;
    }
    if (close_all && !streams.empty()) {
      // Grandchildren holding a pipe: give up on those streams.
      for (Stream& s : streams) Finish(s);
      absl::MutexLock lock(&mu_);
      open_streams_ -= static_cast<int>(streams.size());
      streams.clear();
    }
    fds.clear();
    fds.push_back({wake_fd_, POLLIN, 0});
    for (const Stream& s : streams) fds.push_back({s.fd, POLLIN, 0});
    int rc = poll(fds.data(), fds.size(), -1);
    if (rc < 0) {
      if (errno == EINTR) continue;
      break;
    }
    if (fds[0].revents & POLLIN) {
      uint64_t v;
      (void)!read(wake_fd_, &v, sizeof(v));
    }
    int finished = 0;
    for (size_t i = 1; i < fds.size(); ++i) {
      if (fds[i].revents == 0) continue;
      Stream& s = streams[i - 1];
      ssize_t n = read(s.fd, buf.data(), buf.size());
      if (n < 0 && (errno == EINTR || errno == EAGAIN)) continue;
      if (n <= 0) {
        Finish(s);
        ++finished;
        continue;
      }
      absl::string_view data(buf.data(), static_cast<size_t>(n));
      if (s.file_fd >= 0) WriteAll(s.file_fd, data);
      if (s.sink.tail != nullptr) s.sink.tail->Append(data);
      Duplicate(s, data, /*flush=*/false);
      if (s.sink.console_fd >= 0) {
        out.clear();
        RenderConsole(data, s.sink.prefix, kMaxLine, &s.console, &out);
        if (!out.empty()) {
          absl::MutexLock lock(&ConsoleMutex());
          WriteAll(s.sink.console_fd, out);
        }
      }
    }
    if (finished > 0) {
      std::vector<Stream> alive;
      for (Stream& s : streams) {
        if (s.fd >= 0) alive.push_back(std::move(s));
      }
      streams.swap(alive);
      absl::MutexLock lock(&mu_);
      open_streams_ -= finished;
    }
  }
  for (Stream& s : streams) Finish(s);
  absl::MutexLock lock(&mu_);
  open_streams_ = 0;
}

}  // namespace cpptorchrun::launcher
