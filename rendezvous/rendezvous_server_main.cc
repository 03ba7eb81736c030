// rendezvous_server: the rendezvous service as a standalone process.
//
//   rendezvous_server --host 0.0.0.0 --port 29400 --token_file /etc/rdzv.token
//
// With --port 0 it listens on a free port and prints
// "rendezvous_server listening on HOST:PORT" on stdout (flushed) as soon as
// it serves. SIGTERM or SIGINT shut it down cleanly (exit 0). The flags and
// their checks live in server_flags.h.
#include <pthread.h>
#include <signal.h>

#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <memory>
#include <string>

#include "CLI/CLI.hpp"
#include "absl/strings/str_cat.h"
#include "rendezvous/acceptor.h"
#include "rendezvous/endpoint.h"
#include "rendezvous/server.h"
#include "rendezvous/server_flags.h"
#include "rendezvous/version.h"
#include "spdlog/spdlog.h"

namespace {

using cpptorchrun::rdzv::RendezvousServer;
using cpptorchrun::rdzv::ServerFlags;
using cpptorchrun::rdzv::ServerOptions;

int Fail(const std::string& message) {
  std::fprintf(stderr, "rendezvous_server: %s\n", message.c_str());
  return 2;
}

void LogServing(const std::string& listening, const ServerFlags& flags, const ServerOptions& options,
                int64_t file_limit) {
  spdlog::info("rendezvous_server {} serving on {}{}{}; assignments signed with a key {}",
               cpptorchrun::rdzv::kVersion, listening, options.token.empty() ? "" : " (token required)",
               options.tls_cert_file.empty() ? "" : " (TLS)",
               cpptorchrun::rdzv::SigningKeyOrigin(flags, options));
  spdlog::info("limits: {} open files, {} calls per connection, idle connections closed after {}, "
               "{} MiB for gRPC's buffers", file_limit, options.limits.max_concurrent_streams,
               absl::FormatDuration(options.limits.max_connection_idle),
               options.limits.memory_budget_bytes >> 20);
}

// Serves until SIGTERM or SIGINT; 0 after a clean shutdown, 2 when the
// server cannot start.
int ServeUntilSignal(const ServerFlags& flags, const ServerOptions& options) {
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
  if ((*server)->metrics_port() >= 0) {
    const std::string host = options.metrics_host.empty() ? options.host : options.metrics_host;
    std::printf("rendezvous_server metrics on %s://%s (/metrics, job page /)\n",
                options.tls_cert_file.empty() ? "http" : "https",
                cpptorchrun::rdzv::FormatEndpoint({host, (*server)->metrics_port()}).c_str());
  }
  std::fflush(stdout);
  LogServing(listening, flags, options, file_limit);

  int signal_number = 0;
  sigwait(&signals, &signal_number);
  spdlog::info("signal {}: shutting down", signal_number);
  (*server)->Shutdown();
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  CLI::App app{"rendezvous_server: the cpptorchrun rendezvous service (gRPC)"};
  ServerOptions options;
  ServerFlags flags;
  cpptorchrun::rdzv::AddServerFlags(&app, &flags, &options);
  try {
    app.parse(argc, argv);
  } catch (const CLI::ParseError& e) {
    return app.exit(e);
  }
  if (flags.version) {
    std::printf("rendezvous_server %s\n", cpptorchrun::rdzv::kVersion);
    return 0;
  }
  absl::StatusOr<spdlog::level::level_enum> level = cpptorchrun::rdzv::ParseLogLevel(flags.log_level);
  if (!level.ok()) return Fail(std::string(level.status().message()));
  spdlog::set_level(*level);
  if (absl::Status applied =
          cpptorchrun::rdzv::ApplyServerFlags(flags, std::getenv("CPPTORCHRUN_RDZV_TOKEN"), &options);
      !applied.ok()) {
    return Fail(std::string(applied.message()));
  }
  if (options.token.empty() && !cpptorchrun::rdzv::IsLoopbackHost(options.host)) {
    spdlog::warn(
        "listening on non-loopback address {} without a token: anyone who can reach it can "
        "join runs and read the store (use --token_file or CPPTORCHRUN_RDZV_TOKEN)",
        options.host);
  }
  return ServeUntilSignal(flags, options);
}
