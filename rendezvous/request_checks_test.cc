// Tests of the stateless checks of incoming calls, without a server (the
// same checks over the wire are in bad_input_test).
#include "rendezvous/request_checks.h"

#include <string>

#include "absl/strings/match.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace cpptorchrun::rdzv {
namespace {

v1::Scope ScopeOf(const std::string& run_id, int64_t round) {
  v1::Scope scope;
  scope.set_run_id(run_id);
  scope.set_round(round);
  return scope;
}

TEST(CheckRequest, AJoinWithAnOversizedSecretIsRefusedBeforeItsIds) {
  Limits limits;
  v1::JoinRequest join;
  join.set_run_id("bad id!");
  join.set_node_secret(std::string(257, 's'));
  absl::Status s = CheckRequest(join, limits);
  EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_TRUE(absl::StrContains(s.message(), "node_secret of 257 bytes")) << s;
}

TEST(CheckRequest, AJoinWithAnOversizedFailureReasonIsRefusedNamingIt) {
  Limits limits;
  v1::JoinRequest join;
  join.set_run_id("run");
  join.mutable_node()->set_node_id("n");
  join.mutable_failure()->set_reason(std::string(limits.max_reason_bytes + 1, 'r'));
  absl::Status s = CheckRequest(join, limits);
  EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_TRUE(absl::StrContains(s.message(), "failure.reason is")) << s;
  join.mutable_failure()->set_reason("rank 1 failed: exit code 1");
  EXPECT_FALSE(absl::StrContains(CheckRequest(join, limits).message(), "failure")) << CheckRequest(join, limits);
}

TEST(CheckRequest, BatchesOverMaxKeysPerCallAreRefusedNamingTheLimit) {
  Limits limits;
  limits.max_keys_per_call = 2;
  v1::MultiGetRequest get;
  *get.mutable_scope() = ScopeOf("run", 1);
  for (const char* key : {"a", "b"}) get.add_keys(key);
  EXPECT_TRUE(CheckRequest(get, limits).ok());
  get.add_keys("c");
  absl::Status s = CheckRequest(get, limits);
  EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_TRUE(absl::StrContains(s.message(), "3 keys in one call")) << s;

  v1::MultiSetRequest set;
  *set.mutable_scope() = ScopeOf("run", 1);
  for (const char* key : {"a", "b", "c"}) set.add_entries()->set_key(key);
  EXPECT_TRUE(absl::StrContains(CheckRequest(set, limits).message(), "3 entries in one call"));
}

TEST(CheckRequest, EveryEntryOfAMultiSetIsChecked) {
  Limits limits;
  limits.max_value_bytes = 4;
  v1::MultiSetRequest set;
  *set.mutable_scope() = ScopeOf("run", 0);
  v1::KeyValue* fine = set.add_entries();
  fine->set_key("a");
  fine->set_value("1234");
  EXPECT_TRUE(CheckRequest(set, limits).ok());
  v1::KeyValue* big = set.add_entries();
  big->set_key("b");
  big->set_value("12345");
  EXPECT_EQ(CheckRequest(set, limits).code(), absl::StatusCode::kResourceExhausted);
}

TEST(CheckRequest, AKeepAliveWithTooManyProgressRowsIsRefused) {
  Limits limits;
  limits.max_local_world_size = 1;
  v1::KeepAliveRequest keep_alive;
  keep_alive.set_run_id("run");
  keep_alive.set_node_id("a");
  keep_alive.add_progress();
  EXPECT_TRUE(CheckRequest(keep_alive, limits).ok());
  keep_alive.add_progress();
  EXPECT_TRUE(absl::StrContains(CheckRequest(keep_alive, limits).message(), "max_local_world_size"));
}

// A node's report of its faults and its last restart is bounded like the
// rest, and the error names the field and the limit.
TEST(CheckRequest, AKeepAlivesFaultsAreBounded) {
  Limits limits;
  limits.max_local_world_size = 2;
  limits.max_node_id_bytes = 8;
  limits.max_reason_bytes = 16;
  auto base = [] {
    v1::KeepAliveRequest k;
    k.set_run_id("run");
    k.set_node_id("a");
    v1::HangReport* hang = k.mutable_faults()->mutable_last_hang();
    hang->add_culprit_ranks(1);
    hang->add_culprit_hosts("h2");
    hang->set_process_states("rank 1: T");
    k.mutable_faults()->mutable_last_straggler()->add_ranks(0);
    k.mutable_faults()->mutable_last_straggler()->set_policy("warn");
    return k;
  };
  EXPECT_TRUE(CheckRequest(base(), limits).ok());
  v1::KeepAliveRequest many = base();
  for (int i = 0; i < 3; ++i) many.mutable_faults()->mutable_last_hang()->add_waiting_ranks(i);
  EXPECT_THAT(std::string(CheckRequest(many, limits).message()),
              ::testing::HasSubstr("3 faults.last_hang.waiting_ranks; the limit (max_local_world_size) is 2"));
  v1::KeepAliveRequest long_host = base();
  long_host.mutable_faults()->mutable_last_straggler()->add_hosts("a-host-too-long");
  EXPECT_THAT(std::string(CheckRequest(long_host, limits).message()),
              ::testing::HasSubstr("faults.last_straggler.hosts is 15 bytes; the limit (max_node_id_bytes) is 8"));
  v1::KeepAliveRequest long_states = base();
  long_states.mutable_faults()->mutable_last_hang()->set_process_states(std::string(17, 'x'));
  EXPECT_THAT(std::string(CheckRequest(long_states, limits).message()),
              ::testing::HasSubstr("faults.last_hang.process_states is 17 bytes"));
  v1::KeepAliveRequest long_cause = base();
  long_cause.mutable_last_restart()->set_cause(std::string(17, 'x'));
  EXPECT_THAT(std::string(CheckRequest(long_cause, limits).message()),
              ::testing::HasSubstr("last_restart.cause is 17 bytes"));
}

TEST(BearerTokenMatches, OnlyTheExactBearerValue) {
  EXPECT_TRUE(BearerTokenMatches("Bearer s3cret", "s3cret"));
  EXPECT_FALSE(BearerTokenMatches("Bearer s3cre", "s3cret"));
  EXPECT_FALSE(BearerTokenMatches("Bearer s3cretX", "s3cret"));
  EXPECT_FALSE(BearerTokenMatches("s3cret", "s3cret"));
  EXPECT_FALSE(BearerTokenMatches("", "s3cret"));
  EXPECT_TRUE(ConstantTimeEquals("", ""));
  EXPECT_FALSE(ConstantTimeEquals("a", ""));
}

TEST(PeerHost, TakesTheAddressOutOfGrpcsPeerString) {
  EXPECT_EQ(PeerHost("ipv4:10.1.2.3:5678"), "10.1.2.3");
  EXPECT_EQ(PeerHost("ipv6:[::1]:5678"), "::1");
  EXPECT_EQ(PeerHost("ipv6:[::1"), "");
  EXPECT_EQ(PeerHost("fd:7"), "");
  EXPECT_EQ(PeerHost("unix:/tmp/socket"), "");
}

}  // namespace
}  // namespace cpptorchrun::rdzv
