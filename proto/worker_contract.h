// The launcher-worker contract's environment: the name of every variable
// the launcher sets for a worker (launcher/workers/worker_env.h) and the
// worker reads (worker/agent/env.h), written once; what each means is in
// docs/ENVIRONMENT.md. tests/contract_test.cc checks that what the launcher
// writes the worker reads back equal. The rest of the contract is on the
// wire too: the agent socket (agent.proto) and torchrun's error file
// (TORCHELASTIC_ERROR_FILE, the same test).
#ifndef CPPTORCHRUN_PROTO_WORKER_CONTRACT_H_
#define CPPTORCHRUN_PROTO_WORKER_CONTRACT_H_

namespace cpptorchrun::contract {

// torchrun's variables: the same names, the same meaning.
inline constexpr char kRank[] = "RANK";
inline constexpr char kLocalRank[] = "LOCAL_RANK";
inline constexpr char kGroupRank[] = "GROUP_RANK";
inline constexpr char kRoleRank[] = "ROLE_RANK";
inline constexpr char kRoleName[] = "ROLE_NAME";
inline constexpr char kRoleWorldSize[] = "ROLE_WORLD_SIZE";
inline constexpr char kLocalWorldSize[] = "LOCAL_WORLD_SIZE";
inline constexpr char kWorldSize[] = "WORLD_SIZE";
inline constexpr char kGroupWorldSize[] = "GROUP_WORLD_SIZE";
inline constexpr char kMasterAddr[] = "MASTER_ADDR";
inline constexpr char kMasterPort[] = "MASTER_PORT";
inline constexpr char kRestartCount[] = "TORCHELASTIC_RESTART_COUNT";
inline constexpr char kMaxRestarts[] = "TORCHELASTIC_MAX_RESTARTS";
inline constexpr char kRunId[] = "TORCHELASTIC_RUN_ID";
inline constexpr char kUseAgentStore[] = "TORCHELASTIC_USE_AGENT_STORE";
inline constexpr char kErrorFile[] = "TORCHELASTIC_ERROR_FILE";

// cpptorchrun's own.
inline constexpr char kRdzvEndpoint[] = "CPPTORCHRUN_RDZV_ENDPOINT";
inline constexpr char kRdzvRound[] = "CPPTORCHRUN_RDZV_ROUND";
inline constexpr char kRdzvTokenFile[] = "CPPTORCHRUN_RDZV_TOKEN_FILE";
inline constexpr char kRdzvCaFile[] = "CPPTORCHRUN_RDZV_CA_FILE";
inline constexpr char kRdzvCertFile[] = "CPPTORCHRUN_RDZV_CERT_FILE";
inline constexpr char kRdzvKeyFile[] = "CPPTORCHRUN_RDZV_KEY_FILE";
inline constexpr char kAgentSocket[] = "CPPTORCHRUN_AGENT_SOCKET";
inline constexpr char kWorkerTimeoutS[] = "CPPTORCHRUN_WORKER_TIMEOUT_S";
inline constexpr char kRecovery[] = "CPPTORCHRUN_RECOVERY";
inline constexpr char kRecoveryInPlace[] = "in_place";  // kRecovery's value under --recovery in_place
inline constexpr char kLocalAddr[] = "CPPTORCHRUN_LOCAL_ADDR";
inline constexpr char kFakeGpu[] = "CPPTORCHRUN_FAKE_GPU";
inline constexpr char kFakeGpus[] = "CPPTORCHRUN_FAKE_GPUS";

// Every variable above of cpptorchrun's own, and the error file: an outer
// launcher's values must not reach an inner launcher's workers.
inline constexpr const char* kLauncherOwned[] = {
    kFakeGpu,    kFakeGpus,      kAgentSocket, kWorkerTimeoutS, kRecovery,   kRdzvEndpoint, kRdzvRound,
    kRdzvCertFile, kRdzvKeyFile, kRdzvTokenFile, kRdzvCaFile,   kLocalAddr, kErrorFile};

}  // namespace cpptorchrun::contract

#endif  // CPPTORCHRUN_PROTO_WORKER_CONTRACT_H_
