// The worker environment (docs/ENVIRONMENT.md).
#include "launcher/workers/worker_env.h"

#include <vector>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"

namespace cpptorchrun::launcher {
namespace {

// torchrun's OMP_NUM_THREADS where the user set none: 1 for several
// workers on a node (none for one).
bool OneThreadEach(int local_world_size) { return local_world_size > 1; }

}  // namespace

int WorkerThreads(const std::map<std::string, std::string>& base, int local_world_size, int cpus) {
  if (auto it = base.find("OMP_NUM_THREADS"); it != base.end()) {
    int v = 0;
    if (absl::SimpleAtoi(it->second, &v) && v > 0) return v;
  }
  return OneThreadEach(local_world_size) ? 1 : cpus;
}

std::map<std::string, std::string> BuildWorkerEnv(const WorkerEnvInputs& in) {
  std::map<std::string, std::string> env = in.base;
  // Variables of an outer launcher must not leak into ours.
  for (const char* stale : {"CPPTORCHRUN_FAKE_GPU", "CPPTORCHRUN_FAKE_GPUS", "CPPTORCHRUN_AGENT_SOCKET",
                            "CPPTORCHRUN_WORKER_TIMEOUT_S", "CPPTORCHRUN_RECOVERY",
                            "CPPTORCHRUN_RDZV_ENDPOINT", "CPPTORCHRUN_RDZV_ROUND", "CPPTORCHRUN_RDZV_CERT_FILE", "CPPTORCHRUN_RDZV_KEY_FILE",
                            "CPPTORCHRUN_RDZV_TOKEN_FILE", "CPPTORCHRUN_RDZV_CA_FILE", "CPPTORCHRUN_LOCAL_ADDR",
                            "TORCHELASTIC_ERROR_FILE"}) {
    env.erase(stale);
  }
  const int rank = in.rank_offset + in.local_rank;
  env["RANK"] = absl::StrCat(rank);
  env["LOCAL_RANK"] = absl::StrCat(in.local_rank);
  env["GROUP_RANK"] = absl::StrCat(in.group_rank);
  env["ROLE_RANK"] = absl::StrCat(rank);
  env["ROLE_NAME"] = in.role;
  env["ROLE_WORLD_SIZE"] = absl::StrCat(in.world_size);
  env["LOCAL_WORLD_SIZE"] = absl::StrCat(in.local_world_size);
  env["WORLD_SIZE"] = absl::StrCat(in.world_size);
  env["GROUP_WORLD_SIZE"] = absl::StrCat(in.group_world_size);
  env["MASTER_ADDR"] = in.master_addr;
  env["MASTER_PORT"] = absl::StrCat(in.master_port);
  env["TORCHELASTIC_RESTART_COUNT"] = absl::StrCat(in.restart_count);
  env["TORCHELASTIC_MAX_RESTARTS"] = absl::StrCat(in.max_restarts);
  env["TORCHELASTIC_RUN_ID"] = in.run_id;
  env["TORCHELASTIC_USE_AGENT_STORE"] = "False";
  env["TORCHELASTIC_ERROR_FILE"] = in.error_file;
  env.emplace("TORCH_NCCL_ASYNC_ERROR_HANDLING", "1");
  if (OneThreadEach(in.local_world_size)) env.emplace("OMP_NUM_THREADS", "1");
  // A Python worker writes its stack when sent SIGABRT (python_stack.h);
  // a value the user set, empty included (off), is theirs.
  if (in.python_faulthandler) env.emplace("PYTHONFAULTHANDLER", "1");

  env["CPPTORCHRUN_RDZV_ROUND"] = absl::StrCat(in.round);
  if (!in.rdzv_endpoint.empty()) env["CPPTORCHRUN_RDZV_ENDPOINT"] = in.rdzv_endpoint;
  if (!in.rdzv_token_file.empty()) env["CPPTORCHRUN_RDZV_TOKEN_FILE"] = in.rdzv_token_file;
  if (!in.rdzv_ca_file.empty()) env["CPPTORCHRUN_RDZV_CA_FILE"] = in.rdzv_ca_file;
  if (!in.rdzv_cert_file.empty()) env["CPPTORCHRUN_RDZV_CERT_FILE"] = in.rdzv_cert_file;
  if (!in.rdzv_key_file.empty()) env["CPPTORCHRUN_RDZV_KEY_FILE"] = in.rdzv_key_file;
  if (!in.agent_socket.empty()) {
    env["CPPTORCHRUN_AGENT_SOCKET"] = in.agent_socket;
    if (in.in_place) env["CPPTORCHRUN_RECOVERY"] = "in_place";
    if (in.worker_timeout > absl::ZeroDuration()) {
      env["CPPTORCHRUN_WORKER_TIMEOUT_S"] = absl::StrCat(absl::ToDoubleSeconds(in.worker_timeout));
    }
  }
  if (!in.local_addr.empty()) env["CPPTORCHRUN_LOCAL_ADDR"] = in.local_addr;
  const int slot = in.slot >= 0 ? in.slot : in.local_rank;
  if (in.fake_gpus > 0) {
    env["CPPTORCHRUN_FAKE_GPU"] = absl::StrCat(slot);
    env["CPPTORCHRUN_FAKE_GPUS"] = absl::StrCat(in.fake_gpus);
  }
  if (in.virtual_local_rank) {
    env["LOCAL_RANK"] = "0";
    std::string device = absl::StrCat(slot);
    if (auto it = in.base.find("CUDA_VISIBLE_DEVICES"); it != in.base.end() && !it->second.empty()) {
      std::vector<std::string> visible = absl::StrSplit(it->second, ',');
      if (slot < static_cast<int>(visible.size())) device = visible[slot];
    }
    env["CUDA_VISIBLE_DEVICES"] = device;
  }
  return env;
}

}  // namespace cpptorchrun::launcher
