// Tests of the IDX reader: good raw and gzip files, and each way a file can
// be wrong, with the error naming the file and the problem.
#include "worker/data/idx.h"

#include <zlib.h>

#include <cstdlib>
#include <fstream>
#include <string>

#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace cpptorchrun::worker {
namespace {

using ::testing::HasSubstr;

std::string TempDir() {
  const char* dir = std::getenv("TEST_TMPDIR");
  return dir != nullptr ? dir : "/tmp";
}

void Put32(std::string* out, uint32_t v) {
  out->push_back(static_cast<char>(v >> 24));
  out->push_back(static_cast<char>(v >> 16));
  out->push_back(static_cast<char>(v >> 8));
  out->push_back(static_cast<char>(v));
}

std::string ImageBytes(uint32_t count, uint32_t rows, uint32_t cols, uint32_t magic = 0x803) {
  std::string out;
  Put32(&out, magic);
  Put32(&out, count);
  Put32(&out, rows);
  Put32(&out, cols);
  for (uint32_t i = 0; i < count * rows * cols; ++i) out.push_back(static_cast<char>(i % 251));
  return out;
}

std::string LabelBytes(uint32_t count, uint32_t magic = 0x801) {
  std::string out;
  Put32(&out, magic);
  Put32(&out, count);
  for (uint32_t i = 0; i < count; ++i) out.push_back(static_cast<char>(i % 10));
  return out;
}

std::string WriteRaw(const std::string& name, const std::string& bytes) {
  std::string path = TempDir() + "/" + name;
  std::ofstream(path, std::ios::binary) << bytes;
  return path;
}

std::string WriteGz(const std::string& name, const std::string& bytes) {
  std::string path = TempDir() + "/" + name;
  gzFile f = gzopen(path.c_str(), "wb");
  gzwrite(f, bytes.data(), bytes.size());
  gzclose(f);
  return path;
}

TEST(Idx, ReadsRawAndGzipImages) {
  std::string bytes = ImageBytes(3, 2, 4);
  for (const std::string& path : {WriteRaw("raw-images", bytes), WriteGz("gz-images.gz", bytes)}) {
    absl::StatusOr<IdxImages> images = ReadIdxImages(path);
    ASSERT_TRUE(images.ok()) << images.status();
    EXPECT_EQ(images->count, 3);
    EXPECT_EQ(images->rows, 2);
    EXPECT_EQ(images->cols, 4);
    ASSERT_EQ(images->pixels.size(), 24u);
    EXPECT_EQ(images->pixels[23], 23);
  }
}

TEST(Idx, BadMagicIsNamed) {
  std::string path = WriteRaw("bad-magic", ImageBytes(1, 2, 2, 0x801));
  absl::StatusOr<IdxImages> images = ReadIdxImages(path);
  ASSERT_FALSE(images.ok());
  EXPECT_THAT(images.status().message(), HasSubstr("bad-magic"));
  EXPECT_THAT(images.status().message(), HasSubstr("magic number 0x00000801"));
}

TEST(Idx, TruncatedBodyAndHeader) {
  std::string bytes = ImageBytes(4, 3, 3);
  absl::StatusOr<IdxImages> body = ReadIdxImages(WriteRaw("short-body", bytes.substr(0, 30)));
  ASSERT_FALSE(body.ok());
  EXPECT_EQ(body.status().code(), absl::StatusCode::kDataLoss);
  EXPECT_THAT(body.status().message(), HasSubstr("header says 4 images"));
  absl::StatusOr<IdxImages> header = ReadIdxImages(WriteRaw("short-header", bytes.substr(0, 9)));
  ASSERT_FALSE(header.ok());
  EXPECT_THAT(header.status().message(), HasSubstr("needs 16"));
}

TEST(Idx, TruncatedGzipStream) {
  std::string full = WriteGz("cut.gz", ImageBytes(50, 28, 28));
  std::ifstream in(full, std::ios::binary);
  std::string compressed((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  std::string path = WriteRaw("cut-short.gz", compressed.substr(0, compressed.size() / 2));
  absl::StatusOr<IdxImages> images = ReadIdxImages(path);
  ASSERT_FALSE(images.ok());
  EXPECT_EQ(images.status().code(), absl::StatusCode::kDataLoss);
  EXPECT_THAT(images.status().message(), HasSubstr("cut-short.gz"));
}

TEST(Idx, TrailingBytesAreAnError) {
  absl::StatusOr<IdxLabels> labels = ReadIdxLabels(WriteRaw("long-labels", LabelBytes(5) + "xx"));
  ASSERT_FALSE(labels.ok());
  EXPECT_THAT(labels.status().message(), HasSubstr("2 trailing bytes"));
}

TEST(Idx, LabelOutOfRange) {
  std::string bytes = LabelBytes(3);
  bytes[9] = 12;
  absl::StatusOr<IdxLabels> labels = ReadIdxLabels(WriteRaw("big-label", bytes));
  ASSERT_FALSE(labels.ok());
  EXPECT_THAT(labels.status().message(), HasSubstr("label 12 at index 1"));
}

TEST(Idx, MissingFileIsNotFound) {
  absl::StatusOr<IdxImages> images = ReadIdxImages(TempDir() + "/no-such-file.gz");
  ASSERT_FALSE(images.ok());
  EXPECT_EQ(images.status().code(), absl::StatusCode::kNotFound);
  EXPECT_THAT(images.status().message(), HasSubstr("no-such-file.gz"));
}

TEST(Idx, SplitChecksCountsAndLimits) {
  std::string dir = TempDir() + "/mnist-like";
  std::system(("mkdir -p " + dir).c_str());
  WriteGz("mnist-like/train-images-idx3-ubyte.gz", ImageBytes(6, 2, 2));
  WriteGz("mnist-like/train-labels-idx1-ubyte.gz", LabelBytes(6));
  absl::StatusOr<Dataset> data = LoadMnistSplit(dir, Split::kTrain, 4);
  ASSERT_TRUE(data.ok()) << data.status();
  EXPECT_EQ(data->size(), 4);
  EXPECT_EQ(data->labels.labels.size(), 4u);
  EXPECT_EQ(data->images.pixels.size(), 16u);

  WriteRaw("mnist-like/t10k-images-idx3-ubyte", ImageBytes(6, 2, 2));
  WriteRaw("mnist-like/t10k-labels-idx1-ubyte", LabelBytes(5));
  absl::StatusOr<Dataset> bad = LoadMnistSplit(dir, Split::kTest);
  ASSERT_FALSE(bad.ok());
  EXPECT_THAT(bad.status().message(), HasSubstr("holds 6 images but"));
}

TEST(Idx, ReadsFashionMnist) {
  const char* dir = std::getenv("CPPTORCHRUN_FASHION_MNIST");
  if (dir == nullptr) GTEST_SKIP() << "CPPTORCHRUN_FASHION_MNIST is not set";
  absl::StatusOr<Dataset> test = LoadMnistSplit(dir, Split::kTest);
  if (absl::IsNotFound(test.status())) GTEST_SKIP() << "no data set: " << test.status();
  ASSERT_TRUE(test.ok()) << test.status();
  EXPECT_EQ(test->size(), 10000);
  EXPECT_EQ(test->features(), 784);
}

}  // namespace
}  // namespace cpptorchrun::worker
