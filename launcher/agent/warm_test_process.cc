// A warm process for warm_pool_test, speaking base/become.h as train and
// the Python forkserver do. argv[1]:
//   spare       says ready, takes one request, becomes the worker: prints
//               "warm MARK=<$MARK>" and exits with $EXIT_CODE
//   refuse      says "error <argv[2]>" and exits 0 (a forkserver whose
//               preload failed)
//   forkserver  says ready, then for each request forks twice; the grand-
//               child, reparented to the launcher, becomes the worker
//   plain       an exec'd worker: prints "exec MARK=<$MARK>", exits $EXIT_CODE
//   late-spare  a spare that is still loading while it is at SCHED_IDLE:
//               it says ready only once the launcher has brought it to
//               SCHED_OTHER (else it exits 4 after 20 s), then as spare
// A worker whose environment has PRINT_POLICY adds " policy=<its
// scheduling policy>" (SCHED_OTHER is 0, SCHED_IDLE 5).
#include <sched.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>

#include "base/become.h"

namespace {

namespace b = cpptorchrun::base;

[[noreturn]] void BeWorker(const char* how) {
  const char* mark = std::getenv("MARK");
  const char* code = std::getenv("EXIT_CODE");
  if (std::getenv("PRINT_POLICY") != nullptr) {
    std::printf("%s MARK=%s policy=%d\n", how, mark ? mark : "-", sched_getscheduler(0));
  } else {
    std::printf("%s MARK=%s\n", how, mark ? mark : "-");
  }
  std::fflush(stdout);
  _exit(code ? std::atoi(code) : 0);
}

[[noreturn]] void Spare(bool late) {
  for (int i = 0; late && i < 20000 && sched_getscheduler(0) == SCHED_IDLE; ++i) usleep(1000);
  if (late && sched_getscheduler(0) == SCHED_IDLE) _exit(4);  // never brought back
  if (!b::SendWarmMessage(b::kWarmFd, "ready").ok()) _exit(2);
  absl::StatusOr<b::ReceivedBecome> got = b::ReceiveBecome(b::kWarmFd);
  if (!got.ok()) _exit(3);
  absl::Status applied = b::ApplyBecome(*got);
  (void)b::AnswerBecome(b::kWarmFd, applied);
  close(b::kWarmFd);
  BeWorker("warm");
}

[[noreturn]] void Forkserver() {
  if (!b::SendWarmMessage(b::kWarmFd, "ready").ok()) _exit(2);
  for (;;) {
    absl::StatusOr<b::ReceivedBecome> got = b::ReceiveBecome(b::kWarmFd);
    if (!got.ok()) _exit(0);
    const pid_t mid = fork();
    if (mid == 0) {
      if (fork() != 0) _exit(0);
      // The grandchild: wait until it belongs to the launcher (bounded).
      for (int i = 0; i < 2000 && getppid() != got->request.launcher_pid; ++i) usleep(1000);
      if (getppid() != got->request.launcher_pid) _exit(126);
      setpgid(0, 0);
      absl::Status applied = b::ApplyBecome(*got);
      (void)b::AnswerBecome(b::kWarmFd, applied);
      close(b::kWarmFd);
      BeWorker("forked");
    }
    close(got->stdout_fd);
    close(got->stderr_fd);
    if (mid > 0) waitpid(mid, nullptr, 0);
  }
}

}  // namespace

int main(int argc, char** argv) {
  const std::string mode = argc > 1 ? argv[1] : "";
  if (mode == "spare" || mode == "late-spare") Spare(mode == "late-spare");
  if (mode == "forkserver") Forkserver();
  if (mode == "refuse") {
    (void)b::SendWarmMessage(b::kWarmFd, std::string("error ") + (argc > 2 ? argv[2] : "refused"));
    return 0;
  }
  if (mode == "plain") BeWorker("exec");
  std::fprintf(stderr, "usage: warm_test_process spare|late-spare|refuse WHY|forkserver|plain\n");
  return 2;
}
