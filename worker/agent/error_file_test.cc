// Tests of the torchrun-compatible error file, read back by Python's json
// module where /usr/bin/python3 is present.
#include "worker/agent/error_file.h"

#include <cstdio>
#include <fstream>
#include <sstream>

#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace cpptorchrun::worker {
namespace {

using ::testing::HasSubstr;

TEST(ErrorFile, Format) {
  std::string json = ErrorJson("DataError", "file \"x\" is short\n", "ctx", 1700000000);
  EXPECT_EQ(json,
            "{\"message\": {\"message\": \"DataError: file \\\"x\\\" is short\\n\", "
            "\"extraInfo\": {\"py_callstack\": \"ctx\", \"timestamp\": \"1700000000\"}}}\n");
  // Hostile bytes (a control character, a byte that is not UTF-8) still
  // give a file that is valid JSON and valid UTF-8.
  EXPECT_THAT(ErrorJson("E", std::string("a\x01" "b\xff"), "", 1), HasSubstr("a\\u0001b\\ufffd"));
}

TEST(ErrorFile, WritesAFilePythonReads) {
  std::string path = std::string(std::getenv("TEST_TMPDIR") ? std::getenv("TEST_TMPDIR") : "/tmp") +
                     "/error.json";
  ASSERT_TRUE(WriteErrorFile(path, "RuntimeError", "boom \\ \"quoted\"", "rank 1", 42).ok());
  std::ifstream in(path);
  std::stringstream text;
  text << in.rdbuf();
  EXPECT_THAT(text.str(), HasSubstr("RuntimeError: boom"));
  FILE* probe = std::fopen("/usr/bin/python3", "r");
  if (probe == nullptr) GTEST_SKIP() << "no /usr/bin/python3 to parse the JSON";
  std::fclose(probe);
  std::string command = "/usr/bin/python3 -c \"import json,sys; d=json.load(open('" + path +
                        "')); m=d['message']; sys.exit(0 if m['message']=='RuntimeError: boom \\\\\\\\ "
                        "\\\\\\\"quoted\\\\\\\"' and m['extraInfo']['timestamp']=='42' else 3)\"";
  EXPECT_EQ(std::system(command.c_str()), 0) << command;
  EXPECT_FALSE(WriteErrorFile("/nonexistent-dir/e.json", "T", "w", "", 0).ok());
}

}  // namespace
}  // namespace cpptorchrun::worker
