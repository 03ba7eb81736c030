// The worker's environment (docs/ENVIRONMENT.md), parsed and checked in one
// place: torchrun's variables and cpptorchrun's own. A pure function of a
// getenv-like lookup, so tests pass a map.
#ifndef CPPTORCHRUN_WORKER_AGENT_ENV_H_
#define CPPTORCHRUN_WORKER_AGENT_ENV_H_

#include <cstdint>
#include <functional>
#include <optional>
#include <string>

#include "absl/status/statusor.h"
#include "absl/time/time.h"

namespace cpptorchrun::worker {

struct WorkerEnv {
  int rank = 0;
  int local_rank = 0;
  int world_size = 1;
  int local_world_size = 1;
  // The node's place among the nodes (GROUP_RANK, GROUP_WORLD_SIZE); 0 nodes
  // when GROUP_WORLD_SIZE is unset (a launcher that does not say).
  int group_rank = 0;
  int group_world_size = 0;
  std::string master_addr;
  int master_port = 0;
  std::string run_id;
  int64_t restart_count = 0;
  std::string error_file;
  std::string rdzv_endpoint;
  int64_t rdzv_round = 0;
  std::string rdzv_token_file;
  // TLS to the rendezvous: the CA file (CPPTORCHRUN_RDZV_CA_FILE); empty: plaintext.
  std::string rdzv_ca_file;
  // etcd: the client certificate and key (CPPTORCHRUN_RDZV_CERT_FILE,
  // CPPTORCHRUN_RDZV_KEY_FILE); empty: none.
  std::string rdzv_cert_file;
  std::string rdzv_key_file;
  std::string agent_socket;
  // Set only under --fake_gpus.
  std::optional<int> fake_gpu;
  // Where Gloo binds: CPPTORCHRUN_LOCAL_ADDR, else 127.0.0.1.
  std::string local_addr = "127.0.0.1";
  // How long the worker heartbeats without a completed step
  // (CPPTORCHRUN_WORKER_TIMEOUT_S, seconds, the launcher's --worker_timeout).
  absl::Duration worker_timeout = absl::Seconds(300);
  // CPPTORCHRUN_RECOVERY=in_place: the launcher keeps this worker through a
  // round change when its collective fails (docs/DESIGN.md).
  bool in_place = false;
};

// Returns the value of a variable, or nullptr when unset.
using EnvLookup = std::function<const char*(const char*)>;

// Absent variables take the defaults above (a world of one). Errors
// (InvalidArgument) name the variable and its bad value: not an integer,
// RANK outside [0, WORLD_SIZE), LOCAL_RANK negative, GROUP_RANK outside
// [0, GROUP_WORLD_SIZE) when both are set, a port outside 1..65535,
// a worker timeout that is not a positive number of seconds.
absl::StatusOr<WorkerEnv> ParseWorkerEnv(const EnvLookup& lookup);

}  // namespace cpptorchrun::worker

#endif  // CPPTORCHRUN_WORKER_AGENT_ENV_H_
