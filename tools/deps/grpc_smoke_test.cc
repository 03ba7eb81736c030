// Smoke test: a callback-API gRPC server and a client with a deadline talk
// over loopback on a port the kernel picks.
#include <chrono>
#include <memory>

#include "grpcpp/grpcpp.h"
#include "gtest/gtest.h"
#include "proto/smoke.grpc.pb.h"

namespace {

class EchoService final : public cpptorchrun::smoke::Echo::CallbackService {
  grpc::ServerUnaryReactor* Echo(grpc::CallbackServerContext* ctx,
                                 const cpptorchrun::smoke::EchoRequest* req,
                                 cpptorchrun::smoke::EchoReply* reply) override {
    reply->set_text("echo: " + req->text());
    auto* reactor = ctx->DefaultReactor();
    reactor->Finish(grpc::Status::OK);
    return reactor;
  }
};

TEST(GrpcSmoke, CallbackServerAnswersOverLoopback) {
  EchoService service;
  int port = 0;
  grpc::ServerBuilder builder;
  builder.AddListeningPort("127.0.0.1:0", grpc::InsecureServerCredentials(), &port);
  builder.RegisterService(&service);
  std::unique_ptr<grpc::Server> server = builder.BuildAndStart();
  ASSERT_NE(server, nullptr);
  ASSERT_GT(port, 0);

  auto channel = grpc::CreateChannel("127.0.0.1:" + std::to_string(port),
                                     grpc::InsecureChannelCredentials());
  auto stub = cpptorchrun::smoke::Echo::NewStub(channel);
  grpc::ClientContext ctx;
  ctx.set_deadline(std::chrono::system_clock::now() + std::chrono::seconds(10));
  cpptorchrun::smoke::EchoRequest req;
  req.set_text("hello");
  cpptorchrun::smoke::EchoReply reply;
  grpc::Status status = stub->Echo(&ctx, req, &reply);
  ASSERT_TRUE(status.ok()) << status.error_message();
  EXPECT_EQ(reply.text(), "echo: hello");
  server->Shutdown();
}

}  // namespace
