// UTF-8, checked once for every writer of outside text (JSON, Prometheus
// labels): which bytes start a valid sequence.
#ifndef CPPTORCHRUN_BASE_UTF8_H_
#define CPPTORCHRUN_BASE_UTF8_H_

#include <cstddef>

#include "absl/strings/string_view.h"

namespace cpptorchrun::base {

// The length (1..4) of the valid UTF-8 sequence starting at text[i], or 0
// when none starts there (RFC 3629: no overlong forms, no surrogates,
// nothing above U+10FFFF, no truncated sequence). `i` < text.size().
size_t Utf8SequenceLength(absl::string_view text, size_t i);

}  // namespace cpptorchrun::base

#endif  // CPPTORCHRUN_BASE_UTF8_H_
