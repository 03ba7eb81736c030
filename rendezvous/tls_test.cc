// TLS: a server with a certificate and a token serves a client that trusts
// the certificate, and refuses plaintext clients. The certificate is made
// at test time with the openssl command (skipped, saying so, without it).
#include <cstdlib>
#include <memory>
#include <string>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "absl/time/time.h"
#include "gtest/gtest.h"
#include "rendezvous/client.h"
#include "rendezvous/server.h"

namespace cpptorchrun::rdzv {
namespace {

std::string TempDir() {
  const char* dir = std::getenv("TEST_TMPDIR");
  return dir != nullptr ? dir : "/tmp";
}

TEST(Tls, ServesTrustingClientsAndRefusesPlaintext) {
  if (std::system("command -v openssl >/dev/null 2>&1") != 0) {
    GTEST_SKIP() << "the openssl command is not installed; cannot make a test certificate";
  }
  const std::string dir = TempDir();
  const std::string cert = dir + "/cert.pem", key = dir + "/key.pem";
  const std::string make = absl::StrCat(
      "openssl req -x509 -newkey rsa:2048 -nodes -keyout ", key, " -out ", cert,
      " -days 1 -subj /CN=localhost -addext subjectAltName=IP:127.0.0.1,DNS:localhost"
      " >/dev/null 2>&1");
  ASSERT_EQ(std::system(make.c_str()), 0) << make;

  ServerOptions options;
  options.tls_cert_file = cert;
  options.tls_key_file = key;
  options.token = "tok";
  auto server = RendezvousServer::Start(options);
  ASSERT_TRUE(server.ok()) << server.status();

  ClientOptions trusted;
  trusted.endpoint = (*server)->endpoint();
  trusted.token = "tok";
  trusted.tls_root_cert_file = cert;
  auto store = NewGrpcRendezvousClient(trusted)->OpenStore("run", 1);
  ASSERT_TRUE(store->Set("k", "v").ok());
  EXPECT_EQ(*store->Get("k", absl::ZeroDuration()), "v");

  ClientOptions plaintext = trusted;
  plaintext.tls_root_cert_file.clear();
  plaintext.retry_budget = absl::Milliseconds(300);
  plaintext.call_timeout = absl::Seconds(2);
  absl::Status refused = NewGrpcRendezvousClient(plaintext)->OpenStore("run", 1)->Set("k", "x");
  EXPECT_FALSE(refused.ok());
  EXPECT_EQ(*store->Get("k", absl::ZeroDuration()), "v");
}

TEST(Tls, UnreadableFilesAreNamed) {
  ServerOptions options;
  options.tls_cert_file = "/nonexistent/cert.pem";
  options.tls_key_file = "/nonexistent/key.pem";
  auto server = RendezvousServer::Start(options);
  ASSERT_FALSE(server.ok());
  EXPECT_NE(server.status().message().find("/nonexistent/cert.pem"), std::string::npos);
  options.tls_key_file.clear();
  EXPECT_EQ(RendezvousServer::Start(options).status().code(), absl::StatusCode::kInvalidArgument);

  ClientOptions client;
  client.endpoint = "127.0.0.1:1";
  client.tls_root_cert_file = "/nonexistent/ca.pem";
  auto created = CreateGrpcRendezvousClient(client);
  ASSERT_FALSE(created.ok());
  EXPECT_NE(created.status().message().find("/nonexistent/ca.pem"), std::string::npos);
  client.tls_root_cert_file.clear();
  client.endpoint = "host:notaport";
  EXPECT_EQ(CreateGrpcRendezvousClient(client).status().code(),
            absl::StatusCode::kInvalidArgument);
  // The never-failing factory defers the error to each call.
  auto deferred = NewGrpcRendezvousClient(client);
  EXPECT_EQ(deferred->RunStatus("run").status().code(), absl::StatusCode::kInvalidArgument);
}

}  // namespace
}  // namespace cpptorchrun::rdzv
