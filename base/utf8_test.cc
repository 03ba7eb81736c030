#include "base/utf8.h"

#include <string>

#include "gtest/gtest.h"

namespace cpptorchrun::base {
namespace {

size_t Len(const std::string& s, size_t i = 0) { return Utf8SequenceLength(s, i); }

TEST(Utf8, ValidSequencesOfEachLength) {
  EXPECT_EQ(Len("a"), 1u);
  EXPECT_EQ(Len("\xC3\xA9"), 2u);          // é
  EXPECT_EQ(Len("\xE2\x82\xAC"), 3u);      // €
  EXPECT_EQ(Len("\xF0\x9F\x98\x80"), 4u);  // 😀
  EXPECT_EQ(Len("x\xC3\xA9", 1), 2u) << "from the middle of a text";
}

TEST(Utf8, WhatIsNotUtf8StartsNoSequence) {
  EXPECT_EQ(Len("\x80"), 0u) << "a continuation byte";
  EXPECT_EQ(Len("\xC0\xAF"), 0u) << "overlong 2-byte";
  EXPECT_EQ(Len("\xE0\x80\xAF"), 0u) << "overlong 3-byte";
  EXPECT_EQ(Len("\xF0\x80\x80\xAF"), 0u) << "overlong 4-byte";
  EXPECT_EQ(Len("\xED\xA0\x80"), 0u) << "a surrogate";
  EXPECT_EQ(Len("\xF4\x90\x80\x80"), 0u) << "above U+10FFFF";
  EXPECT_EQ(Len("\xF5\x80\x80\x80"), 0u);
  EXPECT_EQ(Len("\xFF"), 0u);
  EXPECT_EQ(Len("\xE2\x82"), 0u) << "truncated";
  EXPECT_EQ(Len("\xE2\x28\xA1"), 0u) << "a bad continuation";
}

}  // namespace
}  // namespace cpptorchrun::base
