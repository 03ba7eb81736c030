// NewEtcdKv: the Kv interface over a real etcd cluster's v3 gRPC API (the
// KV, Lease and Watch services, compiled from etcd's own .proto files), one
// channel per member, failing over between them.
//
// Failover: a call that a member answers UNAVAILABLE (down, unreachable, or
// without a leader: etcd's "no leader" and "request timed out" come as
// UNAVAILABLE), or does not answer within its share of the call's deadline
// (a follower whose proposal went to a leader that died waits for etcd's
// own 7 s request timeout), is sent to the next member, every member tried
// at most twice within the deadline, with a short backoff between passes.
// So a write may be applied twice: every write the rendezvous makes is
// idempotent (Put of the same value, DeletePrefix, a lease) or a
// transaction that compares a revision (applied once, the second attempt's
// comparison fails and the caller rereads); the store's Add marks its
// transaction so that a retried one is recognised (kv_store.h). Members the
// client last found working are tried first.
//
// Watches carry etcd's "hasleader" metadata, so that a member cut off from
// its cluster ends the watch (and the client moves on) instead of holding
// it silently.
#ifndef CPPTORCHRUN_RENDEZVOUS_ETCD_ETCD_KV_H_
#define CPPTORCHRUN_RENDEZVOUS_ETCD_ETCD_KV_H_

#include <memory>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/time/time.h"
#include "rendezvous/etcd/endpoints.h"
#include "rendezvous/etcd/kv.h"

namespace cpptorchrun::rdzv::etcd {

struct EtcdOptions {
  // The cluster's members, host:port each (a bracketed IPv6 host is fine).
  std::vector<std::string> endpoints;
  // The deadline of one call, every member it tries included (Watch: on top
  // of its own timeout).
  absl::Duration call_timeout = absl::Seconds(5);
  // etcd's auth: with a user, the client authenticates (Auth.Authenticate)
  // before its first call and again when etcd says its token is no longer
  // valid, and sends the token on every call.
  std::string user;
  std::string password;
  // TLS to the members (PEM files): the CA that signed their certificates,
  // and this client's certificate and key where etcd asks for one
  // (--client-cert-auth). Empty: plaintext.
  std::string tls_ca_file;
  std::string tls_cert_file;
  std::string tls_key_file;
};

// Errors: no endpoints, a malformed one (as ParseEtcdEndpoints), a
// call_timeout that is not positive, a TLS file that cannot be read (named),
// a certificate without its key, a password without a user. Connecting is lazy: an unreachable
// cluster shows in the first call, which names every member it tried.
absl::StatusOr<std::unique_ptr<Kv>> NewEtcdKv(const EtcdOptions& options);

// What the first of `options.endpoints` says of itself (etcd's
// Maintenance.Status, over the options' TLS): its id and its leader's (0:
// none). For the test clusters' leader.
struct MemberStatus {
  uint64_t member_id = 0;
  uint64_t leader = 0;
};
absl::StatusOr<MemberStatus> EtcdMemberStatus(const EtcdOptions& options);

}  // namespace cpptorchrun::rdzv::etcd

#endif  // CPPTORCHRUN_RENDEZVOUS_ETCD_ETCD_KV_H_
