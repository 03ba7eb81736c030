// rendezvous_server: the rendezvous service as a standalone process.
//
//   rendezvous_server --host 0.0.0.0 --port 29400 --token_file /etc/rdzv.token
//
// With --port 0 it listens on a free port and prints
// "rendezvous_server listening on HOST:PORT" on stdout (flushed) as soon as
// it serves. SIGTERM or SIGINT shut it down cleanly (exit 0).
#include <signal.h>

#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <iostream>
#include <sstream>
#include <string>

#include "CLI/CLI.hpp"
#include "absl/strings/ascii.h"
#include "absl/strings/str_cat.h"
#include "base/token.h"
#include "rendezvous/signing.h"
#include "rendezvous/endpoint.h"
#include "rendezvous/server.h"
#include "rendezvous/version.h"
#include "spdlog/spdlog.h"

namespace {

using cpptorchrun::rdzv::IsLoopbackHost;
using cpptorchrun::rdzv::RendezvousServer;
using cpptorchrun::rdzv::ServerOptions;

int Fail(const std::string& message) {
  std::fprintf(stderr, "rendezvous_server: %s\n", message.c_str());
  return 2;
}

}  // namespace

int main(int argc, char** argv) {
  CLI::App app{"rendezvous_server: the cpptorchrun rendezvous service (gRPC)"};
  ServerOptions options;
  std::string host = options.host;
  int port = cpptorchrun::rdzv::kDefaultRendezvousPort;
  std::string token_file, key_file, tls_cert, tls_key, log_level = "info";
  bool version = false;
  app.add_option("--host", host, "address to listen on (IPv6 with or without brackets)")
      ->capture_default_str();
  app.add_option("--port", port, "port to listen on; 0 picks a free one and prints it")
      ->capture_default_str();
  app.add_option("--token_file", token_file,
                 "file holding the shared token clients must send (else env "
                 "CPPTORCHRUN_RDZV_TOKEN; else none)");
  app.add_option("--key_file", key_file,
                 "file holding the secret (16 bytes or more) that signs the assignments this server "
                 "issues, kept across restarts; only the server should read it (else derived from "
                 "the token; else random, and a restarted server re-registers only runs it does "
                 "not know)");
  app.add_option("--tls_cert", tls_cert, "PEM certificate chain: serve TLS (with --tls_key)");
  app.add_option("--tls_key", tls_key, "PEM private key for --tls_cert");
  app.add_option("--log_level", log_level, "trace, debug, info, warn, error or off")
      ->capture_default_str();
  app.add_option("--max_runs", options.limits.max_runs, "runs held at once")->capture_default_str();
  app.add_option("--max_keys_per_run", options.limits.max_keys_per_run, "store keys per run")
      ->capture_default_str();
  app.add_option("--max_value_bytes", options.limits.max_value_bytes, "bytes per store value")
      ->capture_default_str();
  app.add_option("--max_message_bytes", options.limits.max_message_bytes,
                 "bytes per request message")
      ->capture_default_str();
  double idle_s = absl::ToDoubleSeconds(options.limits.max_connection_idle);
  app.add_option("--max_connection_idle", idle_s,
                 "seconds a connection may carry no call before it is closed")
      ->capture_default_str()
      ->check(CLI::Range(0.1, 86400.0));
  app.add_option("--max_concurrent_streams", options.limits.max_concurrent_streams,
                 "concurrent calls on one connection")
      ->capture_default_str()
      ->check(CLI::Range(1, 1 << 20));
  app.add_flag("--version", version, "print the version and exit");
  try {
    app.parse(argc, argv);
  } catch (const CLI::ParseError& e) {
    return app.exit(e);
  }
  if (version) {
    std::printf("rendezvous_server %s\n", cpptorchrun::rdzv::kVersion);
    return 0;
  }

  spdlog::level::level_enum level = spdlog::level::from_str(log_level);
  if (level == spdlog::level::off && log_level != "off") {
    return Fail(absl::StrCat("--log_level '", log_level,
                             "' is not one of trace, debug, info, warn, error, off"));
  }
  spdlog::set_level(level);
  options.limits.max_connection_idle = absl::Seconds(idle_s);

  if (port < 0 || port > 65535) {
    return Fail(absl::StrCat("--port ", port, " is out of range 0..65535"));
  }
  if (host.size() >= 2 && host.front() == '[' && host.back() == ']') {
    host = host.substr(1, host.size() - 2);
  }
  absl::StatusOr<cpptorchrun::rdzv::Endpoint> parsed = cpptorchrun::rdzv::ParseEndpoint(
      host.find(':') != std::string::npos ? absl::StrCat("[", host, "]") : host, port);
  if (!parsed.ok()) return Fail(absl::StrCat("--host: ", parsed.status().message()));
  options.host = parsed->host;
  options.port = port;

  if (!token_file.empty()) {
    absl::StatusOr<std::string> token = cpptorchrun::base::ReadTokenFile(token_file);
    if (!token.ok()) return Fail(absl::StrCat("--token_file: ", token.status().message()));
    options.token = *token;
  } else if (const char* env = std::getenv("CPPTORCHRUN_RDZV_TOKEN"); env != nullptr) {
    // Set but blank is a mistake, not a wish for an open server.
    absl::StatusOr<std::string> token = cpptorchrun::base::ParseToken(env, "CPPTORCHRUN_RDZV_TOKEN");
    if (!token.ok()) return Fail(std::string(token.status().message()));
    options.token = *token;
  }
  if (!key_file.empty()) {
    absl::StatusOr<cpptorchrun::rdzv::SigningKey> key = cpptorchrun::rdzv::ReadSigningKeyFile(key_file);
    if (!key.ok()) return Fail(absl::StrCat("--key_file: ", key.status().message()));
    options.signing_key = *key;
  }
  options.tls_cert_file = tls_cert;
  options.tls_key_file = tls_key;
  if (options.token.empty() && !IsLoopbackHost(options.host)) {
    spdlog::warn(
        "listening on non-loopback address {} without a token: anyone who can reach it can "
        "join runs and read the store (use --token_file or CPPTORCHRUN_RDZV_TOKEN)",
        options.host);
  }

  // Signals are taken synchronously by this thread; block them before gRPC
  // starts its threads so that none of those receives them.
  sigset_t signals;
  sigemptyset(&signals);
  sigaddset(&signals, SIGTERM);
  sigaddset(&signals, SIGINT);
  pthread_sigmask(SIG_BLOCK, &signals, nullptr);

  // Every connection is a descriptor: take all the kernel allows.
  const int64_t file_limit = cpptorchrun::rdzv::RaiseFileLimit();
  absl::StatusOr<std::unique_ptr<RendezvousServer>> server = RendezvousServer::Start(options);
  if (!server.ok()) return Fail(std::string(server.status().message()));
  std::string listening = cpptorchrun::rdzv::FormatEndpoint({options.host, (*server)->port()});
  std::printf("rendezvous_server listening on %s\n", listening.c_str());
  std::fflush(stdout);
  spdlog::info("rendezvous_server {} serving on {}{}{}; assignments signed with a key {}",
               cpptorchrun::rdzv::kVersion, listening, options.token.empty() ? "" : " (token required)",
               options.tls_cert_file.empty() ? "" : " (TLS)",
               !key_file.empty()        ? "from --key_file (durable)"
               : !options.token.empty() ? "derived from the token (durable; token holders can derive it too)"
                                        : "made at random (not durable: see --key_file)");
  spdlog::info("limits: {} open files, {} calls per connection, idle connections closed after {}, "
               "{} MiB for gRPC's buffers", file_limit, options.limits.max_concurrent_streams,
               absl::FormatDuration(options.limits.max_connection_idle),
               options.limits.memory_budget_bytes >> 20);

  int signal_number = 0;
  sigwait(&signals, &signal_number);
  spdlog::info("signal {}: shutting down", signal_number);
  (*server)->Shutdown();
  return 0;
}
