// `train --comm_hook` and its knobs, torch-free: what DDP does to a bucket
// between "gradients ready" and "averaged gradients back in place", as
// PyTorch's DDP communication hooks do, and PowerSGD's compression rule and
// payload sizes as pure functions (worker/training/comm_hook.h applies them
// to tensors).
#ifndef CPPTORCHRUN_WORKER_TRAINING_COMM_HOOK_OPTIONS_H_
#define CPPTORCHRUN_WORKER_TRAINING_COMM_HOOK_OPTIONS_H_

#include <cstdint>
#include <string>

#include "absl/status/status.h"
#include "absl/status/statusor.h"

namespace cpptorchrun::worker {

// allreduce: float32 sum, then divided by the world (the default).
// fp16 / bf16: the bucket cast to half / bfloat16 and divided by the world
// there, all-reduced (sum) at 16 bits, cast back (torch's
// fp16_compress_hook, bf16_compress_hook).
// powersgd: rank-r PowerSGD with error feedback and warm start (Vogels et
// al. 2019; torch's powerSGD_hook).
enum class CommHookKind { kAllReduce, kFp16, kBf16, kPowerSgd };

// "allreduce", "fp16", "bf16", "powersgd".
const char* CommHookName(CommHookKind kind);
// The inverse; InvalidArgument naming --comm_hook and the choices.
absl::StatusOr<CommHookKind> ParseCommHookKind(const std::string& name);

struct CommHookOptions {
  CommHookKind kind = CommHookKind::kAllReduce;
  // PowerSGD's matrix approximation rank (torch's default 1).
  int powersgd_rank = 1;
  // Synchronised steps all-reduced uncompressed before PowerSGD starts.
  // torch defaults to 1,000, more than a short run here has (an epoch at
  // world 2 is 469 steps); 10 lets Adam's first, largest steps, from the
  // random initial weights, see exact gradients, and compresses the rest.
  int64_t powersgd_start_iter = 10;
  // A matrix is compressed only if it shrinks by more than this factor
  // (torch's min_compression_rate, default 2).
  double min_compression_rate = 2;
  // Seeds the random initial Q, identically on every rank.
  uint64_t seed = 0;
};

// InvalidArgument naming the first bad flag (--powersgd_rank,
// --powersgd_start_iter).
absl::Status ValidateCommHookOptions(const CommHookOptions& options);

// Whether PowerSGD compresses an n x m gradient matrix at rank
// min(n, m, rank): (n + m) * rank * min_rate < n * m.
bool PowerSgdCompresses(int64_t n, int64_t m, int rank, double min_rate);

}  // namespace cpptorchrun::worker

#endif  // CPPTORCHRUN_WORKER_TRAINING_COMM_HOOK_OPTIONS_H_
