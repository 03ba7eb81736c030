// The rendezvous_server binary's command line: its flags, and how they
// become ServerOptions (which files they read, which values they refuse).
// Kept apart from main() so the decisions are tested without a process.
#ifndef CPPTORCHRUN_RENDEZVOUS_SERVER_FLAGS_H_
#define CPPTORCHRUN_RENDEZVOUS_SERVER_FLAGS_H_

#include <string>

#include "CLI/CLI.hpp"
#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "rendezvous/endpoint.h"
#include "rendezvous/server.h"
#include "spdlog/spdlog.h"

namespace cpptorchrun::rdzv {

// What the flags hold before they are checked.
struct ServerFlags {
  std::string host = "127.0.0.1";
  int port = kDefaultRendezvousPort;
  std::string token_file, key_file, tls_cert, tls_key;
  std::string log_level = "info";
  double max_connection_idle_s = 60;
  int metrics_port = -1;
  std::string metrics_host;
  bool version = false;
};

// Declares every flag on `app`: the ones that need checking land in
// `flags`, the limits straight in `options->limits` (whose values, and
// `options`' host, are the defaults shown).
void AddServerFlags(CLI::App* app, ServerFlags* flags, ServerOptions* options);

// --log_level's value; InvalidArgument naming it when unknown.
absl::StatusOr<spdlog::level::level_enum> ParseLogLevel(const std::string& text);

// Fills `options` from `flags`: the host (brackets optional around IPv6)
// and port, the idle bound, the token (from --token_file, else from
// `env_token`, the value of CPPTORCHRUN_RDZV_TOKEN, when not null), the
// signing key file and the TLS files. The error names the flag at fault.
absl::Status ApplyServerFlags(const ServerFlags& flags, const char* env_token,
                              ServerOptions* options);

// Where the assignments' signing key of a server started so comes from, as
// its start-up log line says it.
const char* SigningKeyOrigin(const ServerFlags& flags, const ServerOptions& options);

}  // namespace cpptorchrun::rdzv

#endif  // CPPTORCHRUN_RENDEZVOUS_SERVER_FLAGS_H_
