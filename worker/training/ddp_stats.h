// Where DDP's gradient communication went (DdpStats): the figures DDP sums
// per synchronised step, kept apart from ddp.h so that code that only
// tallies them (the all-reduce mode rotation, tests) needs no LibTorch.
#ifndef CPPTORCHRUN_WORKER_TRAINING_DDP_STATS_H_
#define CPPTORCHRUN_WORKER_TRAINING_DDP_STATS_H_

#include <cstdint>

namespace cpptorchrun::worker {

// Where a synchronised step's communication went, summed over the steps.
struct DdpStats {
  // Synchronised backward passes finished.
  int64_t steps = 0;
  // FinishBackward's wait for the all-reduces: what the backward pass did
  // not hide, as the training thread sees it.
  double wait_seconds = 0;
  // Steps whose every all-reduce reported when it ran (Work::Times); the
  // two figures below cover those steps only.
  int64_t timed_steps = 0;
  // The all-reduces' own run time.
  double allreduce_seconds = 0;
  // Of that, the part that ran before the backward pass returned (before
  // FinishBackward was called): hidden behind the backward pass.
  double hidden_seconds = 0;
  // Payload bytes this rank handed to the gradients' all-reduces (count x
  // element size: what the communication hook sends, comm_hook.h).
  int64_t bytes_sent = 0;

  // Field by field: what happened between two snapshots, and its sum.
  DdpStats operator-(const DdpStats& before) const;
  DdpStats& operator+=(const DdpStats& more);
};

}  // namespace cpptorchrun::worker

#endif  // CPPTORCHRUN_WORKER_TRAINING_DDP_STATS_H_
