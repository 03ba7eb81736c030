#include "base/flags.h"

#include "absl/status/status.h"
#include "absl/strings/ascii.h"
#include "absl/strings/str_cat.h"

namespace cpptorchrun::base {

absl::StatusOr<bool> ParseBool(absl::string_view text, absl::string_view what) {
  const std::string v = absl::AsciiStrToLower(absl::StripAsciiWhitespace(text));
  if (v == "1" || v == "true" || v == "yes" || v == "on") return true;
  if (v == "0" || v == "false" || v == "no" || v == "off" || v.empty()) return false;
  return absl::InvalidArgumentError(
      absl::StrCat(what, ": expected a boolean (1/true/yes/on or 0/false/no/off); got '", text, "'"));
}

}  // namespace cpptorchrun::base
