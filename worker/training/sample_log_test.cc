#include "worker/training/sample_log.h"

#include <cstdlib>
#include <fstream>
#include <sstream>
#include <vector>

#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace cpptorchrun::worker {
namespace {

using ::testing::HasSubstr;

std::string Dir(const std::string& name) {
  const char* base = std::getenv("TEST_TMPDIR");
  return std::string(base != nullptr ? base : "/tmp") + "/" + name;
}

std::string ReadFile(const std::string& path) {
  std::ifstream in(path);
  std::stringstream s;
  s << in.rdbuf();
  return s.str();
}

TEST(SampleLog, WritesHeaderResumeAndOneLinePerBatch) {
  absl::StatusOr<std::unique_ptr<SampleLog>> log = SampleLog::Open(Dir("a/b"), 3, 1, 4);
  ASSERT_TRUE(log.ok()) << log.status();
  EXPECT_THAT((*log)->path(), HasSubstr("/a/b/samples.round3.rank1.pid"));
  (*log)->OnResumed(17);
  std::vector<int64_t> indices = {5, 9, 2};
  StepReport r;
  r.global_step = 18;
  r.epoch = 0;
  r.samples = indices;
  (*log)->OnBatchStart(r);
  r.global_step = 19;
  r.epoch = 1;
  r.samples = absl::MakeConstSpan(indices).subspan(1);
  (*log)->OnBatchStart(r);
  EXPECT_EQ(ReadFile((*log)->path()),
            "# round 3 rank 1 world 4\n# resumed 17\n18 0 5 9 2\n19 1 9 2\n");
}

TEST(SampleLog, AnUnusableFolderIsNamed) {
  const std::string file = Dir("plain-file");
  std::ofstream(file) << "x";
  absl::StatusOr<std::unique_ptr<SampleLog>> log = SampleLog::Open(file + "/sub", 1, 0, 1);
  ASSERT_FALSE(log.ok());
  EXPECT_THAT(log.status().message(), HasSubstr("--sample_log"));
  EXPECT_THAT(log.status().message(), HasSubstr("plain-file/sub"));
}

}  // namespace
}  // namespace cpptorchrun::worker
