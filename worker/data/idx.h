// IDX files (the MNIST / Fashion-MNIST format): a reader for image and
// label files, gzip-compressed or raw, with errors that name the file and
// what is wrong with it (magic number, dimensions, counts, truncation).
// No LibTorch here: the trainer turns the bytes into tensors.
#ifndef CPPTORCHRUN_WORKER_DATA_IDX_H_
#define CPPTORCHRUN_WORKER_DATA_IDX_H_

#include <cstdint>
#include <string>
#include <vector>

#include "absl/status/statusor.h"

namespace cpptorchrun::worker {

// Images as unsigned bytes, row-major: pixels[i * rows * cols + r * cols + c].
struct IdxImages {
  int64_t count = 0;
  int64_t rows = 0;
  int64_t cols = 0;
  std::vector<uint8_t> pixels;
};

// One label per sample.
struct IdxLabels {
  std::vector<uint8_t> labels;
};

// A labelled data set in memory (what the trainer samples from).
struct Dataset {
  IdxImages images;
  IdxLabels labels;
  int64_t size() const { return images.count; }
  int64_t features() const { return images.rows * images.cols; }
};

// Reads an idx3-ubyte image file (magic 0x00000803). The file may be gzip
// compressed or raw (data_file.h; `cache_dir` as there, "" for none).
// Errors (InvalidArgument / NotFound / DataLoss) name `path` and the field
// that is wrong.
absl::StatusOr<IdxImages> ReadIdxImages(const std::string& path, const std::string& cache_dir = "");

// Reads an idx1-ubyte label file (magic 0x00000801). Each label must be
// below `num_classes`.
absl::StatusOr<IdxLabels> ReadIdxLabels(const std::string& path, int num_classes = 10,
                                        const std::string& cache_dir = "");

// Which split of an MNIST-style folder.
enum class Split { kTrain, kTest };

// Loads "<dir>/{train,t10k}-{images-idx3,labels-idx1}-ubyte[.gz]" (the
// compressed name is preferred when both exist) and checks that images and
// labels agree in count. `limit` > 0 keeps only the first `limit` samples.
// `cache_dir`: the cache of inflated copies (data_file.h), "" for none.
absl::StatusOr<Dataset> LoadMnistSplit(const std::string& dir, Split split, int64_t limit = 0,
                                       const std::string& cache_dir = "");

// Parses an in-memory IDX byte string (already decompressed); `name` is used
// in error messages. Exposed for tests.
absl::StatusOr<IdxImages> ParseIdxImages(const std::string& bytes, const std::string& name);
absl::StatusOr<IdxLabels> ParseIdxLabels(const std::string& bytes, const std::string& name,
                                         int num_classes = 10);

}  // namespace cpptorchrun::worker

#endif  // CPPTORCHRUN_WORKER_DATA_IDX_H_
