// Integration tests of the real cpptorchrun binary with real worker
// processes (test_worker.cc): the environment, restart counts, exit codes,
// the failure summary, log files, whole lines, signal forwarding, hung
// workers, multi-node on loopback, the status table, and that no process of
// a job outlives it, even when the launcher is SIGKILLed (checked in /proc).
//
// Usage (from BUILD): launcher_integration_test <cpptorchrun> <test_worker>
#include <arpa/inet.h>
#include <dirent.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <sched.h>
#include <signal.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstdlib>
#include <fstream>
#include <map>
#include <set>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/clock.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace {

using ::testing::HasSubstr;
using ::testing::Not;

std::string g_launcher;
std::string g_worker;

std::string ReadFile(const std::string& path) {
  std::ifstream in(path);
  std::stringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

bool Exists(const std::string& path) { return access(path.c_str(), F_OK) == 0; }

// The folders under `log_dir` whose names start with `<run_id>_`: one per
// launcher (torchrun's <run_id>_<unique>).
std::vector<std::string> OwnLogFolders(const std::string& log_dir, const std::string& run_id) {
  std::vector<std::string> found;
  if (DIR* d = opendir(log_dir.c_str()); d != nullptr) {
    while (dirent* e = readdir(d)) {
      if (absl::StartsWith(e->d_name, run_id + "_")) found.push_back(log_dir + "/" + e->d_name);
    }
    closedir(d);
  }
  std::sort(found.begin(), found.end());
  return found;
}

// True when `pid` is gone (or a zombie nobody reaped yet).
bool Dead(pid_t pid) {
  std::string stat = ReadFile(absl::StrCat("/proc/", pid, "/stat"));
  if (stat.empty()) return true;
  size_t close = stat.rfind(')');
  return close != std::string::npos && close + 2 < stat.size() && stat[close + 2] == 'Z';
}

// Waits (bounded) for `cond`, checking every few milliseconds.
template <typename F>
bool Eventually(F cond, absl::Duration limit = absl::Seconds(30)) {
  absl::Time deadline = absl::Now() + limit;
  while (absl::Now() < deadline) {
    if (cond()) return true;
    absl::SleepFor(absl::Milliseconds(10));
  }
  return cond();
}

// A port P such that P and P + 1 are both free (a static multi-node job's
// MASTER_PORT and its rendezvous).
int FreePortPair();

int FreePort() {
  int fd = socket(AF_INET, SOCK_STREAM, 0);
  sockaddr_in a{};
  a.sin_family = AF_INET;
  a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  bind(fd, reinterpret_cast<sockaddr*>(&a), sizeof(a));
  socklen_t len = sizeof(a);
  getsockname(fd, reinterpret_cast<sockaddr*>(&a), &len);
  close(fd);
  return ntohs(a.sin_port);
}

int FreePortPair() {
  for (int i = 0; i < 100; ++i) {
    const int p = FreePort();
    int fd = socket(AF_INET, SOCK_STREAM, 0);
    sockaddr_in a{};
    a.sin_family = AF_INET;
    a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    a.sin_port = htons(p + 1);
    const bool ok = p < 65535 && bind(fd, reinterpret_cast<sockaddr*>(&a), sizeof(a)) == 0;
    close(fd);
    if (ok) return p;
  }
  return FreePort();
}

// One cpptorchrun process with its stdout and stderr captured.
class Launcher {
 public:
  Launcher(std::vector<std::string> args, std::map<std::string, std::string> env = {}) {
    std::vector<std::string> argv = {g_launcher};
    argv.insert(argv.end(), args.begin(), args.end());
    std::vector<std::string> envs;
    for (char** e = environ; *e != nullptr; ++e) {
      std::string kv = *e;
      std::string key = kv.substr(0, kv.find('='));
      if (env.count(key) == 0) envs.push_back(kv);
    }
    for (const auto& [k, v] : env) envs.push_back(k + "=" + v);
    std::vector<char*> av, ev;
    for (auto& s : argv) av.push_back(s.data());
    av.push_back(nullptr);
    for (auto& s : envs) ev.push_back(s.data());
    ev.push_back(nullptr);
    int out[2], err[2];
    EXPECT_EQ(pipe(out), 0);
    EXPECT_EQ(pipe(err), 0);
    pid_ = fork();
    if (pid_ == 0) {
      dup2(out[1], 1);
      dup2(err[1], 2);
      close(out[0]);
      close(err[0]);
      execve(av[0], av.data(), ev.data());
      _exit(127);
    }
    close(out[1]);
    close(err[1]);
    readers_.emplace_back([this, fd = out[0]] { Drain(fd, &out_); });
    readers_.emplace_back([this, fd = err[0]] { Drain(fd, &err_); });
    waiter_ = std::thread([this] {
      int ws = 0;
      while (waitpid(pid_, &ws, 0) < 0 && errno == EINTR) {
      }
      absl::MutexLock lock(&mu_);
      status_ = ws;
      done_ = true;
    });
  }

  ~Launcher() {
    if (!Finished(absl::ZeroDuration())) {
      kill(pid_, SIGKILL);
    }
    waiter_.join();
    for (auto& t : readers_) t.join();
  }

  pid_t pid() const { return pid_; }
  void Signal(int s) { kill(pid_, s); }

  bool Finished(absl::Duration limit) {
    absl::MutexLock lock(&mu_);
    return mu_.AwaitWithTimeout(absl::Condition(&done_), limit);
  }

  // Waits for the exit and the end of its output; the exit code (128+signal
  // when killed), or -1 on timeout (then the launcher is killed).
  int Wait(absl::Duration limit = absl::Seconds(120)) {
    if (!Finished(limit)) {
      ADD_FAILURE() << "cpptorchrun did not finish within " << limit << "\nstderr:\n" << err();
      kill(pid_, SIGKILL);
      Finished(absl::Seconds(30));
      return -1;
    }
    for (auto& t : readers_) t.join();
    readers_.clear();
    absl::MutexLock lock(&mu_);
    return WIFSIGNALED(status_) ? 128 + WTERMSIG(status_) : WEXITSTATUS(status_);
  }

  std::string out() {
    absl::MutexLock lock(&mu_);
    return out_;
  }
  std::string err() {
    absl::MutexLock lock(&mu_);
    return err_;
  }

 private:
  void Drain(int fd, std::string* into) {
    char buf[65536];
    for (;;) {
      ssize_t n = read(fd, buf, sizeof(buf));
      if (n < 0 && errno == EINTR) continue;
      if (n <= 0) break;
      absl::MutexLock lock(&mu_);
      into->append(buf, n);
    }
    close(fd);
  }

  pid_t pid_ = -1;
  absl::Mutex mu_;
  bool done_ ABSL_GUARDED_BY(mu_) = false;
  int status_ ABSL_GUARDED_BY(mu_) = 0;
  std::string out_ ABSL_GUARDED_BY(mu_);
  std::string err_ ABSL_GUARDED_BY(mu_);
  std::thread waiter_;
  std::vector<std::thread> readers_;
};

class LauncherTest : public ::testing::Test {
 protected:
  void SetUp() override {
    const char* t = std::getenv("TEST_TMPDIR");
    dir_ = absl::StrCat(t ? t : "/tmp", "/it_XXXXXX");
    ASSERT_NE(mkdtemp(dir_.data()), nullptr);
  }

  // Every worker pid this test recorded must be gone.
  void TearDown() override {
    for (pid_t pid : RecordedPids()) {
      EXPECT_TRUE(Eventually([pid] { return Dead(pid); }, absl::Seconds(10)))
          << "worker " << pid << " outlived its launcher";
      kill(pid, SIGKILL);
    }
  }

  std::vector<pid_t> RecordedPids() {
    std::vector<pid_t> pids;
    for (const std::string& f : Files("pid.")) {
      // A worker stopped while writing leaves an empty file: no pid.
      pid_t pid = std::atoi(ReadFile(dir_ + "/" + f).c_str());
      if (pid > 1) pids.push_back(pid);
    }
    return pids;
  }

  std::vector<std::string> Files(const std::string& prefix) {
    std::vector<std::string> out;
    std::string listing;
    std::unique_ptr<FILE, int (*)(FILE*)> p(popen(("ls " + dir_).c_str(), "r"), pclose);
    char line[4096];
    while (p && fgets(line, sizeof(line), p.get()) != nullptr) {
      std::string name(line);
      if (!name.empty() && name.back() == '\n') name.pop_back();
      if (absl::StartsWith(name, prefix)) out.push_back(name);
    }
    return out;
  }

  std::map<std::string, std::string> Env(int rank, int restart) {
    std::map<std::string, std::string> env;
    std::string text = ReadFile(absl::StrCat(dir_, "/env.", rank, ".", restart));
    for (absl::string_view line : absl::StrSplit(text, '\n', absl::SkipEmpty())) {
      size_t eq = line.find('=');
      env[std::string(line.substr(0, eq))] = std::string(line.substr(eq + 1));
    }
    return env;
  }

  std::string dir_;
};

TEST_F(LauncherTest, EveryEnvironmentVariable) {
  Launcher l({"--standalone", "--nproc_per_node=2", "--fake_gpus=2", "--rdzv_id=envjob",
              "--max_restarts=3", "--role=trainer", "--monitor_interval=0.1", g_worker, "--record", dir_});
  ASSERT_EQ(l.Wait(), 0) << l.err();
  std::set<std::string> ports;
  for (int r = 0; r < 2; ++r) {
    auto env = Env(r, 0);
    ASSERT_FALSE(env.empty()) << "rank " << r << " wrote no environment";
    EXPECT_EQ(env["RANK"], std::to_string(r));
    EXPECT_EQ(env["LOCAL_RANK"], std::to_string(r));
    EXPECT_EQ(env["GROUP_RANK"], "0");
    EXPECT_EQ(env["ROLE_RANK"], std::to_string(r));
    EXPECT_EQ(env["ROLE_NAME"], "trainer");
    EXPECT_EQ(env["ROLE_WORLD_SIZE"], "2");
    EXPECT_EQ(env["LOCAL_WORLD_SIZE"], "2");
    EXPECT_EQ(env["WORLD_SIZE"], "2");
    EXPECT_EQ(env["GROUP_WORLD_SIZE"], "1");
    EXPECT_EQ(env["MASTER_ADDR"], "127.0.0.1");
    EXPECT_GT(std::atoi(env["MASTER_PORT"].c_str()), 0);
    ports.insert(env["MASTER_PORT"]);
    EXPECT_EQ(env["TORCHELASTIC_RESTART_COUNT"], "0");
    EXPECT_EQ(env["TORCHELASTIC_MAX_RESTARTS"], "3");
    EXPECT_EQ(env["TORCHELASTIC_RUN_ID"], "envjob");
    EXPECT_EQ(env["TORCHELASTIC_USE_AGENT_STORE"], "False");
    EXPECT_THAT(env["TORCHELASTIC_ERROR_FILE"], ::testing::ContainsRegex(absl::StrCat("/envjob_[A-Za-z0-9]{6}/attempt_0/", r, "/error\\.json$")));
    EXPECT_EQ(env["TORCH_NCCL_ASYNC_ERROR_HANDLING"], "1");
    EXPECT_EQ(env["OMP_NUM_THREADS"], "1");
    EXPECT_THAT(env["CPPTORCHRUN_RDZV_ENDPOINT"], HasSubstr("127.0.0.1:"));
    EXPECT_EQ(env["CPPTORCHRUN_RDZV_ROUND"], "1");
    EXPECT_THAT(env["CPPTORCHRUN_AGENT_SOCKET"], HasSubstr("/agent.sock"));
    EXPECT_EQ(env["CPPTORCHRUN_FAKE_GPU"], std::to_string(r));
    EXPECT_EQ(env["CPPTORCHRUN_FAKE_GPUS"], "2");
    EXPECT_EQ(env["CPPTORCHRUN_LOCAL_ADDR"], "127.0.0.1");
    EXPECT_EQ(env.count("CPPTORCHRUN_RDZV_TOKEN_FILE"), 0u);
    // The socket's folder is private.
    std::string sock = env["CPPTORCHRUN_AGENT_SOCKET"];
    EXPECT_THAT(sock, HasSubstr("cpptorchrun-"));
  }
  EXPECT_EQ(ports.size(), 1u);
}

TEST_F(LauncherTest, AgentSocketFolderIsPrivateWhileRunning) {
  std::string go = dir_ + "/go";
  Launcher l({"--nproc_per_node=1", g_worker, "--record", dir_, "--wait_file", go});
  ASSERT_TRUE(Eventually([&] { return Exists(dir_ + "/pid.0.0"); }));
  std::string sock = Env(0, 0)["CPPTORCHRUN_AGENT_SOCKET"];
  struct stat st {};
  ASSERT_EQ(stat(sock.substr(0, sock.rfind('/')).c_str(), &st), 0);
  EXPECT_EQ(st.st_mode & 0777, 0700u);
  std::ofstream(go) << "1";
  EXPECT_EQ(l.Wait(), 0) << l.err();
}

TEST_F(LauncherTest, RestartCountsAndFreshPorts) {
  Launcher l({"--nproc_per_node=2", "--max_restarts=3", g_worker, "--record", dir_, "--fail_until", "1:2"});
  ASSERT_EQ(l.Wait(), 0) << l.err();
  for (int restart = 0; restart <= 2; ++restart) {
    for (int r = 0; r < 2; ++r) {
      if (restart < 2 && r == 0 && !Exists(absl::StrCat(dir_, "/env.0.", restart))) continue;  // stopped early
      auto env = Env(r, restart);
      ASSERT_FALSE(env.empty()) << "rank " << r << " restart " << restart;
      EXPECT_EQ(env["TORCHELASTIC_RESTART_COUNT"], std::to_string(restart));
      EXPECT_EQ(env["CPPTORCHRUN_RDZV_ROUND"], std::to_string(restart + 1));
    }
  }
  EXPECT_FALSE(Exists(dir_ + "/env.1.3"));
  EXPECT_THAT(l.err(), HasSubstr("restarting, 1 of 3"));
  EXPECT_THAT(l.err(), HasSubstr("restarting, 2 of 3"));
  EXPECT_THAT(l.err(), Not(HasSubstr("FAILED")));
}

TEST_F(LauncherTest, OutOfRestartsExitsWithTheRootCauseAndSummary) {
  Launcher l({"--nproc_per_node=2", "--max_restarts=1", "--rdzv_id=sumjob", g_worker, "--record", dir_,
              "--error_file", "1:bad batch", "--exit", "1:5", "--hang"});
  EXPECT_EQ(l.Wait(), 5);
  std::string err = l.err();
  EXPECT_THAT(err, HasSubstr("FAILED"));
  size_t root = err.find("Root Cause (first observed failure):");
  ASSERT_NE(root, std::string::npos) << err;
  std::string tail = err.substr(root);
  EXPECT_THAT(tail, HasSubstr("rank      : 1 (local_rank: 1)"));
  EXPECT_THAT(tail, HasSubstr("exitcode  : 5"));
  EXPECT_THAT(tail, HasSubstr("host      : 127.0.0.1"));
  EXPECT_THAT(tail, HasSubstr("RuntimeError: bad batch"));
  EXPECT_THAT(tail, ::testing::ContainsRegex("/sumjob_[A-Za-z0-9]{6}/attempt_1/1/error\\.json"));
  EXPECT_THAT(tail, HasSubstr("traceback : test_worker main"));
  EXPECT_TRUE(Exists(dir_ + "/env.1.1"));
  EXPECT_FALSE(Exists(dir_ + "/env.1.2"));
}

TEST_F(LauncherTest, CrashOnSignalExits128PlusSignal) {
  Launcher l({"--nproc_per_node=2", g_worker, "--record", dir_, "--raise", "0:SIGSEGV", "--hang"});
  EXPECT_EQ(l.Wait(), 128 + SIGSEGV);
  EXPECT_THAT(l.err(), HasSubstr("SIGSEGV"));
  EXPECT_THAT(l.err(), HasSubstr("exitcode  : -11"));
}

TEST_F(LauncherTest, LogFilesLayoutRedirectsAndTee) {
  std::string logs = dir_ + "/logs";
  Launcher l({"--nproc_per_node=2", "--rdzv_id=logjob", "--log_dir", logs, "--redirects=2", "--tee=1",
              "--max_restarts=1", g_worker, "--print", "hello-out", "--fail_until", "*:1"});
  ASSERT_EQ(l.Wait(), 0) << l.err();
  const std::vector<std::string> own = OwnLogFolders(logs, "logjob");
  ASSERT_EQ(own.size(), 1u) << l.err();
  EXPECT_THAT(l.err(), HasSubstr(own[0])) << "the launcher names its log folder";
  for (int attempt = 0; attempt < 2; ++attempt) {
    for (int r = 0; r < 2; ++r) {
      std::string base = absl::StrCat(own[0], "/attempt_", attempt, "/", r, "/");
      EXPECT_TRUE(Exists(base + "stdout.log")) << base;
      EXPECT_TRUE(Exists(base + "stderr.log")) << base;
      // Attempt 0 may be stopped before a worker printed; attempt 1 runs to the end.
      if (attempt == 1) {
        EXPECT_EQ(ReadFile(base + "stdout.log"), "hello-out\n") << base;
      }
    }
  }
  // The event log beside them: the failure, the restart and its phases, the end.
  const std::string events = ReadFile(own[0] + "/events.jsonl");
  EXPECT_THAT(events, HasSubstr("\"event\": \"worker_failed\""));
  EXPECT_THAT(events, ::testing::ContainsRegex("\"event\": \"restart\", \"cause\": \"worker_failed\".*\"total_s\": [0-9.]+"));
  EXPECT_THAT(events, HasSubstr("\"event\": \"finished\", \"exit_code\": 0"));
  EXPECT_THAT(l.err(), HasSubstr("restart (worker_failed) took"));
  // Tee: stdout on the console too, prefixed.
  EXPECT_THAT(l.out(), HasSubstr("[default0]:hello-out"));
  EXPECT_THAT(l.out(), HasSubstr("[default1]:hello-out"));
}

TEST_F(LauncherTest, RedirectKeepsOutputOffTheConsole) {
  std::string logs = dir_ + "/logs";
  Launcher l({"--nproc_per_node=1", "--log_dir", logs, "-r", "3", g_worker, "--print", "quiet-line"});
  ASSERT_EQ(l.Wait(), 0) << l.err();
  EXPECT_THAT(l.out(), Not(HasSubstr("quiet-line")));
  const std::vector<std::string> own = OwnLogFolders(logs, "none");
  ASSERT_EQ(own.size(), 1u);
  EXPECT_EQ(ReadFile(own[0] + "/attempt_0/0/stdout.log"), "quiet-line\n");
}

TEST_F(LauncherTest, TeeWinsOverRedirectsForTheConsoleAsInTorchrun) {
  std::string logs = dir_ + "/logs";
  Launcher l({"--nproc_per_node=1", "--log_dir", logs, "--redirects", "3", "--tee", "3", g_worker, "--print",
              "both-ways"});
  ASSERT_EQ(l.Wait(), 0) << l.err();
  EXPECT_THAT(l.out(), HasSubstr("[default0]:both-ways"));
  const std::vector<std::string> own = OwnLogFolders(logs, "none");
  ASSERT_EQ(own.size(), 1u);
  EXPECT_EQ(ReadFile(own[0] + "/attempt_0/0/stdout.log"), "both-ways\n");
}

TEST_F(LauncherTest, DuplicateFiltersCollectMatchingLinesOfEveryRank) {
  std::string logs = dir_ + "/logs";
  Launcher l({"--nproc_per_node=2", "--log_dir", logs, "--tee", "1", "--duplicate_stdout_filters", "loss,acc",
              g_worker, "--print", "step 1 loss 0.5"});
  ASSERT_EQ(l.Wait(), 0) << l.err();
  const std::vector<std::string> own = OwnLogFolders(logs, "none");
  ASSERT_EQ(own.size(), 1u);
  std::vector<std::string> lines =
      absl::StrSplit(ReadFile(own[0] + "/attempt_0/filtered_stdout.log"), '\n', absl::SkipEmpty());
  std::sort(lines.begin(), lines.end());
  EXPECT_EQ(lines, (std::vector<std::string>{"[default0]:step 1 loss 0.5", "[default1]:step 1 loss 0.5"}));
}

TEST_F(LauncherTest, NumaBindingExclusiveGivesEachWorkerItsOwnCpus) {
  std::set<int> allowed;
  cpu_set_t set;
  CPU_ZERO(&set);
  ASSERT_EQ(sched_getaffinity(0, sizeof(set), &set), 0);
  for (int c = 0; c < CPU_SETSIZE; ++c) {
    if (CPU_ISSET(c, &set)) allowed.insert(c);
  }
  if (allowed.size() < 2) GTEST_SKIP() << "needs 2 CPUs in this test's affinity mask, has " << allowed.size();
  // Two fake GPUs on this machine's NUMA node(s); each worker reports the
  // CPUs the kernel lets it run on.
  Launcher l({"--nproc_per_node=2", "--fake_gpus=2", "--numa_binding=exclusive", "--no_python", "/bin/sh",
              "-c", "grep Cpus_allowed_list /proc/self/status"});
  ASSERT_EQ(l.Wait(), 0) << l.err();
  std::map<std::string, std::string> by_rank;
  for (absl::string_view line : absl::StrSplit(l.out(), '\n', absl::SkipEmpty())) {
    std::vector<std::string> parts = absl::StrSplit(line, absl::ByAnyChar(":\t"), absl::SkipWhitespace());
    if (parts.size() == 3 && parts[1] == "Cpus_allowed_list") by_rank[parts[0]] = parts[2];
  }
  ASSERT_EQ(by_rank.size(), 2u) << l.out();
  EXPECT_NE(by_rank["[default0]"], by_rank["[default1]"]) << "exclusive: disjoint CPUs";
  EXPECT_THAT(l.err(), HasSubstr("--numa_binding exclusive: local rank 0 on CPUs"));
  // Without GPUs there is nothing to bind near.
  Launcher cpu({"--nproc_per_node=2", "--numa_binding=node", "--no_python", "/bin/true"});
  EXPECT_EQ(cpu.Wait(), 2);
  EXPECT_THAT(cpu.err(), HasSubstr("--numa_binding binds each worker near its GPU"));
}

TEST_F(LauncherTest, StandaloneRunIdAndStaticMasterAddressAsTorchrunSetsThem) {
  // --standalone without --rdzv_id: a fresh UUID names the run.
  Launcher s({"--standalone", "--nproc_per_node=1", "--no_python", "/bin/sh", "-c", "echo id=$TORCHELASTIC_RUN_ID"});
  ASSERT_EQ(s.Wait(), 0) << s.err();
  EXPECT_THAT(s.out(), ::testing::ContainsRegex("id=[0-9a-f]{8}-[0-9a-f]{4}-4[0-9a-f]{3}-[89ab][0-9a-f]{3}-[0-9a-f]{12}"));
  // Static: MASTER_ADDR and MASTER_PORT are the flags, as given.
  const int port = FreePort();
  Launcher m({"--nproc_per_node=1", "--master_addr=localhost", absl::StrCat("--master_port=", port), "--no_python",
              "/bin/sh", "-c", "echo master=$MASTER_ADDR:$MASTER_PORT"});
  ASSERT_EQ(m.Wait(), 0) << m.err();
  EXPECT_THAT(m.out(), HasSubstr(absl::StrCat("master=localhost:", port)));
}

TEST_F(LauncherTest, LaunchersSharingALogDirNeverWriteIntoEachOthersFiles) {
  // Two nodes of one job on a shared filesystem, or the same job run twice:
  // one --log_dir, one run id.
  std::string logs = dir_ + "/shared-logs";
  Launcher a({"--nproc_per_node=1", "--rdzv_id=twice", "--log_dir", logs, "-r", "3", g_worker, "--print",
              "from-a"});
  Launcher b({"--nproc_per_node=1", "--rdzv_id=twice", "--log_dir", logs, "-r", "3", g_worker, "--print",
              "from-b"});
  ASSERT_EQ(a.Wait(), 0) << a.err();
  ASSERT_EQ(b.Wait(), 0) << b.err();
  Launcher again({"--nproc_per_node=1", "--rdzv_id=twice", "--log_dir", logs, "-r", "3", g_worker,
                  "--print", "from-again"});
  ASSERT_EQ(again.Wait(), 0) << again.err();
  const std::vector<std::string> own = OwnLogFolders(logs, "twice");
  ASSERT_EQ(own.size(), 3u);
  std::multiset<std::string> outputs;
  for (const std::string& f : own) outputs.insert(ReadFile(f + "/attempt_0/0/stdout.log"));
  EXPECT_EQ(outputs, (std::multiset<std::string>{"from-a\n", "from-b\n", "from-again\n"}));
}

TEST_F(LauncherTest, NoHalfLinesUnderAFlood) {
  const int kLines = 20000;
  Launcher l({"--nproc_per_node=3", g_worker, "--flood", std::to_string(kLines)});
  ASSERT_EQ(l.Wait(), 0) << l.err().substr(0, 2000);
  for (const std::string* stream : {new std::string(l.out()), new std::string(l.err())}) {
    std::map<int, int> next;  // per rank: the next line number expected
    for (absl::string_view line : absl::StrSplit(*stream, '\n', absl::SkipEmpty())) {
      if (absl::StartsWith(line, "[20")) continue;  // the launcher's own log lines
      ASSERT_TRUE(absl::StartsWith(line, "[default")) << line.substr(0, 200);
      int r = line[8] - '0';
      absl::string_view body = line.substr(11);
      std::vector<std::string> parts = absl::StrSplit(body, ':');
      ASSERT_EQ(parts.size(), 4u) << line.substr(0, 200);
      EXPECT_EQ(parts[0].substr(3), std::to_string(r)) << line.substr(0, 200);
      EXPECT_EQ(parts[1], std::to_string(next[r])) << "rank " << r << " lost or mixed a line";
      next[r] = std::atoi(parts[1].c_str()) + 1;
      EXPECT_EQ(parts[3], "end");
      EXPECT_EQ(parts[2].find_first_not_of(static_cast<char>('a' + r)), std::string::npos)
          << line.substr(0, 200);
    }
    for (int r = 0; r < 3; ++r) EXPECT_EQ(next[r], kLines) << "rank " << r;
    delete stream;
  }
}

TEST_F(LauncherTest, LocalRanksFilter) {
  Launcher l({"--nproc_per_node=3", "--local_ranks_filter=1", g_worker, "--print", "visible"});
  ASSERT_EQ(l.Wait(), 0) << l.err();
  EXPECT_THAT(l.out(), HasSubstr("[default1]:visible"));
  EXPECT_THAT(l.out(), Not(HasSubstr("[default0]")));
  EXPECT_THAT(l.out(), Not(HasSubstr("[default2]")));
}

TEST_F(LauncherTest, SigtermIsForwardedAndExitCodeIs143) {
  Launcher l({"--nproc_per_node=2", g_worker, "--record", dir_, "--on_signal", "SIGTERM", "--hang"});
  ASSERT_TRUE(Eventually([&] { return Exists(dir_ + "/pid.0.0") && Exists(dir_ + "/pid.1.0"); }));
  l.Signal(SIGTERM);
  EXPECT_EQ(l.Wait(), 128 + SIGTERM);
  EXPECT_TRUE(Exists(dir_ + "/got.SIGTERM.0"));
  EXPECT_TRUE(Exists(dir_ + "/got.SIGTERM.1"));
}

TEST_F(LauncherTest, SigusrIsForwardedWhenHandled) {
  Launcher l({"--nproc_per_node=2", "--signals_to_handle=SIGTERM,SIGUSR1", g_worker, "--record", dir_,
              "--on_signal", "SIGUSR1", "--hang"});
  ASSERT_TRUE(Eventually([&] { return Exists(dir_ + "/pid.0.0") && Exists(dir_ + "/pid.1.0"); }));
  l.Signal(SIGUSR1);
  // The workers record the signal and exit 0: the job succeeds.
  EXPECT_EQ(l.Wait(), 0) << l.err();
  EXPECT_TRUE(Exists(dir_ + "/got.SIGUSR1.0"));
  EXPECT_TRUE(Exists(dir_ + "/got.SIGUSR1.1"));
}

TEST_F(LauncherTest, IgnoredSigtermMeansSigkillAfterShutdownTimeout) {
  Launcher l({"--nproc_per_node=2", "--shutdown_timeout=0.5", g_worker, "--record", dir_, "--ignore_sigterm",
              "--hang"});
  ASSERT_TRUE(Eventually([&] { return Exists(dir_ + "/pid.0.0") && Exists(dir_ + "/pid.1.0"); }));
  l.Signal(SIGTERM);
  EXPECT_EQ(l.Wait(), 128 + SIGTERM);
  EXPECT_THAT(l.err(), HasSubstr("sending SIGKILL"));
  for (pid_t pid : RecordedPids()) EXPECT_TRUE(Dead(pid)) << pid;
}

TEST_F(LauncherTest, WorkersDieWhenTheLauncherIsSigkilled) {
  Launcher l({"--nproc_per_node=3", g_worker, "--record", dir_, "--ignore_sigterm", "--hang"});
  ASSERT_TRUE(Eventually([&] { return RecordedPids().size() == 3; }));
  std::vector<pid_t> pids = RecordedPids();
  for (pid_t pid : pids) EXPECT_FALSE(Dead(pid));
  l.Signal(SIGKILL);
  EXPECT_EQ(l.Wait(), 128 + SIGKILL);
  for (pid_t pid : pids) {
    EXPECT_TRUE(Eventually([pid] { return Dead(pid); }, absl::Seconds(10))) << "worker " << pid << " survived";
  }
}

TEST_F(LauncherTest, EachWorkerLeadsItsOwnProcessGroup) {
  std::string go = dir_ + "/go";
  Launcher l({"--nproc_per_node=2", g_worker, "--record", dir_, "--wait_file", go});
  ASSERT_TRUE(Eventually([&] { return RecordedPids().size() == 2; }));
  for (const std::string& f : Files("pid.")) {
    std::vector<std::string> parts = absl::StrSplit(ReadFile(dir_ + "/" + f), absl::ByAnyChar(" \n"),
                                                    absl::SkipEmpty());
    ASSERT_EQ(parts.size(), 2u);
    EXPECT_EQ(parts[0], parts[1]) << "pid and pgid differ";
  }
  std::ofstream(go) << "1";
  EXPECT_EQ(l.Wait(), 0) << l.err();
}

TEST_F(LauncherTest, SilentWorkerIsHungAndKilled) {
  Launcher l({"--nproc_per_node=2", "--worker_timeout=1", "--shutdown_timeout=1", "--monitor_interval=0.1", g_worker, "--record",
              dir_, "--heartbeats", "2", "--ignore_sigterm", "--hang"});
  EXPECT_EQ(l.Wait(), 128 + SIGKILL);
  EXPECT_THAT(l.err(), HasSubstr("hung: no heartbeat"));
}

TEST_F(LauncherTest, ExecutableOnPathRunsDirectly) {
  std::string bin = g_worker.substr(0, g_worker.rfind('/'));
  std::string name = g_worker.substr(g_worker.rfind('/') + 1);
  Launcher l({"--nproc_per_node=2", name, "--print", "from-path"},
             {{"PATH", bin + ":/usr/bin:/bin"}});
  ASSERT_EQ(l.Wait(), 0) << l.err();
  EXPECT_THAT(l.out(), HasSubstr("[default1]:from-path"));
}

TEST_F(LauncherTest, BadUsageExits2WithOneLineAndStartsNothing) {
  for (std::vector<std::string> args :
       std::vector<std::vector<std::string>>{{"--nproc_per_node=0", g_worker, "--record", dir_},
                                             {"--bogus", g_worker, "--record", dir_},
                                             {"--nnodes=2", "--standalone", g_worker, "--record", dir_},
                                             {"--fake_gpus=1", "--nproc_per_node=2", g_worker, "--record", dir_},
                                             {"no-such-program-xyz"}}) {
    Launcher l(args);
    EXPECT_EQ(l.Wait(), 2) << args[0];
    std::string err = l.err();
    EXPECT_THAT(err, HasSubstr("cpptorchrun: error: "));
    EXPECT_EQ(std::count(err.begin(), err.end(), '\n'), 1) << err;
  }
  EXPECT_TRUE(Files("env.").empty());
}

TEST_F(LauncherTest, HelpAndVersion) {
  Launcher v({"--version"});
  EXPECT_EQ(v.Wait(), 0);
  EXPECT_EQ(v.out(), "cpptorchrun 0.1.0\n");
  Launcher h({"--help"});
  EXPECT_EQ(h.Wait(), 0);
  EXPECT_THAT(h.out(), HasSubstr("--nproc_per_node"));
}

TEST_F(LauncherTest, TwoNodesOnLoopbackWithStatus) {
  const int port = FreePortPair();
  const std::string go = dir_ + "/go";
  std::vector<std::string> common = {"--nnodes=2", "--nproc_per_node=2", "--master_addr=127.0.0.1",
                                     absl::StrCat("--master_port=", port), "--rdzv_id=twonodes",
                                     "--monitor_interval=0.1",
                                     "--rdzv_conf=keep_alive_interval=0.2"};
  auto node = [&](int rank) {
    std::vector<std::string> a = common;
    a.push_back(absl::StrCat("--node_rank=", rank));
    a.insert(a.end(), {g_worker, "--record", dir_, "--heartbeats", "1", "--wait_file", go});
    return a;
  };
  Launcher n0(node(0));
  Launcher n1(node(1));
  ASSERT_TRUE(Eventually([&] { return RecordedPids().size() == 4; }, absl::Seconds(60)))
      << n0.err() << "\n" << n1.err();
  std::set<std::string> ranks;
  for (int r = 0; r < 4; ++r) {
    auto env = Env(r, 0);
    ranks.insert(env["RANK"]);
    EXPECT_EQ(env["WORLD_SIZE"], "4");
    EXPECT_EQ(env["GROUP_WORLD_SIZE"], "2");
    EXPECT_EQ(env["LOCAL_WORLD_SIZE"], "2");
    EXPECT_EQ(env["GROUP_RANK"], std::to_string(r / 2));
    EXPECT_EQ(env["MASTER_ADDR"], "127.0.0.1");
    // As under torchrun: the user's --master_port; the rendezvous is above it.
    EXPECT_EQ(env["MASTER_PORT"], std::to_string(port));
  }
  EXPECT_EQ(ranks.size(), 4u);
  EXPECT_EQ(Env(0, 0)["MASTER_PORT"], Env(3, 0)["MASTER_PORT"]);

  // Status while it runs: both nodes, each rank's progress (after a keep-alive).
  std::string table;
  ASSERT_TRUE(Eventually([&] {
    Launcher s({"status", "--rdzv_endpoint", absl::StrCat("127.0.0.1:", port + 1), "--rdzv_id", "twonodes"});
    if (s.Wait() != 0) return false;
    table = s.out();
    return absl::StrContains(table, "nodes 2") && std::count(table.begin(), table.end(), '\n') >= 9;
  }, absl::Seconds(30))) << table;
  EXPECT_THAT(table, HasSubstr("run twonodes"));
  EXPECT_THAT(table, HasSubstr("0-1"));
  EXPECT_THAT(table, HasSubstr("2-3"));

  std::ofstream(go) << "1";
  EXPECT_EQ(n0.Wait(), 0) << n0.err();
  EXPECT_EQ(n1.Wait(), 0) << n1.err();
}

// The environment with the highest CPPTORCHRUN_RDZV_ROUND among the env.*
// files in `dir` (empty when none).
std::map<std::string, std::string> LatestEnv(const std::string& dir) {
  std::map<std::string, std::string> best;
  std::unique_ptr<FILE, int (*)(FILE*)> p(popen(("ls " + dir).c_str(), "r"), pclose);
  char line[4096];
  while (p && fgets(line, sizeof(line), p.get()) != nullptr) {
    std::string name(line);
    if (!name.empty() && name.back() == '\n') name.pop_back();
    if (!absl::StartsWith(name, "env.")) continue;
    std::map<std::string, std::string> env;
    for (absl::string_view l : absl::StrSplit(ReadFile(dir + "/" + name), '\n', absl::SkipEmpty())) {
      size_t eq = l.find('=');
      env[std::string(l.substr(0, eq))] = std::string(l.substr(eq + 1));
    }
    if (best.empty() || std::atoi(env["CPPTORCHRUN_RDZV_ROUND"].c_str()) >
                            std::atoi(best["CPPTORCHRUN_RDZV_ROUND"].c_str())) {
      best = env;
    }
  }
  return best;
}

bool PortOpen(int port) {
  int fd = socket(AF_INET, SOCK_STREAM, 0);
  sockaddr_in a{};
  a.sin_family = AF_INET;
  a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  a.sin_port = htons(port);
  bool ok = connect(fd, reinterpret_cast<sockaddr*>(&a), sizeof(a)) == 0;
  close(fd);
  return ok;
}

TEST_F(LauncherTest, LostNodeRestartsTheOtherWithoutConsumingRestarts) {
  const int port = FreePort();
  const std::string go = dir_ + "/go";
  // Keep-alive deadline 1.5 s: short, but not so short that a loaded
  // machine kills a live node.
  const std::string conf = "--rdzv_conf=keep_alive_interval=0.5,keep_alive_max_attempt=3,last_call_timeout=3";
  std::vector<std::string> common = {"--nnodes=1:2", "--nproc_per_node=2", "--rdzv_backend=c10d",
                                     absl::StrCat("--rdzv_endpoint=127.0.0.1:", port), "--rdzv_id=elastic",
                                     "--monitor_interval=0.1", "--max_restarts=0"};
  std::vector<std::string> a_args = common;
  // Node a starts first and serves the loopback endpoint; b is its client.
  a_args.insert(a_args.end(), {conf, g_worker, "--record", dir_, "--wait_file", go});
  Launcher a(a_args);
  ASSERT_TRUE(Eventually([&] { return PortOpen(port); })) << a.err();
  const std::string b_dir = dir_ + "/b";
  mkdir(b_dir.c_str(), 0755);
  std::vector<std::string> b_args = common;
  b_args.insert(b_args.end(), {conf, g_worker, "--record", b_dir, "--wait_file", go});
  Launcher b(b_args);
  // Round 1: both nodes, 4 ranks.
  ASSERT_TRUE(Eventually([&] {
    return LatestEnv(dir_)["WORLD_SIZE"] == "4" && LatestEnv(b_dir)["WORLD_SIZE"] == "4";
  }, absl::Seconds(60))) << a.err() << "\n" << b.err();
  const std::string first_round = LatestEnv(dir_)["CPPTORCHRUN_RDZV_ROUND"];
  // Each worker records its env before its pid: wait for both of b's pids.
  std::vector<pid_t> b_workers;
  ASSERT_TRUE(Eventually([&] {
    b_workers.clear();
    for (const char* f : {"/pid.0.0", "/pid.1.0", "/pid.2.0", "/pid.3.0"}) {
      if (Exists(b_dir + f)) b_workers.push_back(std::atoi(ReadFile(b_dir + f).c_str()));
    }
    return b_workers.size() == 2u && b_workers[0] > 0 && b_workers[1] > 0;
  })) << b.err();
  // Node b dies hard; its workers die with it.
  b.Signal(SIGKILL);
  EXPECT_EQ(b.Wait(), 128 + SIGKILL);
  for (pid_t pid : b_workers) EXPECT_TRUE(Eventually([pid] { return Dead(pid); }, absl::Seconds(10)));
  // Node a notices, restarts alone in a new round; its restart count stays 0.
  ASSERT_TRUE(Eventually([&] {
    auto env = LatestEnv(dir_);
    return env["CPPTORCHRUN_RDZV_ROUND"] != first_round && env["WORLD_SIZE"] == "2";
  }, absl::Seconds(60))) << a.err();
  EXPECT_EQ(LatestEnv(dir_)["TORCHELASTIC_RESTART_COUNT"], "0");
  std::ofstream(go) << "1";
  EXPECT_EQ(a.Wait(), 0) << a.err();
  EXPECT_THAT(a.err(), HasSubstr("restarts not consumed"));
}

TEST_F(LauncherTest, ANodeWaitingToJoinRestartsTheGroupWithoutConsumingRestarts) {
  const int port = FreePort();
  const std::string go = dir_ + "/go";
  const std::string b_dir = dir_ + "/b";
  mkdir(b_dir.c_str(), 0755);
  // The same command line for both: the first launcher binds the loopback
  // endpoint and serves it, the second is its client.
  auto node = [&](const std::string& record) {
    return std::vector<std::string>{
        "--nnodes=1:2", "--nproc_per_node=2", "--rdzv_backend=c10d",
        absl::StrCat("--rdzv_endpoint=127.0.0.1:", port), "--rdzv_id=joiner",
        "--monitor_interval=0.1", "--max_restarts=0",
        "--rdzv_conf=keep_alive_interval=0.2,last_call_timeout=0.5",
        g_worker, "--record", record, "--wait_file", go};
  };
  Launcher a(node(dir_));
  // Node a runs alone first (one node is enough after the last call).
  ASSERT_TRUE(Eventually([&] { return LatestEnv(dir_)["WORLD_SIZE"] == "2"; }, absl::Seconds(60))) << a.err();
  Launcher b(node(b_dir));
  // Node b waits to join: the round ends, both meet in the next one.
  ASSERT_TRUE(Eventually([&] {
    return LatestEnv(dir_)["WORLD_SIZE"] == "4" && LatestEnv(b_dir)["WORLD_SIZE"] == "4";
  }, absl::Seconds(60))) << a.err() << "\n" << b.err();
  EXPECT_EQ(LatestEnv(dir_)["TORCHELASTIC_RESTART_COUNT"], "0");
  std::ofstream(go) << "1";
  EXPECT_EQ(a.Wait(), 0) << a.err();
  EXPECT_EQ(b.Wait(), 0) << b.err();
  EXPECT_THAT(a.err(), HasSubstr("restarts not consumed"));
}

TEST_F(LauncherTest, AFailureOnOneNodeRestartsEveryNode) {
  const int port = FreePortPair();
  const std::string flag = dir_ + "/failed-once";
  const std::string go = dir_ + "/go";
  const std::string b_dir = dir_ + "/b";
  mkdir(b_dir.c_str(), 0755);
  auto node = [&](int rank, const std::string& record) {
    return std::vector<std::string>{
        "--nnodes=2", "--nproc_per_node=2", absl::StrCat("--node_rank=", rank), "--master_addr=127.0.0.1",
        absl::StrCat("--master_port=", port), "--rdzv_id=restartall",
        "--monitor_interval=0.1", "--max_restarts=1", "--rdzv_conf=keep_alive_interval=0.2",
        g_worker, "--record", record, "--wait_file", "2:" + go, "--wait_file", "3:" + go,
        "--fail_once", "3:" + flag, "--print", "done"};
  };
  Launcher n0(node(0, dir_));
  Launcher n1(node(1, b_dir));
  // Node 0's workers succeed first; node 0 waits in the exit barrier when
  // rank 3 (node 1) fails.
  ASSERT_TRUE(Eventually([&] { return absl::StrContains(n0.err(), "exit barrier"); }, absl::Seconds(60)))
      << n0.err();
  std::ofstream(go) << "1";
  EXPECT_EQ(n0.Wait(), 0) << n0.err();
  EXPECT_EQ(n1.Wait(), 0) << n1.err();
  EXPECT_TRUE(Exists(flag));
  // Node 1 (ranks 2, 3) failed once and restarted with count 1; node 0 was
  // told by the new round and restarted too, without consuming a restart.
  EXPECT_EQ(Env(0, 0)["CPPTORCHRUN_RDZV_ROUND"], "2");
  auto b_env = LatestEnv(b_dir);
  EXPECT_EQ(b_env["TORCHELASTIC_RESTART_COUNT"], "1");
  EXPECT_EQ(b_env["CPPTORCHRUN_RDZV_ROUND"], "2");
  EXPECT_THAT(n0.err(), HasSubstr("restarts not consumed"));
  EXPECT_THAT(n1.err(), HasSubstr("restarting, 1 of 1"));
}

TEST_F(LauncherTest, PytorchGlooEnvInitWorksUnchanged) {
  if (!Exists("/usr/bin/python3") ||
      system("/usr/bin/python3 -c 'import torch.distributed' >/dev/null 2>&1") != 0) {
    GTEST_SKIP() << "/usr/bin/python3 has no torch.distributed";
  }
  std::string script = dir_ + "/gloo_env.py";
  std::ofstream(script) << "import os, torch, torch.distributed as dist\n"
                           "dist.init_process_group('gloo')\n"
                           "t = torch.tensor([float(dist.get_rank() + 1)])\n"
                           "dist.all_reduce(t)\n"
                           "print('sum', int(t.item()), 'world', dist.get_world_size())\n"
                           "dist.destroy_process_group()\n";
  Launcher l({"--nproc_per_node=2", script}, {{"PYTHON_EXEC", "/usr/bin/python3"}});
  ASSERT_EQ(l.Wait(absl::Seconds(300)), 0) << l.err();
  EXPECT_THAT(l.out(), HasSubstr("[default0]:sum 3 world 2"));
  EXPECT_THAT(l.out(), HasSubstr("[default1]:sum 3 world 2"));
}

TEST_F(LauncherTest, PytorchStaticTwoNodesUseTheGivenMasterPortAsTorchrunDoes) {
  if (!Exists("/usr/bin/python3") ||
      system("/usr/bin/python3 -c 'import torch.distributed' >/dev/null 2>&1") != 0) {
    GTEST_SKIP() << "/usr/bin/python3 has no torch.distributed";
  }
  // torchrun's classic multi-node line: the workers' own TCPStore listens
  // at --master_port, which the script checks, on rank 0's node.
  std::string script = dir_ + "/static.py";
  std::ofstream(script) << "import os, torch, torch.distributed as dist\n"
                           "assert os.environ['MASTER_PORT'] == os.environ['EXPECT_PORT'], os.environ['MASTER_PORT']\n"
                           "dist.init_process_group('gloo')\n"
                           "t = torch.tensor([float(dist.get_rank() + 1)])\n"
                           "dist.all_reduce(t)\n"
                           "print('sum', int(t.item()), 'world', dist.get_world_size())\n"
                           "dist.destroy_process_group()\n";
  const int port = FreePortPair();
  auto node = [&](int rank) {
    return std::vector<std::string>{"--nnodes=2", "--nproc_per_node=2", absl::StrCat("--node_rank=", rank),
                                    "--master_addr=127.0.0.1", absl::StrCat("--master_port=", port), script};
  };
  const std::map<std::string, std::string> env = {{"PYTHON_EXEC", "/usr/bin/python3"},
                                                  {"EXPECT_PORT", std::to_string(port)}};
  Launcher n0(node(0), env);
  Launcher n1(node(1), env);
  ASSERT_EQ(n0.Wait(absl::Seconds(300)), 0) << n0.err();
  ASSERT_EQ(n1.Wait(absl::Seconds(300)), 0) << n1.err();
  EXPECT_THAT(n0.out(), HasSubstr("[default0]:sum 10 world 4"));
  EXPECT_THAT(n1.out(), HasSubstr("[default1]:sum 10 world 4"));
}

}  // namespace

int main(int argc, char** argv) {
  ::testing::InitGoogleTest(&argc, argv);
  if (argc < 3) {
    std::fprintf(stderr, "usage: %s <cpptorchrun> <test_worker>\n", argv[0]);
    return 2;
  }
  auto absolute = [](const std::string& p) {
    if (!p.empty() && p[0] == '/') return p;
    char cwd[4096];
    return std::string(getcwd(cwd, sizeof(cwd))) + "/" + p;
  };
  g_launcher = absolute(argv[1]);
  g_worker = absolute(argv[2]);
  return RUN_ALL_TESTS();
}
