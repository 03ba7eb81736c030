// Tests of the background checkpoint writer: a fake write that blocks until
// the test lets it go orders every case without sleeping; one case writes
// real files.
#include "worker/training/checkpoint_writer.h"

#include <cstdlib>
#include <thread>
#include <vector>

#include "absl/synchronization/mutex.h"
#include "absl/synchronization/notification.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace cpptorchrun::worker {
namespace {

using ::testing::ElementsAre;
using ::testing::HasSubstr;

CheckpointState StateAt(int64_t step) {
  CheckpointState state;
  state.ints["global_step"] = step;
  state.tensors.push_back({"w", {2}, {1.0f, float(step)}});
  return state;
}

// Records the ids written; the first write blocks until Release().
class GatedWrite {
 public:
  CheckpointWriter::WriteFn Fn() {
    return [this](int64_t id, const CheckpointState& state) -> absl::Status {
      if (!first_started_.HasBeenNotified()) {
        first_started_.Notify();
        released_.WaitForNotification();
      }
      absl::MutexLock lock(&mu_);
      ids_.push_back(id);
      EXPECT_EQ(*state.Int("global_step"), id);
      if (id == fail_id_) return absl::InternalError("disk full writing checkpoint 2");
      return absl::OkStatus();
    };
  }
  void WaitUntilFirstStarted() { first_started_.WaitForNotification(); }
  void Release() { released_.Notify(); }
  void FailOn(int64_t id) { fail_id_ = id; }
  std::vector<int64_t> ids() {
    absl::MutexLock lock(&mu_);
    return ids_;
  }

 private:
  absl::Notification first_started_, released_;
  absl::Mutex mu_;
  std::vector<int64_t> ids_;
  int64_t fail_id_ = -1;
};

TEST(CheckpointWriter, SubmitReturnsWhileTheWriteRuns) {
  GatedWrite gate;
  CheckpointWriter writer(gate.Fn());
  ASSERT_TRUE(writer.Submit(1, StateAt(1)).ok());
  gate.WaitUntilFirstStarted();
  // The write of 1 is blocked: Submit must not wait for it.
  ASSERT_TRUE(writer.Submit(2, StateAt(2)).ok());
  EXPECT_EQ(writer.stats().written, 0);
  gate.Release();
  ASSERT_TRUE(writer.Flush().ok());
  EXPECT_THAT(gate.ids(), ElementsAre(1, 2));
  EXPECT_EQ(writer.stats().written, 2);
  EXPECT_EQ(writer.stats().newest_written, 2);
}

TEST(CheckpointWriter, EverySnapshotIsWrittenInOrder) {
  GatedWrite gate;
  CheckpointWriter writer(gate.Fn());
  ASSERT_TRUE(writer.Submit(1, StateAt(1)).ok());
  gate.WaitUntilFirstStarted();
  ASSERT_TRUE(writer.Submit(2, StateAt(2)).ok());
  // 2 waits: the third Submit waits for the writer to take it, which it
  // does once 1 is written.
  std::thread third([&] { EXPECT_TRUE(writer.Submit(3, StateAt(3)).ok()); });
  gate.Release();
  third.join();
  ASSERT_TRUE(writer.Flush().ok());
  EXPECT_THAT(gate.ids(), ElementsAre(1, 2, 3));
  EXPECT_EQ(writer.stats().written, 3);
  EXPECT_EQ(writer.stats().newest_written, 3);
}

TEST(CheckpointWriter, AFailedWriteIsReturnedOnceByTheNextFlush) {
  GatedWrite gate;
  gate.FailOn(2);
  CheckpointWriter writer(gate.Fn());
  ASSERT_TRUE(writer.Submit(1, StateAt(1)).ok());
  gate.WaitUntilFirstStarted();
  ASSERT_TRUE(writer.Submit(2, StateAt(2)).ok());
  gate.Release();
  absl::Status flushed = writer.Flush();
  EXPECT_EQ(flushed.code(), absl::StatusCode::kInternal);
  EXPECT_THAT(flushed.message(), HasSubstr("checkpoint 2"));
  EXPECT_TRUE(writer.Flush().ok());
  EXPECT_EQ(writer.stats().newest_written, 1);
  // The writer goes on after a failure.
  ASSERT_TRUE(writer.Submit(3, StateAt(3)).ok());
  ASSERT_TRUE(writer.Flush().ok());
  EXPECT_EQ(writer.stats().newest_written, 3);
}

TEST(CheckpointWriter, TheDestructorWritesWhatWasHandedOver) {
  GatedWrite gate;
  {
    CheckpointWriter writer(gate.Fn());
    ASSERT_TRUE(writer.Submit(1, StateAt(1)).ok());
    gate.WaitUntilFirstStarted();
    ASSERT_TRUE(writer.Submit(2, StateAt(2)).ok());
    gate.Release();
  }
  EXPECT_THAT(gate.ids(), ElementsAre(1, 2));
}

TEST(CheckpointWriter, FlushWithNothingHandedOverReturnsAtOnce) {
  GatedWrite gate;
  CheckpointWriter writer(gate.Fn());
  EXPECT_TRUE(writer.Flush().ok());
  EXPECT_TRUE(gate.ids().empty());
}

TEST(CheckpointWriter, WritesRealFilesKeepingTheNewest) {
  std::string dir = std::string(std::getenv("TEST_TMPDIR") ? std::getenv("TEST_TMPDIR") : "/tmp") +
                    "/writer_files";
  std::system(("rm -rf " + dir).c_str());
  CheckpointWriter writer(CheckpointWriter::WriteTo(dir, 2));
  for (int64_t step : {10, 20, 30}) {
    ASSERT_TRUE(writer.Submit(step, StateAt(step)).ok());
    ASSERT_TRUE(writer.Flush().ok());
  }
  std::vector<std::pair<int64_t, std::string>> files = ListCheckpoints(dir);
  ASSERT_EQ(files.size(), 2u);
  EXPECT_EQ(files[0].first, 30);
  EXPECT_EQ(files[1].first, 20);
  std::vector<std::string> warnings;
  std::optional<LoadedCheckpoint> newest = LoadNewestCheckpoint(dir, &warnings);
  ASSERT_TRUE(newest.has_value());
  EXPECT_EQ(*newest->state.Int("global_step"), 30);
  EXPECT_TRUE(warnings.empty());
}

}  // namespace
}  // namespace cpptorchrun::worker
