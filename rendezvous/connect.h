// The one way to reach a run's rendezvous, whatever its backend: the
// launcher, `cpptorchrun status` and every worker open their client (and the
// round's store) from a target (rendezvous/target.h) with the same call.
#ifndef CPPTORCHRUN_RENDEZVOUS_CONNECT_H_
#define CPPTORCHRUN_RENDEZVOUS_CONNECT_H_

#include <memory>
#include <string>

#include "absl/status/statusor.h"
#include "rendezvous/client.h"
#include "rendezvous/target.h"

namespace cpptorchrun::rdzv {

// A client for `options.endpoint` read as a target; the other options
// apply to either backend (the deadline of each call; the token and TLS
// root to the gRPC service).
absl::StatusOr<std::unique_ptr<RendezvousClient>> CreateRendezvousClient(const ClientOptions& options);

}  // namespace cpptorchrun::rdzv

#endif  // CPPTORCHRUN_RENDEZVOUS_CONNECT_H_
