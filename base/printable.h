// Text that came from outside (a client's reason, a peer's message) made
// safe to print on a terminal or in a log line: control characters (C0 and
// DEL: newlines, escape sequences) become \xNN, so no such text can forge
// a log line or drive the terminal.
#ifndef CPPTORCHRUN_BASE_PRINTABLE_H_
#define CPPTORCHRUN_BASE_PRINTABLE_H_

#include <string>

#include "absl/strings/string_view.h"

namespace cpptorchrun::base {

std::string Printable(absl::string_view text);

}  // namespace cpptorchrun::base

#endif  // CPPTORCHRUN_BASE_PRINTABLE_H_
