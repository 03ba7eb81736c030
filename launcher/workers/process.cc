// The real ProcessLauncher: vfork/exec, process groups, PR_SET_PDEATHSIG,
// pipes into the LogMux, and a signalfd for SIGCHLD and forwarded signals.
#include "launcher/workers/process.h"

#include <fcntl.h>
#include <poll.h>
#include <sched.h>
#include <signal.h>
#include <sys/eventfd.h>
#include <sys/prctl.h>
#include <sys/signalfd.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>
#include <cstdio>
#include <cstring>
#include <vector>

#include "absl/status/status.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "base/become.h"
#include "base/signals.h"

namespace cpptorchrun::launcher {
namespace {

// A process's command name (/proc/PID/comm, at most 15 characters); ""
// when it is gone or unreadable.
std::string CommandName(pid_t pid) {
  std::string name;
  if (FILE* f = std::fopen(absl::StrCat("/proc/", pid, "/comm").c_str(), "r")) {
    char buf[64] = {0};
    if (std::fgets(buf, sizeof(buf), f) != nullptr) name = buf;
    std::fclose(f);
  }
  while (!name.empty() && (name.back() == '\n' || name.back() == '\r')) name.pop_back();
  return name;
}

// set_mempolicy's MPOL_PREFERRED (linux/mempolicy.h; no libnuma needed).
constexpr int kMpolPreferred = 1;


// SIGCHLD and `signals`: what the launcher blocks and reads from its signalfd.
sigset_t LauncherSignalSet(const std::vector<int>& signals) {
  sigset_t set;
  sigemptyset(&set);
  sigaddset(&set, SIGCHLD);
  for (int s : signals) sigaddset(&set, s);
  return set;
}

}  // namespace

ExitStatus ExitStatus::FromWaitStatus(int ws) {
  if (WIFSIGNALED(ws)) return Killed(WTERMSIG(ws));
  if (WIFEXITED(ws)) return Exited(WEXITSTATUS(ws));
  return Exited(255);
}

std::string ExitStatus::ToString() const {
  if (signaled) return absl::StrCat("signal ", SignalName(signal), " (", signal, ")");
  return absl::StrCat("exit code ", code);
}

void BlockLauncherSignals(const std::vector<int>& signals) {
  const sigset_t set = LauncherSignalSet(signals);
  pthread_sigmask(SIG_BLOCK, &set, nullptr);
  // A closed console must not kill the launcher mid-shutdown.
  signal(SIGPIPE, SIG_IGN);
}

namespace {

// What execve needs, built before the fork (the child may only make
// async-signal-safe calls).
struct ExecImage {
  explicit ExecImage(const ProcessSpec& spec) : argv_strings(spec.argv) {
    env_strings.reserve(spec.env.size());
    for (const auto& [k, v] : spec.env) env_strings.push_back(absl::StrCat(k, "=", v));
    for (std::string& s : env_strings) envp.push_back(s.data());
    envp.push_back(nullptr);
    for (std::string& s : argv_strings) argv.push_back(s.data());
    argv.push_back(nullptr);
    CPU_ZERO(&cpus);
    for (int c : spec.cpus) {
      if (c >= 0 && c < CPU_SETSIZE) CPU_SET(c, &cpus);
    }
    bind_cpus = !spec.cpus.empty();
    prefer_node = spec.memory_node >= 0 && spec.memory_node < 1024;
    if (prefer_node) node_mask[spec.memory_node / 64] |= 1UL << (spec.memory_node % 64);
    idle = spec.idle_priority;
  }
  ExecImage(const ExecImage&) = delete;
  ExecImage& operator=(const ExecImage&) = delete;

  std::vector<std::string> env_strings;
  std::vector<char*> envp;
  std::vector<std::string> argv_strings;
  std::vector<char*> argv;
  cpu_set_t cpus;
  bool bind_cpus = false;
  unsigned long node_mask[16] = {0};  // 1024 nodes
  bool prefer_node = false;
  bool idle = false;
};

// The child between vfork and exec: its own process group, killed with its
// parent, the pipes as stdout/stderr, default signal dispositions and an
// empty mask, its CPUs, memory node and scheduling policy; on exec failure
// its errno in the parent's memory and exit 127.
[[noreturn]] void ExecChild(const ExecImage& image, int out_w, int err_w, int pass_fd, pid_t parent,
                            volatile int* child_errno) {
  setpgid(0, 0);
  prctl(PR_SET_PDEATHSIG, SIGKILL);
  // The launcher may have died before the prctl: then nobody would kill us.
  if (getppid() != parent) _exit(126);
  dup2(out_w, STDOUT_FILENO);
  dup2(err_w, STDERR_FILENO);
  // The warm process's socket as fd 3, kept across exec (dup2 clears
  // close-on-exec; an fd already at 3 has it cleared by hand).
  if (pass_fd >= 0 && pass_fd != base::kWarmFd) dup2(pass_fd, base::kWarmFd);
  if (pass_fd == base::kWarmFd) fcntl(pass_fd, F_SETFD, 0);
  struct sigaction dfl {};
  dfl.sa_handler = SIG_DFL;
  for (int s = 1; s < NSIG; ++s) {
    if (s != SIGKILL && s != SIGSTOP) sigaction(s, &dfl, nullptr);
  }
  sigset_t none;
  sigemptyset(&none);
  sigprocmask(SIG_SETMASK, &none, nullptr);
  // Raw system calls on this task alone, inherited across exec.
  if (image.bind_cpus) sched_setaffinity(0, sizeof(image.cpus), &image.cpus);
  if (image.prefer_node) syscall(SYS_set_mempolicy, kMpolPreferred, image.node_mask, 1024 + 1);
  if (image.idle) {
    sched_param param{};
    sched_setscheduler(0, SCHED_IDLE, &param);
  }
  execve(image.argv[0], image.argv.data(), image.envp.data());
  *child_errno = errno;
  _exit(127);
}

// Waits for a child that is known to be ending.
void ReapEnding(pid_t pid) {
  int ws = 0;
  while (waitpid(pid, &ws, 0) < 0 && errno == EINTR) {
  }
}

class RealProcessLauncher final : public ProcessLauncher {
 public:
  RealProcessLauncher(int signal_fd, int wake_fd) : signal_fd_(signal_fd), wake_fd_(wake_fd) {}
  ~RealProcessLauncher() override {
    close(signal_fd_);
    close(wake_fd_);
  }

  absl::StatusOr<pid_t> Start(const ProcessSpec& spec) override {
    if (spec.argv.empty()) return absl::InvalidArgumentError("empty argv");
    if (spec.warm_socket >= 0) return StartWarm(spec);
    // Everything the child needs is prepared before fork: between fork and
    // exec only async-signal-safe calls are made.
    ExecImage image(spec);
    int out[2] = {-1, STDERR_FILENO}, err[2] = {-1, STDERR_FILENO};
    if (!spec.inherit_output) {
      if (pipe2(out, O_CLOEXEC) != 0) return Errno("pipe");
      if (pipe2(err, O_CLOEXEC) != 0) {
        CloseAll({out[0], out[1]});
        return Errno("pipe");
      }
    }
    const pid_t parent = getpid();
    // vfork: the parent is suspended until the child has exec'd or exited,
    // and the child writes `child_errno` in the parent's memory. No page
    // tables are copied, which keeps starting 8 workers within a few ms.
    volatile int child_errno = 0;
    pid_t pid = vfork();
    if (pid < 0) {
      if (!spec.inherit_output) CloseAll({out[0], out[1], err[0], err[1]});
      return Errno("fork");
    }
    if (pid == 0) ExecChild(image, out[1], err[1], spec.pass_fd, parent, &child_errno);
    setpgid(pid, pid);  // harmless if the child did it already
    if (!spec.inherit_output) CloseAll({out[1], err[1]});
    if (child_errno != 0) {
      ReapEnding(pid);
      if (!spec.inherit_output) CloseAll({out[0], err[0]});
      return absl::FailedPreconditionError(absl::StrCat("cannot exec ", spec.argv[0], ": ", strerror(child_errno)));
    }
    if (spec.inherit_output) return pid;
    absl::Status s1 = mux_.Add(out[0], spec.stdout_sink);
    absl::Status s2 = mux_.Add(err[0], spec.stderr_sink);
    if (!s1.ok() || !s2.ok()) {
      kill(-pid, SIGKILL);
      ReapEnding(pid);
      return !s1.ok() ? s1 : s2;
    }
    return pid;
  }

  // The worker from a warm process: the same pipes as an exec'd one, their
  // write ends sent over the warm socket instead of dup'ed into a child.
  absl::StatusOr<pid_t> StartWarm(const ProcessSpec& spec) {
    base::BecomeRequest request;
    char cwd[4096] = {};
    if (getcwd(cwd, sizeof(cwd)) != nullptr) request.cwd = cwd;
    request.cpus = spec.cpus;
    request.memory_node = spec.memory_node;
    request.launcher_pid = getpid();
    request.argv = spec.argv;
    request.env = spec.env;
    int out[2], err[2];
    if (pipe2(out, O_CLOEXEC) != 0) return Errno("pipe");
    if (pipe2(err, O_CLOEXEC) != 0) {
      CloseAll({out[0], out[1]});
      return Errno("pipe");
    }
    absl::StatusOr<pid_t> pid =
        base::RequestBecome(spec.warm_socket, request, out[1], err[1], absl::Now() + spec.warm_timeout);
    // The warm process has its own copies now (or none).
    CloseAll({out[1], err[1]});
    if (!pid.ok()) {
      CloseAll({out[0], err[0]});
      return pid.status();
    }
    absl::Status s1 = mux_.Add(out[0], spec.stdout_sink);
    absl::Status s2 = mux_.Add(err[0], spec.stderr_sink);
    if (!s1.ok() || !s2.ok()) {
      kill(-*pid, SIGKILL);
      return !s1.ok() ? s1 : s2;
    }
    return *pid;
  }

  void SignalGroup(pid_t pid, int signo) override {
    if (pid > 0) kill(-pid, signo);
  }

  void Signal(pid_t pid, int signo) override {
    if (pid > 0) kill(pid, signo);
  }

  void SignalGroupStopNow(pid_t pid, int signo) override {
    if (pid <= 0) return;
    sigval value{};
    value.sival_int = kStopNowSignalValue;
    // First, so that the worker's pending SIGTERM is this one (a second
    // standard signal of a kind is merged into the pending one).
    sigqueue(pid, signo, value);
    kill(-pid, signo);
  }

  std::vector<ProcessEvent> Wait(absl::Time deadline) override {
    std::vector<ProcessEvent> events;
    Reap(&events);
    if (!events.empty()) return events;
    for (;;) {
      absl::Duration left = deadline - absl::Now();
      int timeout_ms = left <= absl::ZeroDuration()
                           ? 0
                           : static_cast<int>(std::min<int64_t>(absl::ToInt64Milliseconds(left) + 1,
                                                                1 << 30));
      pollfd fds[2] = {{signal_fd_, POLLIN, 0}, {wake_fd_, POLLIN, 0}};
      int rc = poll(fds, 2, timeout_ms);
      if (rc < 0 && errno == EINTR) continue;
      if (fds[1].revents & POLLIN) {
        uint64_t v;
        (void)!read(wake_fd_, &v, sizeof(v));
        events.push_back({ProcessEvent::Kind::kWakeup});
      }
      if (fds[0].revents & POLLIN) {
        signalfd_siginfo info[8];
        ssize_t n = read(signal_fd_, info, sizeof(info));
        for (ssize_t i = 0; n > 0 && i < n / static_cast<ssize_t>(sizeof(info[0])); ++i) {
          if (static_cast<int>(info[i].ssi_signo) == SIGCHLD) continue;
          ProcessEvent e;
          e.kind = ProcessEvent::Kind::kSignal;
          e.signo = static_cast<int>(info[i].ssi_signo);
          e.sender_pid = static_cast<pid_t>(info[i].ssi_pid);
          if (e.sender_pid > 0) e.sender = CommandName(e.sender_pid);
          events.push_back(e);
        }
      }
      Reap(&events);
      if (!events.empty() || absl::Now() >= deadline) return events;
    }
  }

  void Wakeup() override {
    uint64_t one = 1;
    (void)!write(wake_fd_, &one, sizeof(one));
  }

  void DrainOutput(absl::Time deadline) override { mux_.WaitDrained(deadline); }

 private:
  static absl::Status Errno(const char* what) {
    return absl::InternalError(absl::StrCat(what, ": ", strerror(errno)));
  }
  static void CloseAll(std::initializer_list<int> fds) {
    for (int fd : fds) close(fd);
  }
  static void Reap(std::vector<ProcessEvent>* events) {
    for (;;) {
      int ws = 0;
      pid_t pid = waitpid(-1, &ws, WNOHANG);
      if (pid <= 0) return;
      ProcessEvent e;
      e.kind = ProcessEvent::Kind::kExited;
      e.pid = pid;
      e.status = ExitStatus::FromWaitStatus(ws);
      events->push_back(e);
    }
  }

  int signal_fd_;
  int wake_fd_;
  LogMux mux_;
};

}  // namespace

absl::StatusOr<std::unique_ptr<ProcessLauncher>> NewRealProcessLauncher(
    const RealProcessLauncherOptions& options) {
  BlockLauncherSignals(options.signals);
  const sigset_t set = LauncherSignalSet(options.signals);
  int sfd = signalfd(-1, &set, SFD_CLOEXEC | SFD_NONBLOCK);
  if (sfd < 0) return absl::InternalError(absl::StrCat("signalfd: ", strerror(errno)));
  int wfd = eventfd(0, EFD_CLOEXEC | EFD_NONBLOCK);
  if (wfd < 0) {
    close(sfd);
    return absl::InternalError(absl::StrCat("eventfd: ", strerror(errno)));
  }
  if (options.subreaper) prctl(PR_SET_CHILD_SUBREAPER, 1);
  return std::unique_ptr<ProcessLauncher>(new RealProcessLauncher(sfd, wfd));
}

std::string ProcessStateFromStat(const std::string& stat_line) {
  const size_t close = stat_line.rfind(')');
  if (close == std::string::npos || close + 2 >= stat_line.size()) return "unknown";
  switch (stat_line[close + 2]) {
    case 'R':
      return "running";
    case 'S':
      return "sleeping";
    case 'D':
      return "uninterruptible sleep (D)";
    case 'T':
      return "stopped (T)";
    case 't':
      return "traced (t)";
    case 'Z':
      return "zombie";
    case 'X':
      return "dead";
    case 'I':
      return "idle";
    default:
      return "unknown";
  }
}

namespace {
// The first line of a small /proc file, without its newline; "" when it
// cannot be read.
std::string FirstLine(const std::string& path) {
  std::string line;
  if (FILE* f = std::fopen(path.c_str(), "r")) {
    char buf[512] = {0};
    if (std::fgets(buf, sizeof(buf), f) != nullptr) line = buf;
    std::fclose(f);
  }
  while (!line.empty() && (line.back() == '\n' || line.back() == '\r')) line.pop_back();
  return line;
}
}  // namespace

std::string ProcessState(pid_t pid, const std::string& proc) {
  const std::string dir = absl::StrCat(proc, "/", pid);
  const std::string line = FirstLine(dir + "/stat");
  if (line.empty()) return "gone";
  std::string state = ProcessStateFromStat(line);
  if (state == "uninterruptible sleep (D)") {
    const std::string wchan = FirstLine(dir + "/wchan");
    if (!wchan.empty() && wchan != "0") absl::StrAppend(&state, " in ", wchan);
  }
  return state;
}

std::string ProcessLauncher::State(pid_t pid) { return ProcessState(pid); }

std::optional<int64_t> CpuTicksFromStat(const std::string& stat_line) {
  const size_t close = stat_line.rfind(')');
  if (close == std::string::npos) return std::nullopt;
  // After the command: state (field 3) ... utime (14), stime (15).
  std::vector<absl::string_view> fields =
      absl::StrSplit(absl::string_view(stat_line).substr(close + 1), ' ', absl::SkipEmpty());
  int64_t utime = 0, stime = 0;
  if (fields.size() < 13 || !absl::SimpleAtoi(fields[11], &utime) || !absl::SimpleAtoi(fields[12], &stime)) {
    return std::nullopt;
  }
  return utime + stime;
}

std::optional<int64_t> ProcessCpuTicks(pid_t pid, const std::string& proc) {
  const std::string line = FirstLine(absl::StrCat(proc, "/", pid, "/stat"));
  if (line.empty()) return std::nullopt;
  return CpuTicksFromStat(line);
}

std::optional<int64_t> ProcessLauncher::CpuTicks(pid_t pid) { return ProcessCpuTicks(pid); }

}  // namespace cpptorchrun::launcher
