// The Gloo communicator: the CPU path. TCP transport, bootstrapped through
// the round's rendezvous store (GlooStore); collectives run on a CommThread
// so they are asynchronous.
#ifndef CPPTORCHRUN_WORKER_COMM_GLOO_COMM_H_
#define CPPTORCHRUN_WORKER_COMM_GLOO_COMM_H_

#include <memory>
#include <string>

#include "absl/status/statusor.h"
#include "absl/time/time.h"
#include "rendezvous/store.h"
#include "worker/comm/comm.h"

namespace cpptorchrun::worker {

struct GlooOptions {
  // Borrowed; used only during NewGlooCommunicator.
  rdzv::Store* store = nullptr;
  int rank = 0;
  int world_size = 1;
  // The address this rank listens on (CPPTORCHRUN_LOCAL_ADDR).
  std::string hostname = "127.0.0.1";
  // Prefix of the bootstrap keys in the store.
  std::string key_prefix = "gloo/";
  // Bounds the bootstrap and every collective.
  absl::Duration timeout = absl::Seconds(60);
};

// Connects the full mesh. Errors: InvalidArgument for bad rank/world or a
// missing store; Unavailable when the mesh cannot be formed (names why).
absl::StatusOr<std::unique_ptr<Communicator>> NewGlooCommunicator(const GlooOptions& options);

}  // namespace cpptorchrun::worker

#endif  // CPPTORCHRUN_WORKER_COMM_GLOO_COMM_H_
