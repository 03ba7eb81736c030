// The launcher-worker contract, both sides at once: the environment the
// launcher builds for a worker (launcher/workers/worker_env.h) is read back
// equal by the worker (worker/agent/env.h), and the error file the worker
// writes (worker/agent/error_file.h) is read back equal by the launcher
// (launcher/workers/error_file.h). The names are proto/worker_contract.h.
#include <map>
#include <string>

#include "absl/time/time.h"
#include "gtest/gtest.h"
#include "launcher/workers/error_file.h"
#include "launcher/workers/worker_env.h"
#include "proto/worker_contract.h"
#include "worker/agent/env.h"
#include "worker/agent/error_file.h"

namespace cpptorchrun {
namespace {

absl::StatusOr<worker::WorkerEnv> ReadBack(const std::map<std::string, std::string>& env) {
  return worker::ParseWorkerEnv([&env](const char* name) -> const char* {
    auto it = env.find(name);
    return it == env.end() ? nullptr : it->second.c_str();
  });
}

launcher::WorkerEnvInputs EveryInput() {
  launcher::WorkerEnvInputs in;
  in.base = {{"PATH", "/bin"}};
  in.local_rank = 1;
  in.local_world_size = 3;
  in.slot = 2;  // running short: its device is slot 2
  in.group_rank = 1;
  in.group_world_size = 2;
  in.rank_offset = 3;
  in.world_size = 6;
  in.master_addr = "10.0.0.1";
  in.master_port = 29511;
  in.round = 12;
  in.restart_count = 4;
  in.max_restarts = 9;
  in.run_id = "job-7";
  in.error_file = "/logs/attempt_4/1/error.json";
  in.agent_socket = "/run/cpt/agent.sock";
  in.worker_timeout = absl::Seconds(90);
  in.rdzv_endpoint = "etcd://10.0.0.9:2379,10.0.0.10:2379/jobs";
  in.rdzv_token_file = "/run/cpt/token";
  in.rdzv_ca_file = "/etc/cpt/ca.pem";
  in.rdzv_cert_file = "/etc/cpt/client.pem";
  in.rdzv_key_file = "/etc/cpt/client.key";
  in.local_addr = "10.0.0.2";
  in.fake_gpus = 3;
  in.in_place = true;
  return in;
}

TEST(Contract, WhatTheLauncherWritesTheWorkerReadsBackEqual) {
  const launcher::WorkerEnvInputs in = EveryInput();
  absl::StatusOr<worker::WorkerEnv> got = ReadBack(launcher::BuildWorkerEnv(in));
  ASSERT_TRUE(got.ok()) << got.status();
  EXPECT_EQ(got->rank, in.rank_offset + in.local_rank);
  EXPECT_EQ(got->local_rank, in.local_rank);
  EXPECT_EQ(got->world_size, in.world_size);
  EXPECT_EQ(got->local_world_size, in.local_world_size);
  EXPECT_EQ(got->group_rank, in.group_rank);
  EXPECT_EQ(got->group_world_size, in.group_world_size);
  EXPECT_EQ(got->master_addr, in.master_addr);
  EXPECT_EQ(got->master_port, in.master_port);
  EXPECT_EQ(got->run_id, in.run_id);
  EXPECT_EQ(got->restart_count, in.restart_count);
  EXPECT_EQ(got->error_file, in.error_file);
  EXPECT_EQ(got->rdzv_endpoint, in.rdzv_endpoint);
  EXPECT_EQ(got->rdzv_round, in.round);
  EXPECT_EQ(got->rdzv_token_file, in.rdzv_token_file);
  EXPECT_EQ(got->rdzv_ca_file, in.rdzv_ca_file);
  EXPECT_EQ(got->rdzv_cert_file, in.rdzv_cert_file);
  EXPECT_EQ(got->rdzv_key_file, in.rdzv_key_file);
  EXPECT_EQ(got->agent_socket, in.agent_socket);
  EXPECT_EQ(got->local_addr, in.local_addr);
  EXPECT_EQ(got->fake_gpu, in.slot);
  EXPECT_EQ(got->worker_timeout, in.worker_timeout);
  EXPECT_TRUE(got->in_place);
}

// What the launcher leaves out, the worker takes as unset: its defaults,
// not a stale value of an outer launcher's.
TEST(Contract, WhatTheLauncherLeavesOutIsUnsetForTheWorker) {
  launcher::WorkerEnvInputs in;
  in.master_port = 29500;  // a round always has one
  for (const char* owned : contract::kLauncherOwned) in.base[owned] = "stale";
  in.base[contract::kFakeGpu] = "5";
  in.base[contract::kWorkerTimeoutS] = "7";
  const std::map<std::string, std::string> env = launcher::BuildWorkerEnv(in);
  for (const char* owned : contract::kLauncherOwned) {
    auto it = env.find(owned);
    EXPECT_TRUE(it == env.end() || it->second != "stale") << owned;
  }
  absl::StatusOr<worker::WorkerEnv> got = ReadBack(env);
  ASSERT_TRUE(got.ok()) << got.status();
  const worker::WorkerEnv defaults;
  EXPECT_FALSE(got->fake_gpu.has_value());
  EXPECT_EQ(got->worker_timeout, defaults.worker_timeout);
  EXPECT_EQ(got->agent_socket, "");
  EXPECT_EQ(got->rdzv_endpoint, "");
  EXPECT_EQ(got->local_addr, defaults.local_addr);
  EXPECT_FALSE(got->in_place);
}

TEST(Contract, TheErrorFileTheWorkerWritesTheLauncherReadsBackEqual) {
  const std::string json =
      worker::ErrorJson("RuntimeError", "rank 1: \"bad\" batch\n", "train_main.cc: step 12\tepoch 1", 1765152000);
  absl::StatusOr<launcher::WorkerError> got = launcher::ParseErrorJson(json);
  ASSERT_TRUE(got.ok()) << got.status();
  EXPECT_EQ(got->message, "RuntimeError: rank 1: \"bad\" batch\n");
  EXPECT_EQ(got->traceback, "train_main.cc: step 12\tepoch 1");
  EXPECT_EQ(got->timestamp, 1765152000);
}

}  // namespace
}  // namespace cpptorchrun
