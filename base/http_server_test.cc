#include "base/http_server.h"

#include <string>

#include "gtest/gtest.h"
#include "httplib.h"

namespace cpptorchrun::base {
namespace {

TEST(HttpAuthTest, TokenHeaderOrSessionCookie) {
  EXPECT_TRUE(HttpAuthorized("", "s", "", ""));
  EXPECT_TRUE(HttpAuthorized("t0k", "sess", "Bearer t0k", ""));
  EXPECT_FALSE(HttpAuthorized("t0k", "sess", "Bearer t0", ""));
  EXPECT_FALSE(HttpAuthorized("t0k", "sess", "Bearer t0kk", ""));
  EXPECT_FALSE(HttpAuthorized("t0k", "sess", "t0k", ""));
  EXPECT_FALSE(HttpAuthorized("t0k", "sess", "", ""));
  EXPECT_TRUE(HttpAuthorized("t0k", "sess", "", "a=b; cpptorchrun_session=sess"));
  EXPECT_FALSE(HttpAuthorized("t0k", "sess", "", "cpptorchrun_session=t0k"));
  EXPECT_FALSE(HttpAuthorized("t0k", "sess", "", "cpptorchrun_session="));
  EXPECT_FALSE(HttpAuthorized("t0k", "sess", "", "xcpptorchrun_session=sess"));
}

TEST(HttpAuthTest, CookiesAndRedirects) {
  EXPECT_EQ(CookieValue("a=1; b=2", "b"), "2");
  EXPECT_EQ(CookieValue("ab=1", "a"), "");
  EXPECT_EQ(SafeRedirect("/run/x?y=1"), "/run/x?y=1");
  EXPECT_EQ(SafeRedirect("//evil.example/"), "/");
  EXPECT_EQ(SafeRedirect("https://evil.example/"), "/");
  EXPECT_EQ(SafeRedirect("/\\evil"), "/");
  EXPECT_EQ(SafeRedirect("/a\r\nSet-Cookie: x"), "/");
  EXPECT_EQ(HtmlEscape("<a href=\"x\">&'"), "&lt;a href=&quot;x&quot;&gt;&amp;&#39;");
}

class HttpServerTest : public ::testing::Test {
 protected:
  void SetUp() override {
    HttpServerOptions options;
    options.token = "s3cret";
    options.max_request_bytes = 1024;
    auto server = HttpServer::Start(
        options, {{"/metrics",
                   [](const HttpRequest&) {
                     HttpResponse r;
                     r.body = "m 1\n";
                     return r;
                   }},
                  {"/run/*", [](const HttpRequest& req) {
                     HttpResponse r;
                     r.body = req.path.substr(5);
                     return r;
                   }}});
    ASSERT_TRUE(server.ok()) << server.status();
    server_ = std::move(*server);
    client_ = std::make_unique<httplib::Client>("127.0.0.1", server_->port());
  }
  std::unique_ptr<HttpServer> server_;
  std::unique_ptr<httplib::Client> client_;
};

TEST_F(HttpServerTest, TokenGuardsEveryRoute) {
  auto res = client_->Get("/metrics");
  ASSERT_TRUE(res);
  EXPECT_EQ(res->status, 401);
  res = client_->Get("/metrics", {{"Authorization", "Bearer wrong"}});
  EXPECT_EQ(res->status, 401);
  res = client_->Get("/metrics", {{"Authorization", "Bearer s3cret"}});
  EXPECT_EQ(res->status, 200);
  EXPECT_EQ(res->body, "m 1\n");
  EXPECT_EQ(res->get_header_value("X-Content-Type-Options"), "nosniff");
  // A browser without the token gets the login form, which returns it here.
  res = client_->Get("/run/abc", {{"Accept", "text/html,*/*"}});
  EXPECT_EQ(res->status, 401);
  EXPECT_NE(res->body.find("name=\"next\" value=\"/run/abc\""), std::string::npos) << res->body;
  // Unknown paths are 404 only to those who hold the token.
  EXPECT_EQ(client_->Get("/nope")->status, 401);
  EXPECT_EQ(client_->Get("/nope", {{"Authorization", "Bearer s3cret"}})->status, 404);
  EXPECT_EQ(client_->Get("/run/abc", {{"Authorization", "Bearer s3cret"}})->body, "abc");
}

TEST_F(HttpServerTest, LoginSetsASessionCookieNotTheToken) {
  auto form = client_->Get("/login");
  ASSERT_TRUE(form);
  EXPECT_EQ(form->status, 200);
  EXPECT_NE(form->body.find("<form"), std::string::npos);
  auto wrong = client_->Post("/login", "token=nope&next=/metrics", "application/x-www-form-urlencoded");
  EXPECT_EQ(wrong->status, 401);
  EXPECT_FALSE(wrong->has_header("Set-Cookie"));
  auto ok = client_->Post("/login", "token=s3cret&next=//evil/", "application/x-www-form-urlencoded");
  ASSERT_TRUE(ok);
  EXPECT_EQ(ok->status, 303);
  EXPECT_EQ(ok->get_header_value("Location"), "/");
  const std::string cookie = ok->get_header_value("Set-Cookie");
  EXPECT_EQ(cookie.find("s3cret"), std::string::npos);
  EXPECT_NE(cookie.find("HttpOnly"), std::string::npos);
  const std::string value = cookie.substr(0, cookie.find(';'));
  EXPECT_EQ(client_->Get("/metrics", {{"Cookie", value}})->status, 200);
  EXPECT_EQ(client_->Get("/metrics", {{"Cookie", "cpptorchrun_session=forged"}})->status, 401);
}

TEST_F(HttpServerTest, HostileRequestsAreRefused) {
  httplib::Headers auth = {{"Authorization", "Bearer s3cret"}};
  auto big = client_->Post("/metrics", auth, std::string(4096, 'x'), "text/plain");
  ASSERT_TRUE(big);
  EXPECT_EQ(big->status, 413);
  auto long_uri = client_->Get(("/run/" + std::string(10000, 'a')).c_str(), auth);
  ASSERT_TRUE(long_uri);
  EXPECT_EQ(long_uri->status, 414);
  // A path holding a newline still goes through the token check and the router.
  auto newline = client_->Get("/run/a%0Ab", auth);
  ASSERT_TRUE(newline);
  EXPECT_EQ(newline->body, "a\nb");
  EXPECT_EQ(client_->Get("/x%0Ay")->status, 401);
  auto put = client_->Put("/metrics", auth, "x", "text/plain");
  ASSERT_TRUE(put);
  EXPECT_EQ(put->status, 405);
  EXPECT_EQ(client_->Delete("/metrics")->status, 405);
}

TEST(HttpServerStartTest, BadPortAndBusyPort) {
  HttpServerOptions options;
  options.port = 70000;
  EXPECT_EQ(HttpServer::Start(options, {}).status().code(), absl::StatusCode::kInvalidArgument);
  auto first = HttpServer::Start(HttpServerOptions(), {});
  ASSERT_TRUE(first.ok());
  options.port = (*first)->port();
  EXPECT_EQ(HttpServer::Start(options, {}).status().code(), absl::StatusCode::kUnavailable);
  options.port = 0;
  options.tls_cert_file = "/nonexistent.pem";
  options.tls_key_file = "/nonexistent.key";
  EXPECT_EQ(HttpServer::Start(options, {}).status().code(), absl::StatusCode::kNotFound);
}

}  // namespace
}  // namespace cpptorchrun::base
