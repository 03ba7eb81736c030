#include "launcher/agent/event_log.h"

#include <fstream>
#include <sstream>

#include "gtest/gtest.h"

namespace cpptorchrun::launcher {
namespace {

TEST(EventJson, FieldsOfEveryKindAndEscapedText) {
  EXPECT_EQ(EventJson(1.5, "restart", {{"round", int64_t{3}}, {"total_s", 0.25}, {"pids", std::vector<int64_t>{7, 8}},
                                       {"reason", std::string("node 'a\"b'\nleft\x01")}}),
            "{\"time\": 1.500000, \"event\": \"restart\", \"round\": 3, \"total_s\": 0.250000, "
            "\"pids\": [7, 8], \"reason\": \"node 'a\\\"b'\\nleft\\u0001\"}");
}

TEST(EventJson, BytesThatAreNotUtf8StillGiveValidJson) {
  // A reason from another node or a worker's path may hold any bytes.
  EXPECT_EQ(EventJson(0, "closed", {{"reason", std::string("caf\xc3\xa9 \xff\xc3")}}),
            "{\"time\": 0.000000, \"event\": \"closed\", \"reason\": \"caf\xc3\xa9 \\ufffd\\ufffd\"}");
}

TEST(FileEventLog, OneLinePerEventAppended) {
  const std::string path = std::string(::testing::TempDir()) + "/events.jsonl";
  {
    auto log = NewFileEventLog(path, false);
    log->Record("round_joined", {{"round", int64_t{1}}});
    log->Record("finished", {{"exit_code", int64_t{0}}});
  }
  std::ifstream in(path);
  std::string a, b, c;
  std::getline(in, a);
  std::getline(in, b);
  EXPECT_FALSE(std::getline(in, c));
  EXPECT_NE(a.find("\"event\": \"round_joined\", \"round\": 1}"), std::string::npos) << a;
  EXPECT_NE(b.find("\"event\": \"finished\", \"exit_code\": 0}"), std::string::npos) << b;
}

}  // namespace
}  // namespace cpptorchrun::launcher
