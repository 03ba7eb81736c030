// The rendezvous token: one reader for every part that sends or checks it
// (cpptorchrun, `cpptorchrun status`, rendezvous_server, the workers), so a
// token file means the same thing everywhere.
//
// A token is what the file (or variable) holds with leading and trailing
// whitespace removed (blank lines, a trailing newline or CRLF, spaces). What
// is left must be non-empty and printable ASCII without spaces (it travels
// as the gRPC metadata value "Bearer <token>", which allows nothing else).
// An empty or whitespace-only token is an error, never "no auth".
#ifndef CPPTORCHRUN_BASE_TOKEN_H_
#define CPPTORCHRUN_BASE_TOKEN_H_

#include <string>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"

namespace cpptorchrun::base {

// The token in `text`; InvalidArgument naming `source` (e.g. "the token file
// /etc/t") when it is empty or holds a character a token cannot carry.
absl::StatusOr<std::string> ParseToken(absl::string_view text, absl::string_view source);

// Reads the token file at `path`. NotFound when it cannot be read (the
// error names the path and why); otherwise as ParseToken.
absl::StatusOr<std::string> ReadTokenFile(const std::string& path);

}  // namespace cpptorchrun::base

#endif  // CPPTORCHRUN_BASE_TOKEN_H_
