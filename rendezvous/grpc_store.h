// The gRPC side of the client library: the connection (channel, stub,
// credentials, deadlines, retries) shared by a RendezvousClient and the
// Stores it opens, and the Store over the rendezvous service.
#ifndef CPPTORCHRUN_RENDEZVOUS_GRPC_STORE_H_
#define CPPTORCHRUN_RENDEZVOUS_GRPC_STORE_H_

#include <cstdint>
#include <functional>
#include <memory>
#include <string>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/time/time.h"
#include "grpcpp/grpcpp.h"
#include "proto/rendezvous.grpc.pb.h"
#include "rendezvous/client.h"
#include "rendezvous/store.h"

namespace cpptorchrun::rdzv {

// Thread-safe.
class Connection {
 public:
  // InvalidArgument for a bad endpoint; NotFound for an unreadable root cert.
  static absl::StatusOr<std::shared_ptr<Connection>> Open(const ClientOptions& options);

  // Runs `rpc` with a fresh context (token, deadline = call_timeout +
  // `wait`), retrying UNAVAILABLE with exponential backoff and jitter until
  // the retry budget is spent. `what` names the call in errors.
  absl::Status Call(const char* what, absl::Duration wait,
                    const std::function<grpc::Status(grpc::ClientContext*)>& rpc);

  v1::Rendezvous::Stub* stub() { return stub_.get(); }
  const ClientOptions& options() const { return options_; }

 private:
  explicit Connection(const ClientOptions& options) : options_(options) {}
  ClientOptions options_;
  std::string target_;
  std::shared_ptr<grpc::Channel> channel_;
  std::unique_ptr<v1::Rendezvous::Stub> stub_;
};

// The Store of (run_id, round) over `connection`. Waiting reads are issued
// in pieces of at most `piece` (the server bounds each) until the caller's
// timeout passes.
std::unique_ptr<Store> NewGrpcStore(std::shared_ptr<Connection> connection, std::string run_id,
                                    int64_t round, absl::Duration piece = absl::Seconds(20));

}  // namespace cpptorchrun::rdzv

#endif  // CPPTORCHRUN_RENDEZVOUS_GRPC_STORE_H_
