// "Become": how the launcher hands a new worker's identity to a process that
// is already running (a warm spare `train` that has loaded LibTorch and its
// data, or the Python forkserver that forks one per worker), instead of
// exec'ing a fresh one. One rule, written once, for both sides:
//
// The launcher and the warm process share a Unix SOCK_SEQPACKET socket (the
// warm process has it as the fd named by CPPTORCHRUN_WARM_FD). One request
// is one message: NUL-terminated strings
//     "CPPTORCHRUN-BECOME-1", cwd, cpus ("0,1,5"; "" for the launcher's),
//     memory node ("-1": none), launcher pid, argc, argv..., envc, "K=V"...
// with the worker's stdout and stderr (the write ends of the launcher's
// pipes) attached as SCM_RIGHTS. The answer is one message: "ok <pid>" (the
// pid of the process that now is the worker) or "error <why>". A warm
// process says "ready" once when it is ready to take requests (or
// "error <why>" and exits).
//
// The launcher side never links LibTorch; the worker side (train) and the
// forkserver (launcher/agent/forkserver.py, the same format in Python)
// follow it.
#ifndef CPPTORCHRUN_BASE_BECOME_H_
#define CPPTORCHRUN_BASE_BECOME_H_

#include <sys/types.h>

#include <cstdint>
#include <map>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "absl/time/time.h"

namespace cpptorchrun::base {

// The environment variable that names the warm process's socket.
inline constexpr char kWarmFdEnv[] = "CPPTORCHRUN_WARM_FD";
// The fd the launcher gives it.
inline constexpr int kWarmFd = 3;
// A request larger than this is refused (the caller execs instead): the
// kernel's default limit on one Unix datagram (net.core.wmem_max) is near.
inline constexpr size_t kMaxBecomeBytes = 192 * 1024;

struct BecomeRequest {
  std::string cwd;
  std::vector<int> cpus;  // empty: leave as is
  int memory_node = -1;
  int64_t launcher_pid = 0;
  std::vector<std::string> argv;
  std::map<std::string, std::string> env;  // the whole environment
};

// The message's bytes. Pure.
std::string EncodeBecome(const BecomeRequest& request);
// InvalidArgument naming what is wrong (magic, a count, a number, an env
// entry without '=', a NUL missing, bytes left over). Pure.
absl::StatusOr<BecomeRequest> DecodeBecome(absl::string_view bytes);

// The answer's bytes, and back: a pid, or the process's error (Internal,
// its text); InvalidArgument for an answer that is neither. Pure.
std::string EncodeBecomeAnswer(const absl::StatusOr<pid_t>& answer);
absl::StatusOr<pid_t> DecodeBecomeAnswer(absl::string_view bytes);

// A SOCK_SEQPACKET socketpair, both ends close-on-exec: [0] the launcher's,
// [1] the warm process's.
absl::Status WarmSocketPair(int fds[2]);

// Launcher side: waits up to `deadline` for the warm process's "ready"
// (DeadlineExceeded; Unavailable when it closed the socket; Internal with
// its text when it said "error ...").
absl::Status AwaitWarmReady(int fd, absl::Time deadline);
// Launcher side: sends `request` with the two fds and waits up to
// `deadline` for the answer: the worker's pid. Errors: the request too
// large (ResourceExhausted), the socket closed (Unavailable), no answer in
// time (DeadlineExceeded), the warm process's error (Internal).
absl::StatusOr<pid_t> RequestBecome(int fd, const BecomeRequest& request, int stdout_fd, int stderr_fd,
                                    absl::Time deadline);

// Warm side: one request and its two fds (blocks; Unavailable when the
// launcher closed the socket).
struct ReceivedBecome {
  BecomeRequest request;
  int stdout_fd = -1;
  int stderr_fd = -1;
};
absl::StatusOr<ReceivedBecome> ReceiveBecome(int fd);
// Warm side: sends one message ("ready", an answer).
absl::Status SendWarmMessage(int fd, absl::string_view message);
// Warm side, in the process that became the worker: the answer, "ok
// <this pid>", or the error `applied` (ApplyBecome's result).
absl::Status AnswerBecome(int fd, const absl::Status& applied);
// Warm side, in the process that becomes the worker: back from SCHED_IDLE
// (LeaveIdlePriority), the environment replaced, the cwd, stdout and stderr
// on the received fds (closed after), its CPUs and memory node (best
// effort, as at exec). Errors name the step.
absl::Status ApplyBecome(ReceivedBecome& received);

// The waiting priority. A spare may start at SCHED_IDLE (the launcher's
// rule: launcher/agent/warm_pool.h): it loads and waits on CPUs the workers
// leave idle, so a group in training is not slowed by the spares that
// would serve its restart. The worker it becomes is at SCHED_OTHER again,
// as an exec'd one is. The
// kernel lets a thread leave SCHED_IDLE only with CAP_SYS_NICE or an
// RLIMIT_NICE that allows its nice value (20 - nice): where it does not,
// spares wait at the launcher's priority.
//
// Whether the calling process runs at SCHED_OTHER and a thread of it can
// go to SCHED_IDLE and back (a probe thread tries: the kernel's rule, not
// a copy of it).
bool IdlePriorityReversible();
// Every thread of process `pid` (0: this one) that is at SCHED_IDLE back to
// SCHED_OTHER, its nice value kept. Errors name the thread and the
// kernel's reason.
absl::Status LeaveIdlePriority(pid_t pid = 0);

}  // namespace cpptorchrun::base

#endif  // CPPTORCHRUN_BASE_BECOME_H_
