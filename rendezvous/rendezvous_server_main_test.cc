// Tests of the rendezvous_server binary as a process: --version, bad flags,
// the "listening on" line with --port 0, serving a client, and a clean exit
// on SIGTERM.
#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <spawn.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cstdlib>
#include <fstream>
#include <string>
#include <vector>

#include "absl/strings/match.h"
#include "absl/time/clock.h"
#include "absl/time/time.h"
#include "gtest/gtest.h"
#include "rendezvous/client.h"

extern char** environ;

namespace cpptorchrun::rdzv {
namespace {

std::string Binary() {
  const char* dir = std::getenv("TEST_SRCDIR");
  const char* ws = std::getenv("TEST_WORKSPACE");
  if (dir != nullptr && ws != nullptr) {
    return std::string(dir) + "/" + ws + "/rendezvous/rendezvous_server";
  }
  return "rendezvous/rendezvous_server";
}

struct Child {
  pid_t pid = -1;
  int out = -1;  // stdout and stderr together
};

Child Spawn(const std::vector<std::string>& args) {
  int fds[2];
  EXPECT_EQ(pipe(fds), 0);
  posix_spawn_file_actions_t actions;
  posix_spawn_file_actions_init(&actions);
  posix_spawn_file_actions_adddup2(&actions, fds[1], 1);
  posix_spawn_file_actions_adddup2(&actions, fds[1], 2);
  posix_spawn_file_actions_addclose(&actions, fds[0]);
  std::vector<char*> argv;
  std::string binary = Binary();
  argv.push_back(binary.data());
  std::vector<std::string> copy = args;
  for (std::string& a : copy) argv.push_back(a.data());
  argv.push_back(nullptr);
  Child child;
  EXPECT_EQ(posix_spawn(&child.pid, binary.c_str(), &actions, nullptr, argv.data(), environ), 0);
  posix_spawn_file_actions_destroy(&actions);
  close(fds[1]);
  child.out = fds[0];
  return child;
}

// Reads until `stop` appears, EOF, or the deadline.
std::string ReadUntil(int fd, const std::string& stop, absl::Duration limit) {
  std::string text;
  absl::Time deadline = absl::Now() + limit;
  while (absl::Now() < deadline && (stop.empty() || !absl::StrContains(text, stop))) {
    pollfd p{fd, POLLIN, 0};
    int ms = static_cast<int>(absl::ToInt64Milliseconds(deadline - absl::Now()));
    if (poll(&p, 1, std::max(ms, 1)) <= 0) continue;
    char buffer[4096];
    ssize_t n = read(fd, buffer, sizeof(buffer));
    if (n <= 0) break;
    text.append(buffer, n);
  }
  return text;
}

int Wait(Child& child) {
  int status = 0;
  waitpid(child.pid, &status, 0);
  close(child.out);
  return WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
}

TEST(RendezvousServerMain, PrintsItsVersion) {
  Child child = Spawn({"--version"});
  std::string out = ReadUntil(child.out, "", absl::Seconds(20));
  EXPECT_EQ(Wait(child), 0);
  EXPECT_EQ(out, "rendezvous_server 0.1.0\n");
}

// A token file holding only a CRLF: set, but no token in it.
std::string BlankFile() {
  const char* t = std::getenv("TEST_TMPDIR");
  std::string path = std::string(t != nullptr ? t : "/tmp") + "/blank-token";
  std::ofstream(path) << "\r\n";
  return path;
}

TEST(RendezvousServerMain, RejectsBadFlagsNamingThem) {
  struct Case {
    std::vector<std::string> args;
    std::string fragment;
  };
  const Case cases[] = {
      {{"--port", "70000"}, "--port 70000 is out of range"},
      {{"--host", "bad host"}, "--host"},
      {{"--log_level", "loud"}, "--log_level 'loud'"},
      {{"--token_file", "/nonexistent/token"}, "cannot read the token file '/nonexistent/token'"},
      {{"--token_file", BlankFile()}, "holds no token"},
      {{"--key_file", BlankFile()}, "--key_file: the key file"},
      {{"--no_such_flag"}, "no_such_flag"},
  };
  for (const Case& c : cases) {
    Child child = Spawn(c.args);
    std::string out = ReadUntil(child.out, "", absl::Seconds(20));
    EXPECT_NE(Wait(child), 0) << out;
    EXPECT_TRUE(absl::StrContains(out, c.fragment)) << out;
  }
}

TEST(RendezvousServerMain, ABlankTokenVariableIsAnErrorNotAnOpenServer) {
  setenv("CPPTORCHRUN_RDZV_TOKEN", " \r\n", 1);
  Child child = Spawn({"--host", "127.0.0.1", "--port", "0"});
  unsetenv("CPPTORCHRUN_RDZV_TOKEN");
  std::string out = ReadUntil(child.out, "", absl::Seconds(20));
  EXPECT_EQ(Wait(child), 2) << out;  // a usage error, as for bad flags
  EXPECT_TRUE(absl::StrContains(out, "CPPTORCHRUN_RDZV_TOKEN holds no token")) << out;
  EXPECT_FALSE(absl::StrContains(out, "listening")) << out;
}

TEST(RendezvousServerMain, ServesOnAFreePortAndStopsOnSigterm) {
  Child child = Spawn({"--host", "127.0.0.1", "--port", "0", "--log_level", "warn"});
  std::string out = ReadUntil(child.out, "\n", absl::Seconds(20));
  const std::string prefix = "rendezvous_server listening on 127.0.0.1:";
  ASSERT_TRUE(absl::StartsWith(out, prefix)) << out;
  std::string endpoint = out.substr(std::string("rendezvous_server listening on ").size());
  endpoint = endpoint.substr(0, endpoint.find('\n'));

  ClientOptions options;
  options.endpoint = endpoint;
  auto client = NewGrpcRendezvousClient(options);
  auto store = client->OpenStore("run", 1);
  ASSERT_TRUE(store->Set("k", "v").ok());
  EXPECT_EQ(*store->Get("k", absl::ZeroDuration()), "v");

  ASSERT_EQ(kill(child.pid, SIGTERM), 0);
  EXPECT_EQ(Wait(child), 0);
}

}  // namespace
}  // namespace cpptorchrun::rdzv
