// Links Debian's cpp-httplib and serves one request on loopback.
#include <thread>

#include "gtest/gtest.h"
#include "httplib.h"

TEST(HttplibSmokeTest, ServesOneRequest) {
  httplib::Server server;
  server.Get("/", [](const httplib::Request&, httplib::Response& res) { res.set_content("hi", "text/plain"); });
  const int port = server.bind_to_any_port("127.0.0.1");
  ASSERT_GT(port, 0);
  std::thread listener([&] { server.listen_after_bind(); });
  httplib::Client client("127.0.0.1", port);
  auto res = client.Get("/");
  server.stop();
  listener.join();
  ASSERT_TRUE(res);
  EXPECT_EQ(res->body, "hi");
}
