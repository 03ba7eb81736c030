#include "launcher/config/hosting.h"

#include "gtest/gtest.h"

namespace cpptorchrun::launcher {
namespace {

// Host A of a two-host cluster: one NIC, a Debian-style hostname entry.
LocalHost HostA() {
  LocalHost h;
  h.addresses = {"127.0.0.1", "198.18.0.1", "::1", "fe80::1"};
  h.hostname = "nodea";
  h.fqdn = "nodea.cluster.example";
  h.fqdn_addresses = {"198.18.0.1"};
  return h;
}

HostingInput Multi(const std::string& host, std::vector<std::string> resolved) {
  HostingInput in;
  in.has_endpoint = true;
  in.endpoint_host = host;
  in.endpoint_addresses = std::move(resolved);
  return in;
}

TEST(DecideHosting, TheSameCommandLineOnEveryNodeIsServedByTheEndpointsHost) {
  LocalHost b = HostA();
  b.addresses = {"127.0.0.1", "198.18.0.2"};
  b.hostname = b.fqdn = "nodeb";
  b.fqdn_addresses = {"198.18.0.2"};
  // By IP.
  EXPECT_EQ(DecideHosting(Multi("198.18.0.1", {"198.18.0.1"}), HostA()).hosting, Hosting::kServeIfFree);
  EXPECT_EQ(DecideHosting(Multi("198.18.0.1", {"198.18.0.1"}), b).hosting, Hosting::kClient);
  // By a name that resolves to A's address, by hostname and by FQDN.
  EXPECT_EQ(DecideHosting(Multi("rdzv", {"198.18.0.1"}), HostA()).hosting, Hosting::kServeIfFree);
  EXPECT_EQ(DecideHosting(Multi("rdzv", {"198.18.0.1"}), b).hosting, Hosting::kClient);
  EXPECT_EQ(DecideHosting(Multi("NodeA", {}), HostA()).hosting, Hosting::kServeIfFree);
  EXPECT_EQ(DecideHosting(Multi("nodea.cluster.example", {}), HostA()).hosting, Hosting::kServeIfFree);
  // A name that resolves to loopback here (Debian's 127.0.1.1 line).
  EXPECT_EQ(DecideHosting(Multi("alias", {"127.0.1.1"}), HostA()).hosting, Hosting::kServeIfFree);
  // Loopback: every launcher on this machine could; the first to bind does.
  EXPECT_EQ(DecideHosting(Multi("localhost", {"127.0.0.1"}), b).hosting, Hosting::kServeIfFree);
  // Elsewhere.
  EXPECT_EQ(DecideHosting(Multi("10.9.9.9", {"10.9.9.9"}), HostA()).hosting, Hosting::kClient);
  EXPECT_EQ(DecideHosting(Multi("unresolvable", {}), HostA()).hosting, Hosting::kClient);
}

TEST(DecideHosting, IsHostOverridesWhatTheAddressSays) {
  HostingInput in = Multi("198.18.0.1", {"198.18.0.1"});
  in.is_host = false;
  EXPECT_EQ(DecideHosting(in, HostA()).hosting, Hosting::kClient);
  in = Multi("10.9.9.9", {"10.9.9.9"});
  in.is_host = true;
  HostingDecision d = DecideHosting(in, HostA());
  EXPECT_EQ(d.hosting, Hosting::kServe);
  EXPECT_NE(d.why.find("is_host"), std::string::npos);
}

TEST(DecideHosting, EmbeddedAndStatic) {
  HostingInput in;
  in.standalone = true;
  EXPECT_EQ(DecideHosting(in, HostA()).hosting, Hosting::kEmbedded);
  in = HostingInput{};
  in.single_node = true;
  EXPECT_EQ(DecideHosting(in, HostA()).hosting, Hosting::kEmbedded);
  // A single node with an endpoint (torchrun's localhost:0 recipe) serves it.
  in.has_endpoint = true;
  in.endpoint_host = "localhost";
  EXPECT_EQ(DecideHosting(in, HostA()).hosting, Hosting::kServeIfFree);
  in = Multi("10.9.9.9", {"10.9.9.9"});
  in.endpoint_from_master = true;
  in.node_rank = 0;
  EXPECT_EQ(DecideHosting(in, HostA()).hosting, Hosting::kServe);
  in.node_rank = 1;
  EXPECT_EQ(DecideHosting(in, HostA()).hosting, Hosting::kClient);
}

TEST(BindAddress, AsNarrowAsTheEndpointIsWritten) {
  EXPECT_EQ(BindAddress("198.18.0.1", {"198.18.0.1"}), "198.18.0.1");
  EXPECT_EQ(BindAddress("localhost", {"127.0.0.1"}), "localhost");
  EXPECT_EQ(BindAddress("fe80::1", {"fe80::1"}), "fe80::1");
  EXPECT_EQ(BindAddress("nodea", {"198.18.0.1"}), "0.0.0.0");
  EXPECT_EQ(BindAddress("nodea", {"127.0.1.1"}), "0.0.0.0") << "a Debian hostname: every interface";
  EXPECT_EQ(BindAddress("nodea", {"2001:db8::1", "198.18.0.1"}), "::");
}

TEST(ChooseNodeAddress, FlagThenSingleNodeThenTheRoutesSource) {
  AddressInput in;
  in.local_addr_flag = "10.1.1.1";
  in.route_source = "198.18.0.2";
  EXPECT_EQ(ChooseNodeAddress(in, HostA()).address, "10.1.1.1");
  in.local_addr_flag.clear();
  in.single_node = true;
  EXPECT_EQ(ChooseNodeAddress(in, HostA()).address, "127.0.0.1");
  in.single_node = false;
  in.endpoint_host = "198.18.0.1";
  in.endpoint_address = "198.18.0.1";
  AddressChoice c = ChooseNodeAddress(in, HostA());
  EXPECT_EQ(c.address, "198.18.0.2");
  EXPECT_NE(c.why.find("route to the rendezvous endpoint 198.18.0.1"), std::string::npos);
}

TEST(ChooseNodeAddress, LoopbackOnlyWhenTheEndpointIsLoopbackToo) {
  AddressInput in;
  in.endpoint_host = in.endpoint_address = "127.0.5.1";
  in.route_source = "127.0.0.1";
  EXPECT_EQ(ChooseNodeAddress(in, HostA()).address, "127.0.0.1");
  // The endpoint's name resolved to 127.0.1.1 here: other nodes cannot
  // reach a loopback address; take the FQDN's interface address.
  in.endpoint_host = "nodea";
  in.endpoint_address = "127.0.1.1";
  AddressChoice c = ChooseNodeAddress(in, HostA());
  EXPECT_EQ(c.address, "198.18.0.1");
  EXPECT_NE(c.why.find("loopback"), std::string::npos);
  // The FQDN resolves to loopback only: the first interface address that is
  // neither loopback nor link-local.
  LocalHost h = HostA();
  h.fqdn_addresses = {"127.0.1.1"};
  EXPECT_EQ(ChooseNodeAddress(in, h).address, "198.18.0.1");
  // No route at all.
  in.route_source.reset();
  EXPECT_EQ(ChooseNodeAddress(in, h).address, "198.18.0.1");
  // Nothing but loopback.
  h.addresses = {"127.0.0.1", "::1"};
  EXPECT_EQ(ChooseNodeAddress(in, h).address, "127.0.0.1");
}

TEST(LocalFacts, ReadOffThisMachine) {
  LocalHost local = ReadLocalHost();
  EXPECT_FALSE(local.hostname.empty());
  bool has_loopback = false;
  for (const auto& a : local.addresses) has_loopback |= IsLoopbackAddress(a);
  EXPECT_TRUE(has_loopback);
  EXPECT_EQ(ResolveHost("127.0.0.1"), std::vector<std::string>{"127.0.0.1"});
  EXPECT_TRUE(ResolveHost("no-such-host.invalid").empty());
  EXPECT_EQ(RouteSource("127.0.0.1").value_or(""), "127.0.0.1");
  EXPECT_FALSE(RouteSource("not an address").has_value());
  EXPECT_TRUE(IsLoopbackAddress("::ffff:127.0.0.1"));
  EXPECT_FALSE(IsLoopbackAddress("198.18.0.1"));
  EXPECT_TRUE(IsNumericAddress("198.18.0.1"));
  EXPECT_TRUE(IsNumericAddress("fe80::1"));
  EXPECT_FALSE(IsNumericAddress("nodea"));
}

}  // namespace
}  // namespace cpptorchrun::launcher
