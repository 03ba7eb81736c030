// The rendezvous client: how a launcher (agent) talks to the rendezvous
// service, and how a worker opens the round's store.
//
// RendezvousClient is an interface so that the launcher's elastic loop can
// be tested with a fake (launcher/), and the gRPC implementation
// (NewGrpcRendezvousClient) puts a deadline on every call, retries
// UNAVAILABLE with exponential backoff and jitter, and reconnects after a
// server restart. All methods are thread-safe.
#ifndef CPPTORCHRUN_RENDEZVOUS_CLIENT_H_
#define CPPTORCHRUN_RENDEZVOUS_CLIENT_H_

#include <cstdint>
#include <functional>
#include <memory>
#include <string>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/time/time.h"
#include "proto/rendezvous.pb.h"
#include "rendezvous/store.h"

namespace cpptorchrun::rdzv {

struct ClientOptions {
  // host:port, [v6]:port; see rendezvous/endpoint.h for parsing.
  std::string endpoint;
  // Shared secret sent as "authorization: Bearer <token>"; empty: none.
  // With etcd: etcd's credentials, "user:password" (as etcdctl --user).
  std::string token;
  // TLS with gRPC's SSL credentials when a root certificate file is given.
  std::string tls_root_cert_file;
  // etcd only: this client's certificate and key, where the members ask for
  // one (etcd's --client-cert-auth).
  std::string tls_cert_file;
  std::string tls_key_file;
  // Deadline of each single RPC (long polls add their own wait to it).
  absl::Duration call_timeout = absl::Seconds(10);
  // Retry of UNAVAILABLE: exponential backoff from initial to max, with
  // jitter, until `retry_budget` has passed.
  absl::Duration backoff_initial = absl::Milliseconds(50);
  absl::Duration backoff_max = absl::Seconds(2);
  absl::Duration retry_budget = absl::Seconds(60);
  // How long Join keeps waiting as a spare (it has no join_timeout then).
  absl::Duration max_spare_wait = absl::Hours(24);
};

// What a Join tells its caller while it waits (from the Join's thread).
struct JoinHooks {
  // The rendezvous keeps this node's host out for now (rules.h,
  // "Quarantine"), with the server's detail; called on each answer that
  // says so. The Join keeps asking until it is admitted.
  std::function<void(const std::string& detail)> on_quarantined;
};

class RendezvousClient {
 public:
  virtual ~RendezvousClient() = default;

  // Joins the run and waits (re-issuing the server's bounded long polls)
  // until the round completes or the run's join_timeout passes. A spare
  // keeps waiting until it is admitted, and so does a node kept out
  // (quarantined) until its cool-down ends. Errors: the server's status.
  virtual absl::StatusOr<v1::Assignment> Join(const v1::JoinRequest& request, const JoinHooks& hooks) = 0;
  absl::StatusOr<v1::Assignment> Join(const v1::JoinRequest& request) { return Join(request, JoinHooks()); }

  virtual absl::StatusOr<v1::RunEvent> KeepAlive(const v1::KeepAliveRequest& request) = 0;

  // Returns when the run's version differs from `version` (a change, or a
  // restarted server), when `round` (> 0) is no longer current, or after
  // `timeout`.
  virtual absl::StatusOr<v1::RunEvent> Watch(const std::string& run_id,
                                             const std::string& node_id, int64_t round,
                                             int64_t version, absl::Duration timeout) = 0;

  // `proof`: the signature of the node's current assignment (empty when it
  // has none); the service ends a standing round only for a participant
  // that sends its own.
  virtual absl::Status Leave(const std::string& run_id, const std::string& node_id,
                             const std::string& reason, const std::string& proof = "") = 0;
  // `node_id`, `proof`: the closing node and its assignment's signature,
  // needed to close a run whose round stands (service.h).
  virtual absl::Status Close(const std::string& run_id, const std::string& reason,
                             const std::string& node_id = "", const std::string& proof = "") = 0;
  virtual absl::StatusOr<v1::RunStatusResponse> RunStatus(const std::string& run_id) = 0;

  // The store of (run_id, round), over the same connection.
  virtual std::unique_ptr<Store> OpenStore(const std::string& run_id, int64_t round) = 0;

  // For shutting down: every call in flight on this client (and its
  // stores) ends now, and every later one at once, with CANCELLED, so that
  // threads blocked in long polls can be joined. Thread-safe. The default
  // is for clients whose calls never block.
  virtual void Cancel() {}
};

// Never null. A bad endpoint or unreadable root certificate makes every call
// fail with the error naming it; CreateGrpcRendezvousClient reports it at once.
std::unique_ptr<RendezvousClient> NewGrpcRendezvousClient(const ClientOptions& options);
absl::StatusOr<std::unique_ptr<RendezvousClient>> CreateGrpcRendezvousClient(
    const ClientOptions& options);

}  // namespace cpptorchrun::rdzv

#endif  // CPPTORCHRUN_RENDEZVOUS_CLIENT_H_
