// Tests of the checkpoint format and files: round trip, each corruption
// detected, keep-last-K, fallback past a corrupt or truncated newest file.
#include "worker/training/checkpoint.h"

#include <unistd.h>

#include <cstdlib>
#include <cstring>
#include <fstream>

#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace cpptorchrun::worker {
namespace {

using ::testing::HasSubstr;

std::string FreshDir(const std::string& name) {
  std::string dir = std::string(std::getenv("TEST_TMPDIR") ? std::getenv("TEST_TMPDIR") : "/tmp") +
                    "/" + name;
  std::system(("rm -rf " + dir).c_str());
  return dir;
}

CheckpointState Sample(int64_t step) {
  CheckpointState state;
  state.ints["step"] = step;
  state.ints["epoch"] = 2;
  state.reals["loss"] = 0.25;
  state.strings["optimizer"] = "lamb";
  state.tensors.push_back({"w", {2, 3}, {1, 2, 3, 4, 5, float(step)}});
  state.tensors.push_back({"b", {3}, {-1, 0, 1}});
  return state;
}

TEST(Checkpoint, RoundTrip) {
  absl::StatusOr<CheckpointState> back = DecodeCheckpoint(EncodeCheckpoint(Sample(7)), "x");
  ASSERT_TRUE(back.ok()) << back.status();
  EXPECT_EQ(*back->Int("step"), 7);
  EXPECT_DOUBLE_EQ(back->reals.at("loss"), 0.25);
  ASSERT_NE(back->Tensor("w"), nullptr);
  EXPECT_EQ(back->Tensor("w")->shape, (std::vector<int64_t>{2, 3}));
  EXPECT_EQ(back->Tensor("w")->data.back(), 7.0f);
  EXPECT_EQ(back->Tensor("missing"), nullptr);
  EXPECT_EQ(back->Int("missing").status().code(), absl::StatusCode::kNotFound);
  EXPECT_EQ(back->StringOr("optimizer", "adam"), "lamb");
  EXPECT_EQ(back->StringOr("missing", "none"), "none");
}

TEST(Checkpoint, AnOlderBuildsVersionOneStillReads) {
  // Version 1 had no string table: everything else reads back, strings empty.
  std::string bytes = EncodeCheckpointV1(Sample(3));
  uint32_t version;
  std::memcpy(&version, bytes.data() + 8, 4);
  EXPECT_EQ(version, 1u);
  absl::StatusOr<CheckpointState> back = DecodeCheckpoint(bytes, "v1");
  ASSERT_TRUE(back.ok()) << back.status();
  EXPECT_EQ(*back->Int("step"), 3);
  EXPECT_DOUBLE_EQ(back->reals.at("loss"), 0.25);
  EXPECT_TRUE(back->strings.empty());
  EXPECT_EQ(back->Tensor("b")->data, (std::vector<float>{-1, 0, 1}));
  std::memcpy(&version, EncodeCheckpoint(Sample(3)).data() + 8, 4);
  EXPECT_EQ(version, kCheckpointVersion);
}

TEST(Checkpoint, AFutureVersionIsRefused) {
  std::string bytes = EncodeCheckpoint(Sample(1));
  const uint32_t future = kCheckpointVersion + 1;
  std::memcpy(bytes.data() + 8, &future, 4);
  EXPECT_THAT(DecodeCheckpoint(bytes, "f").status().message(), HasSubstr("unsupported version 3"));
}

TEST(Checkpoint, DetectsCorruption) {
  std::string bytes = EncodeCheckpoint(Sample(1));
  std::string flipped = bytes;
  flipped[40] ^= 0x10;
  EXPECT_THAT(DecodeCheckpoint(flipped, "f").status().message(), HasSubstr("CRC-32"));
  EXPECT_THAT(DecodeCheckpoint(bytes.substr(0, bytes.size() - 9), "t").status().message(),
              HasSubstr("truncated"));
  std::string magic = bytes;
  magic[0] = 'X';
  EXPECT_THAT(DecodeCheckpoint(magic, "m").status().message(), HasSubstr("bad magic"));
  EXPECT_EQ(DecodeCheckpoint("", "e").status().code(), absl::StatusCode::kDataLoss);
}

TEST(Checkpoint, KeepsTheNewestK) {
  std::string dir = FreshDir("keep");
  for (int64_t id : {10, 20, 30, 40}) ASSERT_TRUE(WriteCheckpoint(dir, id, Sample(id), 2).ok());
  auto all = ListCheckpoints(dir);
  ASSERT_EQ(all.size(), 2u);
  EXPECT_EQ(all[0].first, 40);
  EXPECT_EQ(all[1].first, 30);
  std::vector<std::string> warnings;
  auto loaded = LoadNewestCheckpoint(dir, &warnings);
  ASSERT_TRUE(loaded.has_value());
  EXPECT_EQ(loaded->id, 40);
  EXPECT_TRUE(warnings.empty());
}

TEST(Checkpoint, FallsBackPastCorruptAndTruncatedFiles) {
  std::string dir = FreshDir("fallback");
  for (int64_t id : {1, 2, 3}) ASSERT_TRUE(WriteCheckpoint(dir, id, Sample(id), 5).ok());
  auto all = ListCheckpoints(dir);
  ASSERT_EQ(all.size(), 3u);
  ASSERT_EQ(::truncate(all[0].second.c_str(), 30), 0);  // newest: truncated
  {
    std::fstream f(all[1].second, std::ios::in | std::ios::out | std::ios::binary);
    f.seekp(50);
    f.put('\x7f');  // second: a flipped byte
  }
  std::vector<std::string> warnings;
  auto loaded = LoadNewestCheckpoint(dir, &warnings);
  ASSERT_TRUE(loaded.has_value());
  EXPECT_EQ(loaded->id, 1);
  EXPECT_EQ(*loaded->state.Int("step"), 1);
  ASSERT_EQ(warnings.size(), 2u);
  EXPECT_THAT(warnings[0], HasSubstr(CheckpointFileName(3)));
  EXPECT_THAT(warnings[0], HasSubstr("truncated"));
  EXPECT_THAT(warnings[1], HasSubstr("CRC-32"));
}

TEST(Checkpoint, NoFolderMeansNoCheckpoint) {
  std::vector<std::string> warnings;
  EXPECT_FALSE(LoadNewestCheckpoint(FreshDir("none"), &warnings).has_value());
  EXPECT_TRUE(warnings.empty());
}

TEST(Checkpoint, UnwritableFolderIsAnError) {
  std::string dir = FreshDir("blocked");
  std::ofstream(dir) << "a file where the folder should be";
  absl::Status status = WriteCheckpoint(dir + "/sub", 1, Sample(1), 2);
  EXPECT_FALSE(status.ok());
  EXPECT_THAT(status.message(), HasSubstr("blocked"));
}

}  // namespace
}  // namespace cpptorchrun::worker
