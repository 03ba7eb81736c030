// The environment of one worker: exactly torchrun's variables plus
// cpptorchrun's own, as docs/ENVIRONMENT.md lists them (the contract with
// the worker). A pure function of its inputs.
#ifndef CPPTORCHRUN_LAUNCHER_WORKER_ENV_H_
#define CPPTORCHRUN_LAUNCHER_WORKER_ENV_H_

#include <cstdint>
#include <map>
#include <string>

#include "absl/time/time.h"

namespace cpptorchrun::launcher {

struct WorkerEnvInputs {
  // The launcher's own environment, passed through beneath ours.
  std::map<std::string, std::string> base;
  std::string role = "default";
  int local_rank = 0;
  int local_world_size = 1;
  // The worker's slot on the node (its device: the fake GPU index, the GPU
  // under virtual_local_rank); -1: local_rank. They differ only while a
  // node runs with fewer workers than --nproc_per_node (in-place recovery
  // with no spare ready, docs/DESIGN.md): LOCAL_RANK stays contiguous, a
  // worker keeps its device.
  int slot = -1;
  // From the round's assignment.
  int group_rank = 0;
  int group_world_size = 1;
  int rank_offset = 0;  // global rank of this node's local rank 0
  int world_size = 1;
  std::string master_addr;
  int master_port = 0;
  int64_t round = 0;
  // Supervision.
  int restart_count = 0;
  int max_restarts = 0;
  std::string run_id;
  std::string error_file;
  std::string agent_socket;        // empty: not set
  // --worker_timeout, for the worker's own stall bound (it stops
  // heartbeating when no step completed for this long); set with
  // agent_socket only.
  absl::Duration worker_timeout = absl::ZeroDuration();
  std::string rdzv_endpoint;       // empty: not set
  std::string rdzv_token_file;     // empty: not set
  std::string rdzv_ca_file;        // TLS: the CA of the rendezvous's certificate; empty: plaintext
  std::string rdzv_cert_file;      // etcd: the client certificate (and key); empty: none
  std::string rdzv_key_file;
  std::string local_addr;          // empty: not set
  int fake_gpus = 0;               // 0: real devices, no CPPTORCHRUN_FAKE_GPU(S)
  // torchrun's --virtual_local_rank: LOCAL_RANK is 0 for every worker and
  // CUDA_VISIBLE_DEVICES names only the worker's own GPU (the local_rank-th
  // of the launcher's CUDA_VISIBLE_DEVICES, else device local_rank), so each
  // worker sees its GPU as device 0.
  bool virtual_local_rank = false;
  // --recovery in_place: CPPTORCHRUN_RECOVERY=in_place tells a worker that
  // can recover in place that its launcher will keep it through a round
  // change (docs/DESIGN.md); without it a worker whose collective fails
  // fails, as under torchrun.
  bool in_place = false;
  // A Python worker: PYTHONFAULTHANDLER=1 unless the launcher's
  // environment sets it, so that a hung worker's stack can be taken before
  // it is killed (launcher/workers/python_stack.h).
  bool python_faulthandler = false;
};

std::map<std::string, std::string> BuildWorkerEnv(const WorkerEnvInputs& in);

// The threads each worker's LibTorch runs, as BuildWorkerEnv leaves
// OMP_NUM_THREADS: the launcher's (`base`) when it is a positive number, else
// 1 where several workers share the node (torchrun's default), else `cpus`
// (LibTorch's own default: every CPU it may use).
int WorkerThreads(const std::map<std::string, std::string>& base, int local_world_size, int cpus);

}  // namespace cpptorchrun::launcher

#endif  // CPPTORCHRUN_LAUNCHER_WORKER_ENV_H_
