// Tests of rendezvous_server's flags turned into ServerOptions: no process,
// no file but the ones a test writes.
#include "rendezvous/server_flags.h"

#include <cstdlib>
#include <fstream>
#include <string>
#include <vector>

#include "absl/strings/match.h"
#include "gtest/gtest.h"

namespace cpptorchrun::rdzv {
namespace {

absl::Status Parse(std::vector<std::string> args, ServerFlags* flags, ServerOptions* options,
                   const char* env_token = nullptr) {
  CLI::App app;
  AddServerFlags(&app, flags, options);
  std::vector<const char*> argv = {"rendezvous_server"};
  for (const std::string& a : args) argv.push_back(a.c_str());
  app.parse(static_cast<int>(argv.size()), const_cast<char**>(argv.data()));
  return ApplyServerFlags(*flags, env_token, options);
}

TEST(ServerFlags, DefaultsListenOnLoopbackAtTheDefaultPortWithoutAToken) {
  ServerFlags flags;
  ServerOptions options;
  ASSERT_TRUE(Parse({}, &flags, &options).ok());
  EXPECT_EQ(options.host, "127.0.0.1");
  EXPECT_EQ(options.port, kDefaultRendezvousPort);
  EXPECT_TRUE(options.token.empty());
  EXPECT_EQ(options.limits.max_connection_idle, Limits().max_connection_idle);
  EXPECT_EQ(std::string(SigningKeyOrigin(flags, options)), "made at random (not durable: see --key_file)");
}

TEST(ServerFlags, AnIpv6HostMayComeWithOrWithoutBrackets) {
  for (const std::string host : {"::1", "[::1]"}) {
    ServerFlags flags;
    ServerOptions options;
    absl::Status s = Parse({"--host", host, "--port", "0"}, &flags, &options);
    ASSERT_TRUE(s.ok()) << host << ": " << s;
    EXPECT_EQ(options.host, "::1") << host;
    EXPECT_EQ(options.port, 0);
  }
}

TEST(ServerFlags, RefusalsNameTheFlag) {
  ServerFlags flags;
  ServerOptions options;
  absl::Status port = Parse({"--port", "70000"}, &flags, &options);
  EXPECT_TRUE(absl::StrContains(port.message(), "--port 70000")) << port;
  ServerFlags flags2;
  ServerOptions options2;
  absl::Status file = Parse({"--token_file", "/nonexistent/token"}, &flags2, &options2);
  EXPECT_TRUE(absl::StartsWith(file.message(), "--token_file: ")) << file;
  EXPECT_FALSE(ParseLogLevel("loud").ok());
  EXPECT_TRUE(absl::StrContains(ParseLogLevel("loud").status().message(), "--log_level 'loud'"));
  EXPECT_EQ(*ParseLogLevel("off"), spdlog::level::off);
  EXPECT_EQ(*ParseLogLevel("warn"), spdlog::level::warn);
}

TEST(ServerFlags, TheMetricsPortIsOffByDefaultAndChecked) {
  ServerFlags flags;
  ServerOptions options;
  ASSERT_TRUE(Parse({}, &flags, &options).ok());
  EXPECT_EQ(options.metrics_port, -1);
  ServerFlags flags2;
  ServerOptions options2;
  ASSERT_TRUE(Parse({"--metrics_port", "0", "--metrics_host", "[::1]"}, &flags2, &options2).ok());
  EXPECT_EQ(options2.metrics_port, 0);
  EXPECT_EQ(options2.metrics_host, "::1");
  ServerFlags flags3;
  ServerOptions options3;
  absl::Status bad = Parse({"--metrics_port", "70000"}, &flags3, &options3);
  EXPECT_TRUE(absl::StrContains(bad.message(), "--metrics_port 70000")) << bad;
  ServerFlags flags4;
  ServerOptions options4;
  absl::Status same = Parse({"--port", "29400", "--metrics_port", "29400"}, &flags4, &options4);
  EXPECT_TRUE(absl::StrContains(same.message(), "must differ")) << same;
}

TEST(ServerFlags, TheTokenComesFromTheFileBeforeTheVariableAndABlankVariableIsAnError) {
  const std::string path = std::string(std::getenv("TEST_TMPDIR")) + "/token";
  std::ofstream(path) << "from-file\n";
  ServerFlags flags;
  ServerOptions options;
  ASSERT_TRUE(Parse({"--token_file", path}, &flags, &options, "from-env").ok());
  EXPECT_EQ(options.token, "from-file");
  EXPECT_TRUE(absl::StartsWith(SigningKeyOrigin(flags, options), "derived from the token"));

  ServerFlags flags2;
  ServerOptions options2;
  ASSERT_TRUE(Parse({}, &flags2, &options2, "from-env").ok());
  EXPECT_EQ(options2.token, "from-env");

  ServerFlags flags3;
  ServerOptions options3;
  EXPECT_FALSE(Parse({}, &flags3, &options3, "  ").ok());
}

}  // namespace
}  // namespace cpptorchrun::rdzv
