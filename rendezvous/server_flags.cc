// rendezvous_server's flags (see server_flags.h).
#include "rendezvous/server_flags.h"

#include <string>

#include "absl/strings/str_cat.h"
#include "base/token.h"
#include "rendezvous/endpoint.h"
#include "rendezvous/signing.h"

namespace cpptorchrun::rdzv {
namespace {

// "[v6]" and "v6" alike; a host name or IPv4 literal as it is.
absl::Status ApplyAddress(const ServerFlags& flags, ServerOptions* options) {
  if (flags.port < 0 || flags.port > 65535) {
    return absl::InvalidArgumentError(absl::StrCat("--port ", flags.port, " is out of range 0..65535"));
  }
  std::string host = flags.host;
  if (host.size() >= 2 && host.front() == '[' && host.back() == ']') {
    host = host.substr(1, host.size() - 2);
  }
  absl::StatusOr<Endpoint> parsed =
      ParseEndpoint(host.find(':') != std::string::npos ? absl::StrCat("[", host, "]") : host, flags.port);
  if (!parsed.ok()) return absl::InvalidArgumentError(absl::StrCat("--host: ", parsed.status().message()));
  options->host = parsed->host;
  options->port = flags.port;
  return absl::OkStatus();
}

absl::Status ApplySecrets(const ServerFlags& flags, const char* env_token, ServerOptions* options) {
  if (!flags.token_file.empty()) {
    absl::StatusOr<std::string> token = base::ReadTokenFile(flags.token_file);
    if (!token.ok()) return absl::Status(token.status().code(), absl::StrCat("--token_file: ", token.status().message()));
    options->token = *token;
  } else if (env_token != nullptr) {
    // Set but blank is a mistake, not a wish for an open server.
    absl::StatusOr<std::string> token = base::ParseToken(env_token, "CPPTORCHRUN_RDZV_TOKEN");
    if (!token.ok()) return token.status();
    options->token = *token;
  }
  if (!flags.key_file.empty()) {
    absl::StatusOr<SigningKey> key = ReadSigningKeyFile(flags.key_file);
    if (!key.ok()) return absl::Status(key.status().code(), absl::StrCat("--key_file: ", key.status().message()));
    options->signing_key = *key;
  }
  return absl::OkStatus();
}

}  // namespace

void AddServerFlags(CLI::App* app, ServerFlags* flags, ServerOptions* options) {
  flags->host = options->host;
  flags->max_connection_idle_s = absl::ToDoubleSeconds(options->limits.max_connection_idle);
  Limits& limits = options->limits;
  app->add_option("--host", flags->host, "address to listen on (IPv6 with or without brackets)")
      ->capture_default_str();
  app->add_option("--port", flags->port, "port to listen on; 0 picks a free one and prints it")
      ->capture_default_str();
  app->add_option("--token_file", flags->token_file,
                  "file holding the shared token clients must send (else env "
                  "CPPTORCHRUN_RDZV_TOKEN; else none)");
  app->add_option("--key_file", flags->key_file,
                  "file holding the secret (16 bytes or more) that signs the assignments this server "
                  "issues, kept across restarts; only the server should read it (else derived from "
                  "the token; else random, and a restarted server re-registers only runs it does "
                  "not know)");
  app->add_option("--tls_cert", flags->tls_cert, "PEM certificate chain: serve TLS (with --tls_key)");
  app->add_option("--tls_key", flags->tls_key, "PEM private key for --tls_cert");
  app->add_option("--log_level", flags->log_level, "trace, debug, info, warn, error or off")
      ->capture_default_str();
  app->add_option("--max_runs", limits.max_runs, "runs held at once")->capture_default_str();
  app->add_option("--max_keys_per_run", limits.max_keys_per_run, "store keys per run")
      ->capture_default_str();
  app->add_option("--max_value_bytes", limits.max_value_bytes, "bytes per store value")
      ->capture_default_str();
  app->add_option("--max_message_bytes", limits.max_message_bytes, "bytes per request message")
      ->capture_default_str();
  app->add_option("--max_connection_idle", flags->max_connection_idle_s,
                  "seconds a connection may carry no call before it is closed")
      ->capture_default_str()
      ->check(CLI::Range(0.1, 86400.0));
  app->add_option("--max_concurrent_streams", limits.max_concurrent_streams,
                  "concurrent calls on one connection")
      ->capture_default_str()
      ->check(CLI::Range(1, 1 << 20));
  app->add_option("--metrics_port", flags->metrics_port,
                  "HTTP(S) port for operators: Prometheus metrics at /metrics and the job page at "
                  "/ (the same token and TLS as the rendezvous); 0 picks a free one and prints it; "
                  "-1: none")
      ->capture_default_str();
  app->add_option("--metrics_host", flags->metrics_host,
                  "address the metrics port listens on (default: --host)");
  app->add_flag("--version", flags->version, "print the version and exit");
}

absl::StatusOr<spdlog::level::level_enum> ParseLogLevel(const std::string& text) {
  spdlog::level::level_enum level = spdlog::level::from_str(text);
  if (level == spdlog::level::off && text != "off") {
    return absl::InvalidArgumentError(
        absl::StrCat("--log_level '", text, "' is not one of trace, debug, info, warn, error, off"));
  }
  return level;
}

absl::Status ApplyServerFlags(const ServerFlags& flags, const char* env_token,
                              ServerOptions* options) {
  options->limits.max_connection_idle = absl::Seconds(flags.max_connection_idle_s);
  if (absl::Status address = ApplyAddress(flags, options); !address.ok()) return address;
  if (absl::Status secrets = ApplySecrets(flags, env_token, options); !secrets.ok()) return secrets;
  options->tls_cert_file = flags.tls_cert;
  options->tls_key_file = flags.tls_key;
  if (flags.metrics_port < -1 || flags.metrics_port > 65535) {
    return absl::InvalidArgumentError(
        absl::StrCat("--metrics_port ", flags.metrics_port, " is out of range -1..65535"));
  }
  if (flags.metrics_port >= 0 && flags.metrics_port == flags.port && flags.port != 0 &&
      (flags.metrics_host.empty() || flags.metrics_host == flags.host)) {
    return absl::InvalidArgumentError("--metrics_port must differ from --port");
  }
  options->metrics_port = flags.metrics_port;
  options->metrics_host = flags.metrics_host;
  if (options->metrics_host.size() >= 2 && options->metrics_host.front() == '[' &&
      options->metrics_host.back() == ']') {
    options->metrics_host = options->metrics_host.substr(1, options->metrics_host.size() - 2);
  }
  return absl::OkStatus();
}

const char* SigningKeyOrigin(const ServerFlags& flags, const ServerOptions& options) {
  if (!flags.key_file.empty()) return "from --key_file (durable)";
  if (!options.token.empty()) return "derived from the token (durable; token holders can derive it too)";
  return "made at random (not durable: see --key_file)";
}

}  // namespace cpptorchrun::rdzv
