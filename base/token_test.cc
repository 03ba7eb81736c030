#include "base/token.h"

#include <fstream>
#include <string>

#include "gtest/gtest.h"

namespace cpptorchrun::base {
namespace {

std::string WriteFile(const std::string& name, const std::string& text) {
  std::string path = std::string(::testing::TempDir()) + "/" + name;
  std::ofstream(path, std::ios::binary) << text;
  return path;
}

TEST(ParseToken, SurroundingWhitespaceIsNotPartOfTheToken) {
  for (const char* text : {"s3cret", "s3cret\n", "s3cret\r\n", "s3cret \n", "\n\ns3cret\n",
                           "  s3cret\t", "s3cret\r\n\r\n"}) {
    auto token = ParseToken(text, "test");
    ASSERT_TRUE(token.ok()) << text << ": " << token.status();
    EXPECT_EQ(*token, "s3cret");
  }
}

TEST(ParseToken, EmptyOrBlankIsAnErrorNotNoAuth) {
  for (const char* text : {"", " ", "\n", "\r\n", " \t \n"}) {
    auto token = ParseToken(text, "CPPTORCHRUN_RDZV_TOKEN");
    ASSERT_FALSE(token.ok()) << "'" << text << "'";
    EXPECT_EQ(token.status().code(), absl::StatusCode::kInvalidArgument);
    EXPECT_NE(token.status().message().find("CPPTORCHRUN_RDZV_TOKEN holds no token"), std::string::npos)
        << token.status();
  }
}

TEST(ParseToken, InnerLineBreaksAndControlBytesAreRefusedWithoutEchoingTheToken) {
  for (const char* text : {"zq\ncd", "zq cd", "zq\rcd", "zq\x01", "zqf\xc3\xa9"}) {
    auto token = ParseToken(text, "the token file 'x'");
    ASSERT_FALSE(token.ok()) << text;
    EXPECT_EQ(token.status().code(), absl::StatusCode::kInvalidArgument);
    EXPECT_NE(token.status().message().find("the token file 'x'"), std::string::npos);
    EXPECT_EQ(token.status().message().find("zq"), std::string::npos) << token.status();
  }
}

TEST(ParseToken, OversizedIsRefused) {
  EXPECT_FALSE(ParseToken(std::string(5000, 'a'), "t").ok());
  EXPECT_TRUE(ParseToken(std::string(4096, 'a'), "t").ok());
}

TEST(ReadTokenFile, CrlfAndTrailingSpacesReadAsTheSameToken) {
  EXPECT_EQ(*ReadTokenFile(WriteFile("crlf", "tok-1\r\n")), "tok-1");
  EXPECT_EQ(*ReadTokenFile(WriteFile("space", "\ntok-1  \n")), "tok-1");
}

TEST(ReadTokenFile, MissingAndEmptyFilesNameThePath) {
  auto missing = ReadTokenFile("/nonexistent/token");
  ASSERT_FALSE(missing.ok());
  EXPECT_EQ(missing.status().code(), absl::StatusCode::kNotFound);
  EXPECT_NE(missing.status().message().find("/nonexistent/token"), std::string::npos);
  const std::string empty = WriteFile("empty", "\r\n");
  auto blank = ReadTokenFile(empty);
  ASSERT_FALSE(blank.ok());
  EXPECT_NE(blank.status().message().find(empty), std::string::npos);
}

}  // namespace
}  // namespace cpptorchrun::base
