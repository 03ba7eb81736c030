// The shared-memory communicator: for ranks that share a node (WORLD_SIZE ==
// LOCAL_WORLD_SIZE). One POSIX shared-memory segment per communicator, named
// by rank 0 through the round's store and unlinked as soon as every rank has
// mapped it; all-reduce is a chunked reduce-scatter then all-gather in the
// segment, every rank reducing its 1/world share of each chunk. Ranks wait on
// futexes (a few microseconds of spinning first), never busy-spin for long;
// every wait is bounded by the timeout, watches the segment's abort word and,
// in slices, whether the awaited peer's process is still alive. Collectives
// run on a CommThread, so they are asynchronous. The layout and the protocol
// are in shm_comm.cc and README.md.
#ifndef CPPTORCHRUN_WORKER_COMM_SHM_COMM_H_
#define CPPTORCHRUN_WORKER_COMM_SHM_COMM_H_

#include <cstdint>
#include <memory>
#include <string>

#include "absl/status/statusor.h"
#include "absl/time/time.h"
#include "rendezvous/store.h"
#include "worker/comm/comm.h"

namespace cpptorchrun::worker {

struct ShmOptions {
  // Borrowed; used only during NewShmCommunicator. May be null when
  // `segment_name` is given.
  rdzv::Store* store = nullptr;
  int rank = 0;
  int world_size = 1;
  // Key (in the store) under which rank 0 publishes the segment's name.
  std::string key = "shm/segment";
  // Empty: rank 0 makes a fresh name and publishes it under `key`. Set
  // (tests of separate processes without a shared store): every rank uses
  // it, rank 0 creates it. A POSIX shm name: "/" then no other slash.
  std::string segment_name;
  // Bytes of a rank's slot: a chunk's size. Any count works; larger ones
  // travel in several chunks. Capped so that the slots of all ranks (two
  // each) take at most 32 MiB of /dev/shm.
  int64_t slot_bytes = int64_t{2} << 20;
  // Bounds the bootstrap (until every rank has mapped the segment) and
  // every collective.
  absl::Duration timeout = absl::Seconds(60);
  // How often a waiting rank checks that the peer it awaits is alive.
  absl::Duration liveness_interval = absl::Milliseconds(100);
};

// Creates or maps the segment and waits until every rank has mapped it.
// Errors: InvalidArgument for bad options; Unavailable when the segment
// cannot be made or opened (names why); DeadlineExceeded when a rank did not
// arrive within the timeout. No /dev/shm entry is left behind in any case
// (unless rank 0 dies between creating the segment and publishing it).
absl::StatusOr<std::unique_ptr<Communicator>> NewShmCommunicator(const ShmOptions& options);

}  // namespace cpptorchrun::worker

#endif  // CPPTORCHRUN_WORKER_COMM_SHM_COMM_H_
