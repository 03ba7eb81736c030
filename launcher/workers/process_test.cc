// Tests of the real process launcher with real children: exit codes,
// signals, process groups, exec errors, forwarded signals, output.
#include "launcher/workers/process.h"

#include <signal.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <sstream>

#include "absl/strings/str_cat.h"
#include "base/become.h"
#include "gtest/gtest.h"

namespace cpptorchrun::launcher {
namespace {

class ProcessTest : public ::testing::Test {
 protected:
  void SetUp() override {
    auto l = NewRealProcessLauncher({{SIGUSR1}, true});
    ASSERT_TRUE(l.ok()) << l.status();
    launcher_ = std::move(*l);
    const char* t = std::getenv("TEST_TMPDIR");
    dir_ = absl::StrCat(t ? t : "/tmp", "/proc_XXXXXX");
    ASSERT_NE(mkdtemp(dir_.data()), nullptr);
  }

  ProcessSpec Shell(const std::string& script) {
    ProcessSpec s;
    s.argv = {"/bin/sh", "-c", script};
    s.env = {{"PATH", "/usr/bin:/bin"}, {"MARK", "m1"}};
    s.stdout_sink = {"[o]:", -1, dir_ + "/out.log"};
    s.stderr_sink = {"[e]:", -1, dir_ + "/err.log"};
    return s;
  }

  // Waits (bounded) for `pid` to exit.
  std::optional<ExitStatus> WaitExit(pid_t pid, absl::Duration limit = absl::Seconds(30)) {
    absl::Time deadline = absl::Now() + limit;
    while (absl::Now() < deadline) {
      for (const ProcessEvent& e : launcher_->Wait(deadline)) {
        if (e.kind == ProcessEvent::Kind::kExited && e.pid == pid) return e.status;
      }
    }
    return std::nullopt;
  }

  std::string Read(const std::string& name) {
    std::ifstream in(dir_ + "/" + name);
    std::stringstream ss;
    ss << in.rdbuf();
    return ss.str();
  }

  std::unique_ptr<ProcessLauncher> launcher_;
  std::string dir_;
};

TEST_F(ProcessTest, ExitCodeEnvAndOutput) {
  auto pid = launcher_->Start(Shell("echo out $MARK; echo err >&2; exit 3"));
  ASSERT_TRUE(pid.ok()) << pid.status();
  auto st = WaitExit(*pid);
  ASSERT_TRUE(st.has_value());
  EXPECT_FALSE(st->signaled);
  EXPECT_EQ(st->code, 3);
  EXPECT_EQ(st->LauncherExitCode(), 3);
  launcher_->DrainOutput(absl::Now() + absl::Seconds(10));
  EXPECT_EQ(Read("out.log"), "out m1\n");
  EXPECT_EQ(Read("err.log"), "err\n");
}

TEST_F(ProcessTest, SignalGroupKillsTheWholeGroup) {
  auto pid = launcher_->Start(Shell("sleep 1000 & sleep 1000; wait"));
  ASSERT_TRUE(pid.ok());
  EXPECT_EQ(getpgid(*pid), *pid);  // leads its own group
  launcher_->SignalGroup(*pid, SIGKILL);
  auto st = WaitExit(*pid);
  ASSERT_TRUE(st.has_value());
  EXPECT_TRUE(st->signaled);
  EXPECT_EQ(st->signal, SIGKILL);
  EXPECT_EQ(st->LauncherExitCode(), 128 + SIGKILL);
  EXPECT_EQ(st->ToString(), "signal SIGKILL (9)");
  launcher_->DrainOutput(absl::Now() + absl::Seconds(10));
}

TEST_F(ProcessTest, ExecFailureIsAnErrorAndLeavesNothing) {
  ProcessSpec s = Shell("");
  s.argv = {dir_ + "/does-not-exist"};
  auto pid = launcher_->Start(s);
  ASSERT_FALSE(pid.ok());
  EXPECT_NE(pid.status().message().find("does-not-exist"), std::string::npos);
}

TEST_F(ProcessTest, ReceivedSignalsAreEvents) {
  kill(getpid(), SIGUSR1);
  bool seen = false;
  absl::Time deadline = absl::Now() + absl::Seconds(10);
  while (!seen && absl::Now() < deadline) {
    for (const ProcessEvent& e : launcher_->Wait(deadline)) {
      if (e.kind == ProcessEvent::Kind::kSignal && e.signo == SIGUSR1) seen = true;
    }
  }
  EXPECT_TRUE(seen);
}

TEST_F(ProcessTest, WakeupEndsAWait) {
  std::thread t([this] { launcher_->Wakeup(); });
  auto events = launcher_->Wait(absl::Now() + absl::Seconds(30));
  t.join();
  ASSERT_FALSE(events.empty());
  EXPECT_EQ(events[0].kind, ProcessEvent::Kind::kWakeup);
}

TEST_F(ProcessTest, ChildSignalMaskIsReset) {
  // SIGUSR1 is blocked in the launcher; the child must still die of it.
  auto pid = launcher_->Start(Shell("kill -USR1 $$; sleep 5"));
  ASSERT_TRUE(pid.ok());
  auto st = WaitExit(*pid);
  ASSERT_TRUE(st.has_value());
  EXPECT_TRUE(st->signaled);
  EXPECT_EQ(st->signal, SIGUSR1);
}

TEST_F(ProcessTest, PassedFdIsTheChildsFdThree) {
  int sock[2];
  ASSERT_TRUE(base::WarmSocketPair(sock).ok());
  ProcessSpec spec = Shell("readlink /proc/$$/fd/3; readlink /proc/$$/fd/4 || echo no fd 4");
  spec.pass_fd = sock[1];
  auto pid = launcher_->Start(spec);
  ASSERT_TRUE(pid.ok()) << pid.status();
  close(sock[1]);
  ASSERT_TRUE(WaitExit(*pid).has_value());
  launcher_->DrainOutput(absl::Now() + absl::Seconds(10));
  const std::string out = Read("out.log");
  EXPECT_EQ(out.rfind("socket:[", 0), 0u) << out;
  EXPECT_NE(out.find("no fd 4"), std::string::npos) << out;
  close(sock[0]);
}

// A spare's spec starts at SCHED_IDLE (going there needs no privilege);
// any other at the launcher's policy.
TEST_F(ProcessTest, AnIdlePrioritySpecStartsAtSchedIdle) {
  for (const bool idle : {true, false}) {
    ProcessSpec spec = Shell("chrt -p $$");
    spec.idle_priority = idle;
    auto pid = launcher_->Start(spec);
    ASSERT_TRUE(pid.ok()) << pid.status();
    ASSERT_TRUE(WaitExit(*pid).has_value());
    launcher_->DrainOutput(absl::Now() + absl::Seconds(10));
    const std::string out = Read("out.log");
    EXPECT_EQ(out.find("SCHED_IDLE") != std::string::npos, idle) << out;
    ASSERT_EQ(unlink((dir_ + "/out.log").c_str()), 0);
  }
}

// A warm start: a forked child of this test waits on the socket, takes on
// the spec, and its output comes through the launcher's sinks like an
// exec'd worker's.
TEST_F(ProcessTest, WarmStartHandsTheSpecToTheWarmProcess) {
  int sock[2];
  ASSERT_TRUE(base::WarmSocketPair(sock).ok());
  const pid_t warm = fork();
  ASSERT_GE(warm, 0);
  if (warm == 0) {
    close(sock[0]);
    absl::StatusOr<base::ReceivedBecome> got = base::ReceiveBecome(sock[1]);
    if (!got.ok() || !base::ApplyBecome(*got).ok()) _exit(3);
    (void)base::SendWarmMessage(sock[1], base::EncodeBecomeAnswer(getpid()));
    const char* mark = std::getenv("MARK");
    dprintf(1, "warm %s\n", mark ? mark : "-");
    dprintf(2, "warm err\n");
    _exit(0);
  }
  close(sock[1]);
  ProcessSpec spec = Shell("unused");
  spec.warm_socket = sock[0];
  auto pid = launcher_->Start(spec);
  ASSERT_TRUE(pid.ok()) << pid.status();
  EXPECT_EQ(*pid, warm);
  auto st = WaitExit(warm);
  ASSERT_TRUE(st.has_value());
  EXPECT_TRUE(st->success());
  launcher_->DrainOutput(absl::Now() + absl::Seconds(10));
  EXPECT_EQ(Read("out.log"), "warm m1\n");
  EXPECT_EQ(Read("err.log"), "warm err\n");
  close(sock[0]);
}

TEST_F(ProcessTest, WarmStartWithoutAnAnswerFailsAndLeavesNothing) {
  int sock[2];
  ASSERT_TRUE(base::WarmSocketPair(sock).ok());
  close(sock[1]);
  ProcessSpec spec = Shell("unused");
  spec.warm_socket = sock[0];
  spec.warm_timeout = absl::Milliseconds(50);
  auto pid = launcher_->Start(spec);
  EXPECT_FALSE(pid.ok());
  close(sock[0]);
}

TEST(ProcessState, ReadFromTheStatLine) {
  EXPECT_EQ(ProcessStateFromStat("42 (train) R 1 42 42 0"), "running");
  EXPECT_EQ(ProcessStateFromStat("42 (train) T 1 42 42 0"), "stopped (T)");
  EXPECT_EQ(ProcessStateFromStat("42 (train) D 1 42 42 0"), "uninterruptible sleep (D)");
  // A command name with spaces and parentheses: the state follows the last ')'.
  EXPECT_EQ(ProcessStateFromStat("42 (a) S (b) Z 1 42"), "zombie");
  EXPECT_EQ(ProcessStateFromStat("42 (tr"), "unknown");
  EXPECT_EQ(ProcessStateFromStat(""), "unknown");
}

// utime + stime (fields 14 and 15), after a command name with spaces and
// parentheses; none from a short or garbled line. This process has some.
TEST(ProcessState, CpuTicksFromTheStatLine) {
  EXPECT_EQ(CpuTicksFromStat("42 (a) (b) T 1 42 42 0 -1 4194560 100 0 0 0 250 31 0 0 20 0 13"), 281);
  EXPECT_EQ(CpuTicksFromStat("42 (train) T 1 42 42 0"), std::nullopt);
  EXPECT_EQ(CpuTicksFromStat("42 (train) T 1 42 42 0 -1 4194560 100 0 0 0 x 31 0"), std::nullopt);
  EXPECT_EQ(CpuTicksFromStat(""), std::nullopt);
  EXPECT_TRUE(ProcessCpuTicks(getpid()).has_value());
  EXPECT_EQ(ProcessCpuTicks(getpid(), "/nonexistent"), std::nullopt);
}

// A fake /proc: a worker the kernel holds in uninterruptible sleep says
// where (wchan); one whose wchan is hidden ("0") or absent says only D.
TEST(ProcessState, UninterruptibleSleepSaysWhereFromAFakeProc) {
  const std::string proc = ::testing::TempDir() + "/fake_proc";
  auto write = [&](const std::string& path, const std::string& text) {
    mkdir(proc.c_str(), 0755);
    mkdir(path.substr(0, path.rfind('/')).c_str(), 0755);
    FILE* f = std::fopen(path.c_str(), "w");
    ASSERT_NE(f, nullptr) << path;
    std::fputs(text.c_str(), f);
    std::fclose(f);
  };
  write(proc + "/7/stat", "7 (train) D 1 7 7 0\n");
  write(proc + "/7/wchan", "nfs_wait_on_request");
  write(proc + "/8/stat", "8 (train) D 1 8 8 0\n");
  write(proc + "/8/wchan", "0");
  write(proc + "/9/stat", "9 (train) D 1 9 9 0\n");
  write(proc + "/10/stat", "10 (train) S 1 10 10 0\n");
  write(proc + "/10/wchan", "do_epoll_wait");
  EXPECT_EQ(ProcessState(7, proc), "uninterruptible sleep (D) in nfs_wait_on_request");
  EXPECT_EQ(ProcessState(8, proc), "uninterruptible sleep (D)");
  EXPECT_EQ(ProcessState(9, proc), "uninterruptible sleep (D)");
  EXPECT_EQ(ProcessState(10, proc), "sleeping");
  EXPECT_EQ(ProcessState(11, proc), "gone");
}

TEST(ProcessState, OfALiveAndAStoppedChild) {
  pid_t child = fork();
  ASSERT_GE(child, 0);
  if (child == 0) {
    pause();
    _exit(0);
  }
  ASSERT_EQ(kill(child, SIGSTOP), 0);
  int status = 0;
  ASSERT_EQ(waitpid(child, &status, WUNTRACED), child);  // it has stopped
  EXPECT_EQ(ProcessState(child), "stopped (T)");
  kill(child, SIGKILL);
  waitpid(child, &status, 0);
  EXPECT_EQ(ProcessState(child), "gone");
}

}  // namespace
}  // namespace cpptorchrun::launcher
