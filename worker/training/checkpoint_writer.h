// Checkpoints written off the training path. The trainer copies its state
// into a CheckpointState at an optimizer-step boundary (a memory copy, a few
// milliseconds for the seed's model) and hands it over; one background
// thread encodes it, writes it, syncs it and renames it into place
// (WriteCheckpoint: never a partial file where a restart reads). Training
// goes on at once.
//
// At most one write runs and one snapshot waits: a snapshot handed over
// while another still waits waits for it to be taken (the disk is then the
// bottleneck, and memory stays at two snapshots). Every snapshot is
// written, in order, so the last K kept on disk are the last K asked for.
// A failed write is returned by the next Submit or Flush, once, so the
// trainer fails as it did when it wrote in line. The destructor finishes
// what was handed over (a worker stopped by an error still leaves its last
// snapshot on disk), then joins. No LibTorch here.
#ifndef CPPTORCHRUN_WORKER_TRAINING_CHECKPOINT_WRITER_H_
#define CPPTORCHRUN_WORKER_TRAINING_CHECKPOINT_WRITER_H_

#include <cstdint>
#include <functional>
#include <optional>
#include <string>
#include <thread>

#include "absl/base/thread_annotations.h"
#include "absl/status/status.h"
#include "absl/synchronization/mutex.h"
#include "worker/training/checkpoint.h"

namespace cpptorchrun::worker {

class CheckpointWriter {
 public:
  // Writes one checkpoint (id, state) durably; WriteCheckpoint into a folder
  // by default (WriteTo), a fake in tests.
  using WriteFn = std::function<absl::Status(int64_t id, const CheckpointState& state)>;
  static WriteFn WriteTo(const std::string& dir, int keep);

  explicit CheckpointWriter(WriteFn write);
  ~CheckpointWriter();
  CheckpointWriter(const CheckpointWriter&) = delete;
  CheckpointWriter& operator=(const CheckpointWriter&) = delete;

  // Hands `state` over as checkpoint `id` and returns without waiting for
  // the disk (only for the writer to take the previous snapshot, if one
  // still waits). Returns the error of an earlier background write, if one
  // failed since the last Submit or Flush (the state is then not queued).
  absl::Status Submit(int64_t id, CheckpointState state);
  // Waits until every snapshot handed over is written;
  // returns the first error since the last Submit or Flush.
  absl::Status Flush();

  struct Stats {
    int64_t written = 0;
    int64_t newest_written = -1;  // the id of the newest checkpoint on disk; -1: none yet
  };
  Stats stats() const;

 private:
  void Run();
  absl::Status TakeErrorLocked() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);

  const WriteFn write_;
  mutable absl::Mutex mu_;
  struct Pending {
    int64_t id;
    CheckpointState state;
  };
  std::optional<Pending> waiting_ ABSL_GUARDED_BY(mu_);
  bool writing_ ABSL_GUARDED_BY(mu_) = false;
  bool stopping_ ABSL_GUARDED_BY(mu_) = false;
  absl::Status error_ ABSL_GUARDED_BY(mu_);
  Stats stats_ ABSL_GUARDED_BY(mu_);
  std::thread thread_;
};

}  // namespace cpptorchrun::worker

#endif  // CPPTORCHRUN_WORKER_TRAINING_CHECKPOINT_WRITER_H_
