#include "launcher/config/launch_flags.h"

#include <set>
#include <string>
#include <vector>

#include "gtest/gtest.h"

namespace cpptorchrun::launcher {
namespace {

TEST(LaunchFlags, EveryFlagHasOneKeyAnEnvironmentVariableAndAnApplier) {
  std::set<std::string> keys, envs;
  for (const FlagSpec& f : LaunchFlags()) {
    EXPECT_TRUE(keys.insert(f.key).second) << f.key;
    EXPECT_TRUE(envs.insert(f.env).second) << f.env;
    EXPECT_TRUE(static_cast<bool>(f.apply)) << f.key;
    EXPECT_NE(f.names.find("--" + f.key), std::string::npos) << f.key << " is not spelled " << f.names;
  }
}

TEST(LaunchFlags, EveryDefaultIsAValidValue) {
  LaunchConfig c;
  for (const FlagSpec& f : LaunchFlags()) {
    EXPECT_TRUE(f.apply(FlagValue{f.default_value, "--" + f.key, false}, &c).ok()) << f.key;
  }
  EXPECT_EQ(c.min_nodes, 1);
  EXPECT_EQ(c.rdzv_id, "none");
  EXPECT_EQ(c.master_port, 29500);
  EXPECT_EQ(c.signals_to_handle.size(), 4u);
  EXPECT_FALSE(c.worker_timeout.has_value());  // auto: the adaptive deadline
}

TEST(LaunchFlags, AnErrorNamesTheSourceItWasGiven) {
  for (const FlagSpec& f : LaunchFlags()) {
    if (f.key != "nnodes") continue;
    LaunchConfig c;
    absl::Status s = f.apply(FlagValue{"3:2", "PET_NNODES", true}, &c);
    EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument);
    EXPECT_EQ(s.message(), "PET_NNODES: expected N or MIN:MAX with 1 <= MIN <= MAX; got '3:2'");
  }
}

TEST(CheckCombinations, StandaloneMeansC10dOnOneNode) {
  LaunchConfig c;
  c.standalone = true;
  ASSERT_TRUE(CheckCombinations(&c).ok());
  EXPECT_EQ(c.rdzv_backend, RdzvBackend::kC10d);
  c.max_nodes = 2;
  EXPECT_EQ(CheckCombinations(&c).code(), absl::StatusCode::kInvalidArgument);
}

// Applies `value` to the flag `key` as given on the command line.
absl::Status Apply(const std::string& key, const std::string& value, LaunchConfig* c) {
  for (const FlagSpec& f : LaunchFlags()) {
    if (f.key == key) return f.apply(FlagValue{value, "--" + key, true}, c);
  }
  return absl::NotFoundError(key);
}

TEST(CheckCombinations, EtcdTakesAMemberListAndAPrefix) {
  LaunchConfig c;
  ASSERT_TRUE(Apply("rdzv_backend", "etcd", &c).ok());
  ASSERT_TRUE(Apply("nnodes", "2:4", &c).ok());
  ASSERT_TRUE(Apply("rdzv_endpoint", "10.0.0.1:2379, 10.0.0.2,10.0.0.3:2380", &c).ok());
  ASSERT_TRUE(Apply("rdzv_conf", "prefix=/jobs/a,keep_alive_interval=2", &c).ok());
  ASSERT_TRUE(CheckCombinations(&c).ok()) << CheckCombinations(&c);
  EXPECT_EQ(c.rdzv_target, "etcd://10.0.0.1:2379,10.0.0.2:2379,10.0.0.3:2380/jobs/a");
  EXPECT_EQ(c.rdzv_endpoint.host, "10.0.0.1");
  EXPECT_EQ(c.rdzv_endpoint.port, 2379);
  EXPECT_TRUE(c.notes.empty());
}

TEST(CheckCombinations, EtcdV2IsTakenAsEtcdWithANote) {
  LaunchConfig c;
  ASSERT_TRUE(Apply("rdzv_backend", "etcd-v2", &c).ok());
  ASSERT_TRUE(Apply("rdzv_endpoint", "etcd-host", &c).ok());
  ASSERT_TRUE(CheckCombinations(&c).ok()) << CheckCombinations(&c);
  EXPECT_EQ(c.rdzv_backend, RdzvBackend::kEtcd);
  EXPECT_EQ(c.rdzv_target, "etcd://etcd-host:2379/cpptorchrun");
  ASSERT_EQ(c.notes.size(), 1u);
  EXPECT_NE(c.notes[0].find("v3 API"), std::string::npos) << c.notes[0];
}

TEST(CheckCombinations, EtcdMistakesAreNamed) {
  struct Case {
    std::string backend, endpoint, conf, expect;
  };
  for (const Case& k : std::vector<Case>{
           {"etcd", "", "", "required with --rdzv_backend=etcd"},
           {"c10d", "a:1,b:2", "", "is for --rdzv_backend=etcd"},
           {"c10d", "a:1", "prefix=/x", "needs --rdzv_backend=etcd"},
           {"etcd", "a:1,,b:2", "", "empty entry"},
           {"etcd", "a:1,a:1", "", "listed twice"},
           {"etcd", "a:1", "prefix=x", "starting with '/'"},
       }) {
    LaunchConfig c;
    ASSERT_TRUE(Apply("rdzv_backend", k.backend, &c).ok());
    if (!k.endpoint.empty()) ASSERT_TRUE(Apply("rdzv_endpoint", k.endpoint, &c).ok());
    if (!k.conf.empty()) ASSERT_TRUE(Apply("rdzv_conf", k.conf, &c).ok());
    absl::Status s = CheckCombinations(&c);
    EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument) << k.endpoint;
    EXPECT_NE(s.message().find(k.expect), absl::string_view::npos) << s;
  }
  LaunchConfig c;
  c.standalone = true;
  ASSERT_TRUE(Apply("rdzv_backend", "etcd", &c).ok());
  EXPECT_EQ(CheckCombinations(&c).code(), absl::StatusCode::kInvalidArgument);
}

TEST(CheckCombinations, ConflictingProgramKindsAreNamed) {
  LaunchConfig c;
  c.module = true;
  c.no_python = true;
  absl::Status s = CheckCombinations(&c);
  EXPECT_NE(s.message().find("--no_python"), absl::string_view::npos) << s;
}

TEST(CheckCombinations, StaticMultiNodeMeetsAboveTheMasterPort) {
  LaunchConfig c;
  c.min_nodes = c.max_nodes = 2;
  c.master_addr = "10.0.0.1";
  c.master_port = 29500;
  ASSERT_TRUE(CheckCombinations(&c).ok());
  EXPECT_TRUE(c.rdzv_endpoint_from_master);
  EXPECT_EQ(c.rdzv_endpoint.host, "10.0.0.1");
  EXPECT_EQ(c.rdzv_endpoint.port, 29501);
  LaunchConfig top;
  top.min_nodes = top.max_nodes = 2;
  top.master_port = 65535;
  EXPECT_EQ(CheckCombinations(&top).code(), absl::StatusCode::kInvalidArgument);
}

TEST(CheckCombinations, C10dMultiNodeNeedsAnEndpointWithAPort) {
  LaunchConfig c;
  c.rdzv_backend = RdzvBackend::kC10d;
  c.max_nodes = 2;
  EXPECT_EQ(CheckCombinations(&c).code(), absl::StatusCode::kInvalidArgument);
  c.has_rdzv_endpoint = true;
  c.rdzv_endpoint = rdzv::Endpoint{"h", 0};
  EXPECT_EQ(CheckCombinations(&c).code(), absl::StatusCode::kInvalidArgument);
  c.rdzv_endpoint.port = 29400;
  EXPECT_TRUE(CheckCombinations(&c).ok());
}

}  // namespace
}  // namespace cpptorchrun::launcher
