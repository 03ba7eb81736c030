// The etcd members of a rendezvous target, as users write them: pure, no
// gRPC (the launcher's flag parser checks them; the etcd client dials them).
#ifndef CPPTORCHRUN_RENDEZVOUS_ETCD_ENDPOINTS_H_
#define CPPTORCHRUN_RENDEZVOUS_ETCD_ENDPOINTS_H_

#include <string>
#include <vector>

#include "absl/status/statusor.h"

namespace cpptorchrun::rdzv::etcd {

// etcd's client port, for an endpoint given without one.
inline constexpr int kDefaultEtcdPort = 2379;

// Parses "host[:port],host[:port],..." (rendezvous/endpoint.h's rule for each
// entry, blanks around entries ignored, port kDefaultEtcdPort when absent)
// into gRPC targets. Errors name the entry that is wrong: empty, malformed,
// port 0, a duplicate.
absl::StatusOr<std::vector<std::string>> ParseEtcdEndpoints(const std::string& text);

}  // namespace cpptorchrun::rdzv::etcd

#endif  // CPPTORCHRUN_RENDEZVOUS_ETCD_ENDPOINTS_H_
