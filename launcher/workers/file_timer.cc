#include "launcher/workers/file_timer.h"

#include <fcntl.h>
#include <poll.h>
#include <sys/eventfd.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <climits>
#include <cmath>
#include <cstring>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"
#include "absl/time/time.h"
#include "google/protobuf/struct.pb.h"
#include "google/protobuf/util/json_util.h"

namespace cpptorchrun::launcher {
namespace {

// torch's client refuses a request longer than PIPE_BUF; so does the server.
constexpr size_t kMaxLine = PIPE_BUF;

absl::Status Bad(const std::string& what) {
  return absl::InvalidArgumentError(absl::StrCat("file timer request: ", what));
}

// The number under `key`, which must be an integer when `integral`.
absl::StatusOr<double> Number(const google::protobuf::Struct& root, const std::string& key, bool integral) {
  auto it = root.fields().find(key);
  if (it == root.fields().end()) return Bad(absl::StrCat("no \"", key, "\""));
  if (!it->second.has_number_value()) return Bad(absl::StrCat("\"", key, "\" is not a number"));
  const double v = it->second.number_value();
  if (!std::isfinite(v)) return Bad(absl::StrCat("\"", key, "\" is not finite"));
  if (integral && (v != std::floor(v) || std::fabs(v) > 1e15)) {
    return Bad(absl::StrCat("\"", key, "\" is not an integer"));
  }
  return v;
}

}  // namespace

absl::StatusOr<FileTimerRequest> ParseFileTimerRequest(absl::string_view line) {
  google::protobuf::Struct root;
  auto parsed = google::protobuf::util::JsonStringToMessage(std::string(line), &root);
  if (!parsed.ok()) return Bad(absl::StrCat("not a JSON object: ", parsed.message().ToString()));
  absl::StatusOr<double> version = Number(root, "version", true);
  if (!version.ok()) return version.status();
  if (*version != 1) return Bad(absl::StrCat("version ", *version, " (this launcher reads 1)"));
  FileTimerRequest r;
  absl::StatusOr<double> pid = Number(root, "pid", true);
  if (!pid.ok()) return pid.status();
  if (*pid <= 0 || *pid > INT_MAX) return Bad(absl::StrCat("pid ", *pid, " is not a process id"));
  r.pid = static_cast<int64_t>(*pid);
  auto scope = root.fields().find("scope_id");
  if (scope == root.fields().end() || !scope->second.has_string_value()) return Bad("no \"scope_id\" string");
  r.scope_id = scope->second.string_value();
  absl::StatusOr<double> expiration = Number(root, "expiration_time", false);
  if (!expiration.ok()) return expiration.status();
  r.expiration_time = *expiration;
  absl::StatusOr<double> signal = Number(root, "signal", true);
  if (!signal.ok()) return signal.status();
  if (*signal > 64) return Bad(absl::StrCat("signal ", *signal, " is not a signal"));
  r.signal = static_cast<int>(*signal);
  return r;
}

bool FileTimers::Apply(const FileTimerRequest& r) {
  const auto key = std::make_pair(r.pid, r.scope_id);
  if (r.expiration_time < 0) {
    timers_.erase(key);
    return true;
  }
  if (timers_.size() >= kMaxTimers && timers_.count(key) == 0) return false;
  timers_[key] = r;
  return true;
}

std::vector<FileTimerRequest> FileTimers::TakeExpired(double now) {
  std::map<int64_t, std::optional<FileTimerRequest>> by_pid;
  for (const auto& [key, r] : timers_) {
    if (r.expiration_time > now) continue;
    std::optional<FileTimerRequest>& chosen = by_pid[r.pid];
    if (r.signal > 0 && (!chosen.has_value() || r.expiration_time < chosen->expiration_time)) chosen = r;
  }
  std::vector<FileTimerRequest> reap;
  for (const auto& [pid, chosen] : by_pid) {
    if (chosen.has_value()) reap.push_back(*chosen);
    for (auto it = timers_.lower_bound({pid, ""}); it != timers_.end() && it->first.first == pid;) {
      it = timers_.erase(it);
    }
  }
  return reap;
}

std::optional<double> FileTimers::NextExpiry() const {
  std::optional<double> next;
  for (const auto& [key, r] : timers_) {
    if (!next.has_value() || r.expiration_time < *next) next = r.expiration_time;
  }
  return next;
}

absl::StatusOr<std::unique_ptr<FileTimerServer>> FileTimerServer::Start(const std::string& path, Reap reap,
                                                                         Warn warn) {
  ::unlink(path.c_str());
  if (::mkfifo(path.c_str(), 0600) != 0) {
    return absl::InternalError(absl::StrCat("mkfifo ", path, ": ", std::strerror(errno)));
  }
  // Read and write: the pipe never reads end-of-file between clients, and
  // the open does not wait for a first writer.
  int fifo = ::open(path.c_str(), O_RDWR | O_NONBLOCK | O_CLOEXEC);
  if (fifo < 0) {
    const std::string why = std::strerror(errno);
    ::unlink(path.c_str());
    return absl::InternalError(absl::StrCat("open ", path, ": ", why));
  }
  int stop = ::eventfd(0, EFD_CLOEXEC | EFD_NONBLOCK);
  if (stop < 0) {
    ::close(fifo);
    ::unlink(path.c_str());
    return absl::InternalError(absl::StrCat("eventfd: ", std::strerror(errno)));
  }
  return std::unique_ptr<FileTimerServer>(new FileTimerServer(path, fifo, stop, std::move(reap), std::move(warn)));
}

FileTimerServer::FileTimerServer(std::string path, int fifo_fd, int stop_fd, Reap reap, Warn warn)
    : path_(std::move(path)), fifo_fd_(fifo_fd), stop_fd_(stop_fd), reap_(std::move(reap)), warn_(std::move(warn)) {
  thread_ = std::thread([this] { Loop(); });
}

FileTimerServer::~FileTimerServer() {
  uint64_t one = 1;
  (void)!::write(stop_fd_, &one, sizeof(one));
  thread_.join();
  ::close(fifo_fd_);
  ::close(stop_fd_);
  ::unlink(path_.c_str());
}

void FileTimerServer::HandleLine(absl::string_view line) {
  absl::StatusOr<FileTimerRequest> request = ParseFileTimerRequest(line);
  if (!request.ok()) {
    warn_(std::string(request.status().message()));
    return;
  }
  if (!timers_.Apply(*request)) {
    warn_(absl::StrCat("file timer request: ", FileTimers::kMaxTimers, " timers already set; dropped the one of pid ",
                       request->pid));
  }
}

void FileTimerServer::Loop() {
  char buf[8192];
  for (;;) {
    const double now = absl::ToDoubleSeconds(absl::Now() - absl::UnixEpoch());
    for (const FileTimerRequest& r : timers_.TakeExpired(now)) reap_(r);
    // Wakes on a request, on the stop, or at the next expiry.
    int timeout_ms = -1;
    if (std::optional<double> next = timers_.NextExpiry()) {
      timeout_ms = static_cast<int>(std::min(3600.0, std::max(0.0, *next - now)) * 1000) + 1;
    }
    struct pollfd fds[2] = {{fifo_fd_, POLLIN, 0}, {stop_fd_, POLLIN, 0}};
    if (::poll(fds, 2, timeout_ms) < 0 && errno != EINTR) return;
    if (fds[1].revents != 0) return;
    if ((fds[0].revents & POLLIN) == 0) continue;
    ssize_t n;
    while ((n = ::read(fifo_fd_, buf, sizeof(buf))) > 0) {
      partial_.append(buf, static_cast<size_t>(n));
      size_t start = 0;
      for (size_t nl; (nl = partial_.find('\n', start)) != std::string::npos; start = nl + 1) {
        if (!skipping_ && nl - start > kMaxLine) {
          warn_(absl::StrCat("file timer request: a line longer than ", kMaxLine, " bytes; dropped"));
        } else if (!skipping_) {
          HandleLine(absl::string_view(partial_).substr(start, nl - start));
        }
        skipping_ = false;
      }
      partial_.erase(0, start);
      if (partial_.size() > kMaxLine) {
        if (!skipping_) warn_(absl::StrCat("file timer request: a line longer than ", kMaxLine, " bytes; dropped"));
        skipping_ = true;  // until its end
        partial_.clear();
      }
    }
  }
}

}  // namespace cpptorchrun::launcher
