#include "base/files.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cstdlib>
#include <fstream>
#include <string>

#include "gtest/gtest.h"

namespace cpptorchrun::base {
namespace {

std::string TempDir() {
  const char* t = std::getenv("TEST_TMPDIR");
  std::string templ = std::string(t != nullptr ? t : "/tmp") + "/files_test.XXXXXX";
  return mkdtemp(templ.data());
}

TEST(MakeDirs, MakesEveryMissingParentAndAcceptsAnExistingFolder) {
  const std::string root = TempDir();
  const std::string deep = root + "/a/b/c";
  ASSERT_TRUE(MakeDirs(deep).ok());
  struct stat st {};
  ASSERT_EQ(stat(deep.c_str(), &st), 0);
  EXPECT_TRUE(S_ISDIR(st.st_mode));
  EXPECT_TRUE(MakeDirs(deep).ok()) << "an existing folder is fine";
}

TEST(MakeDirs, AFileInTheWayIsAnErrorNamingIt) {
  const std::string root = TempDir();
  std::ofstream(root + "/file") << "x";
  absl::Status s = MakeDirs(root + "/file/sub");
  ASSERT_FALSE(s.ok());
  EXPECT_NE(s.message().find(root + "/file"), absl::string_view::npos) << s;
  s = MakeDirs(root + "/file");
  EXPECT_FALSE(s.ok()) << "a file is not a folder";
}

TEST(ReadWholeFile, ReadsBytesAndNamesWhatIsMissing) {
  const std::string root = TempDir();
  std::ofstream(root + "/t", std::ios::binary) << std::string("a\0b", 3);
  auto got = ReadWholeFile(root + "/t", "token file");
  ASSERT_TRUE(got.ok());
  EXPECT_EQ(*got, std::string("a\0b", 3));
  auto missing = ReadWholeFile(root + "/none", "token file");
  ASSERT_FALSE(missing.ok());
  EXPECT_NE(missing.status().message().find("token file"), absl::string_view::npos);
}

TEST(WriteAll, WritesEveryByteAndNamesThePathOnError) {
  const std::string root = TempDir();
  const std::string path = root + "/out";
  const int fd = ::open(path.c_str(), O_WRONLY | O_CREAT, 0644);
  ASSERT_GE(fd, 0);
  const std::string data(1 << 20, 'x');
  ASSERT_TRUE(WriteAll(fd, data, path).ok());
  ::close(fd);
  EXPECT_EQ(*ReadWholeFile(path, "output"), data);
  absl::Status closed = WriteAll(fd, "y", path);
  ASSERT_FALSE(closed.ok()) << "a closed descriptor";
  EXPECT_NE(closed.message().find(path), absl::string_view::npos) << closed;
}

}  // namespace
}  // namespace cpptorchrun::base
