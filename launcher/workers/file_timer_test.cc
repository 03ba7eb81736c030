// Tests of the file-timer watchdog: the request format and the timer rules
// on made-up times, then the named pipe with a real writer.
#include "launcher/workers/file_timer.h"

#include <fcntl.h>
#include <signal.h>
#include <unistd.h>

#include <cstdlib>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/synchronization/mutex.h"
#include "absl/synchronization/notification.h"
#include "absl/time/clock.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace cpptorchrun::launcher {
namespace {

using ::testing::HasSubstr;

TEST(FileTimerRequest, ParsesWhatTorchsClientWrites) {
  // FileTimerRequest.to_json() of torch 1.13.
  absl::StatusOr<FileTimerRequest> r = ParseFileTimerRequest(
      R"({"version": 1, "pid": 4242, "scope_id": "train.py#17", "expiration_time": 1701939123.25, "signal": 9})");
  ASSERT_TRUE(r.ok()) << r.status();
  EXPECT_EQ(r->pid, 4242);
  EXPECT_EQ(r->scope_id, "train.py#17");
  EXPECT_DOUBLE_EQ(r->expiration_time, 1701939123.25);
  EXPECT_EQ(r->signal, 9);
  r = ParseFileTimerRequest(R"({"version": 1, "pid": 4242, "scope_id": "s", "expiration_time": -1, "signal": 0})");
  ASSERT_TRUE(r.ok()) << r.status();
  EXPECT_LT(r->expiration_time, 0);
}

TEST(FileTimerRequest, BadLinesAreRefusedNamingWhatIsWrong) {
  struct Case {
    const char* line;
    const char* says;
  } cases[] = {
      {"not json", "not a JSON object"},
      {R"([1, 2])", "not a JSON object"},
      {R"({"pid": 1, "scope_id": "s", "expiration_time": 1, "signal": 9})", "no \"version\""},
      {R"({"version": 2, "pid": 1, "scope_id": "s", "expiration_time": 1, "signal": 9})", "version 2"},
      {R"({"version": 1, "pid": -5, "scope_id": "s", "expiration_time": 1, "signal": 9})", "pid -5"},
      {R"({"version": 1, "pid": 0, "scope_id": "s", "expiration_time": 1, "signal": 9})", "pid 0"},
      {R"({"version": 1, "pid": 1.5, "scope_id": "s", "expiration_time": 1, "signal": 9})", "\"pid\" is not an integer"},
      {R"({"version": 1, "pid": "1", "scope_id": "s", "expiration_time": 1, "signal": 9})", "\"pid\" is not a number"},
      {R"({"version": 1, "pid": 1, "expiration_time": 1, "signal": 9})", "no \"scope_id\""},
      {R"({"version": 1, "pid": 1, "scope_id": "s", "signal": 9})", "no \"expiration_time\""},
      {R"({"version": 1, "pid": 1, "scope_id": "s", "expiration_time": 1, "signal": 99})", "signal 99"},
  };
  for (const Case& c : cases) {
    absl::StatusOr<FileTimerRequest> r = ParseFileTimerRequest(c.line);
    ASSERT_FALSE(r.ok()) << c.line;
    EXPECT_EQ(r.status().code(), absl::StatusCode::kInvalidArgument);
    EXPECT_THAT(r.status().message(), HasSubstr(c.says)) << c.line;
  }
}

FileTimerRequest Timer(int64_t pid, const std::string& scope, double at, int signal = SIGKILL) {
  return {pid, scope, at, signal};
}

TEST(FileTimers, AcquireReleaseAndExpire) {
  FileTimers t;
  EXPECT_FALSE(t.NextExpiry().has_value());
  t.Apply(Timer(10, "a", 100));
  t.Apply(Timer(10, "b", 50, SIGTERM));
  t.Apply(Timer(20, "a", 200));
  EXPECT_EQ(t.NextExpiry(), 50);
  EXPECT_TRUE(t.TakeExpired(49).empty());
  // Released before it expires: never reaped.
  t.Apply(Timer(20, "a", -1));
  EXPECT_EQ(t.size(), 2u);
  // Pid 10's earliest expired timer decides the signal; all its timers go.
  std::vector<FileTimerRequest> reap = t.TakeExpired(150);
  ASSERT_EQ(reap.size(), 1u);
  EXPECT_EQ(reap[0].pid, 10);
  EXPECT_EQ(reap[0].scope_id, "b");
  EXPECT_EQ(reap[0].signal, SIGTERM);
  EXPECT_EQ(t.size(), 0u);
}

TEST(FileTimers, ATimerWithoutASignalExpiresWithoutReaping) {
  FileTimers t;
  t.Apply(Timer(10, "a", 1, 0));
  EXPECT_TRUE(t.TakeExpired(5).empty());
  EXPECT_EQ(t.size(), 0u);
}

TEST(FileTimers, TheTableIsBounded) {
  FileTimers t;
  for (size_t i = 0; i < FileTimers::kMaxTimers; ++i) ASSERT_TRUE(t.Apply(Timer(1, absl::StrCat(i), 100)));
  EXPECT_FALSE(t.Apply(Timer(2, "more", 100)));
  EXPECT_TRUE(t.Apply(Timer(1, "0", 200)));  // replacing one is fine
  EXPECT_TRUE(t.Apply(Timer(1, "0", -1)));
}

class ServerTest : public ::testing::Test {
 protected:
  ServerTest() {
    const char* tmp = std::getenv("TEST_TMPDIR");
    path_ = absl::StrCat(tmp ? tmp : "/tmp", "/timer_fifo_", getpid());
  }
  void Write(const std::string& text) {
    int fd = ::open(path_.c_str(), O_WRONLY | O_NONBLOCK);
    ASSERT_GE(fd, 0);
    ASSERT_EQ(::write(fd, text.data(), text.size()), static_cast<ssize_t>(text.size()));
    ::close(fd);
  }
  // Unix seconds from now, as JSON text (StrCat's 6 digits would not do).
  std::string In(double seconds) {
    return absl::StrFormat("%.3f", absl::ToDoubleSeconds(absl::Now() - absl::UnixEpoch()) + seconds);
  }

  std::string path_;
  absl::Mutex mu_;
  std::vector<FileTimerRequest> reaped_;
  std::vector<std::string> warnings_;
  absl::Notification reaped_one_;
};

TEST_F(ServerTest, AnExpiredTimerIsReapedAndBadLinesAreWarnedAbout) {
  {
    auto server = FileTimerServer::Start(
        path_,
        [this](const FileTimerRequest& r) {
          absl::MutexLock lock(&mu_);
          reaped_.push_back(r);
          reaped_one_.Notify();
        },
        [this](const std::string& w) {
          absl::MutexLock lock(&mu_);
          warnings_.push_back(w);
        });
    ASSERT_TRUE(server.ok()) << server.status();
    struct stat st {};
    ASSERT_EQ(::stat(path_.c_str(), &st), 0);
    EXPECT_TRUE(S_ISFIFO(st.st_mode));
    // A garbage line, one released timer, one far in the future, and one
    // already expired, in one write and split across two.
    Write("garbage\n");
    Write(absl::StrCat(R"({"version": 1, "pid": 77, "scope_id": "released", "expiration_time": )", In(0.05),
                       R"(, "signal": 9})", "\n",
                       R"({"version": 1, "pid": 77, "scope_id": "released", "expiration_time": -1, "signal": 0})",
                       "\n", R"({"version": 1, "pid": 78, "scope_id": "later", "expiration_time": )", In(3600),
                       R"(, "signal": 9})", "\n", R"({"version": 1, "pid": 79, "scope_id": "step",)"));
    Write(absl::StrCat(R"( "expiration_time": )", In(-1), R"(, "signal": 15})", "\n"));
    reaped_one_.WaitForNotification();
  }
  // The server is gone: its FIFO too.
  EXPECT_NE(::access(path_.c_str(), F_OK), 0);
  absl::MutexLock lock(&mu_);
  ASSERT_EQ(reaped_.size(), 1u);
  EXPECT_EQ(reaped_[0].pid, 79);
  EXPECT_EQ(reaped_[0].scope_id, "step");
  EXPECT_EQ(reaped_[0].signal, SIGTERM);
  ASSERT_EQ(warnings_.size(), 1u);
  EXPECT_THAT(warnings_[0], HasSubstr("not a JSON object"));
}

TEST_F(ServerTest, ALineLongerThanAPipeWriteIsDroppedWhole) {
  auto server = FileTimerServer::Start(
      path_,
      [this](const FileTimerRequest& r) {
        absl::MutexLock lock(&mu_);
        reaped_.push_back(r);
        reaped_one_.Notify();
      },
      [this](const std::string& w) {
        absl::MutexLock lock(&mu_);
        warnings_.push_back(w);
      });
  ASSERT_TRUE(server.ok()) << server.status();
  Write(std::string(5000, 'x'));
  Write(std::string(3000, 'y') + "\n");
  Write(absl::StrCat(R"({"version": 1, "pid": 5, "scope_id": "s", "expiration_time": 1, "signal": 9})", "\n"));
  reaped_one_.WaitForNotification();
  absl::MutexLock lock(&mu_);
  ASSERT_EQ(warnings_.size(), 1u);
  EXPECT_THAT(warnings_[0], HasSubstr("longer than"));
  EXPECT_EQ(reaped_.at(0).pid, 5);
}

TEST_F(ServerTest, AFolderThatCannotHoldTheFifoIsAnErrorNamingIt) {
  auto server = FileTimerServer::Start("/nonexistent-folder/timer", [](const FileTimerRequest&) {},
                                       [](const std::string&) {});
  ASSERT_FALSE(server.ok());
  EXPECT_THAT(server.status().message(), HasSubstr("mkfifo /nonexistent-folder/timer"));
}

}  // namespace
}  // namespace cpptorchrun::launcher
