// Tests of endpoint parsing and formatting: every accepted form and every
// named error.
#include "rendezvous/endpoint.h"

#include <string>

#include "absl/status/status.h"
#include "gtest/gtest.h"

namespace cpptorchrun::rdzv {
namespace {

struct Good {
  std::string text;
  std::string host;
  int port;
  std::string formatted;
};

TEST(ParseEndpoint, AcceptsEveryForm) {
  const Good cases[] = {
      {"localhost", "localhost", 29400, "localhost:29400"},
      {"node-1.example:1234", "node-1.example", 1234, "node-1.example:1234"},
      {"127.0.0.1:0", "127.0.0.1", 0, "127.0.0.1:0"},
      {"  10.0.0.2:65535 ", "10.0.0.2", 65535, "10.0.0.2:65535"},
      {"[::1]", "::1", 29400, "[::1]:29400"},
      {"[::1]:5000", "::1", 5000, "[::1]:5000"},
      {"[fe80::1%eth0]:7", "fe80::1%eth0", 7, "[fe80::1%eth0]:7"},
  };
  for (const Good& c : cases) {
    auto endpoint = ParseEndpoint(c.text);
    ASSERT_TRUE(endpoint.ok()) << c.text << ": " << endpoint.status();
    EXPECT_EQ(endpoint->host, c.host) << c.text;
    EXPECT_EQ(endpoint->port, c.port) << c.text;
    EXPECT_EQ(FormatEndpoint(*endpoint), c.formatted) << c.text;
  }
}

TEST(ParseEndpoint, DefaultPortIsTheCallers) {
  auto endpoint = ParseEndpoint("host", 1);
  ASSERT_TRUE(endpoint.ok());
  EXPECT_EQ(endpoint->port, 1);
}

struct Bad {
  std::string text;
  std::string fragment;  // the message must name this
};

TEST(ParseEndpoint, RejectsWithAClearMessage) {
  const Bad cases[] = {
      {"", "empty endpoint"},
      {"   ", "empty endpoint"},
      {":29400", "empty host"},
      {"host:", "empty port"},
      {"host:abc", "'abc' is not a number"},
      {"host:-1", "'-1' is not a number"},
      {"host:65536", "out of range"},
      {"host:99999999999", "out of range"},
      {"[::1", "unclosed '['"},
      {"[::1]x", "unexpected 'x'"},
      {"[]:80", "empty host"},
      {"[abc]:80", "IPv6"},
      {"::1", "needs brackets"},
      {"a:b:c", "needs brackets"},
      {"::1]:80", "']' without '['"},
      {"ho st:80", "cannot be in a host name"},
      {"host/x", "cannot be in a host name"},
  };
  for (const Bad& c : cases) {
    auto endpoint = ParseEndpoint(c.text);
    ASSERT_FALSE(endpoint.ok()) << "accepted '" << c.text << "'";
    EXPECT_EQ(endpoint.status().code(), absl::StatusCode::kInvalidArgument) << c.text;
    EXPECT_NE(endpoint.status().message().find(c.fragment), std::string::npos)
        << c.text << " -> " << endpoint.status().message();
  }
}

TEST(IsLoopbackHost, KnowsLoopbackAddresses) {
  EXPECT_TRUE(IsLoopbackHost("localhost"));
  EXPECT_TRUE(IsLoopbackHost("127.0.0.1"));
  EXPECT_TRUE(IsLoopbackHost("127.3.2.1"));
  EXPECT_TRUE(IsLoopbackHost("::1"));
  EXPECT_FALSE(IsLoopbackHost("0.0.0.0"));
  EXPECT_FALSE(IsLoopbackHost("10.0.0.1"));
  EXPECT_FALSE(IsLoopbackHost("::"));
}

}  // namespace
}  // namespace cpptorchrun::rdzv
