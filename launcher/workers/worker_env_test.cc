// Tests of the worker environment: every variable of docs/ENVIRONMENT.md.
#include "launcher/workers/worker_env.h"

#include "gtest/gtest.h"

namespace cpptorchrun::launcher {
namespace {

WorkerEnvInputs Inputs() {
  WorkerEnvInputs in;
  in.base = {{"PATH", "/bin"}, {"CPPTORCHRUN_FAKE_GPU", "9"}, {"TORCHELASTIC_ERROR_FILE", "/old"}};
  in.role = "trainer";
  in.local_rank = 1;
  in.local_world_size = 2;
  in.group_rank = 1;
  in.group_world_size = 3;
  in.rank_offset = 4;
  in.world_size = 6;
  in.master_addr = "10.0.0.1";
  in.master_port = 4242;
  in.round = 7;
  in.restart_count = 2;
  in.max_restarts = 5;
  in.run_id = "job";
  in.error_file = "/logs/job/attempt_2/1/error.json";
  in.agent_socket = "/tmp/x/agent.sock";
  in.rdzv_endpoint = "[::1]:29400";
  in.local_addr = "10.0.0.2";
  return in;
}

TEST(WorkerEnv, TorchrunVariables) {
  auto env = BuildWorkerEnv(Inputs());
  EXPECT_EQ(env.at("RANK"), "5");
  EXPECT_EQ(env.at("LOCAL_RANK"), "1");
  EXPECT_EQ(env.at("GROUP_RANK"), "1");
  EXPECT_EQ(env.at("ROLE_RANK"), "5");
  EXPECT_EQ(env.at("ROLE_NAME"), "trainer");
  EXPECT_EQ(env.at("ROLE_WORLD_SIZE"), "6");
  EXPECT_EQ(env.at("LOCAL_WORLD_SIZE"), "2");
  EXPECT_EQ(env.at("WORLD_SIZE"), "6");
  EXPECT_EQ(env.at("GROUP_WORLD_SIZE"), "3");
  EXPECT_EQ(env.at("MASTER_ADDR"), "10.0.0.1");
  EXPECT_EQ(env.at("MASTER_PORT"), "4242");
  EXPECT_EQ(env.at("TORCHELASTIC_RESTART_COUNT"), "2");
  EXPECT_EQ(env.at("TORCHELASTIC_MAX_RESTARTS"), "5");
  EXPECT_EQ(env.at("TORCHELASTIC_RUN_ID"), "job");
  EXPECT_EQ(env.at("TORCHELASTIC_USE_AGENT_STORE"), "False");
  EXPECT_EQ(env.at("TORCHELASTIC_ERROR_FILE"), "/logs/job/attempt_2/1/error.json");
  EXPECT_EQ(env.at("TORCH_NCCL_ASYNC_ERROR_HANDLING"), "1");
  EXPECT_EQ(env.at("OMP_NUM_THREADS"), "1");
  EXPECT_EQ(env.at("PATH"), "/bin");
}

TEST(WorkerEnv, OwnVariables) {
  auto env = BuildWorkerEnv(Inputs());
  EXPECT_EQ(env.at("CPPTORCHRUN_RDZV_ENDPOINT"), "[::1]:29400");
  EXPECT_EQ(env.at("CPPTORCHRUN_RDZV_ROUND"), "7");
  EXPECT_EQ(env.at("CPPTORCHRUN_AGENT_SOCKET"), "/tmp/x/agent.sock");
  EXPECT_EQ(env.at("CPPTORCHRUN_LOCAL_ADDR"), "10.0.0.2");
  EXPECT_EQ(env.count("CPPTORCHRUN_RDZV_TOKEN_FILE"), 0u);
  // No --fake_gpus: an inherited fake GPU index must not leak through.
  EXPECT_EQ(env.count("CPPTORCHRUN_FAKE_GPU"), 0u);
  EXPECT_EQ(env.count("CPPTORCHRUN_FAKE_GPUS"), 0u);
  EXPECT_EQ(env.count("CPPTORCHRUN_RECOVERY"), 0u) << "gang: workers are not told to wait";
  WorkerEnvInputs in_place = Inputs();
  in_place.in_place = true;
  EXPECT_EQ(BuildWorkerEnv(in_place).at("CPPTORCHRUN_RECOVERY"), "in_place");
  // An outer launcher's does not leak through.
  WorkerEnvInputs inherited = Inputs();
  inherited.base["CPPTORCHRUN_RECOVERY"] = "in_place";
  EXPECT_EQ(BuildWorkerEnv(inherited).count("CPPTORCHRUN_RECOVERY"), 0u);
}

TEST(WorkerEnv, FakeGpus) {
  WorkerEnvInputs in = Inputs();
  in.fake_gpus = 2;
  in.rdzv_token_file = "/run/token";
  auto env = BuildWorkerEnv(in);
  EXPECT_EQ(env.at("CPPTORCHRUN_FAKE_GPU"), "1");
  // A node running short (in-place recovery): LOCAL_RANK is its place,
  // the device its slot's.
  in.slot = 3;
  in.local_rank = 0;
  in.local_world_size = 1;
  env = BuildWorkerEnv(in);
  EXPECT_EQ(env.at("LOCAL_RANK"), "0");
  EXPECT_EQ(env.at("CPPTORCHRUN_FAKE_GPU"), "3");
  EXPECT_EQ(env.at("CPPTORCHRUN_FAKE_GPUS"), "2");
  EXPECT_EQ(env.at("CPPTORCHRUN_RDZV_TOKEN_FILE"), "/run/token");
}

TEST(WorkerEnv, UserSettingsWinWhereTorchrunKeepsThem) {
  WorkerEnvInputs in = Inputs();
  in.base["OMP_NUM_THREADS"] = "4";
  in.base["TORCH_NCCL_ASYNC_ERROR_HANDLING"] = "0";
  in.base["RANK"] = "99";
  auto env = BuildWorkerEnv(in);
  EXPECT_EQ(env.at("OMP_NUM_THREADS"), "4");
  EXPECT_EQ(env.at("TORCH_NCCL_ASYNC_ERROR_HANDLING"), "0");
  EXPECT_EQ(env.at("RANK"), "5");
}

TEST(WorkerEnv, VirtualLocalRankShowsEachWorkerItsGpuAsDeviceZero) {
  WorkerEnvInputs in;
  in.local_rank = 2;
  in.local_world_size = 4;
  in.rank_offset = 4;
  in.virtual_local_rank = true;
  auto env = BuildWorkerEnv(in);
  EXPECT_EQ(env["LOCAL_RANK"], "0");
  EXPECT_EQ(env["RANK"], "6");
  EXPECT_EQ(env["CUDA_VISIBLE_DEVICES"], "2");
  in.base["CUDA_VISIBLE_DEVICES"] = "GPU-a,GPU-b,GPU-c,GPU-d";
  EXPECT_EQ(BuildWorkerEnv(in)["CUDA_VISIBLE_DEVICES"], "GPU-c");
  in.virtual_local_rank = false;
  EXPECT_EQ(BuildWorkerEnv(in)["LOCAL_RANK"], "2");
  EXPECT_EQ(BuildWorkerEnv(in)["CUDA_VISIBLE_DEVICES"], "GPU-a,GPU-b,GPU-c,GPU-d");
}

TEST(WorkerEnv, SingleWorkerLeavesOmpAlone) {
  WorkerEnvInputs in = Inputs();
  in.local_world_size = 1;
  in.local_rank = 0;
  auto env = BuildWorkerEnv(in);
  EXPECT_EQ(env.count("OMP_NUM_THREADS"), 0u);
  EXPECT_EQ(env.count("CPPTORCHRUN_AGENT_SOCKET"), 1u);
}

TEST(WorkerEnv, TheWorkerTimeoutReachesTheWorkerWithTheAgentSocket) {
  WorkerEnvInputs in = Inputs();
  in.worker_timeout = absl::Milliseconds(2500);
  EXPECT_EQ(BuildWorkerEnv(in).at("CPPTORCHRUN_WORKER_TIMEOUT_S"), "2.5");
  in.agent_socket.clear();
  in.base["CPPTORCHRUN_WORKER_TIMEOUT_S"] = "9";
  EXPECT_EQ(BuildWorkerEnv(in).count("CPPTORCHRUN_WORKER_TIMEOUT_S"), 0u)
      << "no agent socket, no heartbeats to bound; an outer launcher's value does not leak";
}

// What the warm pool counts a worker's threads as: the user's
// OMP_NUM_THREADS, else torchrun's 1 for several workers, else every CPU.
TEST(WorkerEnv, APythonWorkersFaultHandlerIsOnUnlessTheUserSaidOtherwise) {
  WorkerEnvInputs in = Inputs();
  EXPECT_EQ(BuildWorkerEnv(in).count("PYTHONFAULTHANDLER"), 0u);  // not a Python worker
  in.python_faulthandler = true;
  EXPECT_EQ(BuildWorkerEnv(in).at("PYTHONFAULTHANDLER"), "1");
  in.base["PYTHONFAULTHANDLER"] = "";  // off, the user's choice
  EXPECT_EQ(BuildWorkerEnv(in).at("PYTHONFAULTHANDLER"), "");
}

TEST(WorkerEnv, WorkerThreadsAsTheEnvironmentLeavesThem) {
  EXPECT_EQ(WorkerThreads({}, 2, 8), 1);
  EXPECT_EQ(WorkerThreads({}, 1, 8), 8);
  EXPECT_EQ(WorkerThreads({{"OMP_NUM_THREADS", "3"}}, 2, 8), 3);
  EXPECT_EQ(WorkerThreads({{"OMP_NUM_THREADS", "3"}}, 1, 8), 3);
  EXPECT_EQ(WorkerThreads({{"OMP_NUM_THREADS", "zero"}}, 1, 8), 8);  // not a number: LibTorch's default
  EXPECT_EQ(WorkerThreads({{"OMP_NUM_THREADS", "0"}}, 2, 8), 1);
  // And BuildWorkerEnv agrees: one thread each for several workers.
  WorkerEnvInputs in = Inputs();
  in.local_world_size = 2;
  EXPECT_EQ(BuildWorkerEnv(in).at("OMP_NUM_THREADS"), "1");
}

}  // namespace
}  // namespace cpptorchrun::launcher
