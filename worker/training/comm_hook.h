// DDP's communication hooks: what happens to a bucket between "gradients
// ready" and "averaged gradients back in place" (--comm_hook; the choices
// in comm_hook_options.h). DDP calls Start for each bucket in bucket order
// as soon as it is full (during the backward pass), then, once the
// backward pass has returned and every bucket has started, Finish for
// each in bucket order, then EndStep. Every rank thus issues the same
// collectives in the same order.
//
// Bytes sent are the payloads this rank hands to all-reduces (count x
// element size, summed): what the hook puts on the wire per all-reduce,
// before the backend's own algorithm (a ring sends 2 (w - 1) / w of it).
#ifndef CPPTORCHRUN_WORKER_TRAINING_COMM_HOOK_H_
#define CPPTORCHRUN_WORKER_TRAINING_COMM_HOOK_H_

#include <torch/torch.h>

#include <cstdint>
#include <memory>
#include <vector>

#include "absl/status/status.h"
#include "worker/comm/comm.h"
#include "worker/training/comm_hook_options.h"

namespace cpptorchrun::worker {

class CommHook {
 public:
  virtual ~CommHook() = default;
  // Starts reducing bucket `bucket`: `flat` (float32) holds this rank's
  // gradients, `grads` are views of it shaped as the parameters in its
  // slots. Both stay valid and untouched by the caller until Finish.
  // Returns the Work to time when the hook's communication before Finish is
  // one collective, else null (not timed).
  virtual std::shared_ptr<Work> Start(size_t bucket, const torch::Tensor& flat,
                                      const std::vector<torch::Tensor>& grads) = 0;
  // Waits for (and completes) the bucket's reduction: the world average, or
  // its compressed approximation, is in `flat`. Errors: the communicator's.
  virtual absl::Status Finish(size_t bucket) = 0;
  // After every bucket's Finish on a synchronised step.
  virtual void EndStep() {}
  // Payload bytes handed to all-reduces so far (see above).
  virtual int64_t bytes_sent() const { return bytes_sent_; }

 protected:
  int64_t bytes_sent_ = 0;
};

// The hook `options.kind` over `comm` (borrowed; must outlive it).
// options must be valid (ValidateCommHookOptions).
std::unique_ptr<CommHook> NewCommHook(const CommHookOptions& options, Communicator* comm);

// Gram-Schmidt on the columns of `matrix` (n x r, float32, in place), as
// PowerSGD orthogonalises P and Q: each column normalised, then removed
// from the columns after it. A column of norm 0 is left zero (torch's
// epsilon 0 would divide by zero).
void OrthogonaliseColumns(torch::Tensor& matrix);

}  // namespace cpptorchrun::worker

#endif  // CPPTORCHRUN_WORKER_TRAINING_COMM_HOOK_H_
