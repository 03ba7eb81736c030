#include "base/json.h"

#include <charconv>
#include <cmath>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "base/utf8.h"

namespace cpptorchrun::base {

std::string JsonString(absl::string_view bytes) {
  std::string out;
  out.reserve(bytes.size() + 2);
  out.push_back('"');
  while (!bytes.empty()) {
    const unsigned char c = static_cast<unsigned char>(bytes[0]);
    const size_t len = Utf8SequenceLength(bytes, 0);
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
