// The warm pool with real processes (warm_test_process speaks the become
// protocol as train and the forkserver do): spares that become workers and
// are replaced when they die, the forkserver whose forks are the launcher's
// children, and every failure falling back to exec.
#include "launcher/agent/warm_pool.h"

#include <sched.h>
#include <signal.h>
#include <stdlib.h>
#include <unistd.h>

#include <fstream>
#include <map>
#include <optional>
#include <variant>
#include <sstream>

#include "absl/strings/str_cat.h"
#include "base/become.h"
#include "gtest/gtest.h"

namespace cpptorchrun::launcher {
namespace {

std::string Helper() {
  char* p = realpath("launcher/agent/warm_test_process", nullptr);
  std::string s = p ? p : "launcher/agent/warm_test_process";
  free(p);
  return s;
}

class WarmPoolTest : public ::testing::Test {
 protected:
  void SetUp() override {
    auto l = NewRealProcessLauncher({{}, true});
    ASSERT_TRUE(l.ok()) << l.status();
    inner_ = std::move(*l);
    const char* t = std::getenv("TEST_TMPDIR");
    dir_ = absl::StrCat(t ? t : "/tmp", "/pool_XXXXXX");
    ASSERT_NE(mkdtemp(dir_.data()), nullptr);
  }

  WarmPoolOptions Options() {
    WarmPoolOptions o;
    o.base_env = {{"PATH", "/usr/bin:/bin"}};
    o.local_world_size = 1;
    o.events = &events_;
    o.ready_timeout = absl::Seconds(30);
    return o;
  }

  // Spares of warm_test_process in `mode`, at SCHED_IDLE before a restart.
  WarmPoolOptions IdleSpares(const std::string& mode) {
    WarmPoolOptions o = Options();
    o.spares = true;
    o.before_restart = WarmPoolOptions::Before::kIdle;
    o.become_timeout = absl::Seconds(30);
    o.program_argv = {Helper(), mode};
    return o;
  }
  static constexpr char kNotReversible[] =
      "this process may not bring a SCHED_IDLE process back (no CAP_SYS_NICE, RLIMIT_NICE below 20 - nice): "
      "spares wait at the launcher's priority here";

  ProcessSpec Worker(const std::string& mark, int local_rank = 0, int exit_code = 0) {
    ProcessSpec s;
    s.argv = {Helper(), "plain"};
    s.env = {{"MARK", mark}, {"LOCAL_RANK", absl::StrCat(local_rank)}, {"EXIT_CODE", absl::StrCat(exit_code)}};
    s.slot = local_rank;
    s.stdout_sink = {"", -1, absl::StrCat(dir_, "/", mark, ".log")};
    s.stderr_sink = {"", -1, ""};
    return s;
  }

  // Waits (bounded) for `pid`'s exit through `l`; exits of others seen on
  // the way are kept for their turn.
  std::optional<ExitStatus> WaitExit(ProcessLauncher& l, pid_t pid) {
    const absl::Time deadline = absl::Now() + absl::Seconds(30);
    while (exits_.count(pid) == 0 && absl::Now() < deadline) {
      for (const ProcessEvent& e : l.Wait(deadline)) {
        if (e.kind == ProcessEvent::Kind::kExited) exits_[e.pid] = e.status;
      }
    }
    auto it = exits_.find(pid);
    if (it == exits_.end()) return std::nullopt;
    return it->second;
  }
  std::map<pid_t, ExitStatus> exits_;

  // Waits (bounded) until the event log has `n` events called `name`,
  // driving the pool's Wait meanwhile.
  bool WaitForEvents(WarmPool& pool, const std::string& name, int n) {
    const absl::Time deadline = absl::Now() + absl::Seconds(30);
    while (absl::Now() < deadline) {
      if (Count(name) >= n) return true;
      for (const ProcessEvent& e : pool.Wait(absl::Now() + absl::Milliseconds(100))) {
        EXPECT_NE(e.kind, ProcessEvent::Kind::kExited) << "a warm process's exit reported: pid " << e.pid;
      }
    }
    return Count(name) >= n;
  }

  int Count(const std::string& name) {
    int n = 0;
    for (const std::string& e : events_.names()) n += e == name;
    return n;
  }

  std::string Read(const std::string& mark) {
    inner_->DrainOutput(absl::Now() + absl::Seconds(10));
    std::ifstream in(absl::StrCat(dir_, "/", mark, ".log"));
    std::stringstream ss;
    ss << in.rdbuf();
    return ss.str();
  }

  std::unique_ptr<ProcessLauncher> inner_;
  MemoryEventLog events_;
  std::string dir_;
};

TEST_F(WarmPoolTest, ASpareBecomesTheWorkerWithItsEnvironment) {
  WarmPoolOptions o = Options();
  o.spares = true;
  o.program_argv = {Helper(), "spare"};
  WarmPool pool(inner_.get(), o);
  pool.PrepareNextStart();
  ASSERT_EQ(pool.spares().size(), 1u);
  const pid_t spare = pool.spares().at(0);
  auto pid = pool.Start(Worker("m1", 0, 3));
  ASSERT_TRUE(pid.ok()) << pid.status();
  EXPECT_EQ(*pid, spare);
  EXPECT_TRUE(pool.spares().empty());
  auto st = WaitExit(pool, *pid);
  ASSERT_TRUE(st.has_value());
  EXPECT_EQ(st->code, 3);
  EXPECT_EQ(Read("m1"), "warm MARK=m1\n");
  EXPECT_EQ(Count("warm_started"), 1);
  // The next start, without a spare, execs.
  auto second = pool.Start(Worker("m2"));
  ASSERT_TRUE(second.ok());
  ASSERT_TRUE(WaitExit(pool, *second).has_value());
  EXPECT_EQ(Read("m2"), "exec MARK=m2\n");
}

// Until the job has restarted, spares wait at SCHED_IDLE and the worker a
// spare becomes is at SCHED_OTHER; after a restart, spares start at the
// workers' priority.
TEST_F(WarmPoolTest, SparesWaitIdleUntilTheJobHasRestarted) {
  if (!base::IdlePriorityReversible()) GTEST_SKIP() << kNotReversible;
  WarmPool pool(inner_.get(), IdleSpares("spare"));
  pool.PrepareNextStart();
  const pid_t spare = pool.spares().at(0);
  EXPECT_EQ(sched_getscheduler(spare), SCHED_IDLE);
  ProcessSpec worker = Worker("m1");
  worker.env["PRINT_POLICY"] = "1";
  auto pid = pool.Start(worker);
  ASSERT_TRUE(pid.ok()) << pid.status();
  EXPECT_EQ(*pid, spare);
  ASSERT_TRUE(WaitExit(pool, *pid).has_value());
  EXPECT_EQ(Read("m1"), absl::StrCat("warm MARK=m1 policy=", SCHED_OTHER, "\n"));
  // That start was a restart (a group had run): the next spare is normal.
  pool.PrepareNextStart();
  const pid_t next = pool.spares().at(0);
  EXPECT_EQ(sched_getscheduler(next), SCHED_OTHER);
  std::vector<std::string> priorities;
  for (const auto& [name, fields] : events_.events()) {
    if (name != "spare_started") continue;
    for (const auto& [k, v] : fields) {
      if (k == "priority") priorities.push_back(std::get<std::string>(v));
    }
  }
  EXPECT_EQ(priorities, (std::vector<std::string>{"idle", "normal"}));
}

// A spare needed while it is still loading at SCHED_IDLE is brought to the
// workers' priority at once (this one says ready only then).
TEST_F(WarmPoolTest, ASpareNeededWhileLoadingIsBroughtToTheWorkersPriority) {
  if (!base::IdlePriorityReversible()) GTEST_SKIP() << kNotReversible;
  WarmPool pool(inner_.get(), IdleSpares("late-spare"));
  pool.PrepareNextStart();
  const pid_t spare = pool.spares().at(0);
  auto pid = pool.Start(Worker("m1"));
  ASSERT_TRUE(pid.ok()) << pid.status();
  EXPECT_EQ(*pid, spare);
  EXPECT_EQ(Count("warm_fallback"), 0);
  ASSERT_TRUE(WaitExit(pool, *pid).has_value());
  EXPECT_EQ(Read("m1"), "warm MARK=m1\n");
}

TEST(SparesBeforeRestartTest, IdleCpusGetIdleSparesBusyOnesNone) {
  using Before = WarmPoolOptions::Before;
  EXPECT_EQ(SparesBeforeRestart(2, 1, 1, true), Before::kIdle);
  EXPECT_EQ(SparesBeforeRestart(2, 1, 1, false), Before::kNormal);
  EXPECT_EQ(SparesBeforeRestart(2, 2, 1, true), Before::kNone);   // every CPU a worker's
  EXPECT_EQ(SparesBeforeRestart(2, 1, 2, true), Before::kNone);   // two threads each
  EXPECT_EQ(SparesBeforeRestart(96, 8, 4, true), Before::kIdle);  // a GPU node
  EXPECT_EQ(SparesBeforeRestart(8, 8, 0, false), Before::kNone);  // threads < 1 counts as 1
}

// Where the workers keep every CPU busy: no spare until the job has
// restarted; then spares at the workers' priority.
TEST_F(WarmPoolTest, NoSpareBeforeTheFirstRestartWhereEveryCpuIsBusy) {
  WarmPoolOptions o = Options();
  o.spares = true;
  o.before_restart = WarmPoolOptions::Before::kNone;
  o.program_argv = {Helper(), "spare"};
  WarmPool pool(inner_.get(), o);
  auto first = pool.Start(Worker("m1"));
  ASSERT_TRUE(first.ok());
  pool.PrepareNextStart();
  EXPECT_TRUE(pool.spares().empty());
  ASSERT_TRUE(WaitExit(pool, *first).has_value());
  EXPECT_EQ(Read("m1"), "exec MARK=m1\n");
  auto second = pool.Start(Worker("m2"));  // the restart: exec'd
  ASSERT_TRUE(second.ok());
  ASSERT_TRUE(WaitExit(pool, *second).has_value());
  EXPECT_EQ(Read("m2"), "exec MARK=m2\n");
  pool.PrepareNextStart();
  ASSERT_EQ(pool.spares().size(), 1u);
  EXPECT_EQ(sched_getscheduler(pool.spares().at(0)), SCHED_OTHER);
}

// In-place recovery with no spare ready: a slot left empty asks for its
// spare (none before: every CPU was busy); it starts at the next Wait, at
// the workers' priority, and says when it is ready. Before any group has
// run (nobody said it can wait warm) none will come.
TEST_F(WarmPoolTest, AnEmptySlotGetsItsSpareAtTheNextWait) {
  WarmPoolOptions o = Options();
  o.spares = true;
  o.before_restart = WarmPoolOptions::Before::kNone;
  o.program_argv = {Helper(), "spare"};
  WarmPool pool(inner_.get(), o);
  EXPECT_FALSE(pool.WantSpare(0)) << "no group has run";
  auto first = pool.Start(Worker("m1"));
  ASSERT_TRUE(first.ok());
  pool.PrepareNextStart();
  EXPECT_TRUE(pool.spares().empty());
  EXPECT_FALSE(pool.WantSpare(1)) << "no such slot";
  EXPECT_TRUE(pool.WantSpare(0));
  EXPECT_TRUE(pool.spares().empty()) << "not before the next Wait";
  EXPECT_FALSE(pool.SpareReady(0));
  ASSERT_TRUE(WaitExit(pool, *first).has_value());
  ASSERT_EQ(pool.spares().size(), 1u);
  EXPECT_EQ(sched_getscheduler(pool.spares().at(0)), SCHED_OTHER);
  ASSERT_TRUE(WaitForEvents(pool, "spare_ready", 1));
  EXPECT_TRUE(pool.SpareReady(0));
  auto second = pool.Start(Worker("m2"));
  ASSERT_TRUE(second.ok());
  ASSERT_TRUE(WaitExit(pool, *second).has_value());
  EXPECT_EQ(Read("m2"), "warm MARK=m2\n");
  EXPECT_FALSE(pool.SpareReady(0)) << "it became the worker";
}

TEST_F(WarmPoolTest, ASpareThatDiesWhileWaitingIsReplaced) {
  WarmPoolOptions o = Options();
  o.spares = true;
  o.program_argv = {Helper(), "spare"};
  WarmPool pool(inner_.get(), o);
  pool.PrepareNextStart();
  const pid_t first = pool.spares().at(0);
  // Waiting: it said ready.
  ASSERT_TRUE(WaitForEvents(pool, "spare_ready", 1));
  kill(first, SIGKILL);
  ASSERT_TRUE(WaitForEvents(pool, "spare_lost", 1));
  ASSERT_EQ(Count("spare_started"), 2);
  ASSERT_EQ(pool.spares().size(), 1u);
  const pid_t second = pool.spares().at(0);
  EXPECT_NE(second, first);
  auto pid = pool.Start(Worker("m3"));
  ASSERT_TRUE(pid.ok());
  EXPECT_EQ(*pid, second);
  ASSERT_TRUE(WaitExit(pool, *pid).has_value());
  EXPECT_EQ(Read("m3"), "warm MARK=m3\n");
}

TEST_F(WarmPoolTest, SparesThatKeepDyingAreTurnedOff) {
  WarmPoolOptions o = Options();
  o.spares = true;
  o.max_losses = 2;
  o.program_argv = {Helper(), "no-such-mode"};  // exits 2 at once
  WarmPool pool(inner_.get(), o);
  pool.PrepareNextStart();
  ASSERT_TRUE(WaitForEvents(pool, "spare_lost", 3));
  EXPECT_TRUE(pool.spares().empty());
  EXPECT_EQ(Count("spare_started"), 3);  // the first and two replacements
  pool.PrepareNextStart();
  EXPECT_TRUE(pool.spares().empty());
  auto pid = pool.Start(Worker("m4"));
  ASSERT_TRUE(pid.ok());
  ASSERT_TRUE(WaitExit(pool, *pid).has_value());
  EXPECT_EQ(Read("m4"), "exec MARK=m4\n");
}

TEST_F(WarmPoolTest, ForkedWorkersAreTheLaunchersChildren) {
  WarmPoolOptions o = Options();
  o.forkserver_argv = {Helper(), "forkserver"};
  WarmPool pool(inner_.get(), o);
  pool.Begin();
  const pid_t server = pool.forkserver();
  ASSERT_GT(server, 0);
  auto a = pool.Start(Worker("f1", 0, 5));
  auto b = pool.Start(Worker("f2", 1));
  ASSERT_TRUE(a.ok()) << a.status();
  ASSERT_TRUE(b.ok()) << b.status();
  EXPECT_NE(*a, server);
  EXPECT_NE(*a, *b);
  EXPECT_EQ(getpgid(*a), *a);  // leads its own group
  auto st = WaitExit(pool, *a);  // reaped here: reparented to this subreaper
  ASSERT_TRUE(st.has_value());
  EXPECT_EQ(st->code, 5);
  ASSERT_TRUE(WaitExit(pool, *b).has_value());
  EXPECT_EQ(Read("f1"), "forked MARK=f1\n");
  EXPECT_EQ(Read("f2"), "forked MARK=f2\n");
  EXPECT_EQ(pool.forkserver(), server);
}

TEST_F(WarmPoolTest, ADeadForkserverIsRestarted) {
  WarmPoolOptions o = Options();
  o.forkserver_argv = {Helper(), "forkserver"};
  WarmPool pool(inner_.get(), o);
  pool.Begin();
  const pid_t server = pool.forkserver();
  kill(server, SIGKILL);
  ASSERT_TRUE(WaitForEvents(pool, "forkserver_lost", 1));
  EXPECT_EQ(Count("forkserver_started"), 2);
  EXPECT_NE(pool.forkserver(), server);
  auto pid = pool.Start(Worker("f3"));
  ASSERT_TRUE(pid.ok());
  ASSERT_TRUE(WaitExit(pool, *pid).has_value());
  EXPECT_EQ(Read("f3"), "forked MARK=f3\n");
}

TEST_F(WarmPoolTest, AForkserverThatRefusesLeavesWorkersSpawned) {
  WarmPoolOptions o = Options();
  o.forkserver_argv = {Helper(), "refuse", "preloading torch initialised CUDA"};
  WarmPool pool(inner_.get(), o);
  pool.Begin();
  auto pid = pool.Start(Worker("f4"));
  ASSERT_TRUE(pid.ok());
  ASSERT_TRUE(WaitExit(pool, *pid).has_value());
  EXPECT_EQ(Read("f4"), "exec MARK=f4\n");
  EXPECT_EQ(Count("warm_fallback"), 1);
  EXPECT_EQ(pool.forkserver(), 0);
  // And it stays off: no second attempt.
  auto again = pool.Start(Worker("f5"));
  ASSERT_TRUE(again.ok());
  ASSERT_TRUE(WaitExit(pool, *again).has_value());
  EXPECT_EQ(Read("f5"), "exec MARK=f5\n");
  EXPECT_EQ(Count("warm_fallback"), 1);
}

TEST_F(WarmPoolTest, TheDestructorLeavesNoWarmProcess) {
  pid_t spare = 0, server = 0;
  {
    WarmPoolOptions o = Options();
    o.spares = true;
    o.program_argv = {Helper(), "spare"};
    o.forkserver_argv = {Helper(), "forkserver"};
    WarmPool pool(inner_.get(), o);
    pool.Begin();
    pool.PrepareNextStart();
    spare = pool.spares().at(0);
    server = pool.forkserver();
  }
  EXPECT_NE(kill(spare, 0), 0);  // gone and reaped
  EXPECT_NE(kill(server, 0), 0);
}

}  // namespace
}  // namespace cpptorchrun::launcher
