#include "base/token.h"

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/strip.h"
#include "base/files.h"

namespace cpptorchrun::base {
namespace {

// Tokens are secrets: a bound keeps a wrong file (a key, a log) from being
// sent whole in every call's metadata.
constexpr size_t kMaxTokenBytes = 4096;

}  // namespace

absl::StatusOr<std::string> ParseToken(absl::string_view text, absl::string_view source) {
  absl::string_view token = absl::StripAsciiWhitespace(text);
  if (token.empty()) {
    return absl::InvalidArgumentError(absl::StrCat(source, " holds no token (it is empty or blank)"));
  }
  if (token.size() > kMaxTokenBytes) {
    return absl::InvalidArgumentError(
        absl::StrCat(source, " holds ", token.size(), " bytes; a token is at most ", kMaxTokenBytes));
  }
  for (size_t i = 0; i < token.size(); ++i) {
    unsigned char c = static_cast<unsigned char>(token[i]);
    if (c <= 0x20 || c >= 0x7f) {
      // Never print the token itself: name the position and the byte.
      return absl::InvalidArgumentError(absl::StrFormat(
          "%s: the token has byte 0x%02x at offset %d; a token is printable ASCII without "
          "spaces or line breaks inside it",
          source, c, i));
    }
  }
  return std::string(token);
}

absl::StatusOr<std::string> ReadTokenFile(const std::string& path) {
  absl::StatusOr<std::string> text = ReadWholeFile(path, "token file");
  if (!text.ok()) return text.status();
  return ParseToken(*text, absl::StrCat("the token file '", path, "'"));
}

}  // namespace cpptorchrun::base
