// Tests of whole-file reads: gzip and raw, errors, and the cache of
// inflated copies (used when fresh, bypassed when stale or damaged, never
// required).
#include "worker/data/data_file.h"

#include <dirent.h>
#include <sys/stat.h>
#include <zlib.h>

#include <cstdlib>
#include <fstream>
#include <map>
#include <sstream>
#include <string>
#include <vector>

#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace cpptorchrun::worker {
namespace {

using ::testing::HasSubstr;

std::string TempDir(const std::string& name) {
  const char* base = std::getenv("TEST_TMPDIR");
  std::string dir = std::string(base != nullptr ? base : "/tmp") + "/" + name;
  ::mkdir(dir.c_str(), 0700);
  return dir;
}

std::string Bytes(size_t n, int salt) {
  std::string out;
  for (size_t i = 0; i < n; ++i) out.push_back(static_cast<char>((i * 7 + salt) % 251));
  return out;
}

void WriteGz(const std::string& path, const std::string& bytes) {
  gzFile f = gzopen(path.c_str(), "wb");
  gzwrite(f, bytes.data(), bytes.size());
  gzclose(f);
}

void WriteFile(const std::string& path, const std::string& bytes) {
  std::ofstream(path, std::ios::binary | std::ios::trunc) << bytes;
}

std::string ReadFile(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  std::stringstream s;
  s << in.rdbuf();
  return s.str();
}

std::vector<std::string> Files(const std::string& dir) {
  std::vector<std::string> out;
  DIR* d = ::opendir(dir.c_str());
  if (d == nullptr) return out;
  while (dirent* e = ::readdir(d)) {
    std::string name = e->d_name;
    if (name != "." && name != "..") out.push_back(dir + "/" + name);
  }
  ::closedir(d);
  return out;
}

TEST(DataFile, InflatesGzipAndPassesRawThrough) {
  const std::string dir = TempDir("plain");
  const std::string bytes = Bytes(300000, 1);
  WriteGz(dir + "/a.gz", bytes);
  WriteFile(dir + "/a.raw", bytes);
  EXPECT_EQ(*ReadDataFile(dir + "/a.gz", ""), bytes);
  EXPECT_EQ(*ReadDataFile(dir + "/a.raw", ""), bytes);
}

TEST(DataFile, ErrorsNameTheFile) {
  const std::string dir = TempDir("errors");
  absl::StatusOr<std::string> missing = ReadDataFile(dir + "/missing.gz", "");
  EXPECT_EQ(missing.status().code(), absl::StatusCode::kNotFound);
  EXPECT_THAT(missing.status().message(), HasSubstr("missing.gz"));

  WriteGz(dir + "/whole.gz", Bytes(100000, 2));
  const std::string gz = ReadFile(dir + "/whole.gz");
  WriteFile(dir + "/cut.gz", gz.substr(0, gz.size() / 2));
  for (const std::string& cache : {std::string(), TempDir("errors-cache")}) {
    absl::StatusOr<std::string> cut = ReadDataFile(dir + "/cut.gz", cache);
    EXPECT_EQ(cut.status().code(), absl::StatusCode::kDataLoss) << cut.status();
    EXPECT_THAT(cut.status().message(), HasSubstr("cut.gz"));
  }
  EXPECT_TRUE(Files(TempDir("errors-cache")).empty()) << "nothing cached from a damaged file";
}

TEST(DataFile, TheCacheIsWrittenOnceAndReadBack) {
  const std::string dir = TempDir("cached");
  const std::string cache = TempDir("cached-cache");
  const std::string bytes = Bytes(200000, 3);
  WriteGz(dir + "/d.gz", bytes);
  EXPECT_EQ(*ReadDataFile(dir + "/d.gz", cache), bytes);
  std::vector<std::string> files = Files(cache);
  ASSERT_EQ(files.size(), 1u);
  EXPECT_EQ(ReadFile(files[0]), bytes);
  EXPECT_THAT(files[0], HasSubstr("d.gz."));

  // Proof that the second read comes from the cache: a copy of the same
  // length but other bytes is what it returns.
  const std::string other = Bytes(200000, 4);
  WriteFile(files[0], other);
  EXPECT_EQ(*ReadDataFile(dir + "/d.gz", cache), other);
}

TEST(DataFile, AStaleOrDamagedCopyIsReplaced) {
  const std::string dir = TempDir("stale");
  const std::string cache = TempDir("stale-cache");
  WriteGz(dir + "/s.gz", Bytes(50000, 5));
  ASSERT_TRUE(ReadDataFile(dir + "/s.gz", cache).ok());

  // The source changes: its identity changes, the old copy is not used.
  const std::string changed = Bytes(60000, 6);
  WriteGz(dir + "/s.gz", changed);
  EXPECT_EQ(*ReadDataFile(dir + "/s.gz", cache), changed);

  // A copy cut short (a full disk, say) is not trusted: it is rewritten.
  for (const std::string& f : Files(cache)) WriteFile(f, "short");
  EXPECT_EQ(*ReadDataFile(dir + "/s.gz", cache), changed);
  bool rewritten = false;
  for (const std::string& f : Files(cache)) rewritten |= ReadFile(f) == changed;
  EXPECT_TRUE(rewritten);
}

TEST(DataFile, AnUnwritableCacheIsSkipped) {
  const std::string dir = TempDir("unwritable");
  WriteFile(dir + "/a-file", "x");
  const std::string bytes = Bytes(1000, 7);
  WriteGz(dir + "/u.gz", bytes);
  // A folder below a regular file can never be made.
  EXPECT_EQ(*ReadDataFile(dir + "/u.gz", dir + "/a-file/cache"), bytes);
}

TEST(DataFile, DefaultCacheDirPrecedence) {
  std::map<std::string, std::string> env;
  auto get = [&env](const char* name) -> const char* {
    auto it = env.find(name);
    return it == env.end() ? nullptr : it->second.c_str();
  };
  EXPECT_EQ(DefaultDataCacheDir(get), "");
  env["HOME"] = "/home/u";
  EXPECT_EQ(DefaultDataCacheDir(get), "/home/u/.cache/cpptorchrun");
  env["XDG_CACHE_HOME"] = "/xdg";
  EXPECT_EQ(DefaultDataCacheDir(get), "/xdg/cpptorchrun");
  env["CPPTORCHRUN_CACHE_DIR"] = "/c";
  EXPECT_EQ(DefaultDataCacheDir(get), "/c");
}

}  // namespace
}  // namespace cpptorchrun::worker
