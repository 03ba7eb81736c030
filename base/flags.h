// One parser for every boolean the user writes (flags, --rdzv_conf keys,
// environment variables), so `is_host=yes` means the same wherever it is
// read.
#ifndef CPPTORCHRUN_BASE_FLAGS_H_
#define CPPTORCHRUN_BASE_FLAGS_H_

#include <string>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"

namespace cpptorchrun::base {

// 1/true/yes/on and 0/false/no/off, in any case; the empty string is false
// (torchrun's `--rdzv_conf is_host=`). InvalidArgument naming `what`
// otherwise.
absl::StatusOr<bool> ParseBool(absl::string_view text, absl::string_view what);

}  // namespace cpptorchrun::base

#endif  // CPPTORCHRUN_BASE_FLAGS_H_
