// The flight recorder: every collective this rank issues, numbered in issue
// order (the order is the same on every rank: comm.h's contract), with its
// kind, its size and when it was issued and finished. Its newest numbers
// travel with the heartbeats, so that on a hang the launchers can tell a
// rank that never issued the collective its peers wait in (the culprit:
// stuck in its data loader, its own code) from the ranks waiting in it.
//
// A communicator wrapped by NewFlightRecordedCommunicator records each call:
// issued when the caller issues it, finished when its Wait() first returns.
#ifndef CPPTORCHRUN_WORKER_COMM_FLIGHT_RECORDER_H_
#define CPPTORCHRUN_WORKER_COMM_FLIGHT_RECORDER_H_

#include <cstddef>
#include <cstdint>
#include <deque>
#include <memory>
#include <string>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/synchronization/mutex.h"
#include "worker/comm/comm.h"

namespace cpptorchrun::worker {

struct CollectiveRecord {
  int64_t seq = 0;  // 1, 2, ... in issue order
  std::string kind;  // "allreduce", "broadcast", "barrier"
  int64_t bytes = 0;
  double issued = 0;    // SteadySeconds
  double finished = 0;  // 0: not yet
};

// The recorder's newest numbers.
struct CollectiveProgress {
  int64_t issued = 0;    // the newest collective issued (its seq); 0: none
  int64_t finished = 0;  // how many have finished
  std::string kind;      // the newest's kind
};

// Thread-safe.
class FlightRecorder {
 public:
  // Keeps the newest `capacity` records.
  explicit FlightRecorder(size_t capacity = 64) : capacity_(capacity) {}

  // Records a collective issued now; its seq.
  int64_t Issue(const std::string& kind, int64_t bytes);
  // Records that collective `seq` finished now (once; later calls do nothing).
  void Finish(int64_t seq);

  CollectiveProgress Progress() const;
  // A new communicator (in-place recovery): numbering starts again at 1,
  // as on the new round's new ranks.
  void Reset();
  // The newest records, oldest first.
  std::vector<CollectiveRecord> Records() const;

 private:
  const size_t capacity_;
  mutable absl::Mutex mu_;
  int64_t issued_ ABSL_GUARDED_BY(mu_) = 0;
  int64_t finished_ ABSL_GUARDED_BY(mu_) = 0;
  std::deque<CollectiveRecord> records_ ABSL_GUARDED_BY(mu_);
};

// `inner` with every collective recorded in `recorder` (neither owned; both
// outlive the result).
std::unique_ptr<Communicator> NewFlightRecordedCommunicator(Communicator* inner, FlightRecorder* recorder);

}  // namespace cpptorchrun::worker

#endif  // CPPTORCHRUN_WORKER_COMM_FLIGHT_RECORDER_H_
