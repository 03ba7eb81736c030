#include "base/printable.h"

#include "absl/strings/str_format.h"

namespace cpptorchrun::base {

std::string Printable(absl::string_view text) {
  std::string out;
  out.reserve(text.size());
  for (char ch : text) {
    const unsigned char c = static_cast<unsigned char>(ch);
    if (c < 0x20 || c == 0x7f) {
      absl::StrAppendFormat(&out, "\\x%02x", c);
    } else {
      out.push_back(ch);
    }
  }
  return out;
}

}  // namespace cpptorchrun::base
