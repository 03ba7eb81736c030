// Reading a data file whole, gzip-compressed or raw, optionally through a
// cache of decompressed copies: a worker restarted after a failure then
// reads its data set at page-cache speed instead of inflating it again
// (inflating Fashion-MNIST's 47 MB of images is most of a worker's data
// time). No LibTorch here.
#ifndef CPPTORCHRUN_WORKER_DATA_DATA_FILE_H_
#define CPPTORCHRUN_WORKER_DATA_DATA_FILE_H_

#include <functional>
#include <string>

#include "absl/status/statusor.h"

namespace cpptorchrun::worker {

// Reads `path` whole; zlib inflates a gzip file and passes a raw one
// through. Errors: NotFound (cannot open), DataLoss (corrupt or truncated
// compressed data), InvalidArgument (over 4 GiB); each names `path`.
//
// With a non-empty `cache_dir`, a gzip file's inflated bytes are looked up
// there under a key of the file's identity (absolute path, device, inode,
// size, modification time), checked against the gzip trailer's length, and
// written there (atomically, best effort: a cache that cannot be written is
// skipped) when missing or stale. The caller still validates the content.
absl::StatusOr<std::string> ReadDataFile(const std::string& path, const std::string& cache_dir);

// The cache folder by default: $CPPTORCHRUN_CACHE_DIR, else
// $XDG_CACHE_HOME/cpptorchrun, else $HOME/.cache/cpptorchrun; "" (no cache)
// when none is set. `getenv` is injected for tests.
std::string DefaultDataCacheDir(const std::function<const char*(const char*)>& getenv);

}  // namespace cpptorchrun::worker

#endif  // CPPTORCHRUN_WORKER_DATA_DATA_FILE_H_
