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
#include "proto/worker_contract.h"

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
  using namespace contract;  // NOLINT: the variables' names
  WorkerEnv env;
  int64_t rank = 0, local_rank = 0, world = 1, local_world = 1, port = 0, fake = -1;
  int64_t group_rank = 0, group_world = 0;
  for (auto [name, out] : {std::pair<const char*, int64_t*>{kRank, &rank},
                           {kLocalRank, &local_rank},
                           {kWorldSize, &world},
                           {kLocalWorldSize, &local_world},
                           {kGroupRank, &group_rank},
                           {kGroupWorldSize, &group_world},
                           {kMasterPort, &port},
                           {kRestartCount, &env.restart_count},
                           {kRdzvRound, &env.rdzv_round},
                           {kFakeGpu, &fake}}) {
    if (absl::Status s = Int(lookup, name, out); !s.ok()) return s;
  }
  if (world < 1 || world > (1 << 20)) {
    return absl::InvalidArgumentError(absl::StrCat(kWorldSize, "=", world, " is not a world size"));
  }
  if (rank < 0 || rank >= world) {
    return absl::InvalidArgumentError(
        absl::StrCat(kRank, "=", rank, " is outside [0, ", kWorldSize, "=", world, ")"));
  }
  if (local_rank < 0 || local_world < 1 || local_rank >= local_world) {
    return absl::InvalidArgumentError(absl::StrCat(kLocalRank, "=", local_rank, " is outside [0, ", kLocalWorldSize, "=",
                                                   local_world, ")"));
  }
  if (group_world != 0 && (group_world < 1 || group_world > world || group_rank < 0 ||
                           group_rank >= group_world)) {
    return absl::InvalidArgumentError(absl::StrCat(kGroupRank, "=", group_rank, " is outside [0, ", kGroupWorldSize, "=",
                                                   group_world, ") or ", kGroupWorldSize, " exceeds ", kWorldSize,
                                                   "=", world));
  }
  if (lookup(kMasterPort) != nullptr && *lookup(kMasterPort) != '\0' &&
      (port < 1 || port > 65535)) {
    return absl::InvalidArgumentError(absl::StrCat(kMasterPort, "=", port, " is not a port"));
  }
  if (env.restart_count < 0) {
    return absl::InvalidArgumentError(absl::StrCat(kRestartCount, " is negative"));
  }
  if (absl::Status s = Seconds(lookup, kWorkerTimeoutS, &env.worker_timeout);
      !s.ok()) {
    return s;
  }
  if (const char* recovery = lookup(kRecovery); recovery != nullptr && *recovery != '\0') {
    if (std::string(recovery) != kRecoveryInPlace && std::string(recovery) != "gang") {
      return absl::InvalidArgumentError(
          absl::StrCat(kRecovery, "=", recovery, " is neither in_place nor gang"));
    }
    env.in_place = std::string(recovery) == kRecoveryInPlace;
  }
  env.rank = static_cast<int>(rank);
  env.local_rank = static_cast<int>(local_rank);
  env.world_size = static_cast<int>(world);
  env.local_world_size = static_cast<int>(local_world);
  env.group_rank = static_cast<int>(group_rank);
  env.group_world_size = static_cast<int>(group_world);
  env.master_port = static_cast<int>(port);
  env.master_addr = Str(lookup, kMasterAddr);
  env.run_id = Str(lookup, kRunId, "none");
  env.error_file = Str(lookup, kErrorFile);
  env.rdzv_endpoint = Str(lookup, kRdzvEndpoint);
  env.rdzv_token_file = Str(lookup, kRdzvTokenFile);
  env.rdzv_ca_file = Str(lookup, kRdzvCaFile);
  env.rdzv_cert_file = Str(lookup, kRdzvCertFile);
  env.rdzv_key_file = Str(lookup, kRdzvKeyFile);
  env.agent_socket = Str(lookup, kAgentSocket);
  env.local_addr = Str(lookup, kLocalAddr, "127.0.0.1");
  const char* fake_value = lookup(kFakeGpu);
  if (fake_value != nullptr && *fake_value != '\0') {
    if (fake < 0) {
      return absl::InvalidArgumentError(
          absl::StrCat(kFakeGpu, "=", fake, " is not a device index"));
    }
    env.fake_gpu = static_cast<int>(fake);
  }
  return env;
}

}  // namespace cpptorchrun::worker
