// Rendezvous targets: the gRPC form stays as it was; the etcd form names
// its members and prefix; a bad member or prefix is named.
#include "rendezvous/connect.h"

#include "gtest/gtest.h"

namespace cpptorchrun::rdzv {
namespace {

TEST(ConnectTest, AHostAndPortIsTheGrpcService) {
  auto t = ParseRendezvousTarget("10.0.0.1:29400");
  ASSERT_TRUE(t.ok()) << t.status();
  EXPECT_EQ(t->backend, RendezvousTarget::Backend::kGrpc);
  EXPECT_EQ(FormatRendezvousTarget(*t), "10.0.0.1:29400");
}

TEST(ConnectTest, AnEtcdTargetListsItsMembersAndPrefix) {
  auto t = ParseRendezvousTarget("etcd://a:1, b ,[::1]:3/jobs/x/");
  ASSERT_TRUE(t.ok()) << t.status();
  EXPECT_EQ(t->backend, RendezvousTarget::Backend::kEtcd);
  EXPECT_EQ(t->etcd_members, (std::vector<std::string>{"a:1", "b:2379", "[::1]:3"}));
  EXPECT_EQ(t->etcd_prefix, "/jobs/x");
  EXPECT_EQ(FormatRendezvousTarget(*t), "etcd://a:1,b:2379,[::1]:3/jobs/x");
  auto back = ParseRendezvousTarget(FormatRendezvousTarget(*t));
  ASSERT_TRUE(back.ok());
  EXPECT_EQ(back->etcd_members, t->etcd_members);
}

TEST(ConnectTest, WithoutAPrefixTheDefaultIsTaken) {
  auto t = ParseRendezvousTarget("etcd://127.0.0.1:2379");
  ASSERT_TRUE(t.ok()) << t.status();
  EXPECT_EQ(t->etcd_prefix, "/cpptorchrun");
}

TEST(ConnectTest, BadMembersAndPrefixesAreNamed) {
  for (const char* bad : {"etcd://", "etcd://a:1,,b:2", "etcd://a:0", "etcd://a:1,a:1", "etcd://a:1/"}) {
    auto t = ParseRendezvousTarget(bad);
    ASSERT_FALSE(t.ok()) << bad;
    EXPECT_NE(t.status().message().find(bad), std::string::npos) << t.status();
  }
  ClientOptions options;
  options.endpoint = "etcd://a:99999";
  auto client = CreateRendezvousClient(options);
  ASSERT_FALSE(client.ok());
  EXPECT_NE(client.status().message().find("a:99999"), std::string::npos) << client.status();
}

}  // namespace
}  // namespace cpptorchrun::rdzv
