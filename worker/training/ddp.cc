// DDP: bucket assignment, gradient hooks, in-order launches, averaging.
#include "worker/training/ddp.h"

#include <algorithm>
#include <optional>

#include "absl/strings/str_cat.h"

namespace cpptorchrun::worker {

std::vector<std::vector<size_t>> AssignBuckets(const std::vector<int64_t>& sizes_bytes,
                                               int64_t first_cap_bytes, int64_t cap_bytes) {
  // PyTorch's rule (compute_bucket_assignment_by_size): a parameter joins
  // the open bucket, and the bucket closes once it has reached its cap. The
  // cap is thus a closing threshold, not a ceiling: a bucket ends with the
  // parameter that takes it to or past the cap. Closing *before* a parameter
  // that would pass the cap instead split the seed's MLP into a 22 KB and a
  // 1.6 MB bucket, both ready at the end of fc1's backward node: two
  // latency-bound collectives per step for no overlap at all.
  std::vector<std::vector<size_t>> out;
  int64_t filled = 0;
  bool open = false;
  for (size_t k = sizes_bytes.size(); k-- > 0;) {
    if (!open) {
      out.emplace_back();
      filled = 0;
      open = true;
    }
    out.back().push_back(k);
    filled += sizes_bytes[k];
    // The first bucket has its own (smaller) cap.
    const int64_t cap = out.size() == 1 ? std::min(first_cap_bytes, cap_bytes) : cap_bytes;
    if (filled >= cap) open = false;
  }
  return out;
}

absl::StatusOr<std::unique_ptr<DistributedDataParallel>> DistributedDataParallel::Create(
    std::vector<torch::Tensor> parameters, std::vector<torch::Tensor> buffers, Communicator* comm,
    const DdpOptions& options) {
  if (comm == nullptr) return absl::InvalidArgumentError("DDP: no communicator");
  if (options.bucket_cap_bytes < 1) {
    return absl::InvalidArgumentError(
        absl::StrCat("DDP: bucket cap of ", options.bucket_cap_bytes, " bytes"));
  }
  if (absl::Status s = ValidateCommHookOptions(options.comm_hook); !s.ok()) return s;
  std::vector<int64_t> sizes;
  for (size_t i = 0; i < parameters.size(); ++i) {
    const torch::Tensor& p = parameters[i];
    if (p.scalar_type() != torch::kFloat || !p.is_contiguous()) {
      return absl::InvalidArgumentError(
          absl::StrCat("DDP: parameter ", i, " is not a contiguous float32 tensor"));
    }
    sizes.push_back(p.numel() * static_cast<int64_t>(sizeof(float)));
  }
  std::unique_ptr<DistributedDataParallel> ddp(
      new DistributedDataParallel(std::move(parameters), std::move(buffers), comm, options));
  ddp->bucket_of_.resize(ddp->parameters_.size());
  ddp->slot_of_.resize(ddp->parameters_.size());
  for (const std::vector<size_t>& members : AssignBuckets(sizes, options.first_bucket_cap_bytes, options.bucket_cap_bytes)) {
    Bucket bucket;
    int64_t offset = 0;
    for (size_t index : members) {
      ddp->bucket_of_[index] = ddp->buckets_.size();
      ddp->slot_of_[index] = bucket.params.size();
      bucket.params.push_back(index);
      bucket.offsets.push_back(offset);
      offset += ddp->parameters_[index].numel();
    }
    bucket.flat = torch::zeros({offset}, torch::kFloat);
    for (size_t slot = 0; slot < bucket.params.size(); ++slot) {
      const torch::Tensor& param = ddp->parameters_[bucket.params[slot]];
      bucket.grads.push_back(
          bucket.flat.narrow(0, bucket.offsets[slot], param.numel()).view(param.sizes()));
    }
    ddp->buckets_.push_back(std::move(bucket));
  }
  ddp->hook_ = NewCommHook(options.comm_hook, comm);
  DistributedDataParallel* self = ddp.get();
  for (size_t i = 0; i < self->parameters_.size(); ++i) {
    self->hook_ids_.push_back(self->parameters_[i].register_hook(
        [self, i](torch::Tensor grad) { self->OnGradient(i, grad); }));
  }
  self->got_grad_.assign(self->parameters_.size(), false);
  return ddp;
}

DistributedDataParallel::DistributedDataParallel(std::vector<torch::Tensor> parameters,
                                                 std::vector<torch::Tensor> buffers,
                                                 Communicator* comm, const DdpOptions& options)
    : parameters_(std::move(parameters)),
      buffers_(std::move(buffers)),
      comm_(comm),
      overlap_(options.overlap),
      now_(options.now ? options.now : std::function<double()>(SteadySeconds)) {}

DistributedDataParallel::~DistributedDataParallel() {
  // A bucket started and never finished (a failed step): its collectives
  // may still read or write the buckets.
  for (size_t b = 0; b < buckets_.size(); ++b) {
    if (buckets_[b].launched) (void)hook_->Finish(b);
  }
  for (size_t i = 0; i < hook_ids_.size(); ++i) parameters_[i].remove_hook(hook_ids_[i]);
}

absl::Status DistributedDataParallel::BroadcastState(int root) {
  torch::NoGradGuard no_grad;
  std::vector<torch::Tensor> all;
  for (const auto& p : parameters_) all.push_back(p.detach().reshape({-1}).to(torch::kFloat));
  for (const auto& b : buffers_) all.push_back(b.detach().reshape({-1}).to(torch::kFloat));
  if (all.empty()) return absl::OkStatus();
  torch::Tensor flat = torch::cat(all);
  absl::Status status = comm_->Broadcast(flat.data_ptr<float>(), flat.numel(), DType::kFloat32, root);
  if (!status.ok()) return status;
  int64_t offset = 0;
  auto take = [&](torch::Tensor& t) {
    t.copy_(flat.narrow(0, offset, t.numel()).view_as(t));
    offset += t.numel();
  };
  for (auto& p : parameters_) take(p);
  for (auto& b : buffers_) take(b);
  return absl::OkStatus();
}

void DistributedDataParallel::PrepareBackward(bool sync) {
  sync_ = sync;
  armed_ = true;
  next_launch_ = 0;
  for (Bucket& bucket : buckets_) {
    bucket.pending = static_cast<int>(bucket.params.size());
    bucket.work.reset();
    bucket.launched = false;
  }
  got_grad_.assign(parameters_.size(), false);
}

void DistributedDataParallel::OnGradient(size_t index, const torch::Tensor& grad) {
  if (!armed_ || !sync_ || got_grad_[index]) return;
  got_grad_[index] = true;
  torch::NoGradGuard no_grad;
  Bucket& bucket = buckets_[bucket_of_[index]];
  const size_t slot = slot_of_[index];
  const torch::Tensor& param = parameters_[index];
  torch::Tensor dest = bucket.flat.narrow(0, bucket.offsets[slot], param.numel());
  // The hook sees this pass's gradient before autograd adds it to .grad;
  // what accumulated on earlier (unsynchronised) passes is added here.
  const torch::Tensor& previous = param.grad();
  if (previous.defined()) {
    torch::add_out(dest, previous.reshape({-1}), grad.reshape({-1}));
  } else {
    dest.copy_(grad.reshape({-1}));
  }
  --bucket.pending;
  if (overlap_) LaunchReadyBuckets();
}

void DistributedDataParallel::LaunchReadyBuckets() {
  // Launch strictly in bucket order so every rank issues the same sequence.
  while (next_launch_ < buckets_.size() && buckets_[next_launch_].pending == 0) {
    Bucket& bucket = buckets_[next_launch_];
    bucket.work = hook_->Start(next_launch_, bucket.flat, bucket.grads);
    bucket.launched = true;
    ++next_launch_;
  }
}

absl::Status DistributedDataParallel::FinishBackward() {
  if (!armed_) return absl::FailedPreconditionError("DDP: FinishBackward without PrepareBackward");
  armed_ = false;
  if (!sync_) return absl::OkStatus();
  // The backward pass has returned: communication after this is exposed.
  const double backward_end = now_();
  torch::NoGradGuard no_grad;
  // Parameters the graph did not reach: their slot is zero (or what they
  // accumulated), so every rank still issues every bucket.
  for (size_t i = 0; i < parameters_.size(); ++i) {
    if (got_grad_[i]) continue;
    Bucket& bucket = buckets_[bucket_of_[i]];
    torch::Tensor dest = bucket.flat.narrow(0, bucket.offsets[slot_of_[i]], parameters_[i].numel());
    const torch::Tensor& previous = parameters_[i].grad();
    if (previous.defined()) {
      dest.copy_(previous.reshape({-1}));
    } else {
      dest.zero_();
    }
    got_grad_[i] = true;
    --bucket.pending;
  }
  LaunchReadyBuckets();
  absl::Status first_error;
  bool timed = true;
  double allreduce = 0;
  double hidden = 0;
  for (size_t b = 0; b < buckets_.size(); ++b) {
    Bucket& bucket = buckets_[b];
    const double wait_start = now_();
    absl::Status status =
        bucket.launched ? hook_->Finish(b) : absl::InternalError("bucket not launched");
    bucket.launched = false;
    stats_.wait_seconds += now_() - wait_start;
    std::optional<WorkTimes> times = bucket.work ? bucket.work->Times() : std::nullopt;
    if (times.has_value()) {
      allreduce += times->finished - times->started;
      hidden += std::max(0.0, std::min(times->finished, backward_end) - times->started);
    } else {
      timed = false;
    }
    bucket.work.reset();
    if (!status.ok()) {
      if (first_error.ok()) first_error = status;
      continue;
    }
    for (size_t slot = 0; slot < bucket.params.size(); ++slot) {
      torch::Tensor& param = parameters_[bucket.params[slot]];
      torch::Tensor src = bucket.flat.narrow(0, bucket.offsets[slot], param.numel()).view_as(param);
      if (param.mutable_grad().defined()) {
        param.mutable_grad().copy_(src);
      } else {
        param.mutable_grad() = src.clone();
      }
    }
  }
  hook_->EndStep();
  stats_.bytes_sent = hook_->bytes_sent();
  if (first_error.ok()) {
    ++stats_.steps;
    if (timed) {
      ++stats_.timed_steps;
      stats_.allreduce_seconds += allreduce;
      stats_.hidden_seconds += hidden;
    }
  }
  return first_error;
}

}  // namespace cpptorchrun::worker
