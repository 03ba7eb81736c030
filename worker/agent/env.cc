// Parsing of the worker environment.
#include "worker/agent/env.h"

#include <cerrno>
#include <cmath>
#include <cstring>
#include <fstream>
#include <sstream>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/strip.h"
#include "absl/strings/ascii.h"

namespace cpptorchrun::worker {
namespace {

absl::Status Int(const EnvLookup& lookup, const char* name, int64_t* out) {
  const char* value = lookup(name);
  if (value == nullptr || *value == '\0') return absl::OkStatus();
  if (!absl::SimpleAtoi(value, out)) {
    return absl::InvalidArgumentError(absl::StrCat(name, "='", value, "' is not an integer"));
  }
  return absl::OkStatus();
}

// A positive, finite number of seconds; absent or empty: `out` is kept.
absl::Status Seconds(const EnvLookup& lookup, const char* name, absl::Duration* out) {
  const char* value = lookup(name);
  if (value == nullptr || *value == '\0') return absl::OkStatus();
  double seconds = 0;
  if (!absl::SimpleAtod(value, &seconds) || !std::isfinite(seconds) || !(seconds > 0)) {
    return absl::InvalidArgumentError(
        absl::StrCat(name, "='", value, "' is not a positive number of seconds"));
  }
  *out = absl::Seconds(seconds);
  return absl::OkStatus();
}

std::string Str(const EnvLookup& lookup, const char* name, const std::string& fallback = "") {
  const char* value = lookup(name);
  return value != nullptr && *value != '\0' ? value : fallback;
}

}  // namespace

absl::StatusOr<WorkerEnv> ParseWorkerEnv(const EnvLookup& lookup) {
  WorkerEnv env;
  int64_t rank = 0, local_rank = 0, world = 1, local_world = 1, port = 0, fake = -1;
  int64_t group_rank = 0, group_world = 0;
  for (auto [name, out] : {std::pair<const char*, int64_t*>{"RANK", &rank},
                           {"LOCAL_RANK", &local_rank},
                           {"WORLD_SIZE", &world},
                           {"LOCAL_WORLD_SIZE", &local_world},
                           {"GROUP_RANK", &group_rank},
                           {"GROUP_WORLD_SIZE", &group_world},
                           {"MASTER_PORT", &port},
                           {"TORCHELASTIC_RESTART_COUNT", &env.restart_count},
                           {"CPPTORCHRUN_RDZV_ROUND", &env.rdzv_round},
                           {"CPPTORCHRUN_FAKE_GPU", &fake}}) {
    if (absl::Status s = Int(lookup, name, out); !s.ok()) return s;
  }
  if (world < 1 || world > (1 << 20)) {
    return absl::InvalidArgumentError(absl::StrCat("WORLD_SIZE=", world, " is not a world size"));
  }
  if (rank < 0 || rank >= world) {
    return absl::InvalidArgumentError(
        absl::StrCat("RANK=", rank, " is outside [0, WORLD_SIZE=", world, ")"));
  }
  if (local_rank < 0 || local_world < 1 || local_rank >= local_world) {
    return absl::InvalidArgumentError(absl::StrCat("LOCAL_RANK=", local_rank,
                                                   " is outside [0, LOCAL_WORLD_SIZE=",
                                                   local_world, ")"));
  }
  if (group_world != 0 && (group_world < 1 || group_world > world || group_rank < 0 ||
                           group_rank >= group_world)) {
    return absl::InvalidArgumentError(absl::StrCat("GROUP_RANK=", group_rank,
                                                   " is outside [0, GROUP_WORLD_SIZE=",
                                                   group_world, ") or GROUP_WORLD_SIZE exceeds "
                                                   "WORLD_SIZE=", world));
  }
  if (lookup("MASTER_PORT") != nullptr && *lookup("MASTER_PORT") != '\0' &&
      (port < 1 || port > 65535)) {
    return absl::InvalidArgumentError(absl::StrCat("MASTER_PORT=", port, " is not a port"));
  }
  if (env.restart_count < 0) {
    return absl::InvalidArgumentError("TORCHELASTIC_RESTART_COUNT is negative");
  }
  if (absl::Status s = Seconds(lookup, "CPPTORCHRUN_WORKER_TIMEOUT_S", &env.worker_timeout);
      !s.ok()) {
    return s;
  }
  if (const char* recovery = lookup("CPPTORCHRUN_RECOVERY"); recovery != nullptr && *recovery != '\0') {
    if (std::string(recovery) != "in_place" && std::string(recovery) != "gang") {
      return absl::InvalidArgumentError(
          absl::StrCat("CPPTORCHRUN_RECOVERY=", recovery, " is neither in_place nor gang"));
    }
    env.in_place = std::string(recovery) == "in_place";
  }
  env.rank = static_cast<int>(rank);
  env.local_rank = static_cast<int>(local_rank);
  env.world_size = static_cast<int>(world);
  env.local_world_size = static_cast<int>(local_world);
  env.group_rank = static_cast<int>(group_rank);
  env.group_world_size = static_cast<int>(group_world);
  env.master_port = static_cast<int>(port);
  env.master_addr = Str(lookup, "MASTER_ADDR");
  env.run_id = Str(lookup, "TORCHELASTIC_RUN_ID", "none");
  env.error_file = Str(lookup, "TORCHELASTIC_ERROR_FILE");
  env.rdzv_endpoint = Str(lookup, "CPPTORCHRUN_RDZV_ENDPOINT");
  env.rdzv_token_file = Str(lookup, "CPPTORCHRUN_RDZV_TOKEN_FILE");
  env.rdzv_ca_file = Str(lookup, "CPPTORCHRUN_RDZV_CA_FILE");
  env.rdzv_cert_file = Str(lookup, "CPPTORCHRUN_RDZV_CERT_FILE");
  env.rdzv_key_file = Str(lookup, "CPPTORCHRUN_RDZV_KEY_FILE");
  env.agent_socket = Str(lookup, "CPPTORCHRUN_AGENT_SOCKET");
  env.local_addr = Str(lookup, "CPPTORCHRUN_LOCAL_ADDR", "127.0.0.1");
  const char* fake_value = lookup("CPPTORCHRUN_FAKE_GPU");
  if (fake_value != nullptr && *fake_value != '\0') {
    if (fake < 0) {
      return absl::InvalidArgumentError(
          absl::StrCat("CPPTORCHRUN_FAKE_GPU=", fake, " is not a device index"));
    }
    env.fake_gpu = static_cast<int>(fake);
  }
  return env;
}

}  // namespace cpptorchrun::worker
