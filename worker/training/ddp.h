// DistributedDataParallel, from scratch, over the Communicator interface.
//
// Parameters are grouped into buckets (in reverse registration order, as
// PyTorch's DDP does, each closed once it reaches bucket_cap_bytes). A hook on every
// parameter copies its gradient into its bucket's flat buffer during the
// backward pass; as soon as a bucket is full, and all buckets before it have
// gone, its all-reduce (sum) is launched asynchronously, so communication
// overlaps the rest of the backward pass. FinishBackward() waits for every
// bucket, divides by the world size and writes the averages into .grad.
// What a bucket's reduction is (plain all-reduce, 16-bit compression,
// PowerSGD) is the communication hook's (DdpOptions::comm_hook, comm_hook.h).
//
// Without overlap (DdpOptions::overlap false, for the benchmark of what
// overlap saves) the hooks still fill the buckets, but every all-reduce is
// launched in FinishBackward.
//
// Gradient accumulation: PrepareBackward(/*sync=*/false) leaves the hooks
// idle, so gradients just accumulate in .grad; on the next synchronised
// backward each bucket slot holds the accumulated sum (.grad so far plus
// the new gradient), which is what is reduced.
//
// Threading: one training thread drives Prepare/backward/Finish; hooks run
// on the autograd thread of that backward. Not for concurrent use.
#ifndef CPPTORCHRUN_WORKER_TRAINING_DDP_H_
#define CPPTORCHRUN_WORKER_TRAINING_DDP_H_

#include <torch/torch.h>

#include <cstdint>
#include <functional>
#include <memory>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "worker/comm/comm.h"
#include "worker/training/comm_hook.h"
#include "worker/training/ddp_stats.h"

namespace cpptorchrun::worker {

struct DdpOptions {
  // Bucket size cap in bytes (--bucket_cap_mb, default 25 MB).
  int64_t bucket_cap_bytes = int64_t{25} << 20;
  // The first bucket's cap (PyTorch's 1 MB): small, so that its all-reduce
  // starts early in the backward pass. Capped by bucket_cap_bytes.
  int64_t first_bucket_cap_bytes = int64_t{1} << 20;
  // Launch each bucket's all-reduce as soon as it is full (during the
  // backward pass); false: all of them in FinishBackward.
  bool overlap = true;
  // What happens to a bucket between "gradients ready" and "averages back
  // in place" (--comm_hook); validated by Create.
  CommHookOptions comm_hook;
  // Seconds on the clock of the backend's Work::Times; default
  // SteadySeconds. Tests inject a fake one.
  std::function<double()> now;
};

class DistributedDataParallel {
 public:
  struct Bucket {
    // Indices into the parameter list, in the order their slots sit.
    std::vector<size_t> params;
    std::vector<int64_t> offsets;
    torch::Tensor flat;
    // Views of `flat` shaped as the parameters in its slots.
    std::vector<torch::Tensor> grads;
    int pending = 0;
    bool launched = false;
    // The hook's collective to time (null when it has none or several).
    std::shared_ptr<Work> work;
  };

  // `parameters`: float32, contiguous, in registration order; `buffers` are
  // only broadcast. `comm` is borrowed and must outlive this. Errors:
  // InvalidArgument for non-float parameters, a cap below 1 byte or bad
  // hook options.
  static absl::StatusOr<std::unique_ptr<DistributedDataParallel>> Create(
      std::vector<torch::Tensor> parameters, std::vector<torch::Tensor> buffers,
      Communicator* comm, const DdpOptions& options);

  // Removes the hooks.
  ~DistributedDataParallel();

  // Copies rank `root`'s parameters and buffers to every rank (at start and
  // after restoring a checkpoint). Collective.
  absl::Status BroadcastState(int root = 0);

  // Call before each backward pass; `sync` false on accumulating steps.
  void PrepareBackward(bool sync);

  // DdpOptions::overlap, from the next backward pass on (the benchmark's
  // rotation of modes). Every rank must set the same.
  void set_overlap(bool overlap) { overlap_ = overlap; }

  // After the backward pass: on a synchronised step waits for every bucket's
  // all-reduce and leaves the world-average gradient in each .grad. A
  // parameter that got no gradient counts as zero. Errors: the
  // communicator's. No-op on an accumulating step.
  absl::Status FinishBackward();

  const std::vector<Bucket>& buckets() const { return buckets_; }
  const DdpStats& stats() const { return stats_; }
  int world_size() const { return comm_->world_size(); }

 private:
  DistributedDataParallel(std::vector<torch::Tensor> parameters,
                          std::vector<torch::Tensor> buffers, Communicator* comm,
                          const DdpOptions& options);
  void OnGradient(size_t index, const torch::Tensor& grad);
  void LaunchReadyBuckets();

  std::vector<torch::Tensor> parameters_;
  std::vector<torch::Tensor> buffers_;
  Communicator* const comm_;
  bool overlap_;
  const std::function<double()> now_;
  std::vector<Bucket> buckets_;
  // After buckets_: destroyed first, while the buckets it reads live.
  std::unique_ptr<CommHook> hook_;
  // Per parameter: its bucket and slot.
  std::vector<size_t> bucket_of_;
  std::vector<size_t> slot_of_;
  std::vector<unsigned> hook_ids_;
  std::vector<bool> got_grad_;
  bool sync_ = true;
  bool armed_ = false;
  size_t next_launch_ = 0;
  DdpStats stats_;
};

// Bucket assignment alone (for tests and logs): parameter indices per
// bucket, walking `sizes_bytes` from last to first. As in PyTorch's DDP, a
// parameter joins the open bucket and the bucket closes once its bytes reach
// the cap (`first_cap_bytes`, at most `cap_bytes`, for the first bucket;
// `cap_bytes` after it), so a bucket may pass its cap by its last parameter.
std::vector<std::vector<size_t>> AssignBuckets(const std::vector<int64_t>& sizes_bytes,
                                               int64_t first_cap_bytes, int64_t cap_bytes);

}  // namespace cpptorchrun::worker

#endif  // CPPTORCHRUN_WORKER_TRAINING_DDP_H_
