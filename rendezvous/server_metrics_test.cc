// The operators' port of a real loopback server: the token guards metrics
// and the page, RPCs and runs show up in /metrics, and a run id holding
// HTML is label-escaped there and JSON-escaped in the page's data.
#include <cstdlib>
#include <memory>
#include <string>

#include "absl/strings/match.h"
#include "grpcpp/grpcpp.h"
#include "gtest/gtest.h"
#include "httplib.h"
#include "proto/rendezvous.grpc.pb.h"
#include "rendezvous/server.h"

namespace cpptorchrun::rdzv {
namespace {

constexpr char kToken[] = "metrics-token";
constexpr char kEvilRun[] = "run\"<img src=x onerror=alert(1)>\n";

class ServerMetricsTest : public ::testing::Test {
 protected:
  void SetUp() override {
    ServerOptions options;
    options.token = kToken;
    options.metrics_port = 0;
    auto server = RendezvousServer::Start(options);
    ASSERT_TRUE(server.ok()) << server.status();
    server_ = std::move(*server);
    ASSERT_GT(server_->metrics_port(), 0);
    http_ = std::make_unique<httplib::Client>("127.0.0.1", server_->metrics_port());
    stub_ = v1::Rendezvous::NewStub(
        grpc::CreateChannel(server_->endpoint(), grpc::InsecureChannelCredentials()));
  }
  grpc::Status Set(const std::string& run_id, bool with_token) {
    grpc::ClientContext ctx;
    if (with_token) ctx.AddMetadata("authorization", std::string("Bearer ") + kToken);
    v1::SetRequest request;
    request.mutable_scope()->set_run_id(run_id);
    request.set_key("k");
    request.set_value("v");
    v1::SetResponse response;
    return stub_->Set(&ctx, request, &response);
  }
  std::string Get(const std::string& path, int expected_status = 200) {
    auto res = http_->Get(path.c_str(), {{"Authorization", std::string("Bearer ") + kToken}});
    EXPECT_TRUE(res) << path;
    if (!res) return "";
    EXPECT_EQ(res->status, expected_status) << path;
    return res->body;
  }
  std::unique_ptr<RendezvousServer> server_;
  std::unique_ptr<httplib::Client> http_;
  std::unique_ptr<v1::Rendezvous::Stub> stub_;
};

TEST_F(ServerMetricsTest, TokenGuardsMetricsAndPage) {
  for (const char* path : {"/metrics", "/", "/run/x", "/api/runs", "/api/run/x", "/static/page.js"}) {
    auto res = http_->Get(path);
    ASSERT_TRUE(res) << path;
    EXPECT_EQ(res->status, 401) << path;
    EXPECT_EQ(res->body.find("cpptorchrun_rdzv"), std::string::npos);
    res = http_->Get(path, {{"Authorization", "Bearer wrong"}});
    EXPECT_EQ(res->status, 401) << path;
  }
  Get("/no/such/path", 404);
  Get("/api/run/unknown", 404);
}

TEST_F(ServerMetricsTest, RpcsAndRunsAreCountedAndHostileIdsEscaped) {
  ASSERT_TRUE(Set("job-1", true).ok());
  EXPECT_EQ(Set("other", false).error_code(), grpc::StatusCode::UNAUTHENTICATED);
  // The server refuses ids outside [A-Za-z0-9._-]; the refusal is counted.
  EXPECT_EQ(Set(kEvilRun, true).error_code(), grpc::StatusCode::INVALID_ARGUMENT);
  const std::string metrics = Get("/metrics");
  EXPECT_TRUE(absl::StrContains(metrics, "# TYPE cpptorchrun_rdzv_rpcs_total counter\n")) << metrics;
  EXPECT_TRUE(absl::StrContains(metrics, "cpptorchrun_rdzv_rpcs_total{method=\"Set\",code=\"OK\"} 1\n"));
  EXPECT_TRUE(absl::StrContains(metrics,
                                "cpptorchrun_rdzv_rpcs_total{method=\"Set\",code=\"UNAUTHENTICATED\"} 1\n"));
  EXPECT_TRUE(absl::StrContains(metrics,
                                "cpptorchrun_rdzv_rpcs_total{method=\"Set\",code=\"INVALID_ARGUMENT\"} 1\n"));
  EXPECT_TRUE(absl::StrContains(metrics, "cpptorchrun_rdzv_rpc_duration_seconds_count{method=\"Set\"} 3\n"));
  EXPECT_TRUE(absl::StrContains(metrics, "cpptorchrun_rdzv_run_store_keys{run=\"job-1\"} 1\n"));
  EXPECT_TRUE(absl::StrContains(metrics, "cpptorchrun_rdzv_runs 1\n"));
  EXPECT_TRUE(absl::StrContains(Get("/api/runs"), "{\"run_id\":\"job-1\",\"state\":\"forming\""));
  // A run id with HTML in the address: the answer escapes it, and the page
  // itself is static (the id never appears in its HTML).
  auto missing = http_->Get("/api/run/%3Cimg%20src%3Dx%20onerror%3Dalert(1)%3E%22%0A",
                            {{"Authorization", std::string("Bearer ") + kToken}});
  ASSERT_TRUE(missing);
  EXPECT_EQ(missing->status, 404);
  EXPECT_EQ(missing->get_header_value("Content-Type"), "application/json");
  EXPECT_EQ(missing->get_header_value("X-Content-Type-Options"), "nosniff");
  EXPECT_TRUE(absl::StrContains(missing->body, "<img src=x onerror=alert(1)>\\\"\\n")) << missing->body;
  const std::string page = Get("/run/%3Cimg%20src%3Dx%3E");
  EXPECT_FALSE(absl::StrContains(page, "<img"));
  EXPECT_TRUE(absl::StrContains(page, "/static/page.js"));
}

TEST_F(ServerMetricsTest, OversizedRequestsAreRefused) {
  auto res = http_->Post("/metrics", {{"Authorization", std::string("Bearer ") + kToken}},
                         std::string(1 << 20, 'x'), "text/plain");
  ASSERT_TRUE(res);
  EXPECT_EQ(res->status, 413);
  auto long_path = http_->Get(("/api/run/" + std::string(20000, 'a')).c_str());
  ASSERT_TRUE(long_path);
  EXPECT_EQ(long_path->status, 414);
}

// With TLS the operators' port speaks HTTPS with the rendezvous's
// certificate (plain HTTP gets nothing), and the session cookie is Secure.
TEST(ServerMetricsTlsTest, HttpsWithTheServersCertificate) {
  if (std::system("command -v openssl >/dev/null 2>&1") != 0) {
    GTEST_SKIP() << "the openssl command is not installed; cannot make a test certificate";
  }
  const char* tmp = std::getenv("TEST_TMPDIR");
  const std::string dir = tmp != nullptr ? tmp : "/tmp";
  const std::string cert = dir + "/metrics-cert.pem", key = dir + "/metrics-key.pem";
  const std::string make = "openssl req -x509 -newkey rsa:2048 -nodes -keyout " + key + " -out " + cert +
                           " -days 1 -subj /CN=localhost -addext subjectAltName=IP:127.0.0.1"
                           " >/dev/null 2>&1";
  ASSERT_EQ(std::system(make.c_str()), 0) << make;
  ServerOptions options;
  options.token = kToken;
  options.metrics_port = 0;
  options.tls_cert_file = cert;
  options.tls_key_file = key;
  auto server = RendezvousServer::Start(options);
  ASSERT_TRUE(server.ok()) << server.status();
  httplib::SSLClient https("127.0.0.1", (*server)->metrics_port());
  https.set_ca_cert_path(cert.c_str());
  https.enable_server_certificate_verification(true);
  auto res = https.Get("/metrics", {{"Authorization", std::string("Bearer ") + kToken}});
  ASSERT_TRUE(res) << httplib::to_string(res.error());
  EXPECT_EQ(res->status, 200);
  EXPECT_TRUE(absl::StrContains(res->body, "cpptorchrun_rdzv_runs 0\n"));
  auto login = https.Get((std::string("/login?token=") + kToken).c_str());
  ASSERT_TRUE(login);
  EXPECT_TRUE(absl::StrContains(login->get_header_value("Set-Cookie"), "; Secure"));
  httplib::Client plain("127.0.0.1", (*server)->metrics_port());
  plain.set_read_timeout(2, 0);
  auto refused = plain.Get("/metrics", {{"Authorization", std::string("Bearer ") + kToken}});
  EXPECT_TRUE(!refused || refused->status != 200);
}

TEST(ServerMetricsOffTest, NoPortUnlessAsked) {
  auto server = RendezvousServer::Start(ServerOptions());
  ASSERT_TRUE(server.ok());
  EXPECT_EQ((*server)->metrics_port(), -1);
}

}  // namespace
}  // namespace cpptorchrun::rdzv
