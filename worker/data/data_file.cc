// Whole-file reads through zlib, and the cache of inflated copies.
#include "worker/data/data_file.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>
#include <zlib.h>

#include <cerrno>
#include <climits>
#include <cstdint>
#include <cstdlib>
#include <cstring>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "base/files.h"

namespace cpptorchrun::worker {
namespace {

// Far above any MNIST-style set; bounds what a corrupt file can ask for.
constexpr int64_t kMaxBytes = int64_t{1} << 32;

// 64-bit FNV-1a: stable across processes and builds (a cache key).
uint64_t Fnv1a(const std::string& s) {
  uint64_t h = 14695981039346656037ull;
  for (unsigned char c : s) {
    h ^= c;
    h *= 1099511628211ull;
  }
  return h;
}

// Reads a file as it is on disk, which must be `expected_size` bytes long
// (NotFound otherwise).
absl::StatusOr<std::string> ReadRaw(const std::string& path, int64_t expected_size) {
  int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) return absl::NotFoundError(absl::StrCat(path, ": ", std::strerror(errno)));
  struct stat st;
  if (::fstat(fd, &st) != 0 || st.st_size != expected_size) {
    ::close(fd);
    return absl::NotFoundError(absl::StrCat(path, ": not the expected size"));
  }
  std::string out(static_cast<size_t>(expected_size), '\0');
  size_t done = 0;
  while (done < out.size()) {
    ssize_t n = ::read(fd, out.data() + done, out.size() - done);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) {
      ::close(fd);
      return absl::DataLossError(absl::StrCat(path, ": short read"));
    }
    done += static_cast<size_t>(n);
  }
  ::close(fd);
  return out;
}

// The last four bytes of a gzip file: the inflated length modulo 2^32; -1
// when the file is not gzip or too short to be.
int64_t GzipTrailerLength(const std::string& path, int64_t file_size) {
  if (file_size < 18) return -1;
  int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) return -1;
  unsigned char head[2] = {0, 0};
  unsigned char tail[4] = {0, 0, 0, 0};
  const bool ok = ::pread(fd, head, 2, 0) == 2 && ::pread(fd, tail, 4, file_size - 4) == 4;
  ::close(fd);
  if (!ok || head[0] != 0x1f || head[1] != 0x8b) return -1;
  return int64_t{tail[0]} | (int64_t{tail[1]} << 8) | (int64_t{tail[2]} << 16) | (int64_t{tail[3]} << 24);
}

absl::StatusOr<std::string> Inflate(const std::string& path, int64_t size_hint) {
  gzFile file = gzopen(path.c_str(), "rb");
  if (file == nullptr) {
    return absl::NotFoundError(absl::StrCat(path, ": cannot open: ", std::strerror(errno)));
  }
  gzbuffer(file, 1 << 18);
  std::string out;
  if (size_hint > 0 && size_hint < kMaxBytes) out.reserve(static_cast<size_t>(size_hint));
  constexpr size_t kChunk = 1 << 20;
  while (true) {
    const size_t at = out.size();
    out.resize(at + kChunk);
    int n = gzread(file, out.data() + at, kChunk);
    if (n < 0) {
      int code = 0;
      std::string message = gzerror(file, &code);
      gzclose(file);
      return absl::DataLossError(absl::StrCat(path, ": corrupt compressed data: ", message));
    }
    out.resize(at + static_cast<size_t>(n));
    if (n == 0) break;
    if (static_cast<int64_t>(out.size()) > kMaxBytes) {
      gzclose(file);
      return absl::InvalidArgumentError(absl::StrCat(path, ": larger than 4 GiB"));
    }
  }
  // A gzip stream cut short reads as EOF; gzclose reports it (Z_BUF_ERROR).
  int code = 0;
  const char* message = gzerror(file, &code);
  std::string error = (code != Z_OK && message != nullptr) ? message : "";
  int close_code = gzclose(file);
  if (code != Z_OK || close_code == Z_BUF_ERROR) {
    return absl::DataLossError(absl::StrCat(
        path, ": truncated or corrupt compressed data", error.empty() ? "" : ": ", error));
  }
  return out;
}

// Best effort: the cache is an optimisation, its failures are not errors.
void WriteCache(const std::string& dir, const std::string& path, const std::string& bytes) {
  if (!base::MakeDirs(dir, 0700).ok()) return;
  const std::string temp = absl::StrCat(path, ".tmp.", ::getpid());
  int fd = ::open(temp.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0600);
  if (fd < 0) return;
  const bool written = base::WriteAll(fd, bytes, temp).ok();
  const bool ok = ::close(fd) == 0 && written;
  if (!ok || ::rename(temp.c_str(), path.c_str()) != 0) ::unlink(temp.c_str());
}

}  // namespace

absl::StatusOr<std::string> ReadDataFile(const std::string& path, const std::string& cache_dir) {
  struct stat st;
  if (::stat(path.c_str(), &st) != 0) {
    return absl::NotFoundError(absl::StrCat(path, ": cannot open: ", std::strerror(errno)));
  }
  const int64_t inflated = GzipTrailerLength(path, st.st_size);
  if (cache_dir.empty() || inflated < 0) return Inflate(path, inflated);

  char resolved[PATH_MAX];
  const std::string absolute = ::realpath(path.c_str(), resolved) != nullptr ? resolved : path;
  const std::string identity =
      absl::StrCat(absolute, "|", st.st_dev, "|", st.st_ino, "|", st.st_size, "|", st.st_mtim.tv_sec,
                   ".", st.st_mtim.tv_nsec);
  const size_t slash = absolute.rfind('/');
  const std::string cached = absl::StrFormat(
      "%s/%s.%016x.raw", cache_dir, absolute.substr(slash == std::string::npos ? 0 : slash + 1),
      Fnv1a(identity));
  // The trailer holds the length modulo 2^32: files of 4 GiB and more are
  // refused by Inflate anyway.
  absl::StatusOr<std::string> hit = ReadRaw(cached, inflated);
  if (hit.ok()) return hit;
  absl::StatusOr<std::string> bytes = Inflate(path, inflated);
  if (bytes.ok() && static_cast<int64_t>(bytes->size()) == inflated) WriteCache(cache_dir, cached, *bytes);
  return bytes;
}

std::string DefaultDataCacheDir(const std::function<const char*(const char*)>& getenv) {
  auto set = [&getenv](const char* name) -> std::string {
    const char* v = getenv(name);
    return v != nullptr ? v : "";
  };
  if (std::string dir = set("CPPTORCHRUN_CACHE_DIR"); !dir.empty()) return dir;
  if (std::string dir = set("XDG_CACHE_HOME"); !dir.empty()) return dir + "/cpptorchrun";
  if (std::string dir = set("HOME"); !dir.empty()) return dir + "/.cache/cpptorchrun";
  return "";
}

}  // namespace cpptorchrun::worker
