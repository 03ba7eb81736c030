// Tests of the JSON string and number writers, hostile bytes first.
#include "base/json.h"

#include <cmath>
#include <limits>

#include "gtest/gtest.h"

namespace cpptorchrun::base {
namespace {

TEST(JsonString, PlainTextIsQuotedAsItIs) {
  EXPECT_EQ(JsonString(""), "\"\"");
  EXPECT_EQ(JsonString("host-1.example:29400"), "\"host-1.example:29400\"");
}

TEST(JsonString, QuotesBackslashesAndControlsAreEscaped) {
  EXPECT_EQ(JsonString("a\"b\\c"), "\"a\\\"b\\\\c\"");
  EXPECT_EQ(JsonString("l1\nl2\r\t"), "\"l1\\nl2\\r\\t\"");
  EXPECT_EQ(JsonString(std::string("\x1b[2J\x00\x7f", 6)), "\"\\u001b[2J\\u0000\\u007f\"");
  EXPECT_EQ(JsonString("\x01\x1f"), "\"\\u0001\\u001f\"");
}

TEST(JsonString, ValidUtf8IsKept) {
  EXPECT_EQ(JsonString("caf\xC3\xA9"), "\"caf\xC3\xA9\"");                      // U+00E9
  EXPECT_EQ(JsonString("\xE2\x82\xAC"), "\"\xE2\x82\xAC\"");                    // U+20AC
  EXPECT_EQ(JsonString("\xF0\x9F\x98\x80"), "\"\xF0\x9F\x98\x80\"");            // U+1F600
  EXPECT_EQ(JsonString("\xF4\x8F\xBF\xBF"), "\"\xF4\x8F\xBF\xBF\"");            // U+10FFFF
  EXPECT_EQ(JsonString("\xED\x9F\xBF"), "\"\xED\x9F\xBF\"");                    // U+D7FF
  EXPECT_EQ(JsonString("a\xE2\x80\xA8" "b\xE2\x80\xA9"), "\"a\\u2028b\\u2029\"");
}

TEST(JsonString, EveryInvalidByteBecomesOneReplacement) {
  const std::string r = "\\ufffd";
  EXPECT_EQ(JsonString("\x80"), "\"" + r + "\"");                  // stray continuation
  EXPECT_EQ(JsonString("\xFF\xFE"), "\"" + r + r + "\"");          // never in UTF-8
  EXPECT_EQ(JsonString("\xC0\xAF"), "\"" + r + r + "\"");          // overlong '/'
  EXPECT_EQ(JsonString("\xE0\x80\xAF"), "\"" + r + r + r + "\"");  // overlong, 3 bytes
  EXPECT_EQ(JsonString("\xED\xA0\x80"), "\"" + r + r + r + "\"");  // a surrogate
  EXPECT_EQ(JsonString("\xF4\x90\x80\x80"), "\"" + r + r + r + r + "\"");  // above U+10FFFF
  EXPECT_EQ(JsonString("ab\xE2\x82"), "\"ab" + r + r + "\"");      // truncated at the end
  EXPECT_EQ(JsonString("\xC3" "\""), "\"" + r + "\\\"\"");         // cut by a quote
  EXPECT_EQ(JsonString("\xE2\x82x"), "\"" + r + r + "x\"");
}

TEST(JsonString, OutputIsPrintableAsciiOrValidUtf8ForEveryByte) {
  for (int b = 0; b < 256; ++b) {
    const std::string in(1, static_cast<char>(b));
    const std::string out = JsonString(in);
    for (unsigned char c : out) EXPECT_TRUE(c >= 0x20 && c != 0x7f) << "byte " << b << " gave " << out;
    if (b >= 0x80) {
      EXPECT_EQ(out, "\"\\ufffd\"") << b;
    }
  }
}

TEST(JsonNumber, ShortestRoundTripAndNullForNonFinite) {
  EXPECT_EQ(JsonNumber(0.3125), "0.3125");
  EXPECT_EQ(JsonNumber(0.1), "0.1");
  EXPECT_EQ(JsonNumber(1450.0), "1450");
  EXPECT_EQ(JsonNumber(-2.5), "-2.5");
  EXPECT_EQ(JsonNumber(std::nan("")), "null");
  EXPECT_EQ(JsonNumber(std::numeric_limits<double>::infinity()), "null");
  EXPECT_EQ(JsonNumber(-std::numeric_limits<double>::infinity()), "null");
  EXPECT_EQ(JsonNumber(int64_t{-7}), "-7");
  EXPECT_EQ(JsonNumber(int64_t{1} << 40), "1099511627776");
}

}  // namespace
}  // namespace cpptorchrun::base
