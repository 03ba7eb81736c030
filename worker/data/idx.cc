// IDX reader: the bytes through data_file.h (gzip or raw, cached), then a
// strict parse of the big-endian header.
#include "worker/data/idx.h"

#include <sys/stat.h>

#include <cerrno>
#include <cstring>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "worker/data/data_file.h"

namespace cpptorchrun::worker {
namespace {

constexpr uint32_t kImagesMagic = 0x00000803;
constexpr uint32_t kLabelsMagic = 0x00000801;
uint32_t BigEndian32(const std::string& bytes, size_t offset) {
  const auto* p = reinterpret_cast<const unsigned char*>(bytes.data()) + offset;
  return (uint32_t{p[0]} << 24) | (uint32_t{p[1]} << 16) | (uint32_t{p[2]} << 8) | uint32_t{p[3]};
}

std::string Hex(uint32_t v) {
  char buf[16];
  std::snprintf(buf, sizeof(buf), "0x%08x", v);
  return buf;
}

bool Exists(const std::string& path) {
  struct stat st;
  return stat(path.c_str(), &st) == 0;
}

}  // namespace

absl::StatusOr<IdxImages> ParseIdxImages(const std::string& bytes, const std::string& name) {
  if (bytes.size() < 16) {
    return absl::DataLossError(absl::StrCat(name, ": truncated: ", bytes.size(),
                                            " bytes, an image file's header needs 16"));
  }
  uint32_t magic = BigEndian32(bytes, 0);
  if (magic != kImagesMagic) {
    return absl::InvalidArgumentError(absl::StrCat(name, ": bad magic number ", Hex(magic),
                                                   ", expected ", Hex(kImagesMagic),
                                                   " (idx3-ubyte images)"));
  }
  IdxImages images;
  images.count = BigEndian32(bytes, 4);
  images.rows = BigEndian32(bytes, 8);
  images.cols = BigEndian32(bytes, 12);
  if (images.rows == 0 || images.cols == 0 || images.rows > 4096 || images.cols > 4096) {
    return absl::InvalidArgumentError(absl::StrCat(name, ": implausible image size ",
                                                   images.rows, "x", images.cols));
  }
  int64_t expected = images.count * images.rows * images.cols;
  int64_t actual = static_cast<int64_t>(bytes.size()) - 16;
  if (actual < expected) {
    return absl::DataLossError(absl::StrCat(name, ": truncated: header says ", images.count,
                                            " images of ", images.rows, "x", images.cols, " (",
                                            expected, " bytes) but ", actual, " follow"));
  }
  if (actual > expected) {
    return absl::InvalidArgumentError(absl::StrCat(name, ": ", actual - expected,
                                                   " trailing bytes after ", images.count,
                                                   " images"));
  }
  images.pixels.assign(bytes.begin() + 16, bytes.end());
  return images;
}

absl::StatusOr<IdxLabels> ParseIdxLabels(const std::string& bytes, const std::string& name,
                                         int num_classes) {
  if (bytes.size() < 8) {
    return absl::DataLossError(absl::StrCat(name, ": truncated: ", bytes.size(),
                                            " bytes, a label file's header needs 8"));
  }
  uint32_t magic = BigEndian32(bytes, 0);
  if (magic != kLabelsMagic) {
    return absl::InvalidArgumentError(absl::StrCat(name, ": bad magic number ", Hex(magic),
                                                   ", expected ", Hex(kLabelsMagic),
                                                   " (idx1-ubyte labels)"));
  }
  int64_t count = BigEndian32(bytes, 4);
  int64_t actual = static_cast<int64_t>(bytes.size()) - 8;
  if (actual < count) {
    return absl::DataLossError(absl::StrCat(name, ": truncated: header says ", count,
                                            " labels but ", actual, " follow"));
  }
  if (actual > count) {
    return absl::InvalidArgumentError(
        absl::StrCat(name, ": ", actual - count, " trailing bytes after ", count, " labels"));
  }
  IdxLabels labels;
  labels.labels.assign(bytes.begin() + 8, bytes.end());
  for (size_t i = 0; i < labels.labels.size(); ++i) {
    if (labels.labels[i] >= num_classes) {
      return absl::InvalidArgumentError(absl::StrCat(name, ": label ", int{labels.labels[i]},
                                                     " at index ", i, " is not below ",
                                                     num_classes));
    }
  }
  return labels;
}

absl::StatusOr<IdxImages> ReadIdxImages(const std::string& path, const std::string& cache_dir) {
  absl::StatusOr<std::string> bytes = ReadDataFile(path, cache_dir);
  if (!bytes.ok()) return bytes.status();
  return ParseIdxImages(*bytes, path);
}

absl::StatusOr<IdxLabels> ReadIdxLabels(const std::string& path, int num_classes,
                                        const std::string& cache_dir) {
  absl::StatusOr<std::string> bytes = ReadDataFile(path, cache_dir);
  if (!bytes.ok()) return bytes.status();
  return ParseIdxLabels(*bytes, path, num_classes);
}

absl::StatusOr<Dataset> LoadMnistSplit(const std::string& dir, Split split, int64_t limit,
                                       const std::string& cache_dir) {
  const std::string prefix = split == Split::kTrain ? "train" : "t10k";
  auto pick = [&](const std::string& stem) {
    std::string base = absl::StrCat(dir, "/", prefix, "-", stem);
    return Exists(base + ".gz") || !Exists(base) ? base + ".gz" : base;
  };
  const std::string images_path = pick("images-idx3-ubyte");
  const std::string labels_path = pick("labels-idx1-ubyte");
  Dataset data;
  absl::StatusOr<IdxImages> images = ReadIdxImages(images_path, cache_dir);
  if (!images.ok()) return images.status();
  absl::StatusOr<IdxLabels> labels = ReadIdxLabels(labels_path, 10, cache_dir);
  if (!labels.ok()) return labels.status();
  if (images->count != static_cast<int64_t>(labels->labels.size())) {
    return absl::InvalidArgumentError(absl::StrCat(images_path, " holds ", images->count,
                                                   " images but ", labels_path, " holds ",
                                                   labels->labels.size(), " labels"));
  }
  data.images = *std::move(images);
  data.labels = *std::move(labels);
  if (limit > 0 && limit < data.images.count) {
    data.images.count = limit;
    data.images.pixels.resize(limit * data.images.rows * data.images.cols);
    data.labels.labels.resize(limit);
  }
  return data;
}

}  // namespace cpptorchrun::worker
