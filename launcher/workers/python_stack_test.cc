#include "launcher/workers/python_stack.h"

#include <string>

#include "absl/strings/str_cat.h"
#include "gtest/gtest.h"

namespace cpptorchrun::launcher {
namespace {

// What Python 3.11's faulthandler writes on SIGABRT, after the script's
// own output.
constexpr char kDump[] =
    "step 3\n"
    "Fatal Python error: Aborted\n"
    "\n"
    "Thread 0x00007f0c2a7fc6c0 (most recent call first):\n"
    "  File \"/usr/lib/python3.11/threading.py\", line 324 in wait\n"
    "\n"
    "Current thread 0x00007f0c3a1bf740 (most recent call first):\n"
    "  File \"/job/train.py\", line 12 in wait_here\n"
    "  File \"/job/train.py\", line 20 in <module>\n"
    "\n"
    "Extension modules: numpy.core._multiarray_umath, torch._C (total: 2)\n";

TEST(PythonStack, TheDumpWithoutTheScriptsOutputOrTheModules) {
  std::optional<std::string> stack = PythonStackFromOutput(kDump);
  ASSERT_TRUE(stack.has_value());
  EXPECT_EQ(*stack,
            "Fatal Python error: Aborted\n\nThread 0x00007f0c2a7fc6c0 (most recent call first):\n"
            "  File \"/usr/lib/python3.11/threading.py\", line 324 in wait\n\n"
            "Current thread 0x00007f0c3a1bf740 (most recent call first):\n"
            "  File \"/job/train.py\", line 12 in wait_here\n"
            "  File \"/job/train.py\", line 20 in <module>");
}

TEST(PythonStack, TheLastDumpWhenThereAreSeveral) {
  const std::string out = absl::StrCat(kDump, "Fatal Python error: Aborted\n\nCurrent thread 0x1 (most recent call "
                                              "first):\n  File \"/job/other.py\", line 1 in again\n");
  std::optional<std::string> stack = PythonStackFromOutput(out);
  ASSERT_TRUE(stack.has_value());
  EXPECT_EQ(stack->find("wait_here"), std::string::npos);
  EXPECT_NE(stack->find("in again"), std::string::npos);
}

TEST(PythonStack, NoneWithoutADumpOrWithoutAFrame) {
  EXPECT_FALSE(PythonStackFromOutput("").has_value());
  EXPECT_FALSE(PythonStackFromOutput("Traceback (most recent call last):\n  File \"x.py\", line 1\n").has_value());
  // Cut off before its first frame (the process was killed while writing).
  EXPECT_FALSE(PythonStackFromOutput("Fatal Python error: Aborted\n\nCurrent thread 0x1").has_value());
}

TEST(PythonStack, ALongStackIsCut) {
  std::string out = "Fatal Python error: Aborted\r\n\r\nCurrent thread 0x1 (most recent call first):\r\n";
  for (int i = 0; i < 500; ++i) absl::StrAppend(&out, "  File \"/job/deep.py\", line ", i, " in recurse\r\n");
  std::optional<std::string> stack = PythonStackFromOutput(out);
  ASSERT_TRUE(stack.has_value());
  EXPECT_LE(stack->size(), kMaxStackBytes + 8);
  EXPECT_EQ(stack->find('\r'), std::string::npos);
  EXPECT_EQ(stack->substr(stack->size() - 6), "\n  ...");
  EXPECT_NE(stack->find("line 0 in recurse"), std::string::npos);
}

TEST(FaultHandler, OnWhenSetAndNotEmpty) {
  EXPECT_FALSE(FaultHandlerOn({}));
  EXPECT_FALSE(FaultHandlerOn({{"PYTHONFAULTHANDLER", ""}}));
  EXPECT_TRUE(FaultHandlerOn({{"PYTHONFAULTHANDLER", "1"}}));
  EXPECT_TRUE(FaultHandlerOn({{"PYTHONFAULTHANDLER", "0"}}));  // Python: any non-empty value
}

}  // namespace
}  // namespace cpptorchrun::launcher
