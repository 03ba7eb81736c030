// RendezvousServer: the rendezvous service listening on a gRPC port, as the
// launcher embeds it (--rdzv_backend=c10d-style "host the store here") and
// as rendezvous_server runs it.
#ifndef CPPTORCHRUN_RENDEZVOUS_SERVER_H_
#define CPPTORCHRUN_RENDEZVOUS_SERVER_H_

#include <atomic>
#include <memory>
#include <optional>
#include <functional>
#include <string>
#include <utility>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/time/time.h"
#include "grpcpp/grpcpp.h"
#include "base/http_server.h"
#include "base/prometheus.h"
#include "rendezvous/acceptor.h"
#include "rendezvous/metrics.h"
#include "base/clock.h"
#include "rendezvous/limits.h"
#include "rendezvous/service.h"
#include "rendezvous/signing.h"

namespace cpptorchrun::rdzv {

struct ServerOptions {
  // Address to listen on: a host name or IP literal (IPv6 without brackets).
  std::string host = "127.0.0.1";
  // 0: a free port the kernel picks (see port()).
  int port = 0;
  // Shared secret required as "authorization: Bearer <token>"; empty: none.
  std::string token;
  // Signs assignments (signing.h); unset: from the token, else random.
  std::optional<SigningKey> signing_key;
  // TLS when both are given (PEM files); else plaintext.
  std::string tls_cert_file, tls_key_file;
  Limits limits;
  // Not owned; must outlive the server.
  base::Clock* clock = base::RealClock();
  // How often deadlines are re-applied.
  absl::Duration tick = absl::Milliseconds(20);
  // Runs untouched (and holding no call) this long are forgotten.
  absl::Duration idle_run_timeout = absl::Hours(1);
  // Count every RPC (by method, code, latency) for metrics: a gRPC
  // interceptor, off unless metrics are wanted (by metrics_port, or by a
  // launcher that serves this server's metrics on its own port).
  bool rpc_metrics = false;
  // The operators' HTTP port (Prometheus /metrics and the job page), on
  // `metrics_host` (empty: `host`), with the same token and TLS files; -1:
  // none, 0: one the kernel picks (see metrics_port()).
  int metrics_port = -1;
  std::string metrics_host;
  MetricsBounds metrics_bounds;
};

class RendezvousServer {
 public:
  // Listens and serves until Shutdown. Errors: InvalidArgument for a bad
  // host/port, NotFound/PermissionDenied naming an unreadable TLS file,
  // Unavailable when the address cannot be bound.
  static absl::StatusOr<std::unique_ptr<RendezvousServer>> Start(const ServerOptions& options);

  // Shuts down.
  ~RendezvousServer();

  int port() const { return port_; }
  // "host:port" ("[v6]:port"), as clients should dial it.
  std::string endpoint() const;
  // Answers held calls UNAVAILABLE, stops listening, waits (bounded) for
  // calls in flight. Idempotent; thread-safe.
  void Shutdown();
  // The service itself (tests drive Tick() under a fake clock).
  RendezvousService* service() { return service_.get(); }

  // The operators' port (-1: none).
  int metrics_port() const { return http_ == nullptr ? -1 : http_->port(); }
  // The server's metrics (the service's snapshot, taken under its lock and
  // rendered here without it; the RPC counters when counted). Thread-safe.
  void AppendMetrics(base::prom::Exposition* out);
  // The operators' HTTP routes: /metrics (this server's, then what `more`
  // adds, when set), the run list (/), a run's page (/run/<id>), their JSON
  // (/api/runs, /api/run/<id>) and the page's files (/static/). For a
  // launcher that serves them on its own port; valid while the server is.
  std::vector<std::pair<std::string, base::HttpHandler>> OperatorRoutes(
      std::function<void(base::prom::Exposition*)> more);

 private:
  RendezvousServer() = default;
  // Plaintext ports: listens with our own accept loop, handing connections
  // to server_ (which it shuts down and drops when it cannot listen).
  absl::Status StartAcceptor(const ServerOptions& options);

  std::string host_;
  int port_ = 0;
  std::unique_ptr<RendezvousService> service_;
  std::unique_ptr<grpc::Server> server_;
  std::unique_ptr<Acceptor> acceptor_;  // plaintext ports
  MetricsBounds metrics_bounds_;
  std::unique_ptr<RpcMetrics> rpc_metrics_;  // when counted
  std::unique_ptr<base::HttpServer> http_;   // the operators' port
  // What gRPC's threads read (the peer_address lambda): set once the
  // acceptor exists, before it can matter to any call's limit.
  std::atomic<Acceptor*> acceptor_view_{nullptr};
  absl::Mutex mu_;
  bool shut_down_ ABSL_GUARDED_BY(mu_) = false;
};

}  // namespace cpptorchrun::rdzv

#endif  // CPPTORCHRUN_RENDEZVOUS_SERVER_H_
