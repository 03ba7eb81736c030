// The communicator: the one interface the trainer and DDP use for
// collectives, whatever the backend (Gloo over TCP, NCCL, fake GPUs, or a
// recording fake in tests). No LibTorch here: buffers are raw pointers.
//
// Contract for every implementation:
// - Collectives must be issued in the same order on every rank.
// - A buffer passed to an *Async call must stay valid, and untouched by the
//   caller, until its Work's Wait() has returned.
// - The issuing methods are thread-safe; collectives run in issue order.
// - Errors come back as absl::Status from Wait(); after Abort() every
//   pending and later collective fails with Aborted.
#ifndef CPPTORCHRUN_WORKER_COMM_COMM_H_
#define CPPTORCHRUN_WORKER_COMM_COMM_H_

#include <cstddef>
#include <cstdint>
#include <memory>
#include <optional>
#include <string>

#include "absl/status/status.h"

namespace cpptorchrun::worker {

enum class ReduceOp { kSum, kAverage };
// kFloat16 is IEEE binary16, kBFloat16 bfloat16 (float16.h): 16-bit raw bits,
// summed in float and rounded once per addition.
enum class DType { kFloat32, kFloat64, kInt64, kUint8, kFloat16, kBFloat16 };

size_t DTypeSize(DType dtype);
const char* DTypeName(DType dtype);

// Seconds on std::chrono::steady_clock: the clock of WorkTimes.
double SteadySeconds();

// When a collective ran, in SteadySeconds, from the moment the backend
// started it to the moment it ended. Queueing behind earlier collectives
// is not counted.
struct WorkTimes {
  double started = 0;
  double finished = 0;
};

// A collective in flight. Wait() may be called more than once, from any
// thread; it returns the collective's final status.
class Work {
 public:
  virtual ~Work() = default;
  virtual absl::Status Wait() = 0;
  virtual bool IsCompleted() = 0;
  // Once completed, when it ran; nullopt before that, for a collective that
  // never ran (failed, aborted), and where the backend cannot tell (NCCL's
  // device-side work, completed stand-ins). For DDP's overlap figures.
  virtual std::optional<WorkTimes> Times() { return std::nullopt; }
};

class Communicator {
 public:
  virtual ~Communicator() = default;

  virtual int rank() const = 0;
  virtual int world_size() const = 0;
  // "gloo", "nccl", "fake-gpu", ... for logs and metrics.
  virtual std::string backend() const = 0;

  // Reduces `count` elements at `data` in place across ranks. kAverage
  // divides the sum by the world size (floating types only).
  virtual std::shared_ptr<Work> AllReduceAsync(void* data, int64_t count, DType dtype,
                                               ReduceOp op) = 0;

  // Copies `count` elements from rank `root`'s buffer into every rank's.
  virtual std::shared_ptr<Work> BroadcastAsync(void* data, int64_t count, DType dtype,
                                               int root) = 0;

  // Returns once every rank has entered the barrier.
  virtual absl::Status Barrier() = 0;

  // Fails pending and future collectives; never blocks for long. A
  // collective already on the wire ends at the latest at its timeout.
  virtual void Abort(const std::string& reason) = 0;

  absl::Status AllReduce(void* data, int64_t count, DType dtype, ReduceOp op) {
    return AllReduceAsync(data, count, dtype, op)->Wait();
  }
  absl::Status Broadcast(void* data, int64_t count, DType dtype, int root) {
    return BroadcastAsync(data, count, dtype, root)->Wait();
  }
};

// A completed Work carrying `status` (for synchronous backends and errors).
std::shared_ptr<Work> CompletedWork(absl::Status status);

// The communicator of a world of one: collectives are identities.
std::unique_ptr<Communicator> NewSingleProcessCommunicator();

}  // namespace cpptorchrun::worker

#endif  // CPPTORCHRUN_WORKER_COMM_COMM_H_
