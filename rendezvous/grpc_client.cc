// The gRPC RendezvousClient and Store (client.h, grpc_store.h): deadlines on
// every call, UNAVAILABLE retried with backoff and jitter, long polls
// re-issued until the caller's own deadline.
#include <algorithm>
#include <chrono>
#include <fstream>
#include <memory>
#include <sstream>
#include <string>
#include <thread>
#include <utility>
#include <vector>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/clock.h"
#include "base/jitter.h"
#include "rendezvous/client.h"
#include "rendezvous/endpoint.h"
#include "rendezvous/grpc_store.h"
#include "rendezvous/rules.h"

namespace cpptorchrun::rdzv {
namespace {

absl::Status FromGrpc(const grpc::Status& status) {
  if (status.ok()) return absl::OkStatus();
  return absl::Status(static_cast<absl::StatusCode>(status.error_code()), status.error_message());
}

// Loops that re-issue server-bounded calls stop after this many rounds even
// if their deadline has not passed (a server answering at once, forever).
constexpr int kMaxPolls = 1000000;

std::chrono::system_clock::time_point ToChrono(absl::Time t) {
  return absl::ToChronoTime(t);
}

}  // namespace

absl::StatusOr<std::shared_ptr<Connection>> Connection::Open(const ClientOptions& options) {
  absl::StatusOr<Endpoint> endpoint = ParseEndpoint(options.endpoint);
  if (!endpoint.ok()) return endpoint.status();
  std::shared_ptr<grpc::ChannelCredentials> credentials;
  if (!options.tls_root_cert_file.empty()) {
    std::ifstream in(options.tls_root_cert_file, std::ios::binary);
    if (!in) {
      return absl::NotFoundError(absl::StrCat("cannot read the TLS root certificate file '",
                                              options.tls_root_cert_file, "'"));
    }
    std::ostringstream pem;
    pem << in.rdbuf();
    grpc::SslCredentialsOptions ssl;
    ssl.pem_root_certs = pem.str();
    credentials = grpc::SslCredentials(ssl);
  } else {
    credentials = grpc::InsecureChannelCredentials();
  }
  std::shared_ptr<Connection> connection(new Connection(options));
  connection->target_ = FormatEndpoint(*endpoint);
  grpc::ChannelArguments args;
  // Reconnect quickly after a server restart.
  args.SetInt(GRPC_ARG_INITIAL_RECONNECT_BACKOFF_MS, 100);
  args.SetInt(GRPC_ARG_MIN_RECONNECT_BACKOFF_MS, 100);
  args.SetInt(GRPC_ARG_MAX_RECONNECT_BACKOFF_MS, 1000);
  args.SetMaxReceiveMessageSize(64 << 20);
  connection->channel_ = grpc::CreateCustomChannel(connection->target_, credentials, args);
  connection->stub_ = v1::Rendezvous::NewStub(connection->channel_);
  return connection;
}

void Connection::Cancel() {
  absl::MutexLock lock(&mu_);
  cancelled_ = true;
  for (grpc::ClientContext* ctx : in_flight_) ctx->TryCancel();
}

bool Connection::cancelled() const {
  absl::MutexLock lock(&mu_);
  return cancelled_;
}

bool Connection::Pause(absl::Duration d) {
  absl::MutexLock lock(&mu_);
  mu_.AwaitWithTimeout(absl::Condition(&cancelled_), d);
  return !cancelled_;
}

bool Connection::Register(grpc::ClientContext* ctx) {
  absl::MutexLock lock(&mu_);
  if (cancelled_) return false;
  in_flight_.insert(ctx);
  return true;
}

void Connection::Unregister(grpc::ClientContext* ctx) {
  absl::MutexLock lock(&mu_);
  in_flight_.erase(ctx);
}

absl::Status Connection::Call(const char* what, absl::Duration wait,
                              const std::function<grpc::Status(grpc::ClientContext*)>& rpc) {
  const absl::Time give_up = absl::Now() + options_.retry_budget;
  absl::Duration backoff = options_.backoff_initial;
  for (int attempt = 1;; ++attempt) {
    grpc::ClientContext ctx;
    ctx.set_deadline(ToChrono(absl::Now() + options_.call_timeout + wait));
    if (!options_.token.empty()) ctx.AddMetadata("authorization", "Bearer " + options_.token);
    if (!Register(&ctx)) return absl::CancelledError(absl::StrCat(what, ": the client is shutting down"));
    grpc::Status status = rpc(&ctx);
    Unregister(&ctx);
    if (status.error_code() != grpc::StatusCode::UNAVAILABLE) return FromGrpc(status);
    absl::Duration sleep = backoff * base::Jitter();
    if (absl::Now() + sleep >= give_up) {
      return absl::UnavailableError(absl::StrCat(
          what, ": rendezvous service at ", target_, " unavailable after ", attempt,
          " attempts over ", absl::FormatDuration(options_.retry_budget), ": ",
          status.error_message()));
    }
    {
      // The backoff ends early when the connection is cancelled.
      absl::MutexLock lock(&mu_);
      mu_.AwaitWithTimeout(absl::Condition(&cancelled_), sleep);
      if (cancelled_) return absl::CancelledError(absl::StrCat(what, ": the client is shutting down"));
    }
    backoff = std::min(backoff * 2, options_.backoff_max);
  }
}

namespace {

class GrpcStore final : public Store {
 public:
  GrpcStore(std::shared_ptr<Connection> connection, std::string run_id, int64_t round,
            absl::Duration piece)
      : connection_(std::move(connection)), piece_(piece) {
    scope_.set_run_id(std::move(run_id));
    scope_.set_round(round);
  }

  absl::Status Set(const std::string& key, const std::string& value) override {
    v1::SetRequest request;
    *request.mutable_scope() = scope_;
    request.set_key(key);
    request.set_value(value);
    v1::SetResponse response;
    return connection_->Call("Set", absl::ZeroDuration(), [&](grpc::ClientContext* ctx) {
      return connection_->stub()->Set(ctx, request, &response);
    });
  }

  absl::StatusOr<std::string> Get(const std::string& key, absl::Duration timeout) override {
    absl::StatusOr<std::vector<std::string>> values = Read({key}, timeout, true);
    if (!values.ok()) return values.status();
    return std::move((*values)[0]);
  }

  absl::StatusOr<int64_t> Add(const std::string& key, int64_t delta) override {
    v1::AddRequest request;
    *request.mutable_scope() = scope_;
    request.set_key(key);
    request.set_delta(delta);
    v1::AddResponse response;
    absl::Status status = connection_->Call("Add", absl::ZeroDuration(), [&](grpc::ClientContext* ctx) {
      return connection_->stub()->Add(ctx, request, &response);
    });
    if (!status.ok()) return status;
    return response.value();
  }

  absl::StatusOr<std::string> CompareSet(const std::string& key,
                                         const std::optional<std::string>& expected,
                                         const std::string& desired, bool* swapped) override {
    v1::CompareSetRequest request;
    *request.mutable_scope() = scope_;
    request.set_key(key);
    request.set_expect_absent(!expected.has_value());
    if (expected.has_value()) request.set_expected(*expected);
    request.set_desired(desired);
    v1::CompareSetResponse response;
    absl::Status status =
        connection_->Call("CompareSet", absl::ZeroDuration(), [&](grpc::ClientContext* ctx) {
          return connection_->stub()->CompareSet(ctx, request, &response);
        });
    if (!status.ok()) return status;
    if (swapped != nullptr) *swapped = response.swapped();
    return response.value();
  }

  absl::StatusOr<bool> Delete(const std::string& key) override {
    v1::DeleteRequest request;
    *request.mutable_scope() = scope_;
    request.set_key(key);
    v1::DeleteResponse response;
    absl::Status status = connection_->Call("Delete", absl::ZeroDuration(), [&](grpc::ClientContext* ctx) {
      return connection_->stub()->Delete(ctx, request, &response);
    });
    if (!status.ok()) return status;
    return response.deleted();
  }

  absl::StatusOr<std::vector<std::string>> MultiGet(const std::vector<std::string>& keys,
                                                    absl::Duration timeout) override {
    return Read(keys, timeout, false);
  }

  absl::Status MultiSet(
      const std::vector<std::pair<std::string, std::string>>& entries) override {
    v1::MultiSetRequest request;
    *request.mutable_scope() = scope_;
    for (const auto& [key, value] : entries) {
      v1::KeyValue* kv = request.add_entries();
      kv->set_key(key);
      kv->set_value(value);
    }
    v1::MultiSetResponse response;
    return connection_->Call("MultiSet", absl::ZeroDuration(), [&](grpc::ClientContext* ctx) {
      return connection_->stub()->MultiSet(ctx, request, &response);
    });
  }

 private:
  // Get / MultiGet in server-bounded pieces until `timeout` passes.
  absl::StatusOr<std::vector<std::string>> Read(const std::vector<std::string>& keys,
                                                absl::Duration timeout, bool single) {
    const absl::Time deadline = absl::Now() + std::max(timeout, absl::ZeroDuration());
    absl::Status status;
    for (int poll = 0; poll < kMaxPolls; ++poll) {
      absl::Duration left = std::max(deadline - absl::Now(), absl::ZeroDuration());
      absl::Duration piece = std::min(left, piece_);
      int32_t piece_ms = static_cast<int32_t>(absl::ToInt64Milliseconds(piece));
      if (piece > absl::ZeroDuration() && piece_ms == 0) piece_ms = 1;
      std::vector<std::string> values;
      if (single) {
        v1::GetRequest request;
        *request.mutable_scope() = scope_;
        request.set_key(keys[0]);
        request.set_timeout_ms(piece_ms);
        v1::GetResponse response;
        status = connection_->Call("Get", piece, [&](grpc::ClientContext* ctx) {
          return connection_->stub()->Get(ctx, request, &response);
        });
        if (status.ok()) values.push_back(std::move(*response.mutable_value()));
      } else {
        v1::MultiGetRequest request;
        *request.mutable_scope() = scope_;
        for (const std::string& key : keys) request.add_keys(key);
        request.set_timeout_ms(piece_ms);
        v1::MultiGetResponse response;
        status = connection_->Call("MultiGet", piece, [&](grpc::ClientContext* ctx) {
          return connection_->stub()->MultiGet(ctx, request, &response);
        });
        if (status.ok()) values.assign(response.values().begin(), response.values().end());
      }
      if (status.ok()) return values;
      if (status.code() != absl::StatusCode::kDeadlineExceeded || absl::Now() >= deadline) {
        return status;
      }
    }
    return status;
  }

  std::shared_ptr<Connection> connection_;
  v1::Scope scope_;
  const absl::Duration piece_;
};

class GrpcRendezvousClient final : public RendezvousClient {
 public:
  explicit GrpcRendezvousClient(absl::StatusOr<std::shared_ptr<Connection>> connection)
      : connection_(std::move(connection)) {}

  void Cancel() override {
    if (connection_.ok()) (*connection_)->Cancel();
  }

  using RendezvousClient::Join;
  absl::StatusOr<v1::Assignment> Join(const v1::JoinRequest& request, const JoinHooks& hooks) override {
    if (!connection_.ok()) return connection_.status();
    Connection& c = **connection_;
    double join_s = request.options().join_timeout_s();
    absl::Duration join_timeout = join_s > 0 ? absl::Seconds(join_s) : kDefaultJoinTimeout;
    // The server enforces join_timeout; the client's own bound is a backstop.
    absl::Time give_up = absl::Now() + join_timeout + c.options().call_timeout;
    for (int poll = 0; poll < kMaxPolls; ++poll) {
      v1::JoinResponse response;
      absl::Status status =
          c.Call("Join", absl::Seconds(30), [&](grpc::ClientContext* ctx) {
            return c.stub()->Join(ctx, request, &response);
          });
      if (!status.ok()) return status;
      switch (response.outcome()) {
        case v1::JoinResponse::COMPLETE:
          return response.assignment();
        case v1::JoinResponse::SPARE:
          give_up = std::max(give_up, absl::Now() + c.options().max_spare_wait);
          break;
        case v1::JoinResponse::PENDING:
          break;
        case v1::JoinResponse::QUARANTINED: {
          // Kept out, not waiting in the round: no join_timeout runs.
          if (hooks.on_quarantined) hooks.on_quarantined(response.detail());
          const absl::Duration retry = std::clamp(absl::Milliseconds(response.retry_after_ms()),
                                                  absl::Milliseconds(10), absl::Seconds(60));
          if (!c.Pause(retry)) return absl::CancelledError("Join: the client is shutting down");
          give_up = std::max(give_up, absl::Now() + join_timeout + c.options().call_timeout);
          continue;
        }
        default:
          return absl::InternalError(absl::StrCat("Join: unexpected outcome ",
                                                  response.outcome(), " from the server"));
      }
      if (absl::Now() >= give_up) {
        return absl::DeadlineExceededError(absl::StrCat(
            "Join of run '", request.run_id(), "' did not complete in time: ", response.detail()));
      }
    }
    return absl::DeadlineExceededError(absl::StrCat("Join of run '", request.run_id(),
                                                    "' gave up after ", kMaxPolls, " polls"));
  }

  absl::StatusOr<v1::RunEvent> KeepAlive(const v1::KeepAliveRequest& request) override {
    if (!connection_.ok()) return connection_.status();
    Connection& c = **connection_;
    v1::KeepAliveResponse response;
    absl::Status status = c.Call("KeepAlive", absl::ZeroDuration(), [&](grpc::ClientContext* ctx) {
      return c.stub()->KeepAlive(ctx, request, &response);
    });
    if (!status.ok()) return status;
    return response.event();
  }

  absl::StatusOr<v1::RunEvent> Watch(const std::string& run_id, const std::string& node_id,
                                     int64_t round, int64_t version,
                                     absl::Duration timeout) override {
    if (!connection_.ok()) return connection_.status();
    Connection& c = **connection_;
    const absl::Time deadline = absl::Now() + std::max(timeout, absl::ZeroDuration());
    v1::RunEvent last;
    for (int poll = 0; poll < kMaxPolls; ++poll) {
      absl::Duration left = std::max(deadline - absl::Now(), absl::ZeroDuration());
      v1::WatchRequest request;
      request.set_run_id(run_id);
      request.set_node_id(node_id);
      request.set_round(round);
      request.set_version(version);
      request.set_timeout_ms(static_cast<int32_t>(
          std::min<int64_t>(absl::ToInt64Milliseconds(left), 1 << 30)));
      v1::WatchResponse response;
      absl::Status status = c.Call("Watch", left, [&](grpc::ClientContext* ctx) {
        return c.stub()->Watch(ctx, request, &response);
      });
      if (!status.ok()) return status;
      // The server bounds each call; ask again until our own timeout.
      // A different version is a change (or a restarted server); an ended
      // round is news too.
      if (response.event().version() != version || response.event().run_closed() ||
          (round > 0 && !response.event().round_current()) || absl::Now() >= deadline) {
        return response.event();
      }
      last = response.event();
    }
    return last;
  }

  absl::Status Leave(const std::string& run_id, const std::string& node_id, const std::string& reason,
                     const std::string& proof) override {
    if (!connection_.ok()) return connection_.status();
    Connection& c = **connection_;
    v1::LeaveRequest request;
    request.set_run_id(run_id);
    request.set_node_id(node_id);
    request.set_reason(reason);
    request.set_proof(proof);
    v1::LeaveResponse response;
    return c.Call("Leave", absl::ZeroDuration(), [&](grpc::ClientContext* ctx) {
      return c.stub()->Leave(ctx, request, &response);
    });
  }

  absl::Status Close(const std::string& run_id, const std::string& reason, const std::string& node_id,
                     const std::string& proof) override {
    if (!connection_.ok()) return connection_.status();
    Connection& c = **connection_;
    v1::CloseRequest request;
    request.set_run_id(run_id);
    request.set_reason(reason);
    request.set_node_id(node_id);
    request.set_proof(proof);
    v1::CloseResponse response;
    return c.Call("Close", absl::ZeroDuration(), [&](grpc::ClientContext* ctx) {
      return c.stub()->Close(ctx, request, &response);
    });
  }

  absl::StatusOr<v1::RunStatusResponse> RunStatus(const std::string& run_id) override {
    if (!connection_.ok()) return connection_.status();
    Connection& c = **connection_;
    v1::RunStatusRequest request;
    request.set_run_id(run_id);
    v1::RunStatusResponse response;
    absl::Status status = c.Call("RunStatus", absl::ZeroDuration(), [&](grpc::ClientContext* ctx) {
      return c.stub()->RunStatus(ctx, request, &response);
    });
    if (!status.ok()) return status;
    return response;
  }

  std::unique_ptr<Store> OpenStore(const std::string& run_id, int64_t round) override {
    if (!connection_.ok()) return std::make_unique<FailingStore>(connection_.status());
    return NewGrpcStore(*connection_, run_id, round);
  }

 private:
  // The store of a client that could not connect: every call fails so.
  class FailingStore final : public Store {
   public:
    explicit FailingStore(absl::Status status) : status_(std::move(status)) {}
    absl::Status Set(const std::string&, const std::string&) override { return status_; }
    absl::StatusOr<std::string> Get(const std::string&, absl::Duration) override {
      return status_;
    }
    absl::StatusOr<int64_t> Add(const std::string&, int64_t) override { return status_; }
    absl::StatusOr<std::string> CompareSet(const std::string&, const std::optional<std::string>&,
                                           const std::string&, bool*) override {
      return status_;
    }
    absl::StatusOr<bool> Delete(const std::string&) override { return status_; }
    absl::StatusOr<std::vector<std::string>> MultiGet(const std::vector<std::string>&,
                                                      absl::Duration) override {
      return status_;
    }
    absl::Status MultiSet(const std::vector<std::pair<std::string, std::string>>&) override {
      return status_;
    }

   private:
    absl::Status status_;
  };

  absl::StatusOr<std::shared_ptr<Connection>> connection_;
};

}  // namespace

std::unique_ptr<Store> NewGrpcStore(std::shared_ptr<Connection> connection, std::string run_id,
                                    int64_t round, absl::Duration piece) {
  return std::make_unique<GrpcStore>(std::move(connection), std::move(run_id), round, piece);
}

std::unique_ptr<RendezvousClient> NewGrpcRendezvousClient(const ClientOptions& options) {
  return std::make_unique<GrpcRendezvousClient>(Connection::Open(options));
}

absl::StatusOr<std::unique_ptr<RendezvousClient>> CreateGrpcRendezvousClient(
    const ClientOptions& options) {
  absl::StatusOr<std::shared_ptr<Connection>> connection = Connection::Open(options);
  if (!connection.ok()) return connection.status();
  return std::unique_ptr<RendezvousClient>(new GrpcRendezvousClient(std::move(connection)));
}

}  // namespace cpptorchrun::rdzv
