// A rendezvous target: the string the launcher takes from the command line
// and hands to its workers (CPPTORCHRUN_RDZV_ENDPOINT) names the backend:
//
//   host:port, [v6]:port                  the gRPC rendezvous service
//   etcd://host[:port],host[:port]/prefix  the rules on an etcd cluster
//                                          (port 2379 when absent; prefix
//                                          optional, default /cpptorchrun)
//
// Parsed and written here, pure, no gRPC: the launcher's flag parser checks
// it, rendezvous/connect.h dials it.
#ifndef CPPTORCHRUN_RENDEZVOUS_TARGET_H_
#define CPPTORCHRUN_RENDEZVOUS_TARGET_H_

#include <string>
#include <vector>

#include "absl/status/statusor.h"

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

}  // namespace cpptorchrun::rdzv

#endif  // CPPTORCHRUN_RENDEZVOUS_TARGET_H_
