// RendezvousServer: gRPC server setup around the service (see server.h).
#include "rendezvous/server.h"

#include <algorithm>
#include <chrono>
#include <functional>
#include <memory>
#include <fstream>
#include <sstream>
#include <string>
#include <utility>

#include "absl/status/status.h"
#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "base/files.h"
#include "grpcpp/resource_quota.h"
#include "grpcpp/support/server_interceptor.h"
#include "base/json.h"
#include "rendezvous/job_page.h"
#include "grpcpp/server_posix.h"
#include "rendezvous/endpoint.h"

namespace cpptorchrun::rdzv {
namespace {

absl::StatusOr<std::string> ReadFile(const std::string& path, const char* what) {
  return base::ReadWholeFile(path, absl::StrCat(what, " file"));
}

absl::Status CheckAddress(const ServerOptions& options) {
  if (options.host.empty()) return absl::InvalidArgumentError("server host is empty");
  if (options.port < 0 || options.port > 65535) {
    return absl::InvalidArgumentError(
        absl::StrCat("server port ", options.port, " is out of range 0..65535"));
  }
  return absl::OkStatus();
}

// TLS from the options' PEM files when they name any, else plaintext.
absl::StatusOr<std::shared_ptr<grpc::ServerCredentials>> Credentials(const ServerOptions& options) {
  if (options.tls_cert_file.empty() && options.tls_key_file.empty()) {
    return grpc::InsecureServerCredentials();
  }
  if (options.tls_cert_file.empty() || options.tls_key_file.empty()) {
    return absl::InvalidArgumentError("TLS needs both a certificate and a key file");
  }
  absl::StatusOr<std::string> cert = ReadFile(options.tls_cert_file, "TLS certificate");
  if (!cert.ok()) return cert.status();
  absl::StatusOr<std::string> key = ReadFile(options.tls_key_file, "TLS key");
  if (!key.ok()) return key.status();
  grpc::SslServerCredentialsOptions ssl;
  ssl.pem_key_cert_pairs.push_back({*key, *cert});
  return grpc::SslServerCredentials(ssl);
}

// Counts each RPC as it is answered: method, status code, and the time
// from its arrival (the interceptor's creation) to its status being sent.
class RpcInterceptor final : public grpc::experimental::Interceptor {
 public:
  RpcInterceptor(grpc::experimental::ServerRpcInfo* info, RpcMetrics* metrics)
      : method_(info->method()), metrics_(metrics), start_(std::chrono::steady_clock::now()) {}
  void Intercept(grpc::experimental::InterceptorBatchMethods* methods) override {
    if (methods->QueryInterceptionHookPoint(
            grpc::experimental::InterceptionHookPoints::PRE_SEND_STATUS)) {
      const std::chrono::duration<double> elapsed = std::chrono::steady_clock::now() - start_;
      metrics_->Record(method_ == nullptr ? "" : method_, methods->GetSendStatus().error_code(),
                       elapsed.count());
    }
    methods->Proceed();
  }

 private:
  const char* method_;
  RpcMetrics* metrics_;
  std::chrono::steady_clock::time_point start_;
};

class RpcInterceptorFactory final : public grpc::experimental::ServerInterceptorFactoryInterface {
 public:
  explicit RpcInterceptorFactory(RpcMetrics* metrics) : metrics_(metrics) {}
  grpc::experimental::Interceptor* CreateServerInterceptor(
      grpc::experimental::ServerRpcInfo* info) override {
    return new RpcInterceptor(info, metrics_);
  }

 private:
  RpcMetrics* metrics_;
};

base::HttpResponse Body(std::string content_type, std::string body, int status = 200) {
  base::HttpResponse r;
  r.status = status;
  r.content_type = std::move(content_type);
  r.body = std::move(body);
  if (absl::StartsWith(r.content_type, "text/html")) {
    r.headers.emplace_back("Content-Security-Policy", "default-src 'self'; frame-ancestors 'none'");
  }
  return r;
}

ServiceOptions ServiceOptionsFor(const ServerOptions& options,
                                 std::function<std::string(const std::string&)> peer_address) {
  ServiceOptions service_options;
  service_options.clock = options.clock;
  service_options.limits = options.limits;
  service_options.token = options.token;
  service_options.signing_key = options.signing_key;
  service_options.peer_address = std::move(peer_address);
  service_options.tick = options.tick;
  service_options.idle_run_timeout = options.idle_run_timeout;
  return service_options;
}

// The connection limits as gRPC channel arguments and a memory quota.
void ApplyConnectionLimits(const Limits& l, grpc::ServerBuilder* builder) {
  // gRPC sets SO_REUSEPORT by default: a second server on the same port
  // would then split the clients between two separate states.
  builder->AddChannelArgument(GRPC_ARG_ALLOW_REUSEPORT, 0);
  builder->SetMaxReceiveMessageSize(l.max_message_bytes);
  builder->SetMaxSendMessageSize(l.max_message_bytes);
  auto ms = [](absl::Duration d) { return static_cast<int>(absl::ToInt64Milliseconds(d)); };
  builder->AddChannelArgument(GRPC_ARG_MAX_CONCURRENT_STREAMS, l.max_concurrent_streams);
  builder->AddChannelArgument(GRPC_ARG_MAX_CONNECTION_IDLE_MS, ms(l.max_connection_idle));
  builder->AddChannelArgument(GRPC_ARG_KEEPALIVE_TIME_MS, ms(l.keepalive_time));
  builder->AddChannelArgument(GRPC_ARG_KEEPALIVE_TIMEOUT_MS, ms(l.keepalive_timeout));
  builder->AddChannelArgument(GRPC_ARG_KEEPALIVE_PERMIT_WITHOUT_CALLS, 1);
  builder->AddChannelArgument(GRPC_ARG_SERVER_HANDSHAKE_TIMEOUT_MS, ms(l.handshake_timeout));
  // Clients may ping at most every 10 s without data (abusive pings end
  // the connection with a GOAWAY).
  builder->AddChannelArgument(GRPC_ARG_HTTP2_MIN_RECV_PING_INTERVAL_WITHOUT_DATA_MS, 10000);
  // The builder keeps its own reference to the quota.
  grpc::ResourceQuota quota("cpptorchrun-rendezvous");
  quota.Resize(static_cast<size_t>(l.memory_budget_bytes));
  builder->SetResourceQuota(quota);
}

}  // namespace

absl::StatusOr<std::unique_ptr<RendezvousServer>> RendezvousServer::Start(
    const ServerOptions& options) {
  if (absl::Status address_ok = CheckAddress(options); !address_ok.ok()) return address_ok;
  absl::StatusOr<std::shared_ptr<grpc::ServerCredentials>> credentials = Credentials(options);
  if (!credentials.ok()) return credentials.status();

  std::unique_ptr<RendezvousServer> server(new RendezvousServer());
  server->host_ = options.host;
  // Filled in once the acceptor exists (plaintext ports): gRPC names the
  // connections it is handed "fd:N", and the acceptor knows their addresses.
  server->service_ = std::make_unique<RendezvousService>(
      ServiceOptionsFor(options, [server_ptr = server.get()](const std::string& peer) {
        if (Acceptor* acceptor = server_ptr->acceptor_view_.load(); acceptor != nullptr) {
          return acceptor->PeerAddress(peer);
        }
        return std::string();
      }));

  std::string address = FormatEndpoint(Endpoint{options.host, options.port});
  const bool tls = !options.tls_cert_file.empty();
  grpc::ServerBuilder builder;
  // Plaintext: our own accept loop (acceptor.h), which survives running out
  // of descriptors; TLS: gRPC's listener.
  if (tls) builder.AddListeningPort(address, *credentials, &server->port_);
  ApplyConnectionLimits(options.limits, &builder);
  builder.RegisterService(server->service_.get());
  server->metrics_bounds_ = options.metrics_bounds;
  if (options.rpc_metrics || options.metrics_port >= 0) {
    server->rpc_metrics_ = std::make_unique<RpcMetrics>();
    std::vector<std::unique_ptr<grpc::experimental::ServerInterceptorFactoryInterface>> creators;
    creators.push_back(std::make_unique<RpcInterceptorFactory>(server->rpc_metrics_.get()));
    builder.experimental().SetInterceptorCreators(std::move(creators));
  }
  server->server_ = builder.BuildAndStart();
  if (server->server_ == nullptr || (tls && server->port_ == 0)) {
    return absl::UnavailableError(absl::StrCat("cannot listen on ", address,
                                               " (address in use or not local?)"));
  }
  if (!tls) {
    if (absl::Status accepting = server->StartAcceptor(options); !accepting.ok()) {
      return absl::UnavailableError(absl::StrCat("cannot listen on ", address, ": ", accepting.message()));
    }
  }
  server->service_->StartTimer();
  if (options.metrics_port >= 0) {
    base::HttpServerOptions http;
    http.host = options.metrics_host.empty() ? options.host : options.metrics_host;
    http.port = options.metrics_port;
    http.token = options.token;
    http.tls_cert_file = options.tls_cert_file;
    http.tls_key_file = options.tls_key_file;
    absl::StatusOr<std::unique_ptr<base::HttpServer>> started =
        base::HttpServer::Start(http, server->OperatorRoutes(nullptr));
    if (!started.ok()) return started.status();
    server->http_ = std::move(*started);
  }
  return server;
}

void RendezvousServer::AppendMetrics(base::prom::Exposition* out) {
  const ServiceSnapshot snapshot = service_->MetricsSnapshot(metrics_bounds_);
  AppendServiceMetrics(snapshot, out);
  if (rpc_metrics_ != nullptr) rpc_metrics_->AppendTo(out);
}

std::vector<std::pair<std::string, base::HttpHandler>> RendezvousServer::OperatorRoutes(
    std::function<void(base::prom::Exposition*)> more) {
  std::vector<std::pair<std::string, base::HttpHandler>> routes;
  routes.emplace_back("/metrics", [this, more](const base::HttpRequest&) {
    base::prom::Exposition exposition;
    AppendMetrics(&exposition);
    if (more) more(&exposition);
    return Body("text/plain; version=0.0.4; charset=utf-8", exposition.Text());
  });
  routes.emplace_back("/", [](const base::HttpRequest&) {
    return Body("text/html; charset=utf-8", std::string(RunListHtml()));
  });
  routes.emplace_back("/run/*", [](const base::HttpRequest&) {
    return Body("text/html; charset=utf-8", std::string(RunPageHtml()));
  });
  routes.emplace_back("/static/page.js", [](const base::HttpRequest&) {
    return Body("text/javascript; charset=utf-8", std::string(PageScript()));
  });
  routes.emplace_back("/static/page.css", [](const base::HttpRequest&) {
    return Body("text/css; charset=utf-8", std::string(PageStyle()));
  });
  routes.emplace_back("/api/runs", [this](const base::HttpRequest&) {
    MetricsBounds list = metrics_bounds_;
    list.max_ranks = 0;
    return Body("application/json", RunListJson(service_->MetricsSnapshot(list)));
  });
  routes.emplace_back("/api/run/*", [this](const base::HttpRequest& request) {
    const std::string run_id = request.path.substr(std::string("/api/run/").size());
    v1::RunStatusResponse status;
    ProgressHistory history;
    absl::Status found = service_->RunStatusOf(run_id, &status, &history,
                                               static_cast<size_t>(std::max(metrics_bounds_.max_ranks, 0)));
    if (!found.ok()) {
      return Body("application/json", absl::StrCat("{\"error\":", base::JsonString(found.message()), "}"), 404);
    }
    return Body("application/json", RunStatusJson(status, history));
  });
  return routes;
}

absl::Status RendezvousServer::StartAcceptor(const ServerOptions& options) {
  grpc::Server* grpc_server = server_.get();
  absl::StatusOr<std::unique_ptr<Acceptor>> acceptor = Acceptor::Start(
      options.host, options.port, [grpc_server](int fd) { grpc::AddInsecureChannelFromFd(grpc_server, fd); });
  if (!acceptor.ok()) {
    server_->Shutdown();
    server_->Wait();
    server_.reset();
    return acceptor.status();
  }
  acceptor_ = std::move(*acceptor);
  acceptor_view_.store(acceptor_.get());
  port_ = acceptor_->port();
  return absl::OkStatus();
}

RendezvousServer::~RendezvousServer() { Shutdown(); }

std::string RendezvousServer::endpoint() const {
  std::string host = host_;
  if (host == "0.0.0.0") host = "127.0.0.1";
  if (host == "::") host = "::1";
  return FormatEndpoint(Endpoint{host, port_});
}

void RendezvousServer::Shutdown() {
  {
    absl::MutexLock lock(&mu_);
    if (shut_down_) return;
    shut_down_ = true;
  }
  if (http_ != nullptr) http_->Shutdown();
  if (acceptor_ != nullptr) acceptor_->Stop();  // no new connections
  if (service_ != nullptr) service_->Shutdown();
  if (server_ != nullptr) {  // null when Start failed to listen
    server_->Shutdown(std::chrono::system_clock::now() + std::chrono::seconds(2));
    server_->Wait();
  }
}

}  // namespace cpptorchrun::rdzv
