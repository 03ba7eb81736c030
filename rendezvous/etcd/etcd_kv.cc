#include "rendezvous/etcd/etcd_kv.h"

#include <grpcpp/grpcpp.h>

#include <algorithm>
#include <atomic>
#include <fstream>
#include <sstream>
#include <set>
#include <utility>

#include "absl/base/thread_annotations.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/strings/str_split.h"
#include "absl/strings/strip.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/clock.h"
#include "etcd/etcdserver/etcdserverpb/rpc.grpc.pb.h"
#include "rendezvous/endpoint.h"

namespace cpptorchrun::rdzv::etcd {
namespace {

namespace pb = ::etcdserverpb;

// The end of the range that holds every key starting with `prefix`: the
// prefix with its last byte that is not 0xff incremented and what follows
// it dropped; "\0" (every key) for a prefix of only 0xff bytes or none.
std::string PrefixEnd(const std::string& prefix) {
  std::string end = prefix;
  while (!end.empty()) {
    unsigned char last = static_cast<unsigned char>(end.back());
    if (last < 0xff) {
      end.back() = static_cast<char>(last + 1);
      return end;
    }
    end.pop_back();
  }
  return std::string(1, '\0');
}

KeyValue FromPb(const ::mvccpb::KeyValue& kv) {
  KeyValue out;
  out.key = kv.key();
  out.value = kv.value();
  out.create_revision = kv.create_revision();
  out.mod_revision = kv.mod_revision();
  out.version = kv.version();
  out.lease = kv.lease();
  return out;
}

RangeResult FromPb(const pb::RangeResponse& r) {
  RangeResult out;
  out.revision = r.header().revision();
  out.kvs.reserve(r.kvs_size());
  for (const auto& kv : r.kvs()) out.kvs.push_back(FromPb(kv));
  return out;
}

void ToPb(const Compare& c, pb::Compare* out) {
  out->set_key(c.key);
  switch (c.result) {
    case Compare::Result::kEqual: out->set_result(pb::Compare::EQUAL); break;
    case Compare::Result::kNotEqual: out->set_result(pb::Compare::NOT_EQUAL); break;
    case Compare::Result::kLess: out->set_result(pb::Compare::LESS); break;
    case Compare::Result::kGreater: out->set_result(pb::Compare::GREATER); break;
  }
  switch (c.target) {
    case Compare::Target::kModRevision:
      out->set_target(pb::Compare::MOD);
      out->set_mod_revision(c.number);
      break;
    case Compare::Target::kCreateRevision:
      out->set_target(pb::Compare::CREATE);
      out->set_create_revision(c.number);
      break;
    case Compare::Target::kVersion:
      out->set_target(pb::Compare::VERSION);
      out->set_version(c.number);
      break;
    case Compare::Target::kValue:
      out->set_target(pb::Compare::VALUE);
      out->set_value(c.value);
      break;
  }
}

void ToPb(const Op& op, pb::RequestOp* out) {
  switch (op.kind) {
    case Op::Kind::kPut: {
      pb::PutRequest* put = out->mutable_request_put();
      put->set_key(op.key);
      put->set_value(op.value);
      put->set_lease(op.lease);
      break;
    }
    case Op::Kind::kDelete:
      out->mutable_request_delete_range()->set_key(op.key);
      break;
    case Op::Kind::kDeletePrefix: {
      pb::DeleteRangeRequest* del = out->mutable_request_delete_range();
      del->set_key(op.key);
      del->set_range_end(PrefixEnd(op.key));
      break;
    }
    case Op::Kind::kGet:
      out->mutable_request_range()->set_key(op.key);
      break;
    case Op::Kind::kGetPrefix: {
      pb::RangeRequest* range = out->mutable_request_range();
      range->set_key(op.key);
      range->set_range_end(PrefixEnd(op.key));
      break;
    }
  }
}

// What a failed attempt means for the call.
enum class Next { kDone, kNextMember };

Next AfterFailure(const grpc::Status& s, bool retry_on_deadline) {
  if (s.error_code() == grpc::StatusCode::UNAVAILABLE) return Next::kNextMember;
  if (s.error_code() == grpc::StatusCode::DEADLINE_EXCEEDED && retry_on_deadline) {
    return Next::kNextMember;
  }
  return Next::kDone;
}

absl::Status FromGrpc(const grpc::Status& s, absl::string_view what, absl::string_view member) {
  return absl::Status(static_cast<absl::StatusCode>(s.error_code()),
                      absl::StrCat("etcd ", what, " (member ", member, "): ", s.error_message()));
}

// etcd's gRPC metadata key for an auth token.
constexpr char kTokenMetadata[] = "token";

absl::StatusOr<std::string> ReadPem(const std::string& path, absl::string_view what) {
  std::ifstream in(path, std::ios::binary);
  if (!in) return absl::NotFoundError(absl::StrCat("etcd ", what, " '", path, "': cannot be read"));
  std::ostringstream pem;
  pem << in.rdbuf();
  return pem.str();
}

absl::StatusOr<std::shared_ptr<grpc::ChannelCredentials>> Credentials(const EtcdOptions& o) {
  if (o.tls_ca_file.empty() && o.tls_cert_file.empty() && o.tls_key_file.empty()) {
    return grpc::InsecureChannelCredentials();
  }
  if (o.tls_cert_file.empty() != o.tls_key_file.empty()) {
    return absl::InvalidArgumentError("etcd TLS: a client certificate and its key go together (cert and key)");
  }
  grpc::SslCredentialsOptions ssl;
  if (!o.tls_ca_file.empty()) {
    absl::StatusOr<std::string> ca = ReadPem(o.tls_ca_file, "CA certificate");
    if (!ca.ok()) return ca.status();
    ssl.pem_root_certs = *ca;
  }
  if (!o.tls_cert_file.empty()) {
    absl::StatusOr<std::string> cert = ReadPem(o.tls_cert_file, "client certificate");
    if (!cert.ok()) return cert.status();
    absl::StatusOr<std::string> key = ReadPem(o.tls_key_file, "client key");
    if (!key.ok()) return key.status();
    ssl.pem_cert_chain = *cert;
    ssl.pem_private_key = *key;
  }
  return grpc::SslCredentials(ssl);
}

class EtcdKv final : public Kv {
 public:
  EtcdKv(std::vector<std::string> targets, const EtcdOptions& options,
         std::shared_ptr<grpc::ChannelCredentials> credentials)
      : targets_(std::move(targets)),
        call_timeout_(options.call_timeout),
        user_(options.user),
        password_(options.password) {
    for (const std::string& target : targets_) {
      grpc::ChannelArguments args;
      // Reconnect quickly to a member that comes back. (Not
      // GRPC_ARG_MIN_RECONNECT_BACKOFF_MS: it is also the connect timeout.)
      args.SetInt(GRPC_ARG_INITIAL_RECONNECT_BACKOFF_MS, 100);
      args.SetInt(GRPC_ARG_MAX_RECONNECT_BACKOFF_MS, 1000);
      args.SetMaxReceiveMessageSize(16 << 20);
      auto channel = grpc::CreateCustomChannel(target, credentials, args);
      Member m;
      m.auth = pb::Auth::NewStub(channel);
      m.kv = pb::KV::NewStub(channel);
      m.lease = pb::Lease::NewStub(channel);
      m.watch = pb::Watch::NewStub(channel);
      members_.push_back(std::move(m));
    }
  }

  ~EtcdKv() override { Cancel(); }

  absl::StatusOr<RangeResult> Get(const std::string& key) override {
    pb::RangeRequest req;
    req.set_key(key);
    return Range(req);
  }

  absl::StatusOr<RangeResult> GetPrefix(const std::string& prefix) override {
    pb::RangeRequest req;
    req.set_key(prefix);
    req.set_range_end(PrefixEnd(prefix));
    return Range(req);
  }

  absl::StatusOr<int64_t> Put(const std::string& key, const std::string& value,
                              int64_t lease) override {
    pb::PutRequest req;
    req.set_key(key);
    req.set_value(value);
    req.set_lease(lease);
    pb::PutResponse resp;
    absl::Status s = Call("Put", /*retry_on_deadline=*/true, [&](Member& m, grpc::ClientContext* ctx) {
      return m.kv->Put(ctx, req, &resp);
    });
    if (!s.ok()) return s;
    return resp.header().revision();
  }

  absl::StatusOr<int64_t> DeletePrefix(const std::string& prefix) override {
    pb::DeleteRangeRequest req;
    req.set_key(prefix);
    req.set_range_end(PrefixEnd(prefix));
    pb::DeleteRangeResponse resp;
    absl::Status s = Call("DeleteRange", true, [&](Member& m, grpc::ClientContext* ctx) {
      return m.kv->DeleteRange(ctx, req, &resp);
    });
    if (!s.ok()) return s;
    return resp.deleted();
  }

  absl::StatusOr<TxnResult> Txn(const std::vector<Compare>& compares, const std::vector<Op>& success,
                                const std::vector<Op>& failure) override {
    pb::TxnRequest req;
    for (const Compare& c : compares) ToPb(c, req.add_compare());
    for (const Op& op : success) ToPb(op, req.add_success());
    for (const Op& op : failure) ToPb(op, req.add_failure());
    pb::TxnResponse resp;
    absl::Status s = Call("Txn", true, [&](Member& m, grpc::ClientContext* ctx) {
      return m.kv->Txn(ctx, req, &resp);
    });
    if (!s.ok()) return s;
    TxnResult out;
    out.succeeded = resp.succeeded();
    out.revision = resp.header().revision();
    for (const pb::ResponseOp& r : resp.responses()) {
      if (r.response_case() == pb::ResponseOp::kResponseRange) {
        RangeResult range = FromPb(r.response_range());
        range.revision = out.revision;
        out.reads.push_back(std::move(range));
      }
    }
    return out;
  }

  absl::StatusOr<int64_t> LeaseGrant(absl::Duration ttl) override {
    int64_t seconds = absl::ToInt64Seconds(absl::Ceil(ttl, absl::Seconds(1)));
    if (seconds < 1) return absl::InvalidArgumentError("etcd lease TTL must be at least 1 s");
    pb::LeaseGrantRequest req;
    req.set_ttl(seconds);
    pb::LeaseGrantResponse resp;
    absl::Status s = Call("LeaseGrant", true, [&](Member& m, grpc::ClientContext* ctx) {
      return m.lease->LeaseGrant(ctx, req, &resp);
    });
    if (!s.ok()) return s;
    if (!resp.error().empty()) return absl::InternalError("etcd LeaseGrant: " + resp.error());
    return resp.id();
  }

  absl::StatusOr<absl::Duration> LeaseKeepAlive(int64_t lease) override {
    pb::LeaseKeepAliveResponse resp;
    absl::Status s = Call("LeaseKeepAlive", true, [&](Member& m, grpc::ClientContext* ctx) {
      auto stream = m.lease->LeaseKeepAlive(ctx);
      pb::LeaseKeepAliveRequest req;
      req.set_id(lease);
      if (!stream->Write(req) || !stream->Read(&resp)) {
        ctx->TryCancel();
        grpc::Status st = stream->Finish();
        if (st.ok()) st = grpc::Status(grpc::StatusCode::UNAVAILABLE, "keep-alive stream closed");
        return st;
      }
      stream->WritesDone();
      ctx->TryCancel();
      (void)stream->Finish();
      return grpc::Status::OK;
    });
    if (!s.ok()) return s;
    if (resp.ttl() <= 0) return absl::NotFoundError(absl::StrCat("etcd lease ", lease, " has expired"));
    return absl::Seconds(resp.ttl());
  }

  absl::Status LeaseRevoke(int64_t lease) override {
    pb::LeaseRevokeRequest req;
    req.set_id(lease);
    pb::LeaseRevokeResponse resp;
    absl::Status s = Call("LeaseRevoke", true, [&](Member& m, grpc::ClientContext* ctx) {
      return m.lease->LeaseRevoke(ctx, req, &resp);
    });
    if (s.code() == absl::StatusCode::kNotFound) {
      return absl::NotFoundError(absl::StrCat("etcd lease ", lease, " not found"));
    }
    return s;
  }

  absl::StatusOr<WatchResult> Watch(const std::string& key, bool prefix, int64_t start_revision,
                                    absl::Duration timeout) override {
    pb::WatchRequest req;
    pb::WatchCreateRequest* create = req.mutable_create_request();
    create->set_key(key);
    if (prefix) create->set_range_end(PrefixEnd(key));
    create->set_start_revision(start_revision);
    WatchResult out;
    bool compacted = false;
    absl::Status s = Call(
        "Watch", true,
        [&](Member& m, grpc::ClientContext* ctx) {
          ctx->AddMetadata("hasleader", "true");
          const absl::Time wait_until = absl::Now() + timeout;
          ctx->set_deadline(absl::ToChronoTime(wait_until));
          auto stream = m.watch->Watch(ctx);
          if (!stream->Write(req)) return Finish(ctx, stream.get());
          bool created = false;
          bool stop = false;  // events, or compacted: this side ends the stream
          pb::WatchResponse resp;
          while (!stop && stream->Read(&resp)) {
            if (resp.compact_revision() != 0) {
              compacted = true;
              stop = true;
              break;
            }
            if (resp.created()) created = true;
            out.revision = std::max(out.revision, resp.header().revision());
            if (resp.canceled()) {
              ctx->TryCancel();
              (void)stream->Finish();
              return grpc::Status(grpc::StatusCode::UNAVAILABLE,
                                  "watch canceled by the member: " + resp.cancel_reason());
            }
            for (const ::mvccpb::Event& e : resp.events()) {
              WatchEvent ev;
              ev.type = e.type() == ::mvccpb::Event::DELETE ? WatchEvent::Type::kDelete
                                                             : WatchEvent::Type::kPut;
              ev.kv = FromPb(e.kv());
              out.events.push_back(std::move(ev));
            }
            if (!out.events.empty()) stop = true;
          }
          if (stop) {
            ctx->TryCancel();
            (void)stream->Finish();
            return grpc::Status::OK;
          }
          grpc::Status st = stream->Finish();
          if (cancelled_.load()) return grpc::Status(grpc::StatusCode::CANCELLED, "cancelled");
          // A wait that ran out while the member was still setting the
          // watch up may end as etcd's own "context deadline exceeded"
          // (code UNKNOWN): it is our deadline, handled as one.
          if (absl::Now() >= wait_until && st.error_code() == grpc::StatusCode::UNKNOWN &&
              st.error_message() == "context deadline exceeded") {
            st = grpc::Status(grpc::StatusCode::DEADLINE_EXCEEDED, st.error_message());
          }
          // The wait ran out after the watch was set up: no changes.
          if (created && st.error_code() == grpc::StatusCode::DEADLINE_EXCEEDED) return grpc::Status::OK;
          if (st.ok() || st.error_code() == grpc::StatusCode::CANCELLED) {
            st = grpc::Status(grpc::StatusCode::UNAVAILABLE, "watch stream closed");
          }
          return st;
        },
        timeout);
    if (!s.ok()) return s;
    if (compacted) {
      return absl::OutOfRangeError(
          absl::StrCat("etcd watch of ", key, ": revision ", start_revision, " has been compacted"));
    }
    return out;
  }

  void Cancel() override {
    cancelled_.store(true);
    absl::MutexLock lock(&mu_);
    for (grpc::ClientContext* ctx : in_flight_) ctx->TryCancel();
  }

 private:
  struct Member {
    std::unique_ptr<pb::Auth::Stub> auth;
    std::unique_ptr<pb::KV::Stub> kv;
    std::unique_ptr<pb::Lease::Stub> lease;
    std::unique_ptr<pb::Watch::Stub> watch;
  };

  template <typename Stream>
  static grpc::Status Finish(grpc::ClientContext* ctx, Stream* stream) {
    ctx->TryCancel();
    grpc::Status st = stream->Finish();
    return st.ok() ? grpc::Status(grpc::StatusCode::UNAVAILABLE, "stream closed") : st;
  }

  absl::StatusOr<RangeResult> Range(const pb::RangeRequest& req) {
    pb::RangeResponse resp;
    absl::Status s = Call("Range", true, [&](Member& m, grpc::ClientContext* ctx) {
      return m.kv->Range(ctx, req, &resp);
    });
    if (!s.ok()) return s;
    return FromPb(resp);
  }

  // Runs `attempt` against members, starting with the last one that worked,
  // until one answers (or fails in a way another member would not fix), at
  // most two passes over the members within call_timeout_ (+ `extra`).
  template <typename Attempt>
  absl::Status Call(absl::string_view what, bool retry_on_deadline, Attempt attempt,
                    absl::Duration extra = absl::ZeroDuration()) {
    const absl::Time deadline = absl::Now() + call_timeout_ + extra;
    const size_t n = members_.size();
    const size_t first = preferred_.load();
    std::vector<std::string> failures;
    bool reauthenticated = false;
    for (size_t i = 0; i < 2 * n; ++i) {
      if (cancelled_.load()) return absl::CancelledError(absl::StrCat("etcd ", what, ": cancelled"));
      if (i == n) absl::SleepFor(absl::Milliseconds(50));  // between passes
      const absl::Time now = absl::Now();
      if (now >= deadline) break;
      const size_t index = (first + i) % n;
      grpc::ClientContext ctx;
      // A member that is down answers at once. For a call that may be
      // retried after a deadline, one that hangs gets its share of what is
      // left, so the others are still tried; a write gets all of it (a
      // member waiting for a new leader answers once there is one).
      const absl::Duration left = deadline - now;
      absl::Duration limit = left;
      if (retry_on_deadline) {
        const size_t remaining_tries = 2 * n - i;
        absl::Duration share = std::max(left / static_cast<int64_t>(std::min(remaining_tries, n)),
                                        std::min(left, absl::Seconds(1)));
        limit = std::min(share + extra, left);
      }
      ctx.set_deadline(absl::ToChronoTime(now + limit));
      ctx.set_wait_for_ready(false);
      std::string token;
      if (!user_.empty()) {
        grpc::Status authed = TokenFrom(members_[index], now + limit, &token);
        if (!authed.ok()) {
          if (AfterFailure(authed, true) == Next::kDone) return FromGrpc(authed, "Authenticate", targets_[index]);
          failures.push_back(absl::StrCat(targets_[index], ": ", authed.error_message()));
          continue;
        }
        ctx.AddMetadata(kTokenMetadata, token);
      }
      {
        // Registered, then checked, under the lock Cancel takes to cancel
        // what is registered: a Cancel either sees this call or is seen.
        absl::MutexLock lock(&mu_);
        if (cancelled_.load()) return absl::CancelledError(absl::StrCat("etcd ", what, ": cancelled"));
        in_flight_.insert(&ctx);
      }
      grpc::Status st = attempt(members_[index], &ctx);
      {
        absl::MutexLock lock(&mu_);
        in_flight_.erase(&ctx);
      }
      if (st.ok()) {
        preferred_.store(index);
        return absl::OkStatus();
      }
      if (cancelled_.load()) return absl::CancelledError(absl::StrCat("etcd ", what, ": cancelled"));
      if (!user_.empty() && st.error_code() == grpc::StatusCode::UNAUTHENTICATED && !reauthenticated) {
        // The token expired (etcd's simple tokens do, unused): once more with a new one.
        reauthenticated = true;
        ForgetToken(token);
        --i;
        continue;
      }
      if (AfterFailure(st, retry_on_deadline) == Next::kDone) return FromGrpc(st, what, targets_[index]);
      failures.push_back(absl::StrCat(targets_[index], ": ", st.error_message()));
    }
    return absl::UnavailableError(absl::StrCat("etcd ", what, ": no member of ",
                                               absl::StrJoin(targets_, ","), " answered (",
                                               absl::StrJoin(failures, "; "), ")"));
  }

  // The auth token, authenticating with `m` first when there is none.
  grpc::Status TokenFrom(Member& m, absl::Time deadline, std::string* token) {
    {
      absl::MutexLock lock(&mu_);
      if (!token_.empty()) {
        *token = token_;
        return grpc::Status::OK;
      }
    }
    pb::AuthenticateRequest req;
    req.set_name(user_);
    req.set_password(password_);
    pb::AuthenticateResponse resp;
    grpc::ClientContext ctx;
    ctx.set_deadline(absl::ToChronoTime(deadline));
    grpc::Status st = m.auth->Authenticate(&ctx, req, &resp);
    if (!st.ok()) return st;
    absl::MutexLock lock(&mu_);
    token_ = resp.token();
    *token = token_;
    return grpc::Status::OK;
  }

  void ForgetToken(const std::string& stale) {
    absl::MutexLock lock(&mu_);
    if (token_ == stale) token_.clear();
  }

  const std::vector<std::string> targets_;
  const absl::Duration call_timeout_;
  const std::string user_;
  const std::string password_;
  std::string token_ ABSL_GUARDED_BY(mu_);
  std::vector<Member> members_;
  std::atomic<size_t> preferred_{0};
  std::atomic<bool> cancelled_{false};
  absl::Mutex mu_;
  std::set<grpc::ClientContext*> in_flight_ ABSL_GUARDED_BY(mu_);
};

}  // namespace

absl::StatusOr<std::unique_ptr<Kv>> NewEtcdKv(const EtcdOptions& options) {
  if (options.endpoints.empty()) return absl::InvalidArgumentError("etcd: no endpoints given");
  if (options.call_timeout <= absl::ZeroDuration()) {
    return absl::InvalidArgumentError("etcd: the call timeout must be positive");
  }
  std::vector<std::string> targets;
  for (const std::string& e : options.endpoints) {
    absl::StatusOr<std::vector<std::string>> parsed = ParseEtcdEndpoints(e);
    if (!parsed.ok()) return parsed.status();
    targets.insert(targets.end(), parsed->begin(), parsed->end());
  }
  std::set<std::string> unique(targets.begin(), targets.end());
  if (unique.size() != targets.size()) {
    return absl::InvalidArgumentError("etcd endpoints: a member is listed twice");
  }
  if (options.user.empty() && !options.password.empty()) {
    return absl::InvalidArgumentError("etcd auth: a password without a user");
  }
  absl::StatusOr<std::shared_ptr<grpc::ChannelCredentials>> credentials = Credentials(options);
  if (!credentials.ok()) return credentials.status();
  return std::unique_ptr<Kv>(new EtcdKv(std::move(targets), options, *std::move(credentials)));
}

absl::StatusOr<MemberStatus> EtcdMemberStatus(const EtcdOptions& options) {
  if (options.endpoints.empty()) return absl::InvalidArgumentError("etcd: no endpoints given");
  absl::StatusOr<std::shared_ptr<grpc::ChannelCredentials>> credentials = Credentials(options);
  if (!credentials.ok()) return credentials.status();
  auto stub = pb::Maintenance::NewStub(grpc::CreateChannel(options.endpoints[0], *credentials));
  grpc::ClientContext ctx;
  ctx.set_deadline(absl::ToChronoTime(absl::Now() + options.call_timeout));
  pb::StatusResponse resp;
  grpc::Status st = stub->Status(&ctx, pb::StatusRequest(), &resp);
  if (!st.ok()) return FromGrpc(st, "Status", options.endpoints[0]);
  return MemberStatus{resp.header().member_id(), resp.leader()};
}

}  // namespace cpptorchrun::rdzv::etcd
