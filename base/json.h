// JSON text for values written by hand (no JSON library is linked): a string
// literal that is valid JSON and valid UTF-8 whatever bytes it is given, and
// numbers that JSON can hold. Text from outside (a client's reason, a node's
// host) is hostile: quotes, backslashes, control characters and bytes that
// are not UTF-8 must not break the document or the terminal that shows it.
#ifndef CPPTORCHRUN_BASE_JSON_H_
#define CPPTORCHRUN_BASE_JSON_H_

#include <cstdint>
#include <string>

#include "absl/strings/string_view.h"

namespace cpptorchrun::base {

// `bytes` as a quoted JSON string. `"` and `\` are escaped; control
// characters (U+0000..U+001F, DEL) and U+2028/U+2029 become \uXXXX; valid
// UTF-8 sequences are kept as they are; every byte that does not start or
// continue a valid sequence (stray continuation bytes, overlong forms,
// surrogates, above U+10FFFF, a truncated sequence) becomes U+FFFD, one per
// byte, so the output is always valid UTF-8.
std::string JsonString(absl::string_view bytes);

// A number as JSON: the shortest text that reads back as the same double;
// NaN and the infinities, which JSON cannot hold, as null.
std::string JsonNumber(double value);
std::string JsonNumber(int64_t value);

}  // namespace cpptorchrun::base

#endif  // CPPTORCHRUN_BASE_JSON_H_
