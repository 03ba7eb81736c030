#include "worker/training/checkpoint_writer.h"

#include <utility>

namespace cpptorchrun::worker {

CheckpointWriter::WriteFn CheckpointWriter::WriteTo(const std::string& dir, int keep) {
  return [dir, keep](int64_t id, const CheckpointState& state) {
    return WriteCheckpoint(dir, id, state, keep);
  };
}

CheckpointWriter::CheckpointWriter(WriteFn write) : write_(std::move(write)) {
  thread_ = std::thread([this] { Run(); });
}

CheckpointWriter::~CheckpointWriter() {
  {
    absl::MutexLock lock(&mu_);
    stopping_ = true;
  }
  thread_.join();
}

absl::Status CheckpointWriter::TakeErrorLocked() {
  absl::Status error = std::move(error_);
  error_ = absl::OkStatus();
  return error;
}

absl::Status CheckpointWriter::Submit(int64_t id, CheckpointState state) {
  absl::MutexLock lock(&mu_);
  mu_.Await(absl::Condition(
      +[](CheckpointWriter* w) ABSL_EXCLUSIVE_LOCKS_REQUIRED(w->mu_) { return !w->waiting_.has_value(); },
      this));
  if (absl::Status error = TakeErrorLocked(); !error.ok()) return error;
  waiting_ = Pending{id, std::move(state)};
  return absl::OkStatus();
}

absl::Status CheckpointWriter::Flush() {
  absl::MutexLock lock(&mu_);
  mu_.Await(absl::Condition(
      +[](CheckpointWriter* w) ABSL_EXCLUSIVE_LOCKS_REQUIRED(w->mu_) {
        return !w->waiting_.has_value() && !w->writing_;
      },
      this));
  return TakeErrorLocked();
}

CheckpointWriter::Stats CheckpointWriter::stats() const {
  absl::MutexLock lock(&mu_);
  return stats_;
}

void CheckpointWriter::Run() {
  absl::MutexLock lock(&mu_);
  while (true) {
    // What was handed over is written before the thread ends.
    mu_.Await(absl::Condition(
        +[](CheckpointWriter* w) ABSL_EXCLUSIVE_LOCKS_REQUIRED(w->mu_) {
          return w->waiting_.has_value() || w->stopping_;
        },
        this));
    if (!waiting_.has_value()) return;
    Pending job = std::move(*waiting_);
    waiting_.reset();
    writing_ = true;
    mu_.Unlock();
    absl::Status written = write_(job.id, job.state);
    mu_.Lock();
    writing_ = false;
    if (written.ok()) {
      ++stats_.written;
      stats_.newest_written = job.id;
    } else if (error_.ok()) {
      error_ = written;
    }
  }
}

}  // namespace cpptorchrun::worker
