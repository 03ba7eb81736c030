// The one way to reach a run's rendezvous, whatever its backend: a target
// string, as the launcher takes it from the command line and hands it to
// its workers (CPPTORCHRUN_RDZV_ENDPOINT), names the backend:
//
//   host:port, [v6]:port                  the gRPC rendezvous service
//   etcd://host[:port],host[:port]/prefix  the rules on an etcd cluster
//                                          (port 2379 when absent; prefix
//                                          optional, default /cpptorchrun)
//
// so the launcher, `cpptorchrun status` and every worker open their client
// (and the round's store) with the same call.
#ifndef CPPTORCHRUN_RENDEZVOUS_CONNECT_H_
#define CPPTORCHRUN_RENDEZVOUS_CONNECT_H_

#include <memory>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "rendezvous/client.h"

namespace cpptorchrun::rdzv {

inline constexpr char kEtcdScheme[] = "etcd://";

struct RendezvousTarget {
  enum class Backend { kGrpc, kEtcd } backend = Backend::kGrpc;
  std::string endpoint;                 // kGrpc: host:port
  std::vector<std::string> etcd_members;  // kEtcd: host:port each
  std::string etcd_prefix;              // kEtcd
};

// InvalidArgument naming what is wrong (the etcd member list's entry, the
// prefix).
absl::StatusOr<RendezvousTarget> ParseRendezvousTarget(const std::string& text);
std::string FormatRendezvousTarget(const RendezvousTarget& target);

// A client for `options.endpoint` read as a target; the other options
// apply to either backend (the deadline of each call; the token and TLS
// root to the gRPC service).
absl::StatusOr<std::unique_ptr<RendezvousClient>> CreateRendezvousClient(const ClientOptions& options);

}  // namespace cpptorchrun::rdzv

#endif  // CPPTORCHRUN_RENDEZVOUS_CONNECT_H_
