// The become protocol (become.h): the message format and the socket calls
// of both sides.
#include "base/become.h"

#include <fcntl.h>
#include <poll.h>
#include <sched.h>
#include <sys/socket.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <cerrno>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <thread>

#include "absl/strings/escaping.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/strings/str_split.h"

namespace cpptorchrun::base {
namespace {

constexpr absl::string_view kMagic = "CPPTORCHRUN-BECOME-1";
// Counts beyond these are hostile or broken, not a real worker.
constexpr int64_t kMaxArgs = 1 << 16;
constexpr int kMaxCpus = 1 << 16;
// set_mempolicy's MPOL_PREFERRED (linux/mempolicy.h).
constexpr int kMpolPreferred = 1;

// Reads NUL-terminated fields one by one.
class Fields {
 public:
  explicit Fields(absl::string_view bytes) : rest_(bytes) {}
  absl::StatusOr<absl::string_view> Next(absl::string_view what) {
    const size_t nul = rest_.find('\0');
    if (nul == absl::string_view::npos) {
      return absl::InvalidArgumentError(absl::StrCat("become request: ", what, " missing or not NUL-terminated"));
    }
    absl::string_view field = rest_.substr(0, nul);
    rest_.remove_prefix(nul + 1);
    return field;
  }
  absl::StatusOr<int64_t> Number(absl::string_view what, int64_t lo, int64_t hi) {
    absl::StatusOr<absl::string_view> f = Next(what);
    if (!f.ok()) return f.status();
    int64_t v = 0;
    if (!absl::SimpleAtoi(*f, &v) || v < lo || v > hi) {
      return absl::InvalidArgumentError(
          absl::StrCat("become request: ", what, " must be a number in [", lo, ", ", hi, "], not \"",
                       absl::CHexEscape(f->substr(0, 40)), "\""));
    }
    return v;
  }
  bool empty() const { return rest_.empty(); }

 private:
  absl::string_view rest_;
};

absl::Status Errno(absl::string_view what) {
  const int e = errno;
  const std::string text = absl::StrCat(what, ": ", strerror(e));
  if (e == EPIPE || e == ECONNRESET || e == ENOTCONN) return absl::UnavailableError(text);
  if (e == EMSGSIZE || e == ENOBUFS) return absl::ResourceExhaustedError(text);
  return absl::InternalError(text);
}

// Waits until `fd` is readable or `deadline`.
absl::Status AwaitReadable(int fd, absl::Time deadline, absl::string_view what) {
  // At least one look, even at a deadline already past (a caller that only
  // asks whether it is there yet).
  for (bool first = true;; first = false) {
    const absl::Duration left = deadline - absl::Now();
    if (left <= absl::ZeroDuration() && !first) {
      return absl::DeadlineExceededError(absl::StrCat("no ", what, " from the warm process in time"));
    }
    pollfd p{fd, POLLIN, 0};
    const int ms = left <= absl::ZeroDuration()
                       ? 0
                       : static_cast<int>(std::min<int64_t>(absl::ToInt64Milliseconds(left) + 1, 1 << 30));
    const int rc = poll(&p, 1, ms);
    if (rc < 0 && errno == EINTR) continue;
    if (rc < 0) return Errno("poll");
    if (rc > 0) return absl::OkStatus();
  }
}

// One message (at most kMaxBecomeBytes); empty: the peer closed.
absl::StatusOr<std::string> ReadMessage(int fd) {
  std::string buf(kMaxBecomeBytes, '\0');
  for (;;) {
    const ssize_t n = recv(fd, buf.data(), buf.size(), MSG_CMSG_CLOEXEC);
    if (n < 0 && errno == EINTR) continue;
    if (n < 0) return Errno("recv");
    if (n == 0) return absl::UnavailableError("the warm process closed its socket");
    buf.resize(static_cast<size_t>(n));
    return buf;
  }
}

}  // namespace

std::string EncodeBecome(const BecomeRequest& r) {
  std::string out;
  auto add = [&out](absl::string_view s) {
    out.append(s.data(), s.size());
    out.push_back('\0');
  };
  add(kMagic);
  add(r.cwd);
  add(absl::StrJoin(r.cpus, ","));
  add(absl::StrCat(r.memory_node));
  add(absl::StrCat(r.launcher_pid));
  add(absl::StrCat(r.argv.size()));
  for (const std::string& a : r.argv) add(a);
  add(absl::StrCat(r.env.size()));
  for (const auto& [k, v] : r.env) add(absl::StrCat(k, "=", v));
  return out;
}

absl::StatusOr<BecomeRequest> DecodeBecome(absl::string_view bytes) {
  Fields f(bytes);
  BecomeRequest r;
  absl::StatusOr<absl::string_view> magic = f.Next("magic");
  if (!magic.ok()) return magic.status();
  if (*magic != kMagic) {
    return absl::InvalidArgumentError(absl::StrCat("become request: expected \"", kMagic, "\", got \"",
                                                   absl::CHexEscape(magic->substr(0, 40)), "\""));
  }
  absl::StatusOr<absl::string_view> cwd = f.Next("cwd");
  if (!cwd.ok()) return cwd.status();
  r.cwd = std::string(*cwd);
  absl::StatusOr<absl::string_view> cpus = f.Next("cpus");
  if (!cpus.ok()) return cpus.status();
  if (!cpus->empty()) {
    for (absl::string_view c : absl::StrSplit(*cpus, ',')) {
      int v = 0;
      if (!absl::SimpleAtoi(c, &v) || v < 0 || v >= kMaxCpus) {
        return absl::InvalidArgumentError(
            absl::StrCat("become request: cpus must be CPU numbers, not \"", absl::CHexEscape(c.substr(0, 20)), "\""));
      }
      r.cpus.push_back(v);
    }
  }
  absl::StatusOr<int64_t> node = f.Number("memory node", -1, 1023);
  if (!node.ok()) return node.status();
  r.memory_node = static_cast<int>(*node);
  absl::StatusOr<int64_t> pid = f.Number("launcher pid", 0, int64_t{1} << 31);
  if (!pid.ok()) return pid.status();
  r.launcher_pid = *pid;
  absl::StatusOr<int64_t> argc = f.Number("argc", 1, kMaxArgs);
  if (!argc.ok()) return argc.status();
  for (int64_t i = 0; i < *argc; ++i) {
    absl::StatusOr<absl::string_view> a = f.Next("argv entry");
    if (!a.ok()) return a.status();
    r.argv.emplace_back(*a);
  }
  absl::StatusOr<int64_t> envc = f.Number("envc", 0, kMaxArgs);
  if (!envc.ok()) return envc.status();
  for (int64_t i = 0; i < *envc; ++i) {
    absl::StatusOr<absl::string_view> e = f.Next("env entry");
    if (!e.ok()) return e.status();
    const size_t eq = e->find('=');
    if (eq == absl::string_view::npos || eq == 0) {
      return absl::InvalidArgumentError(absl::StrCat("become request: env entry \"",
                                                     absl::CHexEscape(e->substr(0, 40)), "\" is not NAME=value"));
    }
    r.env[std::string(e->substr(0, eq))] = std::string(e->substr(eq + 1));
  }
  if (!f.empty()) return absl::InvalidArgumentError("become request: bytes after the environment");
  return r;
}

std::string EncodeBecomeAnswer(const absl::StatusOr<pid_t>& answer) {
  if (answer.ok()) return absl::StrCat("ok ", *answer);
  return absl::StrCat("error ", answer.status().message());
}

absl::StatusOr<pid_t> DecodeBecomeAnswer(absl::string_view bytes) {
  if (absl::ConsumePrefix(&bytes, "ok ")) {
    int pid = 0;
    if (absl::SimpleAtoi(bytes, &pid) && pid > 0) return pid;
  } else if (absl::ConsumePrefix(&bytes, "error ")) {
    return absl::InternalError(std::string(bytes));
  }
  return absl::InvalidArgumentError(
      absl::StrCat("the warm process answered \"", absl::CHexEscape(bytes.substr(0, 60)), "\", not ok or error"));
}

absl::Status WarmSocketPair(int fds[2]) {
  if (socketpair(AF_UNIX, SOCK_SEQPACKET | SOCK_CLOEXEC, 0, fds) != 0) return Errno("socketpair");
  return absl::OkStatus();
}

absl::Status AwaitWarmReady(int fd, absl::Time deadline) {
  if (absl::Status s = AwaitReadable(fd, deadline, "ready"); !s.ok()) return s;
  absl::StatusOr<std::string> m = ReadMessage(fd);
  if (!m.ok()) return m.status();
  if (*m == "ready") return absl::OkStatus();
  absl::string_view text = *m;
  if (absl::ConsumePrefix(&text, "error ")) return absl::InternalError(std::string(text));
  return absl::InvalidArgumentError(
      absl::StrCat("the warm process said \"", absl::CHexEscape(text.substr(0, 60)), "\", not ready"));
}

absl::StatusOr<pid_t> RequestBecome(int fd, const BecomeRequest& request, int stdout_fd, int stderr_fd,
                                    absl::Time deadline) {
  const std::string bytes = EncodeBecome(request);
  if (bytes.size() > kMaxBecomeBytes) {
    return absl::ResourceExhaustedError(absl::StrCat("the worker's argv and environment take ", bytes.size(),
                                                     " bytes, more than a become request holds (",
                                                     kMaxBecomeBytes, ")"));
  }
  iovec iov{const_cast<char*>(bytes.data()), bytes.size()};
  alignas(cmsghdr) char control[CMSG_SPACE(2 * sizeof(int))] = {};
  msghdr msg{};
  msg.msg_iov = &iov;
  msg.msg_iovlen = 1;
  msg.msg_control = control;
  msg.msg_controllen = sizeof(control);
  cmsghdr* c = CMSG_FIRSTHDR(&msg);
  c->cmsg_level = SOL_SOCKET;
  c->cmsg_type = SCM_RIGHTS;
  c->cmsg_len = CMSG_LEN(2 * sizeof(int));
  const int fds[2] = {stdout_fd, stderr_fd};
  std::memcpy(CMSG_DATA(c), fds, sizeof(fds));
  for (;;) {
    const ssize_t n = sendmsg(fd, &msg, MSG_NOSIGNAL);
    if (n < 0 && errno == EINTR) continue;
    if (n < 0) return Errno("sending the become request");
    break;
  }
  if (absl::Status s = AwaitReadable(fd, deadline, "answer"); !s.ok()) return s;
  absl::StatusOr<std::string> answer = ReadMessage(fd);
  if (!answer.ok()) return answer.status();
  return DecodeBecomeAnswer(*answer);
}

absl::StatusOr<ReceivedBecome> ReceiveBecome(int fd) {
  std::string buf(kMaxBecomeBytes, '\0');
  iovec iov{buf.data(), buf.size()};
  alignas(cmsghdr) char control[CMSG_SPACE(8 * sizeof(int))] = {};
  msghdr msg{};
  msg.msg_iov = &iov;
  msg.msg_iovlen = 1;
  msg.msg_control = control;
  msg.msg_controllen = sizeof(control);
  ssize_t n = 0;
  for (;;) {
    n = recvmsg(fd, &msg, MSG_CMSG_CLOEXEC);
    if (n < 0 && errno == EINTR) continue;
    if (n < 0) return Errno("recvmsg");
    break;
  }
  if (n == 0) return absl::UnavailableError("the launcher closed the warm socket");
  std::vector<int> got;
  for (cmsghdr* c = CMSG_FIRSTHDR(&msg); c != nullptr; c = CMSG_NXTHDR(&msg, c)) {
    if (c->cmsg_level != SOL_SOCKET || c->cmsg_type != SCM_RIGHTS) continue;
    const size_t count = (c->cmsg_len - CMSG_LEN(0)) / sizeof(int);
    for (size_t i = 0; i < count; ++i) {
      int v = -1;
      std::memcpy(&v, CMSG_DATA(c) + i * sizeof(int), sizeof(int));
      got.push_back(v);
    }
  }
  auto close_all = [&got] {
    for (int v : got) close(v);
  };
  if ((msg.msg_flags & (MSG_TRUNC | MSG_CTRUNC)) != 0) {
    close_all();
    return absl::InvalidArgumentError("become request: truncated");
  }
  if (got.size() != 2) {
    close_all();
    return absl::InvalidArgumentError(absl::StrCat("become request: ", got.size(), " fds attached, not 2"));
  }
  buf.resize(static_cast<size_t>(n));
  absl::StatusOr<BecomeRequest> request = DecodeBecome(buf);
  if (!request.ok()) {
    close_all();
    return request.status();
  }
  return ReceivedBecome{*std::move(request), got[0], got[1]};
}

absl::Status SendWarmMessage(int fd, absl::string_view message) {
  for (;;) {
    const ssize_t n = send(fd, message.data(), message.size(), MSG_NOSIGNAL);
    if (n < 0 && errno == EINTR) continue;
    if (n < 0) return Errno("send");
    return absl::OkStatus();
  }
}

absl::Status AnswerBecome(int fd, const absl::Status& applied) {
  return SendWarmMessage(fd, EncodeBecomeAnswer(applied.ok() ? absl::StatusOr<pid_t>(getpid())
                                                             : absl::StatusOr<pid_t>(applied)));
}

bool IdlePriorityReversible() {
  if (sched_getscheduler(0) != SCHED_OTHER) return false;
  bool reversible = false;
  // pid 0: the calling thread only, so the probe changes nothing else.
  std::thread probe([&reversible] {
    sched_param none{};
    if (sched_setscheduler(0, SCHED_IDLE, &none) != 0) return;
    reversible = sched_setscheduler(0, SCHED_OTHER, &none) == 0;
  });
  probe.join();
  return reversible;
}

absl::Status LeaveIdlePriority(pid_t pid) {
  const std::string tasks = pid == 0 ? std::string("/proc/self/task") : absl::StrCat("/proc/", pid, "/task");
  std::error_code ec;
  for (const auto& entry : std::filesystem::directory_iterator(tasks, ec)) {
    pid_t tid = 0;
    if (!absl::SimpleAtoi(entry.path().filename().string(), &tid)) continue;
    if (sched_getscheduler(tid) != SCHED_IDLE) continue;  // a thread gone meanwhile: -1
    sched_param none{};
    if (sched_setscheduler(tid, SCHED_OTHER, &none) != 0 && errno != ESRCH) {
      return Errno(absl::StrCat("leaving SCHED_IDLE (thread ", tid, ")"));
    }
  }
  if (ec) return absl::InternalError(absl::StrCat("cannot list ", tasks, ": ", ec.message()));
  return absl::OkStatus();
}

absl::Status ApplyBecome(ReceivedBecome& received) {
  const BecomeRequest& r = received.request;
  if (absl::Status s = LeaveIdlePriority(); !s.ok()) return s;
  if (clearenv() != 0) return absl::InternalError("clearenv failed");
  for (const auto& [k, v] : r.env) {
    if (setenv(k.c_str(), v.c_str(), 1) != 0) return Errno(absl::StrCat("setenv ", k));
  }
  if (!r.cwd.empty() && chdir(r.cwd.c_str()) != 0) return Errno(absl::StrCat("chdir ", r.cwd));
  if (dup2(received.stdout_fd, STDOUT_FILENO) < 0) return Errno("dup2 stdout");
  if (dup2(received.stderr_fd, STDERR_FILENO) < 0) return Errno("dup2 stderr");
  close(received.stdout_fd);
  close(received.stderr_fd);
  received.stdout_fd = received.stderr_fd = -1;
  if (!r.cpus.empty()) {
    cpu_set_t set;
    CPU_ZERO(&set);
    for (int c : r.cpus) {
      if (c < CPU_SETSIZE) CPU_SET(c, &set);
    }
    sched_setaffinity(0, sizeof(set), &set);
  }
  if (r.memory_node >= 0) {
    unsigned long mask[16] = {0};
    mask[r.memory_node / 64] |= 1UL << (r.memory_node % 64);
    syscall(SYS_set_mempolicy, kMpolPreferred, mask, 1024 + 1);
  }
  return absl::OkStatus();
}

}  // namespace cpptorchrun::base
