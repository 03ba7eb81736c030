// Tests of error-file parsing and the failure summary's root cause.
#include "launcher/workers/failure_summary.h"

#include <signal.h>

#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "launcher/workers/error_file.h"

namespace cpptorchrun::launcher {
namespace {

using ::testing::HasSubstr;

TEST(ErrorFile, TorchrunFormat) {
  auto e = ParseErrorJson(
      R"({"message": {"message": "RuntimeError: boom", "extraInfo": {"py_callstack": "at x\nat y", "timestamp": "1700000123"}}})");
  ASSERT_TRUE(e.ok()) << e.status();
  EXPECT_EQ(e->message, "RuntimeError: boom");
  EXPECT_EQ(e->traceback, "at x\nat y");
  EXPECT_EQ(e->timestamp, 1700000123);
}

TEST(ErrorFile, FlatAndBad) {
  auto e = ParseErrorJson(R"({"message": "plain"})");
  ASSERT_TRUE(e.ok());
  EXPECT_EQ(e->message, "plain");
  EXPECT_FALSE(ParseErrorJson("not json").ok());
  EXPECT_FALSE(ParseErrorJson(R"({"other": 1})").ok());
  EXPECT_FALSE(ParseErrorJson(R"({"message": {"extraInfo": {}}})").ok());
  EXPECT_EQ(ReadErrorFile("/nonexistent/error.json").status().code(), absl::StatusCode::kNotFound);
}

FailureRecord Record(int rank, absl::Time t, ExitStatus st, int seq) {
  FailureRecord f;
  f.rank = rank;
  f.local_rank = rank;
  f.host = "h";
  f.status = st;
  f.pid = 100 + rank;
  f.time = t;
  f.sequence = seq;
  return f;
}

TEST(FailureSummary, RootCauseIsTheFirstInTime) {
  absl::Time t0 = absl::FromUnixSeconds(1700000000);
  std::vector<FailureRecord> f = {Record(0, t0 + absl::Seconds(2), ExitStatus::Exited(1), 0),
                                  Record(1, t0, ExitStatus::Killed(SIGSEGV), 1),
                                  Record(2, t0 + absl::Seconds(1), ExitStatus::Exited(4), 2)};
  EXPECT_EQ(RootCauseIndex(f), 1);
  std::string s = FormatFailureSummary("train", f);
  EXPECT_THAT(s, HasSubstr("train FAILED"));
  size_t root = s.find("Root Cause");
  ASSERT_NE(root, std::string::npos);
  std::string tail = s.substr(root);
  EXPECT_THAT(tail, HasSubstr("rank      : 1 (local_rank: 1)"));
  EXPECT_THAT(tail, HasSubstr("exitcode  : -11 (pid: 101)"));
  EXPECT_THAT(tail, HasSubstr("SIGSEGV"));
  std::string head = s.substr(0, root);
  EXPECT_THAT(head, HasSubstr("rank      : 0 (local_rank: 0)"));
  EXPECT_THAT(head, HasSubstr("exitcode  : 4 (pid: 102)"));
  EXPECT_THAT(head, ::testing::Not(HasSubstr("pid: 101")));
}

TEST(FailureSummary, TiesBrokenByErrorTimestampThenOrder) {
  absl::Time t0 = absl::FromUnixSeconds(1700000000);
  std::vector<FailureRecord> f = {Record(0, t0, ExitStatus::Exited(1), 0),
                                  Record(1, t0, ExitStatus::Exited(2), 1)};
  EXPECT_EQ(RootCauseIndex(f), 0);
  f[0].error_timestamp = 20;
  f[1].error_timestamp = 10;
  EXPECT_EQ(RootCauseIndex(f), 1);
  EXPECT_EQ(RootCauseIndex({}), -1);
}

TEST(FailureSummary, MessageAndErrorFile) {
  FailureRecord r = Record(3, absl::FromUnixSeconds(1700000000), ExitStatus::Exited(7), 0);
  r.error_file = "/l/error.json";
  r.message = "ValueError: bad";
  std::string s = FormatFailureSummary("x", {r});
  EXPECT_THAT(s, HasSubstr("<NO_OTHER_FAILURES>"));
  EXPECT_THAT(s, HasSubstr("error_file: /l/error.json"));
  EXPECT_THAT(s, HasSubstr("message   : ValueError: bad"));
  EXPECT_THAT(s, HasSubstr("time      : 2023-11-14_22:13:20.000"));
}

}  // namespace
}  // namespace cpptorchrun::launcher
