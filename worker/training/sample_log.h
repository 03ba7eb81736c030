// The sample log (`train --sample_log DIR`, for tests and audits): every
// batch's data set indices, one file per (round, rank), so that a scenario
// can check that an epoch interrupted by restarts and world-size changes
// still visits every sample once (tests/jobs.py: epoch_coverage).
//
// File DIR/samples.round<R>.rank<K>.pid<P>.txt:
//   # round R rank K world W
//   # resumed S                      (when the run restored a checkpoint)
//   <global step> <epoch> <index> <index> ...   (one line per batch)
// Each line goes out in one write(2), so a killed worker leaves whole lines.
// A line is written as its batch starts: a batch whose step the job kept
// (an in-place recovery goes on from the newest step any survivor
// completed) is logged even when its rank died right after the step; a
// batch never completed is past the next round's resume point, which
// epoch_coverage leaves out.
#ifndef CPPTORCHRUN_WORKER_TRAINING_SAMPLE_LOG_H_
#define CPPTORCHRUN_WORKER_TRAINING_SAMPLE_LOG_H_

#include <cstdint>
#include <memory>
#include <string>

#include "absl/status/statusor.h"
#include "worker/training/metrics.h"

namespace cpptorchrun::worker {

// One rank's log; used from the training thread.
class SampleLog : public TrainObserver {
 public:
  // Creates DIR (and parents) and the rank's file. Errors name the path.
  static absl::StatusOr<std::unique_ptr<SampleLog>> Open(const std::string& dir, int64_t round,
                                                         int rank, int world_size);
  ~SampleLog() override;
  SampleLog(const SampleLog&) = delete;
  SampleLog& operator=(const SampleLog&) = delete;

  void OnResumed(int64_t global_step) override;
  void OnBatchStart(const StepReport& report) override;

  // In-place recovery: this process goes on as rank `rank` of round
  // `round`; its lines go to that round's file from now on.
  absl::Status NextRound(int64_t round, int rank, int world_size);

  const std::string& path() const { return path_; }

 private:
  SampleLog(int fd, std::string dir, std::string path) : fd_(fd), dir_(std::move(dir)), path_(std::move(path)) {}
  static absl::StatusOr<int> Create(const std::string& path);
  void Write(const std::string& line);

  int fd_;
  std::string dir_;
  std::string path_;
};

}  // namespace cpptorchrun::worker

#endif  // CPPTORCHRUN_WORKER_TRAINING_SAMPLE_LOG_H_
