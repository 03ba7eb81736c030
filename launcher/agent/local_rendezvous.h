// The local rendezvous: a RendezvousClient for a single node that needs no
// service (one node, nothing to meet): each Join completes a new round at
// once with this node as group rank 0. Used when a single node runs without
// a rendezvous server, and as the rendezvous of tests.
#ifndef CPPTORCHRUN_LAUNCHER_LOCAL_RENDEZVOUS_H_
#define CPPTORCHRUN_LAUNCHER_LOCAL_RENDEZVOUS_H_

#include <memory>

#include "rendezvous/client.h"

namespace cpptorchrun::launcher {

// Thread-safe. Join fails (InvalidArgument) when the options ask for more
// than one node. Watch returns at its timeout, or at once when the version
// moved (a Join, Leave or Close). The store is in memory.
std::unique_ptr<rdzv::RendezvousClient> NewLocalRendezvousClient();

}  // namespace cpptorchrun::launcher

#endif  // CPPTORCHRUN_LAUNCHER_LOCAL_RENDEZVOUS_H_
