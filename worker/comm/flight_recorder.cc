#include "worker/comm/flight_recorder.h"

#include <atomic>
#include <utility>

namespace cpptorchrun::worker {

int64_t FlightRecorder::Issue(const std::string& kind, int64_t bytes) {
  absl::MutexLock lock(&mu_);
  CollectiveRecord r;
  r.seq = ++issued_;
  r.kind = kind;
  r.bytes = bytes;
  r.issued = SteadySeconds();
  records_.push_back(std::move(r));
  while (records_.size() > capacity_) records_.pop_front();
  return issued_;
}

void FlightRecorder::Finish(int64_t seq) {
  absl::MutexLock lock(&mu_);
  ++finished_;
  // Recent collectives finish near the back.
  for (auto it = records_.rbegin(); it != records_.rend(); ++it) {
    if (it->seq == seq) {
      if (it->finished == 0) it->finished = SteadySeconds();
      return;
    }
  }
}

void FlightRecorder::Reset() {
  absl::MutexLock lock(&mu_);
  issued_ = 0;
  finished_ = 0;
  records_.clear();
}

CollectiveProgress FlightRecorder::Progress() const {
  absl::MutexLock lock(&mu_);
  CollectiveProgress p;
  p.issued = issued_;
  p.finished = finished_;
  if (!records_.empty()) p.kind = records_.back().kind;
  return p;
}

std::vector<CollectiveRecord> FlightRecorder::Records() const {
  absl::MutexLock lock(&mu_);
  return std::vector<CollectiveRecord>(records_.begin(), records_.end());
}

namespace {

// A collective's Work that tells the recorder when its Wait first returns.
class RecordedWork final : public Work {
 public:
  RecordedWork(std::shared_ptr<Work> inner, FlightRecorder* recorder, int64_t seq)
      : inner_(std::move(inner)), recorder_(recorder), seq_(seq) {}

  absl::Status Wait() override {
    absl::Status s = inner_->Wait();
    if (!finished_.exchange(true)) recorder_->Finish(seq_);
    return s;
  }
  bool IsCompleted() override { return inner_->IsCompleted(); }
  std::optional<WorkTimes> Times() override { return inner_->Times(); }

 private:
  std::shared_ptr<Work> inner_;
  FlightRecorder* recorder_;
  const int64_t seq_;
  std::atomic<bool> finished_{false};
};

class FlightRecordedCommunicator final : public Communicator {
 public:
  FlightRecordedCommunicator(Communicator* inner, FlightRecorder* recorder) : inner_(inner), recorder_(recorder) {}

  int rank() const override { return inner_->rank(); }
  int world_size() const override { return inner_->world_size(); }
  std::string backend() const override { return inner_->backend(); }

  std::shared_ptr<Work> AllReduceAsync(void* data, int64_t count, DType dtype, ReduceOp op) override {
    const int64_t seq = recorder_->Issue("allreduce", count * static_cast<int64_t>(DTypeSize(dtype)));
    return std::make_shared<RecordedWork>(inner_->AllReduceAsync(data, count, dtype, op), recorder_, seq);
  }
  std::shared_ptr<Work> BroadcastAsync(void* data, int64_t count, DType dtype, int root) override {
    const int64_t seq = recorder_->Issue("broadcast", count * static_cast<int64_t>(DTypeSize(dtype)));
    return std::make_shared<RecordedWork>(inner_->BroadcastAsync(data, count, dtype, root), recorder_, seq);
  }
  absl::Status Barrier() override {
    const int64_t seq = recorder_->Issue("barrier", 0);
    absl::Status s = inner_->Barrier();
    recorder_->Finish(seq);
    return s;
  }
  void Abort(const std::string& reason) override { inner_->Abort(reason); }

 private:
  Communicator* inner_;
  FlightRecorder* recorder_;
};

}  // namespace

std::unique_ptr<Communicator> NewFlightRecordedCommunicator(Communicator* inner, FlightRecorder* recorder) {
  return std::make_unique<FlightRecordedCommunicator>(inner, recorder);
}

}  // namespace cpptorchrun::worker
