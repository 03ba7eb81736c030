// The checkpoint format and its atomic file handling.
//
// Layout: "CPTRCKPT" | u32 version | u64 payload length | payload | u32 CRC-32
// of the payload. Payload: u32 count of ints, each (u32 name length, name,
// i64); u32 count of reals, each (name, f64); since version 2, u32 count of
// strings, each (name, u32 value length, value); u32 count of tensors, each
// (name, u32 rank, i64 dims..., u64 elements, f32 data...). Version 1 (no
// string table) still reads: an older build's checkpoint resumes.
#include "worker/training/checkpoint.h"

#include <dirent.h>
#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>
#include <zlib.h>

#include <algorithm>
#include <cerrno>
#include <cstdio>
#include <cstring>

#include "absl/strings/str_cat.h"
#include "base/files.h"

namespace cpptorchrun::worker {
namespace {

constexpr char kMagic[8] = {'C', 'P', 'T', 'R', 'C', 'K', 'P', 'T'};
constexpr size_t kHeaderBytes = 8 + 4 + 8;

template <typename T>
void Put(std::string* out, T v) {
  out->append(reinterpret_cast<const char*>(&v), sizeof(T));
}

void PutName(std::string* out, const std::string& name) {
  Put<uint32_t>(out, static_cast<uint32_t>(name.size()));
  out->append(name);
}

// Bounds-checked reader over the payload.
class Reader {
 public:
  Reader(const std::string& bytes, size_t begin, size_t end) : bytes_(bytes), pos_(begin), end_(end) {}
  template <typename T>
  bool Get(T* v) {
    if (end_ - pos_ < sizeof(T)) return false;
    std::memcpy(v, bytes_.data() + pos_, sizeof(T));
    pos_ += sizeof(T);
    return true;
  }
  bool GetName(std::string* name) {
    uint32_t n;
    if (!Get(&n) || end_ - pos_ < n) return false;
    name->assign(bytes_.data() + pos_, n);
    pos_ += n;
    return true;
  }
  bool GetFloats(std::vector<float>* out, uint64_t n) {
    if ((end_ - pos_) / sizeof(float) < n) return false;
    out->resize(n);
    std::memcpy(out->data(), bytes_.data() + pos_, n * sizeof(float));
    pos_ += n * sizeof(float);
    return true;
  }
  bool AtEnd() const { return pos_ == end_; }

 private:
  const std::string& bytes_;
  size_t pos_;
  const size_t end_;
};

std::string Errno(const std::string& what, const std::string& path) {
  return absl::StrCat(what, " ", path, ": ", std::strerror(errno));
}

}  // namespace

absl::StatusOr<int64_t> CheckpointState::Int(const std::string& key) const {
  auto it = ints.find(key);
  if (it == ints.end()) return absl::NotFoundError(absl::StrCat("checkpoint has no '", key, "'"));
  return it->second;
}

const TensorBlob* CheckpointState::Tensor(const std::string& name) const {
  for (const TensorBlob& blob : tensors) {
    if (blob.name == name) return &blob;
  }
  return nullptr;
}

namespace {

std::string Encode(const CheckpointState& state, uint32_t version) {
  std::string payload;
  Put<uint32_t>(&payload, static_cast<uint32_t>(state.ints.size()));
  for (const auto& [name, v] : state.ints) {
    PutName(&payload, name);
    Put<int64_t>(&payload, v);
  }
  Put<uint32_t>(&payload, static_cast<uint32_t>(state.reals.size()));
  for (const auto& [name, v] : state.reals) {
    PutName(&payload, name);
    Put<double>(&payload, v);
  }
  if (version >= 2) {
    Put<uint32_t>(&payload, static_cast<uint32_t>(state.strings.size()));
    for (const auto& [name, v] : state.strings) {
      PutName(&payload, name);
      PutName(&payload, v);
    }
  }
  Put<uint32_t>(&payload, static_cast<uint32_t>(state.tensors.size()));
  for (const TensorBlob& blob : state.tensors) {
    PutName(&payload, blob.name);
    Put<uint32_t>(&payload, static_cast<uint32_t>(blob.shape.size()));
    for (int64_t d : blob.shape) Put<int64_t>(&payload, d);
    Put<uint64_t>(&payload, blob.data.size());
    payload.append(reinterpret_cast<const char*>(blob.data.data()),
                   blob.data.size() * sizeof(float));
  }
  std::string out(kMagic, sizeof(kMagic));
  Put<uint32_t>(&out, version);
  Put<uint64_t>(&out, payload.size());
  out += payload;
  uLong crc = crc32(0L, reinterpret_cast<const Bytef*>(payload.data()), payload.size());
  Put<uint32_t>(&out, static_cast<uint32_t>(crc));
  return out;
}

}  // namespace

std::string CheckpointState::StringOr(const std::string& key, const std::string& otherwise) const {
  auto it = strings.find(key);
  return it == strings.end() ? otherwise : it->second;
}

std::string EncodeCheckpoint(const CheckpointState& state) {
  return Encode(state, kCheckpointVersion);
}

std::string EncodeCheckpointV1(const CheckpointState& state) { return Encode(state, 1); }

absl::StatusOr<CheckpointState> DecodeCheckpoint(const std::string& bytes, const std::string& name) {
  auto loss = [&](const std::string& what) {
    return absl::DataLossError(absl::StrCat(name, ": ", what));
  };
  if (bytes.size() < kHeaderBytes + 4) return loss(absl::StrCat("truncated: ", bytes.size(), " bytes"));
  if (std::memcmp(bytes.data(), kMagic, sizeof(kMagic)) != 0) return loss("bad magic (not a checkpoint)");
  uint32_t version;
  uint64_t length;
  std::memcpy(&version, bytes.data() + 8, 4);
  std::memcpy(&length, bytes.data() + 12, 8);
  if (version < 1 || version > kCheckpointVersion) {
    return loss(absl::StrCat("unsupported version ", version, " (this build reads 1 to ",
                             kCheckpointVersion, ")"));
  }
  if (length != bytes.size() - kHeaderBytes - 4) {
    return loss(absl::StrCat("truncated: header says ", length, " payload bytes, file holds ",
                             bytes.size() - kHeaderBytes - 4));
  }
  uint32_t stored_crc;
  std::memcpy(&stored_crc, bytes.data() + kHeaderBytes + length, 4);
  uLong crc = crc32(0L, reinterpret_cast<const Bytef*>(bytes.data() + kHeaderBytes), length);
  if (static_cast<uint32_t>(crc) != stored_crc) return loss("CRC-32 mismatch (corrupt)");

  Reader in(bytes, kHeaderBytes, kHeaderBytes + length);
  CheckpointState state;
  uint32_t n;
  if (!in.Get(&n)) return loss("malformed integer table");
  for (uint32_t i = 0; i < n; ++i) {
    std::string key;
    int64_t v;
    if (!in.GetName(&key) || !in.Get(&v)) return loss("malformed integer record");
    state.ints[key] = v;
  }
  if (!in.Get(&n)) return loss("malformed real table");
  for (uint32_t i = 0; i < n; ++i) {
    std::string key;
    double v;
    if (!in.GetName(&key) || !in.Get(&v)) return loss("malformed real record");
    state.reals[key] = v;
  }
  if (version >= 2) {
    if (!in.Get(&n)) return loss("malformed string table");
    for (uint32_t i = 0; i < n; ++i) {
      std::string key, v;
      if (!in.GetName(&key) || !in.GetName(&v)) return loss("malformed string record");
      state.strings[key] = v;
    }
  }
  if (!in.Get(&n)) return loss("malformed tensor table");
  for (uint32_t i = 0; i < n; ++i) {
    TensorBlob blob;
    uint32_t rank;
    uint64_t count;
    if (!in.GetName(&blob.name) || !in.Get(&rank) || rank > 8) return loss("malformed tensor record");
    int64_t expected = 1;
    for (uint32_t d = 0; d < rank; ++d) {
      int64_t dim;
      if (!in.Get(&dim) || dim < 0) return loss("malformed tensor shape");
      blob.shape.push_back(dim);
      expected *= dim;
    }
    if (!in.Get(&count) || static_cast<int64_t>(count) != expected || !in.GetFloats(&blob.data, count)) {
      return loss(absl::StrCat("tensor '", blob.name, "' has a bad element count"));
    }
    state.tensors.push_back(std::move(blob));
  }
  if (!in.AtEnd()) return loss("trailing bytes in payload");
  return state;
}

std::string CheckpointFileName(int64_t id) {
  char buf[48];
  std::snprintf(buf, sizeof(buf), "ckpt-%012lld.bin", static_cast<long long>(id));
  return buf;
}

std::vector<std::pair<int64_t, std::string>> ListCheckpoints(const std::string& dir) {
  std::vector<std::pair<int64_t, std::string>> out;
  DIR* d = ::opendir(dir.c_str());
  if (d == nullptr) return out;
  while (struct dirent* entry = ::readdir(d)) {
    std::string name = entry->d_name;
    long long id;
    char tail[8];
    if (name.size() == 21 && std::sscanf(name.c_str(), "ckpt-%12lld.%3s", &id, tail) == 2 &&
        std::string(tail) == "bin" && CheckpointFileName(id) == name) {
      out.emplace_back(id, dir + "/" + name);
    }
  }
  ::closedir(d);
  std::sort(out.begin(), out.end(), [](const auto& a, const auto& b) { return a.first > b.first; });
  return out;
}

absl::Status WriteCheckpoint(const std::string& dir, int64_t id, const CheckpointState& state,
                             int keep) {
  if (absl::Status made = base::MakeDirs(dir); !made.ok()) return made;
  const std::string final_path = dir + "/" + CheckpointFileName(id);
  const std::string temp_path = absl::StrCat(final_path, ".tmp.", ::getpid());
  int fd = ::open(temp_path.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
  if (fd < 0) return absl::InternalError(Errno("open", temp_path));
  absl::Status written = base::WriteAll(fd, EncodeCheckpoint(state), temp_path);
  if (written.ok() && ::fsync(fd) != 0) written = absl::InternalError(Errno("fsync", temp_path));
  if (::close(fd) != 0 && written.ok()) written = absl::InternalError(Errno("close", temp_path));
  if (written.ok() && ::rename(temp_path.c_str(), final_path.c_str()) != 0) {
    written = absl::InternalError(Errno("rename to", final_path));
  }
  if (!written.ok()) {
    ::unlink(temp_path.c_str());
    return written;
  }
  int dir_fd = ::open(dir.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC);
  if (dir_fd >= 0) {
    ::fsync(dir_fd);
    ::close(dir_fd);
  }
  std::vector<std::pair<int64_t, std::string>> all = ListCheckpoints(dir);
  for (size_t i = std::max(keep, 1); i < all.size(); ++i) ::unlink(all[i].second.c_str());
  return absl::OkStatus();
}

std::optional<LoadedCheckpoint> LoadNewestCheckpoint(const std::string& dir,
                                                     std::vector<std::string>* warnings) {
  for (const auto& [id, path] : ListCheckpoints(dir)) {
    std::FILE* f = std::fopen(path.c_str(), "rb");
    if (f == nullptr) {
      warnings->push_back(Errno("cannot open checkpoint", path));
      continue;
    }
    std::string bytes;
    char buf[1 << 16];
    size_t n;
    while ((n = std::fread(buf, 1, sizeof(buf), f)) > 0) bytes.append(buf, n);
    std::fclose(f);
    absl::StatusOr<CheckpointState> state = DecodeCheckpoint(bytes, path);
    if (!state.ok()) {
      warnings->push_back(absl::StrCat("skipping unreadable checkpoint: ", state.status().message()));
      continue;
    }
    return LoadedCheckpoint{id, path, *std::move(state)};
  }
  return std::nullopt;
}

}  // namespace cpptorchrun::worker
