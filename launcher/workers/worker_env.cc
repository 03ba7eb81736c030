// The worker environment (docs/ENVIRONMENT.md).
#include "launcher/workers/worker_env.h"

#include <vector>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "proto/worker_contract.h"

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
  using namespace contract;  // NOLINT: the variables' names
  // Variables of an outer launcher must not leak into ours.
  for (const char* stale : kLauncherOwned) env.erase(stale);
  const int rank = in.rank_offset + in.local_rank;
  env[kRank] = absl::StrCat(rank);
  env[kLocalRank] = absl::StrCat(in.local_rank);
  env[kGroupRank] = absl::StrCat(in.group_rank);
  env[kRoleRank] = absl::StrCat(rank);
  env[kRoleName] = in.role;
  env[kRoleWorldSize] = absl::StrCat(in.world_size);
  env[kLocalWorldSize] = absl::StrCat(in.local_world_size);
  env[kWorldSize] = absl::StrCat(in.world_size);
  env[kGroupWorldSize] = absl::StrCat(in.group_world_size);
  env[kMasterAddr] = in.master_addr;
  env[kMasterPort] = absl::StrCat(in.master_port);
  env[kRestartCount] = absl::StrCat(in.restart_count);
  env[kMaxRestarts] = absl::StrCat(in.max_restarts);
  env[kRunId] = in.run_id;
  env[kUseAgentStore] = "False";
  env[kErrorFile] = in.error_file;
  env.emplace("TORCH_NCCL_ASYNC_ERROR_HANDLING", "1");
  if (OneThreadEach(in.local_world_size)) env.emplace("OMP_NUM_THREADS", "1");
  // A Python worker writes its stack when sent SIGABRT (python_stack.h);
  // a value the user set, empty included (off), is theirs.
  if (in.python_faulthandler) env.emplace("PYTHONFAULTHANDLER", "1");

  env[kRdzvRound] = absl::StrCat(in.round);
  if (!in.rdzv_endpoint.empty()) env[kRdzvEndpoint] = in.rdzv_endpoint;
  if (!in.rdzv_token_file.empty()) env[kRdzvTokenFile] = in.rdzv_token_file;
  if (!in.rdzv_ca_file.empty()) env[kRdzvCaFile] = in.rdzv_ca_file;
  if (!in.rdzv_cert_file.empty()) env[kRdzvCertFile] = in.rdzv_cert_file;
  if (!in.rdzv_key_file.empty()) env[kRdzvKeyFile] = in.rdzv_key_file;
  if (!in.agent_socket.empty()) {
    env[kAgentSocket] = in.agent_socket;
    if (in.in_place) env[kRecovery] = kRecoveryInPlace;
    if (in.worker_timeout > absl::ZeroDuration()) {
      env[kWorkerTimeoutS] = absl::StrCat(absl::ToDoubleSeconds(in.worker_timeout));
    }
  }
  if (!in.local_addr.empty()) env[kLocalAddr] = in.local_addr;
  const int slot = in.slot >= 0 ? in.slot : in.local_rank;
  if (in.fake_gpus > 0) {
    env[kFakeGpu] = absl::StrCat(slot);
    env[kFakeGpus] = absl::StrCat(in.fake_gpus);
  }
  if (in.virtual_local_rank) {
    env[kLocalRank] = "0";
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
