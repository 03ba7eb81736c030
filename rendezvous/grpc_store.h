// The gRPC side of the client library: the connection (channel, stub,
// credentials, deadlines, retries) shared by a RendezvousClient and the
// Stores it opens, and the Store over the rendezvous service.
#ifndef CPPTORCHRUN_RENDEZVOUS_GRPC_STORE_H_
#define CPPTORCHRUN_RENDEZVOUS_GRPC_STORE_H_

#include <cstdint>
#include <functional>
#include <memory>
#include <set>
#include <string>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/synchronization/mutex.h"
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

  // Ends every call in flight (and its retries) now, and makes every later
  // call fail at once, with CANCELLED. For shutting down: a thread blocked
  // in a long poll returns and can be joined. Thread-safe.
  void Cancel();
  bool cancelled() const;
  // Waits `d`, or less when the connection is cancelled (then false).
  bool Pause(absl::Duration d);

 private:
  explicit Connection(const ClientOptions& options) : options_(options) {}
  // The calls in flight, so that Cancel reaches them.
  bool Register(grpc::ClientContext* ctx);
  void Unregister(grpc::ClientContext* ctx);

  ClientOptions options_;
  mutable absl::Mutex mu_;
  bool cancelled_ ABSL_GUARDED_BY(mu_) = false;
  std::set<grpc::ClientContext*> in_flight_ ABSL_GUARDED_BY(mu_);
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
