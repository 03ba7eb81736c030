// Tests of the worker environment parser: defaults, a full launcher
// environment, and each bad value named.
#include "worker/agent/env.h"

#include <fstream>
#include <map>

#include "absl/strings/str_cat.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace cpptorchrun::worker {
namespace {

using ::testing::HasSubstr;

absl::StatusOr<WorkerEnv> Parse(const std::map<std::string, std::string>& vars) {
  return ParseWorkerEnv([&](const char* name) -> const char* {
    auto it = vars.find(name);
    return it == vars.end() ? nullptr : it->second.c_str();
  });
}

TEST(WorkerEnv, DefaultsAreAWorldOfOne) {
  absl::StatusOr<WorkerEnv> env = Parse({});
  ASSERT_TRUE(env.ok());
  EXPECT_EQ(env->rank, 0);
  EXPECT_EQ(env->world_size, 1);
  EXPECT_EQ(env->local_addr, "127.0.0.1");
  EXPECT_FALSE(env->fake_gpu.has_value());
  EXPECT_TRUE(env->rdzv_endpoint.empty());
  EXPECT_EQ(env->worker_timeout, absl::Seconds(300));
}

TEST(WorkerEnv, ReadsTheLauncherEnvironment) {
  absl::StatusOr<WorkerEnv> env = Parse({{"RANK", "3"},
                                         {"LOCAL_RANK", "1"},
                                         {"WORLD_SIZE", "4"},
                                         {"LOCAL_WORLD_SIZE", "2"},
                                         {"GROUP_RANK", "1"},
                                         {"GROUP_WORLD_SIZE", "2"},
                                         {"MASTER_ADDR", "10.0.0.1"},
                                         {"MASTER_PORT", "29500"},
                                         {"TORCHELASTIC_RUN_ID", "job7"},
                                         {"TORCHELASTIC_RESTART_COUNT", "2"},
                                         {"TORCHELASTIC_ERROR_FILE", "/tmp/e.json"},
                                         {"CPPTORCHRUN_RDZV_ENDPOINT", "[::1]:4000"},
                                         {"CPPTORCHRUN_RDZV_ROUND", "5"},
                                         {"CPPTORCHRUN_AGENT_SOCKET", "/run/a.sock"},
                                         {"CPPTORCHRUN_FAKE_GPU", "1"},
                                         {"CPPTORCHRUN_LOCAL_ADDR", "127.0.0.2"},
                                         {"CPPTORCHRUN_WORKER_TIMEOUT_S", "7.5"}});
  ASSERT_TRUE(env.ok()) << env.status();
  EXPECT_EQ(env->rank, 3);
  EXPECT_EQ(env->local_rank, 1);
  EXPECT_EQ(env->world_size, 4);
  EXPECT_EQ(env->group_rank, 1);
  EXPECT_EQ(env->group_world_size, 2);
  EXPECT_EQ(env->master_port, 29500);
  EXPECT_EQ(env->run_id, "job7");
  EXPECT_EQ(env->restart_count, 2);
  EXPECT_EQ(env->rdzv_endpoint, "[::1]:4000");
  EXPECT_EQ(env->rdzv_round, 5);
  EXPECT_EQ(env->agent_socket, "/run/a.sock");
  EXPECT_EQ(env->fake_gpu, 1);
  EXPECT_EQ(env->local_addr, "127.0.0.2");
  EXPECT_EQ(env->worker_timeout, absl::Milliseconds(7500));
}

TEST(WorkerEnv, RecoveryInPlaceOnlyWhenTheLauncherSaysSo) {
  EXPECT_FALSE(Parse({})->in_place);
  EXPECT_TRUE(Parse({{"CPPTORCHRUN_RECOVERY", "in_place"}})->in_place);
  EXPECT_FALSE(Parse({{"CPPTORCHRUN_RECOVERY", "gang"}})->in_place);
  EXPECT_THAT(Parse({{"CPPTORCHRUN_RECOVERY", "inplace"}}).status().message(),
              HasSubstr("CPPTORCHRUN_RECOVERY=inplace"));
}

TEST(WorkerEnv, BadValuesAreNamed) {
  EXPECT_THAT(Parse({{"RANK", "x"}}).status().message(), HasSubstr("RANK='x'"));
  EXPECT_THAT(Parse({{"RANK", "2"}, {"WORLD_SIZE", "2"}}).status().message(),
              HasSubstr("RANK=2 is outside [0, WORLD_SIZE=2)"));
  EXPECT_THAT(Parse({{"WORLD_SIZE", "0"}}).status().message(), HasSubstr("WORLD_SIZE=0"));
  EXPECT_THAT(Parse({{"LOCAL_RANK", "-1"}}).status().message(), HasSubstr("LOCAL_RANK=-1"));
  EXPECT_THAT(Parse({{"MASTER_PORT", "70000"}}).status().message(), HasSubstr("MASTER_PORT"));
  EXPECT_THAT(Parse({{"GROUP_RANK", "2"}, {"GROUP_WORLD_SIZE", "2"}, {"WORLD_SIZE", "4"}})
                  .status()
                  .message(),
              HasSubstr("GROUP_RANK=2 is outside [0, GROUP_WORLD_SIZE=2)"));
  EXPECT_THAT(Parse({{"GROUP_WORLD_SIZE", "3"}, {"WORLD_SIZE", "2"}}).status().message(),
              HasSubstr("exceeds WORLD_SIZE=2"));
  EXPECT_THAT(Parse({{"CPPTORCHRUN_FAKE_GPU", "-2"}}).status().message(),
              HasSubstr("CPPTORCHRUN_FAKE_GPU"));
  EXPECT_THAT(Parse({{"CPPTORCHRUN_RDZV_ROUND", "1.5"}}).status().message(),
              HasSubstr("CPPTORCHRUN_RDZV_ROUND"));
  for (const char* bad : {"0", "-3", "soon", "nan", "inf", "1e999"}) {
    EXPECT_THAT(Parse({{"CPPTORCHRUN_WORKER_TIMEOUT_S", bad}}).status().message(),
                HasSubstr(absl::StrCat("CPPTORCHRUN_WORKER_TIMEOUT_S='", bad,
                                       "' is not a positive number of seconds")))
        << bad;
  }
}

}  // namespace
}  // namespace cpptorchrun::worker
