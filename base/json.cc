#include "base/json.h"

#include <charconv>
#include <cmath>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"

namespace cpptorchrun::base {
namespace {

// The length of the valid UTF-8 sequence at the start of `s`, or 0 when its
// first byte does not start one (RFC 3629: no overlong forms, no surrogates,
// nothing above U+10FFFF).
size_t Utf8SequenceLength(absl::string_view s) {
  const auto byte = [&](size_t i) { return static_cast<unsigned char>(s[i]); };
  const unsigned char b0 = byte(0);
  size_t len;
  unsigned char lo = 0x80, hi = 0xBF;  // the second byte's range
  if (b0 < 0x80) return 1;
  if (b0 >= 0xC2 && b0 <= 0xDF) {
    len = 2;
  } else if (b0 >= 0xE0 && b0 <= 0xEF) {
    len = 3;
    if (b0 == 0xE0) lo = 0xA0;  // overlong
    if (b0 == 0xED) hi = 0x9F;  // surrogates
  } else if (b0 >= 0xF0 && b0 <= 0xF4) {
    len = 4;
    if (b0 == 0xF0) lo = 0x90;  // overlong
    if (b0 == 0xF4) hi = 0x8F;  // above U+10FFFF
  } else {
    return 0;  // a continuation byte, C0/C1 (overlong), F5..FF
  }
  if (s.size() < len) return 0;
  if (byte(1) < lo || byte(1) > hi) return 0;
  for (size_t i = 2; i < len; ++i) {
    if (byte(i) < 0x80 || byte(i) > 0xBF) return 0;
  }
  return len;
}

}  // namespace

std::string JsonString(absl::string_view bytes) {
  std::string out;
  out.reserve(bytes.size() + 2);
  out.push_back('"');
  while (!bytes.empty()) {
    const unsigned char c = static_cast<unsigned char>(bytes[0]);
    const size_t len = Utf8SequenceLength(bytes);
    if (len == 0) {
      out += "\\ufffd";
      bytes.remove_prefix(1);
      continue;
    }
    if (len == 1) {
      switch (c) {
        case '"': out += "\\\""; break;
        case '\\': out += "\\\\"; break;
        case '\n': out += "\\n"; break;
        case '\r': out += "\\r"; break;
        case '\t': out += "\\t"; break;
        default:
          if (c < 0x20 || c == 0x7f) {
            absl::StrAppendFormat(&out, "\\u%04x", c);
          } else {
            out.push_back(static_cast<char>(c));
          }
      }
    } else if (bytes.substr(0, 3) == "\xE2\x80\xA8" || bytes.substr(0, 3) == "\xE2\x80\xA9") {
      // Line and paragraph separators: valid JSON, but line ends to
      // JavaScript and to some viewers.
      out += c == 0xE2 && static_cast<unsigned char>(bytes[2]) == 0xA8 ? "\\u2028" : "\\u2029";
    } else {
      out.append(bytes.data(), len);
    }
    bytes.remove_prefix(len);
  }
  out.push_back('"');
  return out;
}

std::string JsonNumber(double value) {
  if (!std::isfinite(value)) return "null";
  char buf[32];
  auto [end, ec] = std::to_chars(buf, buf + sizeof(buf), value);
  if (ec != std::errc()) return absl::StrFormat("%.17g", value);
  return std::string(buf, end);
}

std::string JsonNumber(int64_t value) { return absl::StrCat(value); }

}  // namespace cpptorchrun::base
