// The gRPC client's cancellation: a thread blocked in a long poll (Join of
// a round that cannot complete yet, a store read, a retry against a server
// that is not there) returns CANCELLED when the client is cancelled, so it
// can be joined; later calls fail at once.
#include <memory>
#include <thread>

#include "absl/strings/str_cat.h"
#include "absl/synchronization/notification.h"
#include "gtest/gtest.h"
#include "rendezvous/client.h"
#include "rendezvous/server.h"

namespace cpptorchrun::rdzv {
namespace {

class ClientCancelTest : public ::testing::Test {
 protected:
  void SetUp() override {
    auto server = RendezvousServer::Start(ServerOptions());
    ASSERT_TRUE(server.ok()) << server.status();
    server_ = std::move(*server);
    endpoint_ = absl::StrCat("127.0.0.1:", server_->port());
  }

  std::unique_ptr<RendezvousClient> Client(const std::string& endpoint) {
    ClientOptions options;
    options.endpoint = endpoint;
    return NewGrpcRendezvousClient(options);
  }

  // A Join that waits for a second node that never comes.
  static v1::JoinRequest LonelyJoin() {
    v1::JoinRequest req;
    req.set_run_id("cancel");
    req.mutable_node()->set_node_id("n0");
    req.mutable_node()->set_host("127.0.0.1");
    req.mutable_node()->set_local_world_size(1);
    req.mutable_node()->set_free_port(1234);
    req.mutable_options()->set_min_nodes(2);
    req.mutable_options()->set_max_nodes(2);
    req.mutable_options()->set_join_timeout_s(600);
    return req;
  }

  std::unique_ptr<RendezvousServer> server_;
  std::string endpoint_;
};

TEST_F(ClientCancelTest, ABlockedJoinReturnsCancelledAndLaterCallsFailAtOnce) {
  auto client = Client(endpoint_);
  absl::StatusOr<v1::Assignment> joined = absl::UnknownError("not returned");
  absl::Notification returned;
  std::thread joiner([&] {
    joined = client->Join(LonelyJoin());
    returned.Notify();
  });
  // Wait (bounded) until the server holds the node in the run.
  auto observer = Client(endpoint_);
  bool waiting = false;
  for (int i = 0; i < 2000 && !waiting; ++i) {
    auto st = observer->RunStatus("cancel");
    waiting = st.ok() && st->waiting_size() == 1;
    if (!waiting) returned.WaitForNotificationWithTimeout(absl::Milliseconds(5));
  }
  ASSERT_TRUE(waiting) << "the Join never reached the server";
  EXPECT_FALSE(returned.HasBeenNotified()) << "the round cannot complete with one node";
  client->Cancel();
  joiner.join();
  EXPECT_EQ(joined.status().code(), absl::StatusCode::kCancelled) << joined.status();
  EXPECT_EQ(client->RunStatus("cancel").status().code(), absl::StatusCode::kCancelled);
  EXPECT_EQ(client->OpenStore("cancel", 1)->Set("k", "v").code(), absl::StatusCode::kCancelled);
  EXPECT_TRUE(observer->RunStatus("cancel").ok()) << "another client is not affected";
}

TEST_F(ClientCancelTest, RetriesAgainstAnAbsentServerEndWhenCancelled) {
  // A port nobody listens on: every attempt is UNAVAILABLE and retried with
  // backoff for the retry budget (60 s).
  const int port = server_->port();
  server_.reset();
  auto client = Client(absl::StrCat("127.0.0.1:", port));
  absl::Status status = absl::UnknownError("not returned");
  std::thread caller([&] { status = client->Leave("cancel", "n0", "test"); });
  client->Cancel();
  caller.join();
  EXPECT_EQ(status.code(), absl::StatusCode::kCancelled) << status;
}

}  // namespace
}  // namespace cpptorchrun::rdzv
