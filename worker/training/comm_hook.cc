// The communication hooks: plain all-reduce, 16-bit compression, PowerSGD.
#include "worker/training/comm_hook.h"

#include <algorithm>

#include "absl/strings/str_cat.h"

namespace cpptorchrun::worker {
namespace {

// The state of a bucket between Start and Finish.
template <typename State>
State& Slot(std::vector<State>& states, size_t bucket) {
  if (states.size() <= bucket) states.resize(bucket + 1);
  return states[bucket];
}

// A float32 sum all-reduce of `t` (contiguous), counted in `bytes`.
std::shared_ptr<Work> SumAsync(Communicator* comm, const torch::Tensor& t, DType dtype,
                               int64_t* bytes) {
  *bytes += t.numel() * static_cast<int64_t>(DTypeSize(dtype));
  return comm->AllReduceAsync(t.data_ptr(), t.numel(), dtype, ReduceOp::kSum);
}

absl::Status WaitFor(std::shared_ptr<Work>& work) {
  if (!work) return absl::InternalError("DDP: a bucket's hook was not started");
  absl::Status status = work->Wait();
  work.reset();
  return status;
}

// allreduce: the sum at float32, then divided by the world.
class AllReduceHook final : public CommHook {
 public:
  explicit AllReduceHook(Communicator* comm) : comm_(comm) {}

  std::shared_ptr<Work> Start(size_t bucket, const torch::Tensor& flat,
                              const std::vector<torch::Tensor>&) override {
    Pending& p = Slot(pending_, bucket);
    p.flat = flat;
    p.work = SumAsync(comm_, flat, DType::kFloat32, &bytes_sent_);
    return p.work;
  }

  absl::Status Finish(size_t bucket) override {
    Pending& p = Slot(pending_, bucket);
    absl::Status status = WaitFor(p.work);
    if (status.ok() && comm_->world_size() > 1) p.flat.mul_(1.0 / comm_->world_size());
    p.flat = torch::Tensor();
    return status;
  }

 private:
  struct Pending {
    torch::Tensor flat;
    std::shared_ptr<Work> work;
  };
  Communicator* const comm_;
  std::vector<Pending> pending_;
};

// fp16 / bf16, as torch's fp16_compress_hook: cast, divide by the world in
// the 16-bit type (before the sum, so that it cannot overflow), all-reduce
// the sum at 16 bits, copy back into the float32 bucket.
class SixteenBitHook final : public CommHook {
 public:
  SixteenBitHook(Communicator* comm, CommHookKind kind)
      : comm_(comm),
        dtype_(kind == CommHookKind::kFp16 ? DType::kFloat16 : DType::kBFloat16),
        scalar_(kind == CommHookKind::kFp16 ? torch::kHalf : torch::kBFloat16) {}

  std::shared_ptr<Work> Start(size_t bucket, const torch::Tensor& flat,
                              const std::vector<torch::Tensor>&) override {
    Pending& p = Slot(pending_, bucket);
    p.flat = flat;
    p.compressed = flat.to(scalar_).div_(comm_->world_size());
    p.work = SumAsync(comm_, p.compressed, dtype_, &bytes_sent_);
    return p.work;
  }

  absl::Status Finish(size_t bucket) override {
    Pending& p = Slot(pending_, bucket);
    absl::Status status = WaitFor(p.work);
    if (status.ok()) p.flat.copy_(p.compressed);
    p = Pending();
    return status;
  }

 private:
  struct Pending {
    torch::Tensor flat;
    torch::Tensor compressed;
    std::shared_ptr<Work> work;
  };
  Communicator* const comm_;
  const DType dtype_;
  const torch::ScalarType scalar_;
  std::vector<Pending> pending_;
};

// PowerSGD (torch's powerSGD_hook, batch_tensors_with_same_shape off): for
// the first start_iter steps the plain all-reduce; then per bucket, with
// the previous step's error e added (M += e), every gradient that
// PowerSgdCompresses is a matrix M (n x m, its first dimension by the rest)
// approximated at rank r: P = M Q, all-reduce P, orthogonalise P,
// Q = M^T P, all-reduce Q, Q /= world, M ~ P Q^T; the other gradients are
// all-reduced uncompressed and averaged. e = M (as input) - the result, over
// the whole bucket. Q is kept for the next step (warm start, orthogonalised
// again first); the first Q of a bucket is drawn from one generator seeded
// alike on every rank, buckets in order.
class PowerSgdHook final : public CommHook {
 public:
  PowerSgdHook(const CommHookOptions& options, Communicator* comm)
      : options_(options),
        comm_(comm),
        plain_(comm),
        generator_(at::detail::createCPUGenerator(options.seed)) {}

  std::shared_ptr<Work> Start(size_t bucket, const torch::Tensor& flat,
                              const std::vector<torch::Tensor>& grads) override {
    Bucket& b = Slot(buckets_, bucket);
    b.plain = iter_ < options_.powersgd_start_iter;
    if (b.plain) return plain_.Start(bucket, flat, grads);
    b.flat = flat;
    if (b.error.defined()) {
      flat.add_(b.error);
    } else {
      b.error = torch::zeros_like(flat);
    }
    b.input = flat.clone();
    Split(b, grads);
    Approximate(b);
    if (b.uncompressed.numel() > 0) {
      b.uncompressed_work = SumAsync(comm_, b.uncompressed, DType::kFloat32, &bytes_sent_);
    }
    b.p_work = SumAsync(comm_, b.p_memory, DType::kFloat32, &bytes_sent_);
    return nullptr;
  }

  absl::Status Finish(size_t bucket) override {
    Bucket& b = Slot(buckets_, bucket);
    if (b.plain) return plain_.Finish(bucket);
    absl::Status status = absl::OkStatus();
    if (b.uncompressed_work) status = WaitFor(b.uncompressed_work);
    absl::Status p_status = WaitFor(b.p_work);
    if (status.ok()) status = p_status;
    if (status.ok()) status = Decompress(b);
    b.flat = b.input = b.uncompressed = torch::Tensor();
    b.matrices.clear();
    b.ps.clear();
    b.qs.clear();
    b.uncompressed_views.clear();
    return status;
  }

  void EndStep() override { ++iter_; }
  int64_t bytes_sent() const override { return bytes_sent_ + plain_.bytes_sent(); }

 private:
  struct Bucket {
    // Kept between steps.
    torch::Tensor error, p_memory, q_memory;
    // This step's.
    bool plain = true;
    torch::Tensor flat, input, uncompressed;
    std::vector<torch::Tensor> uncompressed_views, matrices, ps, qs;
    std::shared_ptr<Work> uncompressed_work, p_work;
  };

  // Sorts the gradients into matrices to compress and the rest; the rest
  // is packed into b.uncompressed.
  void Split(Bucket& b, const std::vector<torch::Tensor>& grads) {
    for (const torch::Tensor& g : grads) {
      const int64_t n = g.dim() == 0 ? 1 : g.size(0);
      const int64_t m = n == 0 ? 0 : g.numel() / n;
      if (g.numel() > 0 && PowerSgdCompresses(n, m, options_.powersgd_rank,
                                                options_.min_compression_rate)) {
        b.matrices.push_back(g.view({n, m}));
      } else {
        b.uncompressed_views.push_back(g.reshape({-1}));
      }
    }
    b.uncompressed = b.uncompressed_views.empty() ? torch::zeros({0}, torch::kFloat)
                                                  : torch::cat(b.uncompressed_views);
  }

  // P = M Q for every matrix, Q warm (orthogonalised again) or fresh.
  void Approximate(Bucket& b) {
    int64_t p_total = 0;
    int64_t q_total = 0;
    for (const torch::Tensor& mat : b.matrices) {
      const int64_t r = std::min<int64_t>({mat.size(0), mat.size(1), options_.powersgd_rank});
      p_total += mat.size(0) * r;
      q_total += mat.size(1) * r;
    }
    const bool fresh = !b.q_memory.defined();
    if (fresh) {
      b.p_memory = torch::empty({p_total}, torch::kFloat);
      b.q_memory = torch::empty({q_total}, torch::kFloat);
    }
    int64_t p_at = 0;
    int64_t q_at = 0;
    for (const torch::Tensor& mat : b.matrices) {
      const int64_t n = mat.size(0);
      const int64_t m = mat.size(1);
      const int64_t r = std::min<int64_t>({n, m, options_.powersgd_rank});
      b.ps.push_back(b.p_memory.narrow(0, p_at, n * r).view({n, r}));
      b.qs.push_back(b.q_memory.narrow(0, q_at, m * r).view({m, r}));
      p_at += n * r;
      q_at += m * r;
      torch::Tensor& q = b.qs.back();
      if (fresh) q.copy_(torch::randn({m, r}, generator_, torch::kFloat));
      OrthogonaliseColumns(q);
      torch::mm_out(b.ps.back(), mat, q);
    }
  }

  // After P's all-reduce: the uncompressed part averaged, then Q, its
  // all-reduce, the approximation written into the bucket, the new error.
  absl::Status Decompress(Bucket& b) {
    const double world = comm_->world_size();
    b.uncompressed.div_(world);
    int64_t at = 0;
    for (torch::Tensor& view : b.uncompressed_views) {
      view.copy_(b.uncompressed.narrow(0, at, view.numel()));
      at += view.numel();
    }
    for (size_t i = 0; i < b.matrices.size(); ++i) {
      OrthogonaliseColumns(b.ps[i]);
      torch::mm_out(b.qs[i], b.matrices[i].t(), b.ps[i]);
    }
    std::shared_ptr<Work> q_work = SumAsync(comm_, b.q_memory, DType::kFloat32, &bytes_sent_);
    if (absl::Status status = WaitFor(q_work); !status.ok()) return status;
    b.q_memory.div_(world);
    for (size_t i = 0; i < b.matrices.size(); ++i) {
      torch::mm_out(b.matrices[i], b.ps[i], b.qs[i].t());
    }
    b.error = b.input - b.flat;
    return absl::OkStatus();
  }

  const CommHookOptions options_;
  Communicator* const comm_;
  AllReduceHook plain_;
  at::Generator generator_;
  int64_t iter_ = 0;
  std::vector<Bucket> buckets_;
};

}  // namespace

void OrthogonaliseColumns(torch::Tensor& matrix) {
  torch::NoGradGuard no_grad;
  const int64_t columns = matrix.size(1);
  for (int64_t i = 0; i < columns; ++i) {
    torch::Tensor col = matrix.narrow(1, i, 1);
    const double norm = col.norm().item<double>();
    if (norm == 0) {
      col.zero_();
    } else {
      col.div_(norm);
    }
    if (i + 1 < columns) {
      torch::Tensor rest = matrix.narrow(1, i + 1, columns - i - 1);
      rest.sub_((col * rest).sum(0, /*keepdim=*/true) * col);
    }
  }
}

std::unique_ptr<CommHook> NewCommHook(const CommHookOptions& options, Communicator* comm) {
  switch (options.kind) {
    case CommHookKind::kAllReduce:
      break;
    case CommHookKind::kFp16:
    case CommHookKind::kBf16:
      return std::make_unique<SixteenBitHook>(comm, options.kind);
    case CommHookKind::kPowerSgd:
      return std::make_unique<PowerSgdHook>(options, comm);
  }
  return std::make_unique<AllReduceHook>(comm);
}

}  // namespace cpptorchrun::worker
