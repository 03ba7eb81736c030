// The become protocol: the format both ways, hostile requests, and a real
// exchange with a forked warm process that takes on the request.
#include "base/become.h"

#include <sched.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <unistd.h>

#include <atomic>
#include <cstdlib>
#include <string>
#include <thread>

#include "gtest/gtest.h"

namespace cpptorchrun::base {
namespace {

BecomeRequest Sample() {
  BecomeRequest r;
  r.cwd = "/tmp";
  r.cpus = {0, 1};
  r.memory_node = -1;
  r.launcher_pid = 1234;
  r.argv = {"/usr/bin/python3", "-u", "train.py", "--lr=0.1", ""};
  r.env = {{"RANK", "3"}, {"EMPTY", ""}, {"WITH_EQ", "a=b"}};
  return r;
}

TEST(BecomeTest, RoundTrips) {
  const BecomeRequest r = Sample();
  absl::StatusOr<BecomeRequest> back = DecodeBecome(EncodeBecome(r));
  ASSERT_TRUE(back.ok()) << back.status();
  EXPECT_EQ(back->cwd, r.cwd);
  EXPECT_EQ(back->cpus, r.cpus);
  EXPECT_EQ(back->memory_node, -1);
  EXPECT_EQ(back->launcher_pid, 1234);
  EXPECT_EQ(back->argv, r.argv);
  EXPECT_EQ(back->env, r.env);
}

TEST(BecomeTest, RefusesBrokenRequestsNamingWhat) {
  const std::string good = EncodeBecome(Sample());
  struct Case {
    std::string bytes, needle;
  };
  std::string no_eq = good;
  no_eq.replace(no_eq.find("RANK=3"), 6, "RANK_3");
  const Case cases[] = {
      {"", "magic"},
      {std::string("CPPTORCHRUN-BECOME-9\0", 21), "expected"},
      {good.substr(0, good.size() - 1), "not NUL-terminated"},
      {good + std::string("x\0", 2), "bytes after"},
      {no_eq, "not NAME=value"},
      {std::string("CPPTORCHRUN-BECOME-1\0/\0x\0", 25), "cpus"},
      {std::string("CPPTORCHRUN-BECOME-1\0/\0\0-7\0", 27), "memory node"},
      {std::string("CPPTORCHRUN-BECOME-1\0/\0\0-1\0" "1\0" "0\0", 30), "argc"},
      {std::string("CPPTORCHRUN-BECOME-1\0/\0\0-1\0" "1\0" "99999999\0", 37), "argc"},
  };
  for (const Case& c : cases) {
    absl::StatusOr<BecomeRequest> r = DecodeBecome(c.bytes);
    ASSERT_FALSE(r.ok()) << c.needle;
    EXPECT_EQ(r.status().code(), absl::StatusCode::kInvalidArgument);
    EXPECT_NE(r.status().message().find(c.needle), std::string::npos) << r.status();
  }
}

TEST(BecomeTest, AnswersRoundTrip) {
  EXPECT_EQ(*DecodeBecomeAnswer(EncodeBecomeAnswer(pid_t{42})), 42);
  absl::StatusOr<pid_t> e = DecodeBecomeAnswer(EncodeBecomeAnswer(absl::InternalError("no torch")));
  EXPECT_EQ(e.status().code(), absl::StatusCode::kInternal);
  EXPECT_EQ(e.status().message(), "no torch");
  EXPECT_EQ(DecodeBecomeAnswer("ok -3").status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(DecodeBecomeAnswer("hello").status().code(), absl::StatusCode::kInvalidArgument);
}

// A child that waits warm, takes on a request (environment, cwd, streams)
// and prints what it became on its new stdout.
TEST(BecomeTest, AWarmChildBecomesTheRequestedWorker) {
  int sock[2];
  ASSERT_TRUE(WarmSocketPair(sock).ok());
  const pid_t child = fork();
  ASSERT_GE(child, 0);
  if (child == 0) {
    close(sock[0]);
    if (!SendWarmMessage(sock[1], "ready").ok()) _exit(2);
    absl::StatusOr<ReceivedBecome> got = ReceiveBecome(sock[1]);
    if (!got.ok()) _exit(3);
    if (!ApplyBecome(*got).ok()) _exit(4);
    if (!SendWarmMessage(sock[1], EncodeBecomeAnswer(getpid())).ok()) _exit(5);
    char cwd[256] = {};
    if (getcwd(cwd, sizeof(cwd)) == nullptr) _exit(6);
    const char* rank = std::getenv("RANK");
    const char* home = std::getenv("HOME");
    dprintf(1, "rank=%s cwd=%s home=%s\n", rank ? rank : "-", cwd, home ? home : "-");
    dprintf(2, "to stderr\n");
    _exit(0);
  }
  close(sock[1]);
  ASSERT_TRUE(AwaitWarmReady(sock[0], absl::Now() + absl::Seconds(30)).ok());
  int out[2], err[2];
  ASSERT_EQ(pipe(out), 0);
  ASSERT_EQ(pipe(err), 0);
  BecomeRequest r;
  r.cwd = "/";
  r.argv = {"worker"};
  r.env = {{"RANK", "7"}};
  absl::StatusOr<pid_t> pid = RequestBecome(sock[0], r, out[1], err[1], absl::Now() + absl::Seconds(30));
  ASSERT_TRUE(pid.ok()) << pid.status();
  EXPECT_EQ(*pid, child);
  close(out[1]);
  close(err[1]);
  std::string text;
  char buf[256];
  for (ssize_t n; (n = read(out[0], buf, sizeof(buf))) > 0;) text.append(buf, static_cast<size_t>(n));
  std::string err_text;
  for (ssize_t n; (n = read(err[0], buf, sizeof(buf))) > 0;) err_text.append(buf, static_cast<size_t>(n));
  int ws = 0;
  ASSERT_EQ(waitpid(child, &ws, 0), child);
  EXPECT_TRUE(WIFEXITED(ws) && WEXITSTATUS(ws) == 0) << ws;
  // The whole environment replaced: HOME is gone.
  EXPECT_EQ(text, "rank=7 cwd=/ home=-\n");
  EXPECT_EQ(err_text, "to stderr\n");
  close(sock[0]);
}

// A spare waits at SCHED_IDLE with a thread of its own (LibTorch starts
// some); once it is the worker, every thread is at SCHED_OTHER. In a child
// process, so that the test's own priority is never at stake.
TEST(BecomeTest, ASpareAtIdlePriorityBecomesAWorkerAtTheNormalOne) {
  if (!IdlePriorityReversible()) {
    GTEST_SKIP() << "this process may not bring a SCHED_IDLE thread back (no CAP_SYS_NICE, RLIMIT_NICE "
                    "below 20 - nice): spares wait at the launcher's priority here";
  }
  const pid_t child = fork();
  ASSERT_GE(child, 0);
  if (child == 0) {
    sched_param none{};
    if (sched_setscheduler(0, SCHED_IDLE, &none) != 0) _exit(2);
    int hold[2];
    if (pipe(hold) != 0) _exit(3);
    std::atomic<pid_t> tid{0};
    std::thread waiter([&] {  // inherits SCHED_IDLE
      tid = static_cast<pid_t>(syscall(SYS_gettid));
      char c;
      (void)!read(hold[0], &c, 1);
    });
    for (int i = 0; i < 10000000 && tid.load() == 0; ++i) std::this_thread::yield();
    if (tid.load() == 0 || sched_getscheduler(tid) != SCHED_IDLE) _exit(4);
    ReceivedBecome got;
    got.request.cwd = "/";
    got.request.env = {{"RANK", "1"}};
    got.stdout_fd = dup(STDOUT_FILENO);
    got.stderr_fd = dup(STDERR_FILENO);
    const bool applied = ApplyBecome(got).ok();
    const bool main_normal = sched_getscheduler(0) == SCHED_OTHER;
    const bool thread_normal = sched_getscheduler(tid) == SCHED_OTHER;
    (void)!write(hold[1], "x", 1);
    waiter.join();
    _exit(!applied ? 5 : !main_normal ? 6 : !thread_normal ? 7 : 0);
  }
  int ws = 0;
  ASSERT_EQ(waitpid(child, &ws, 0), child);
  // 4: the thread never started or was not idle, 5: ApplyBecome failed, 6: the main thread, 7: the other thread still idle.
  EXPECT_TRUE(WIFEXITED(ws) && WEXITSTATUS(ws) == 0) << "child exit " << WEXITSTATUS(ws);
}

TEST(BecomeTest, AClosedWarmSocketIsUnavailable) {
  int sock[2];
  ASSERT_TRUE(WarmSocketPair(sock).ok());
  close(sock[1]);
  EXPECT_EQ(AwaitWarmReady(sock[0], absl::Now() + absl::Seconds(5)).code(), absl::StatusCode::kUnavailable);
  close(sock[0]);
}

TEST(BecomeTest, ASilentWarmProcessTimesOut) {
  int sock[2];
  ASSERT_TRUE(WarmSocketPair(sock).ok());
  int p[2];
  ASSERT_EQ(pipe(p), 0);
  BecomeRequest r;
  r.argv = {"x"};
  absl::StatusOr<pid_t> pid = RequestBecome(sock[0], r, p[1], p[1], absl::Now() + absl::Milliseconds(20));
  EXPECT_EQ(pid.status().code(), absl::StatusCode::kDeadlineExceeded);
  // The request is there, with its two fds, for whoever reads it.
  absl::StatusOr<ReceivedBecome> got = ReceiveBecome(sock[1]);
  ASSERT_TRUE(got.ok()) << got.status();
  EXPECT_EQ(got->request.argv, r.argv);
  close(got->stdout_fd);
  close(got->stderr_fd);
  for (int fd : {sock[0], sock[1], p[0], p[1]}) close(fd);
}

// The largest request the protocol allows goes through one datagram.
TEST(BecomeTest, ARequestNearTheLimitArrivesWhole) {
  int sock[2];
  ASSERT_TRUE(WarmSocketPair(sock).ok());
  int p[2];
  ASSERT_EQ(pipe(p), 0);
  BecomeRequest r;
  r.argv = {"x"};
  r.env["BIG"] = std::string(kMaxBecomeBytes - 100, 'a');
  ASSERT_LE(EncodeBecome(r).size(), kMaxBecomeBytes);
  absl::StatusOr<pid_t> pid = RequestBecome(sock[0], r, p[1], p[1], absl::Now() + absl::Milliseconds(20));
  EXPECT_EQ(pid.status().code(), absl::StatusCode::kDeadlineExceeded) << pid.status();
  absl::StatusOr<ReceivedBecome> got = ReceiveBecome(sock[1]);
  ASSERT_TRUE(got.ok()) << got.status();
  EXPECT_EQ(got->request.env, r.env);
  close(got->stdout_fd);
  close(got->stderr_fd);
  for (int fd : {sock[0], sock[1], p[0], p[1]}) close(fd);
}

TEST(BecomeTest, ARequestTooLargeIsRefusedBeforeSending) {
  int sock[2];
  ASSERT_TRUE(WarmSocketPair(sock).ok());
  BecomeRequest r;
  r.argv = {"x"};
  r.env["BIG"] = std::string(kMaxBecomeBytes, 'a');
  absl::StatusOr<pid_t> pid = RequestBecome(sock[0], r, 1, 2, absl::Now() + absl::Seconds(1));
  EXPECT_EQ(pid.status().code(), absl::StatusCode::kResourceExhausted);
  close(sock[0]);
  close(sock[1]);
}

}  // namespace
}  // namespace cpptorchrun::base
