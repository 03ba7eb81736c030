// Worker processes: the ProcessLauncher interface the elastic agent starts,
// signals and reaps its workers through, and the real implementation (fork
// and exec, each worker leading its own process group, PR_SET_PDEATHSIG so
// workers die with the launcher, output through the LogMux, SIGCHLD and the
// forwarded signals read from a signalfd).
#ifndef CPPTORCHRUN_LAUNCHER_PROCESS_H_
#define CPPTORCHRUN_LAUNCHER_PROCESS_H_

#include <sys/types.h>

#include <map>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/time/time.h"
#include "launcher/workers/log_mux.h"

namespace cpptorchrun::launcher {

// How a process ended.
struct ExitStatus {
  bool signaled = false;
  int code = 0;    // exit code when !signaled
  int signal = 0;  // terminating signal when signaled

  static ExitStatus Exited(int code) { return {false, code, 0}; }
  static ExitStatus Killed(int signo) { return {true, 0, signo}; }
  static ExitStatus FromWaitStatus(int wait_status);
  bool success() const { return !signaled && code == 0; }
  // What the launcher exits with when this is the root cause: the code, or
  // 128 + signal.
  int LauncherExitCode() const { return signaled ? 128 + signal : code; }
  // torchrun's exitcode: the code, or minus the signal.
  int TorchrunExitCode() const { return signaled ? -signal : code; }
  // "exit code 3" or "signal SIGSEGV (11)".
  std::string ToString() const;
};

struct ProcessSpec {
  // argv[0] is the path to exec (already resolved).
  std::vector<std::string> argv;
  // The whole environment of the process.
  std::map<std::string, std::string> env;
  StreamSink stdout_sink;
  StreamSink stderr_sink;
  // --numa_binding: the CPUs the process may run on (empty: the launcher's)
  // and the NUMA node its memory is preferred on (-1: none). Applied in the
  // child before exec; best effort (a kernel that refuses leaves it unbound).
  std::vector<int> cpus;
  int memory_node = -1;
  // The worker's local rank (its slot on this node, whatever LOCAL_RANK
  // says under --virtual_local_rank), for warm pools; -1: not a worker.
  int slot = -1;
  // A warm start (base/become.h): when >= 0, no fork and exec; the warm
  // process at the other end of this socket (a spare, the forkserver) is
  // sent the spec and answers with the pid of the process that is now the
  // worker. It must answer within `warm_timeout`.
  int warm_socket = -1;
  absl::Duration warm_timeout = absl::Seconds(10);
  // Exec'd processes only: stdout and stderr are the launcher's stderr, no
  // pipes, the sinks unused (warm processes, which outlive DrainOutput).
  bool inherit_output = false;
  // Exec'd processes only: this fd is the child's fd 3 (base::kWarmFd), the
  // warm process's end of its socket; -1: none.
  int pass_fd = -1;
  // Exec'd processes only: the child starts at SCHED_IDLE (a warm spare,
  // base/become.h: it runs on CPUs nothing else wants until it becomes a
  // worker and leaves it).
  bool idle_priority = false;
};

struct ProcessEvent {
  enum class Kind { kExited, kSignal, kWakeup };
  Kind kind = Kind::kWakeup;
  pid_t pid = 0;        // kExited
  ExitStatus status;    // kExited
  int signo = 0;        // kSignal: a signal the launcher received
  pid_t sender_pid = 0;  // kSignal: who sent it (0: the kernel, a terminal)
  std::string sender;    // kSignal: the sender's command name (/proc/PID/comm), "" when unknown
};

// Used from one thread (the agent's), except Wakeup, which is thread-safe.
class ProcessLauncher {
 public:
  virtual ~ProcessLauncher() = default;

  // Starts a process that leads its own process group. Errors: the program
  // could not be exec'd (nothing is left running); for a warm start, the
  // warm process's failure to answer (the caller decides what of it to stop).
  virtual absl::StatusOr<pid_t> Start(const ProcessSpec& spec) = 0;

  // Sends `signo` to the process group led by `pid` (no-op once it is gone).
  virtual void SignalGroup(pid_t pid, int signo) = 0;
  // Sends `signo` to the process `pid` only, not its children (a hung
  // Python worker's SIGABRT: one stack, python_stack.h).
  virtual void Signal(pid_t pid, int signo) = 0;
  // The same, after sending `pid` itself `signo` with the value
  // base::kStopNowSignalValue (base/signals.h): a stop for a restart.
  virtual void SignalGroupStopNow(pid_t pid, int signo) { SignalGroup(pid, signo); }

  // Blocks until something happens or `deadline`: child exits (every child
  // is reaped, including adopted orphans, which callers ignore), signals the
  // launcher received, a Wakeup. Empty at the deadline.
  virtual std::vector<ProcessEvent> Wait(absl::Time deadline) = 0;

  // Makes a Wait return (from any thread).
  virtual void Wakeup() = 0;

  // Waits until the output of every process started so far is written out,
  // or `deadline`.
  virtual void DrainOutput(absl::Time deadline) = 0;

  // The group started last is running (every worker made its first step)
  // and its workers said they can wait warm (agent.proto's STARTED): a
  // good time to prepare the next start (warm_pool.h). Default: nothing.
  virtual void PrepareNextStart() {}
  // In-place recovery with no spare ready (docs/DESIGN.md): slot `slot` is
  // left empty while the node runs on with fewer workers, and wants a spare
  // to grow back with. Starts one now (the job has restarted) unless one is
  // there; false where no spare will come (spares off, or the program
  // cannot wait warm). Default: none will.
  virtual bool WantSpare(int slot) { return false; }
  // That slot's spare has loaded and waits (no waiting here).
  virtual bool SpareReady(int slot) { return false; }

  // The scheduling state of a process this launcher started (ProcessState
  // below; a fake reports what its test sets).
  virtual std::string State(pid_t pid);
  // The CPU time the process has used (ProcessCpuTicks below); none when
  // unknown.
  virtual std::optional<int64_t> CpuTicks(pid_t pid);
};

// Blocks SIGCHLD and `signals` in the calling thread. Call it at the start
// of main, before any thread exists, so that every thread inherits the mask
// and only the launcher's signalfd sees these signals.
void BlockLauncherSignals(const std::vector<int>& signals);

struct RealProcessLauncherOptions {
  // Signals reported as kSignal events (they must be blocked, see above).
  std::vector<int> signals;
  // Become a child subreaper, so orphaned grandchildren are reaped here.
  bool subreaper = true;
};

absl::StatusOr<std::unique_ptr<ProcessLauncher>> NewRealProcessLauncher(
    const RealProcessLauncherOptions& options);

// A process's scheduling state from a line of /proc/PID/stat ("123 (comm)
// S ..."; the command name may hold spaces and parentheses): "running",
// "sleeping", "uninterruptible sleep (D)", "stopped (T)", "traced (t)",
// "zombie", ... ; "unknown" when the line cannot be read.
std::string ProcessStateFromStat(const std::string& stat_line);
// The same for a live pid (`proc`/PID/stat); "gone" when it cannot be read.
// A process in uninterruptible sleep also says where the kernel holds it
// (`proc`/PID/wchan, when the kernel shows it): "uninterruptible sleep (D)
// in nfs_wait_on_request".
std::string ProcessState(pid_t pid, const std::string& proc = "/proc");

// The CPU time a process has used, user and system, in clock ticks
// (fields 14 and 15 of /proc/PID/stat): from a stat line, and for a live
// pid; none when it cannot be read. A stopped process uses none, a
// throttled one some: what tells them apart between two looks.
std::optional<int64_t> CpuTicksFromStat(const std::string& stat_line);
std::optional<int64_t> ProcessCpuTicks(pid_t pid, const std::string& proc = "/proc");

}  // namespace cpptorchrun::launcher

#endif  // CPPTORCHRUN_LAUNCHER_PROCESS_H_
