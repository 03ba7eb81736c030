#include "base/printable.h"

#include "gtest/gtest.h"

namespace cpptorchrun::base {
namespace {

TEST(Printable, ControlCharactersAreEscapedTheRestKept) {
  EXPECT_EQ(Printable("node left: done"), "node left: done");
  EXPECT_EQ(Printable("a\nb"), "a\\x0ab");
  EXPECT_EQ(Printable("\x1b]0;owned\x07"), "\\x1b]0;owned\\x07");
  EXPECT_EQ(Printable("tab\there\x7f"), "tab\\x09here\\x7f");
  EXPECT_EQ(Printable("caf\xc3\xa9"), "caf\xc3\xa9") << "UTF-8 is kept";
}

}  // namespace
}  // namespace cpptorchrun::base
