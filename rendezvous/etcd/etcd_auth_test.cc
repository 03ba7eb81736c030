// etcd's auth and TLS options of the etcd client: on a real one-member
// cluster with auth enabled (a root user, as etcd requires), a client with
// the right credentials works (the Kv, and a whole rendezvous client from a
// "user:password" token), one without or with a wrong password is refused
// with etcd's reason; on a member serving TLS with client certificates, the
// CA and a certificate get in and nothing else does; bad TLS settings are
// named before any call.
#include <cstdlib>
#include <memory>
#include <string>

#include <grpcpp/grpcpp.h>

#include "absl/strings/str_cat.h"
#include "gtest/gtest.h"
#include "etcd/etcdserver/etcdserverpb/rpc.grpc.pb.h"
#include "rendezvous/connect.h"
#include "rendezvous/etcd/etcd_cluster.h"
#include "rendezvous/etcd/etcd_kv.h"

namespace cpptorchrun::rdzv::etcd {
namespace {

namespace pb = ::etcdserverpb;

constexpr char kPassword[] = "s3cret-pw";

// A Join of node n0 to a one-node run.
v1::JoinRequest OneNodeJoin(const std::string& run_id) {
  v1::JoinRequest join;
  join.set_run_id(run_id);
  join.mutable_node()->set_node_id("n0");
  join.mutable_node()->set_host("127.0.0.1");
  join.mutable_node()->set_local_world_size(1);
  join.mutable_node()->set_static_node_rank(-1);
  join.mutable_options()->set_min_nodes(1);
  join.mutable_options()->set_max_nodes(1);
  return join;
}

class EtcdAuthTest : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    if (EtcdCluster::Binary().empty()) return;
    const char* tmp = getenv("TEST_TMPDIR");
    auto started = EtcdCluster::Start(1, tmp != nullptr ? tmp : "/tmp");
    ASSERT_TRUE(started.ok()) << started.status();
    cluster_ = started->release();
    // etcd enables auth only with a root user in the root role.
    auto channel = grpc::CreateChannel(cluster_->Endpoints()[0], grpc::InsecureChannelCredentials());
    auto auth = pb::Auth::NewStub(channel);
    auto call = [](auto fn) {
      grpc::ClientContext ctx;
      ctx.set_deadline(std::chrono::system_clock::now() + std::chrono::seconds(10));
      return fn(&ctx);
    };
    pb::AuthUserAddRequest add;
    add.set_name("root");
    add.set_password(kPassword);
    pb::AuthUserAddResponse add_resp;
    grpc::Status s = call([&](grpc::ClientContext* c) { return auth->UserAdd(c, add, &add_resp); });
    ASSERT_TRUE(s.ok()) << s.error_message();
    pb::AuthUserGrantRoleRequest grant;
    grant.set_user("root");
    grant.set_role("root");
    pb::AuthUserGrantRoleResponse grant_resp;
    s = call([&](grpc::ClientContext* c) { return auth->UserGrantRole(c, grant, &grant_resp); });
    ASSERT_TRUE(s.ok()) << s.error_message();
    pb::AuthEnableRequest enable;
    pb::AuthEnableResponse enable_resp;
    s = call([&](grpc::ClientContext* c) { return auth->AuthEnable(c, enable, &enable_resp); });
    ASSERT_TRUE(s.ok()) << s.error_message();
  }

  static void TearDownTestSuite() {
    delete cluster_;
    cluster_ = nullptr;
  }

  void SetUp() override {
    if (cluster_ == nullptr) GTEST_SKIP() << "etcd is not installed (Debian's etcd-server; tools/bootstrap installs it)";
  }

  static EtcdOptions Options(const std::string& user, const std::string& password) {
    EtcdOptions o;
    o.endpoints = cluster_->Endpoints();
    o.user = user;
    o.password = password;
    return o;
  }

  static EtcdCluster* cluster_;
};

EtcdCluster* EtcdAuthTest::cluster_ = nullptr;

TEST_F(EtcdAuthTest, TheRightCredentialsReadAndWrite) {
  auto kv = NewEtcdKv(Options("root", kPassword));
  ASSERT_TRUE(kv.ok()) << kv.status();
  ASSERT_TRUE((*kv)->Put("/auth-test/k", "v").ok());
  auto got = (*kv)->Get("/auth-test/k");
  ASSERT_TRUE(got.ok()) << got.status();
  ASSERT_EQ(got->kvs.size(), 1u);
  EXPECT_EQ(got->kvs[0].value, "v");
}

TEST_F(EtcdAuthTest, NoCredentialsOrAWrongPasswordAreRefusedWithEtcdsReason) {
  auto anonymous = NewEtcdKv(Options("", ""));
  ASSERT_TRUE(anonymous.ok());
  auto put = (*anonymous)->Put("/auth-test/anon", "v");
  ASSERT_FALSE(put.ok());
  EXPECT_NE(put.status().message().find("etcd Put"), std::string::npos) << put.status();

  auto wrong = NewEtcdKv(Options("root", "not-it"));
  ASSERT_TRUE(wrong.ok());
  auto got = (*wrong)->Get("/auth-test/k");
  ASSERT_FALSE(got.ok());
  EXPECT_NE(got.status().message().find("Authenticate"), std::string::npos) << got.status();
  EXPECT_NE(got.status().message().find("authentication failed"), std::string::npos) << got.status();
}

TEST_F(EtcdAuthTest, ARendezvousClientTakesUserColonPasswordAsItsToken) {
  ClientOptions options;
  options.endpoint = absl::StrCat(kEtcdScheme, cluster_->EndpointList(), "/auth-test");
  options.token = absl::StrCat("root:", kPassword);
  auto client = CreateRendezvousClient(options);
  ASSERT_TRUE(client.ok()) << client.status();
  auto a = (*client)->Join(OneNodeJoin("auth-run"));
  ASSERT_TRUE(a.ok()) << a.status();
  EXPECT_EQ(a->world_size(), 1);

  options.token = "no-colon";
  auto bad = CreateRendezvousClient(options);
  ASSERT_FALSE(bad.ok());
  EXPECT_NE(bad.status().message().find("user:password"), std::string::npos) << bad.status();
}

// A member serving TLS and requiring client certificates (etcd's
// --client-cert-auth), with a certificate made now (its own CA, for
// 127.0.0.1): the CA and a client certificate reach it, on the Kv and on a
// whole rendezvous client; without the client certificate, or in
// plaintext, it is refused.
class EtcdTlsTest : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    if (EtcdCluster::Binary().empty() || std::system("command -v openssl >/dev/null 2>&1") != 0) return;
    const char* tmp = getenv("TEST_TMPDIR");
    dir_ = new std::string(absl::StrCat(tmp != nullptr ? tmp : "/tmp", "/etcd-tls"));
    ASSERT_EQ(std::system(absl::StrCat("mkdir -p '", *dir_, "'").c_str()), 0);
    tls_.cert_file = *dir_ + "/cert.pem";
    tls_.key_file = *dir_ + "/key.pem";
    tls_.ca_file = tls_.cert_file;
    tls_.client_cert_auth = true;
    const std::string make = absl::StrCat(
        "openssl req -x509 -newkey rsa:2048 -nodes -keyout '", tls_.key_file, "' -out '", tls_.cert_file,
        "' -days 2 -subj /CN=127.0.0.1 -addext subjectAltName=IP:127.0.0.1 >/dev/null 2>&1");
    ASSERT_EQ(std::system(make.c_str()), 0) << make;
    auto started = EtcdCluster::Start(1, *dir_, absl::Seconds(30), "127.0.0.1", tls_);
    ASSERT_TRUE(started.ok()) << started.status();
    cluster_ = started->release();
  }
  static void TearDownTestSuite() {
    delete cluster_;
    cluster_ = nullptr;
  }
  void SetUp() override {
    if (cluster_ == nullptr) GTEST_SKIP() << "needs etcd (Debian's etcd-server) and the openssl command";
  }
  static EtcdOptions Options() {
    EtcdOptions o;
    o.endpoints = cluster_->Endpoints();
    o.call_timeout = absl::Seconds(3);
    o.tls_ca_file = tls_.ca_file;
    o.tls_cert_file = tls_.cert_file;
    o.tls_key_file = tls_.key_file;
    return o;
  }
  static EtcdCluster* cluster_;
  static EtcdClusterTls tls_;
  static std::string* dir_;
};

EtcdCluster* EtcdTlsTest::cluster_ = nullptr;
EtcdClusterTls EtcdTlsTest::tls_;
std::string* EtcdTlsTest::dir_ = nullptr;

TEST_F(EtcdTlsTest, TheCaAndAClientCertificateReachTheMember) {
  auto kv = NewEtcdKv(Options());
  ASSERT_TRUE(kv.ok()) << kv.status();
  ASSERT_TRUE((*kv)->Put("/tls-test/k", "v").ok());
  auto got = (*kv)->Get("/tls-test/k");
  ASSERT_TRUE(got.ok()) << got.status();
  ASSERT_EQ(got->kvs.size(), 1u);

  ClientOptions options;
  options.endpoint = absl::StrCat(kEtcdScheme, cluster_->EndpointList(), "/tls-test");
  options.tls_root_cert_file = tls_.ca_file;
  options.tls_cert_file = tls_.cert_file;
  options.tls_key_file = tls_.key_file;
  auto client = CreateRendezvousClient(options);
  ASSERT_TRUE(client.ok()) << client.status();
  auto a = (*client)->Join(OneNodeJoin("tls-run"));
  ASSERT_TRUE(a.ok()) << a.status();
}

TEST_F(EtcdTlsTest, WithoutAClientCertificateOrInPlaintextTheMemberRefuses) {
  EtcdOptions no_cert = Options();
  no_cert.tls_cert_file.clear();
  no_cert.tls_key_file.clear();
  auto kv = NewEtcdKv(no_cert);
  ASSERT_TRUE(kv.ok());
  EXPECT_FALSE((*kv)->Put("/tls-test/anon", "v").ok());
  EtcdOptions plain;
  plain.endpoints = cluster_->Endpoints();
  plain.call_timeout = absl::Seconds(3);
  auto plain_kv = NewEtcdKv(plain);
  ASSERT_TRUE(plain_kv.ok());
  auto put = (*plain_kv)->Put("/tls-test/plain", "v");
  ASSERT_FALSE(put.ok());
  EXPECT_NE(put.status().message().find(cluster_->Endpoints()[0]), std::string::npos) << put.status();
}

TEST(EtcdTlsOptionsTest, UnreadableFilesAndAHalfPairAreNamed) {
  EtcdOptions o;
  o.endpoints = {"127.0.0.1:2379"};
  o.tls_ca_file = "/nonexistent/ca.pem";
  auto kv = NewEtcdKv(o);
  ASSERT_FALSE(kv.ok());
  EXPECT_NE(kv.status().message().find("/nonexistent/ca.pem"), std::string::npos) << kv.status();
  o.tls_ca_file.clear();
  o.tls_cert_file = "/nonexistent/cert.pem";
  kv = NewEtcdKv(o);
  ASSERT_FALSE(kv.ok());
  EXPECT_NE(kv.status().message().find("cert and key"), std::string::npos) << kv.status();
  EtcdOptions p;
  p.endpoints = {"127.0.0.1:2379"};
  p.password = "x";
  kv = NewEtcdKv(p);
  ASSERT_FALSE(kv.ok());
  EXPECT_NE(kv.status().message().find("without a user"), std::string::npos) << kv.status();
}

}  // namespace
}  // namespace cpptorchrun::rdzv::etcd
