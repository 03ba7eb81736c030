// The fake-GPU communicator: the NCCL id exchange, then a CPU communicator
// (Gloo unless told otherwise) underneath.
#include "worker/comm/fake_gpu_comm.h"

#include "absl/strings/str_cat.h"

namespace cpptorchrun::worker {
namespace {

class FakeGpuCommunicator final : public Communicator {
 public:
  FakeGpuCommunicator(std::unique_ptr<Communicator> inner, int device)
      : inner_(std::move(inner)), device_(device) {}

  int rank() const override { return inner_->rank(); }
  int world_size() const override { return inner_->world_size(); }
  std::string backend() const override {
    return absl::StrCat("fake-gpu:", device_, " over ", inner_->backend());
  }
  std::shared_ptr<Work> AllReduceAsync(void* data, int64_t count, DType dtype,
                                       ReduceOp op) override {
    return inner_->AllReduceAsync(data, count, dtype, op);
  }
  std::shared_ptr<Work> BroadcastAsync(void* data, int64_t count, DType dtype,
                                       int root) override {
    return inner_->BroadcastAsync(data, count, dtype, root);
  }
  absl::Status Barrier() override { return inner_->Barrier(); }
  void Abort(const std::string& reason) override { inner_->Abort(reason); }

 private:
  std::unique_ptr<Communicator> inner_;
  const int device_;
};

}  // namespace

absl::StatusOr<std::unique_ptr<Communicator>> NewFakeGpuCommunicator(
    const FakeGpuOptions& options) {
  if (options.gloo.store == nullptr) {
    return absl::InvalidArgumentError("fake GPUs: no rendezvous store");
  }
  absl::StatusOr<std::string> id = ShareNcclUniqueId(*options.gloo.store, options.gloo.rank,
                                                     options.make_id, options.gloo.timeout);
  if (!id.ok()) return id.status();
  absl::Status same = VerifySameUniqueId(*options.gloo.store, options.gloo.rank,
                                         options.gloo.world_size, *id, options.gloo.timeout);
  if (!same.ok()) return same;
  absl::StatusOr<std::unique_ptr<Communicator>> inner;
  if (options.make_inner) {
    inner = options.make_inner();
  } else {
    GlooOptions gloo = options.gloo;
    gloo.key_prefix = "fake_gpu/gloo/";
    inner = NewGlooCommunicator(gloo);
  }
  if (!inner.ok()) return inner.status();
  return std::unique_ptr<Communicator>(
      std::make_unique<FakeGpuCommunicator>(*std::move(inner), options.device));
}

}  // namespace cpptorchrun::worker
