// cpptorchrun's entry point: parses the command line, resolves devices and
// the program, sets up the rendezvous (an embedded server for a single node
// or --standalone, else a client of --rdzv_endpoint), the agent service and
// the real process launcher, runs the elastic agent, and exits with its code.
#include <signal.h>
#include <unistd.h>

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <random>
#include <set>
#include <sstream>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "base/flags.h"
#include "base/token.h"
#include "launcher/agent/agent_service.h"
#include "launcher/agent/elastic_agent.h"
#include "launcher/agent/event_log.h"
#include "launcher/agent/local_rendezvous.h"
#include "launcher/agent/progress_board.h"
#include "launcher/agent/round_monitor.h"
#include "launcher/config/cli.h"
#include "launcher/config/devices.h"
#include "launcher/config/hosting.h"
#include "launcher/config/numa.h"
#include "launcher/config/program.h"
#include "launcher/status_cmd.h"
#include "launcher/workers/console_log.h"
#include "launcher/workers/ports.h"
#include "launcher/workers/process.h"
#include "launcher/workers/run_dir.h"
#include "rendezvous/client.h"
#include "rendezvous/clock.h"
#include "rendezvous/endpoint.h"
#include "rendezvous/server.h"
#include "spdlog/spdlog.h"

extern char** environ;

namespace cpptorchrun::launcher {
namespace {

constexpr int kUsageError = 2;

std::map<std::string, std::string> Environment() {
  std::map<std::string, std::string> env;
  for (char** e = environ; e != nullptr && *e != nullptr; ++e) {
    std::string kv(*e);
    size_t eq = kv.find('=');
    if (eq == std::string::npos) continue;
    env.emplace(kv.substr(0, eq), kv.substr(eq + 1));
  }
  return env;
}

int UsageError(const absl::Status& status) {
  std::string msg(status.message());
  std::fprintf(stderr, "cpptorchrun: error: %s\n", msg.c_str());
  return kUsageError;
}

double ConfSeconds(const LaunchConfig& c, const std::string& key, double def) {
  auto it = c.rdzv_conf.find(key);
  double v = def;
  if (it != c.rdzv_conf.end()) absl::SimpleAtod(it->second, &v);
  return v;
}

std::string NodeId(const std::string& host) {
  std::random_device rd;
  return absl::StrCat(host, "-", getpid(), "-", absl::Hex(rd(), absl::kZeroPad8));
}

// The signals that stop the workers and the launcher.
const std::vector<int>& StopSignals() {
  static const auto* signals = new std::vector<int>{SIGINT, SIGTERM, SIGHUP, SIGQUIT};
  return *signals;
}

// The signals the launcher blocks and reads: the stop signals always;
// --signals_to_handle adds the forwarded-only ones (SIGUSR1/2). No repeats.
std::vector<int> HandledSignals(const LaunchConfig& c) {
  std::vector<int> all = StopSignals();
  for (int s : c.signals_to_handle) {
    if (std::find(all.begin(), all.end(), s) == all.end()) all.push_back(s);
  }
  return all;
}

// --numa_binding: each local rank's CPUs and memory node, from this
// machine's topology (none without the flag). Errors are usage errors.
absl::StatusOr<std::vector<Binding>> NumaBindings(const LaunchConfig& c, DeviceEnumerator& devices, int nproc,
                                                  bool uses_gpus) {
  if (c.numa_binding.empty()) return std::vector<Binding>{};
  if (!uses_gpus && c.fake_gpus == 0) {
    return absl::InvalidArgumentError(
        "--numa_binding binds each worker near its GPU, and this node's workers have none "
        "(--nproc_per_node gpu, or --fake_gpus N for fake ones)");
  }
  auto bus_ids = devices.GpuBusIds();
  if (!bus_ids.ok()) return bus_ids.status();
  auto topology = ReadTopology("/sys", *bus_ids, devices.fake() ? nproc : 0);
  if (!topology.ok()) return topology.status();
  auto bindings = BindingsFor(*ParseNumaMode(c.numa_binding), nproc, *topology, AllowedCpus());
  if (!bindings.ok()) return bindings.status();
  for (size_t lr = 0; lr < bindings->size(); ++lr) {
    spdlog::info("--numa_binding {}: local rank {} on CPUs {}, memory preferred on NUMA node {}", c.numa_binding,
                 lr, FormatCpuList((*bindings)[lr].cpus), (*bindings)[lr].memory_node);
  }
  return bindings;
}

// TLS to the rendezvous (--rdzv_conf): every node verifies it with `cacert`;
// a node that serves the endpoint serves it with `cert` and `key`.
struct TlsConf {
  std::string ca, cert, key;
};

absl::StatusOr<TlsConf> ReadTlsConf(const std::map<std::string, std::string>& conf) {
  auto get = [&](const char* key) {
    auto it = conf.find(key);
    return it == conf.end() ? std::string() : it->second;
  };
  TlsConf tls{get("cacert"), get("cert"), get("key")};
  for (const auto& [key, path] : {std::pair<const char*, std::string>{"cacert", tls.ca}, {"cert", tls.cert},
                                  {"key", tls.key}}) {
    if (!path.empty() && access(path.c_str(), R_OK) != 0) {
      return absl::InvalidArgumentError(
          absl::StrCat("--rdzv_conf ", key, ": cannot read '", path, "': ", std::strerror(errno)));
    }
  }
  if (tls.cert.empty() != tls.key.empty()) {
    return absl::InvalidArgumentError("--rdzv_conf cert and key: both or neither");
  }
  if (!tls.cert.empty() && tls.ca.empty()) {
    return absl::InvalidArgumentError(
        "--rdzv_conf cert and key need cacert too (every node, this one included, verifies the server with it)");
  }
  return tls;
}

// A random (version 4) UUID, as torchrun names a --standalone run.
std::string RandomUuid() {
  std::random_device rd;
  uint8_t b[16];
  for (uint8_t& x : b) x = static_cast<uint8_t>(rd());
  b[6] = (b[6] & 0x0f) | 0x40;
  b[8] = (b[8] & 0x3f) | 0x80;
  std::string out;
  for (int i = 0; i < 16; ++i) {
    if (i == 4 || i == 6 || i == 8 || i == 10) out += '-';
    absl::StrAppend(&out, absl::Hex(b[i], absl::kZeroPad2));
  }
  return out;
}

int Launch(LaunchConfig c, const std::map<std::string, std::string>& env) {
  // torchrun names a --standalone run with a fresh UUID (an explicit
  // --rdzv_id is kept here, where torchrun would ignore it).
  if (c.standalone && !c.rdzv_id_given) c.rdzv_id = RandomUuid();
  // Devices and the program: any problem is a usage error, nothing started.
  std::unique_ptr<DeviceEnumerator> devices =
      c.fake_gpus > 0 ? NewFakeDeviceEnumerator(c.fake_gpus)
                      : NewRealDeviceEnumerator(env.count("CUDA_VISIBLE_DEVICES")
                                                    ? std::optional<std::string>(env.at("CUDA_VISIBLE_DEVICES"))
                                                    : std::nullopt);
  bool uses_gpus = false;
  auto nproc = ResolveNprocPerNode(c, *devices, &uses_gpus);
  if (!nproc.ok()) return UsageError(nproc.status());
  auto argv = ResolveProgram(c, env);
  if (!argv.ok()) return UsageError(argv.status());
  auto numa = NumaBindings(c, *devices, *nproc, uses_gpus);
  if (!numa.ok()) return UsageError(numa.status());
  std::string token;
  std::string token_file;
  if (auto it = c.rdzv_conf.find("token_file"); it != c.rdzv_conf.end()) {
    absl::StatusOr<std::string> read = base::ReadTokenFile(it->second);
    if (!read.ok()) {
      return UsageError(absl::InvalidArgumentError(
          absl::StrCat("--rdzv_conf token_file: ", read.status().message())));
    }
    token = *read;
    token_file = it->second;
  }
  auto tls = ReadTlsConf(c.rdzv_conf);
  if (!tls.ok()) return UsageError(tls.status());
  const std::string &tls_ca = tls->ca, &tls_cert = tls->cert, &tls_key = tls->key;

  auto processes = NewRealProcessLauncher({HandledSignals(c), /*subreaper=*/true});
  if (!processes.ok()) {
    spdlog::error("{}", processes.status().ToString());
    return 1;
  }

  // The private folder: the agent socket, and the logs without --log_dir.
  auto run_dir = RunDir::Create(c.log_dir, c.rdzv_id);
  if (!run_dir.ok()) return UsageError(run_dir.status());
  if (!c.log_dir.empty()) spdlog::info("worker logs: {}", (*run_dir)->log_root());

  const bool single_node = c.max_nodes == 1;
  const LocalHost local = ReadLocalHost();
  const std::vector<std::string> endpoint_addresses =
      c.has_rdzv_endpoint ? ResolveHost(c.rdzv_endpoint.host) : std::vector<std::string>{};

  // This node's address: what other nodes reach it at.
  AddressInput address_in;
  address_in.local_addr_flag = c.local_addr;
  address_in.single_node = single_node;
  address_in.endpoint_host = c.rdzv_endpoint.host;
  if (!endpoint_addresses.empty()) {
    address_in.endpoint_address = endpoint_addresses.front();
    address_in.route_source = RouteSource(endpoint_addresses.front());
  }
  const AddressChoice address = ChooseNodeAddress(address_in, local);
  const std::string host = address.address;
  if (single_node) {
    spdlog::debug("this node's address: {} ({})", host, address.why);
  } else {
    spdlog::info("this node's address: {} ({})", host, address.why);
  }

  // Who serves the rendezvous (launcher/config/hosting.h).
  HostingInput hosting_in;
  hosting_in.standalone = c.standalone;
  hosting_in.single_node = single_node;
  hosting_in.has_endpoint = c.has_rdzv_endpoint;
  hosting_in.endpoint_from_master = c.rdzv_endpoint_from_master;
  hosting_in.node_rank = c.node_rank;
  hosting_in.endpoint_host = c.rdzv_endpoint.host;
  hosting_in.endpoint_addresses = endpoint_addresses;
  if (auto it = c.rdzv_conf.find("is_host"); it != c.rdzv_conf.end()) {
    hosting_in.is_host = base::ParseBool(it->second, "--rdzv_conf is_host").value_or(false);
  }
  const HostingDecision hosting = DecideHosting(hosting_in, local);
  spdlog::debug("rendezvous hosting: {}", hosting.why);

  std::unique_ptr<rdzv::RendezvousServer> server;
  std::unique_ptr<rdzv::RendezvousClient> client;
  std::string endpoint;
  const bool loopback_embed = hosting.hosting == Hosting::kEmbedded;
  const std::string bind_host =
      loopback_embed ? "127.0.0.1" : BindAddress(c.rdzv_endpoint.host, endpoint_addresses);
  const int bind_port = loopback_embed ? 0 : c.rdzv_endpoint.port;
  bool serve = hosting.hosting == Hosting::kEmbedded || hosting.hosting == Hosting::kServe;
  if (hosting.hosting == Hosting::kServeIfFree) {
    // Quietly: another launcher on this machine may have bound it first.
    serve = bind_port == 0 || PortIsFree(bind_host, bind_port);
    if (!serve) spdlog::debug("port {} is taken here: a client of the launcher that serves it", bind_port);
  }
  if (serve && !loopback_embed && !tls_ca.empty() && tls_cert.empty()) {
    return UsageError(absl::InvalidArgumentError(absl::StrCat(
        "this node serves the rendezvous (", hosting.why, ") and the job uses TLS (--rdzv_conf cacert): "
        "give it the server's certificate and key too (--rdzv_conf cert=...,key=...)")));
  }
  // A rendezvous embedded on loopback stays plaintext: it never leaves the machine.
  const std::string client_ca = loopback_embed ? "" : tls_ca;
  if (serve) {
    rdzv::ServerOptions so;
    so.host = bind_host;
    so.port = bind_port;
    so.token = token;
    if (!loopback_embed) {
      so.tls_cert_file = tls_cert;
      so.tls_key_file = tls_key;
    }
    auto started = rdzv::RendezvousServer::Start(so);
    if (!started.ok()) {
      if (hosting.hosting == Hosting::kServe) {
        spdlog::error("cannot serve the rendezvous at {} ({}): {}", rdzv::FormatEndpoint(c.rdzv_endpoint),
                      hosting.why, started.status().ToString());
        return 1;
      }
      if (loopback_embed) {
        spdlog::warn("embedded rendezvous server unavailable ({}); using the local one",
                     started.status().ToString());
      } else if (bind_port == 0) {
        spdlog::error("cannot serve the rendezvous at {}: {}", rdzv::FormatEndpoint(c.rdzv_endpoint),
                      started.status().ToString());
        return 1;
      } else {
        // Lost the race for the port to another launcher: be its client.
        endpoint = rdzv::FormatEndpoint(c.rdzv_endpoint);
        spdlog::debug("not hosting the rendezvous: {}", started.status().ToString());
      }
    } else {
      server = std::move(*started);
      endpoint = (loopback_embed || bind_port == 0)
                     ? rdzv::FormatEndpoint(rdzv::Endpoint{loopback_embed ? "127.0.0.1" : c.rdzv_endpoint.host,
                                                           server->port()})
                     : rdzv::FormatEndpoint(c.rdzv_endpoint);
      spdlog::info("serving the rendezvous at {} (cpptorchrun status --rdzv_endpoint {} --rdzv_id {})",
                   endpoint, endpoint, c.rdzv_id);
    }
  } else if (c.rdzv_endpoint.port == 0) {
    return UsageError(absl::InvalidArgumentError(absl::StrCat(
        "--rdzv_endpoint ", rdzv::FormatEndpoint(c.rdzv_endpoint),
        ": port 0 (pick a free port) needs this node to serve it, but ", hosting.why)));
  } else {
    endpoint = rdzv::FormatEndpoint(c.rdzv_endpoint);
  }
  spdlog::debug("rendezvous {} ready", endpoint.empty() ? "local" : endpoint);
  if (!endpoint.empty()) {
    rdzv::ClientOptions co;
    co.endpoint = endpoint;
    co.token = token;
    co.tls_root_cert_file = client_ca;
    client = rdzv::NewGrpcRendezvousClient(co);
  } else {
    client = NewLocalRendezvousClient();
  }

  ProgressBoard board(rdzv::RealClock());
  std::unique_ptr<AgentService> agent_service;
  {
    auto svc = AgentService::Start((*run_dir)->socket_path(), &board);
    if (svc.ok()) {
      agent_service = std::move(*svc);
    } else {
      spdlog::warn("agent service unavailable ({}): heartbeats are not watched", svc.status().ToString());
    }
  }

  spdlog::debug("agent service ready");
  AgentOptions o;
  o.run_id = c.rdzv_id;
  o.role = c.role;
  o.max_restarts = c.max_restarts;
  o.monitor_interval = c.monitor_interval;
  o.worker_timeout = c.worker_timeout;
  o.shutdown_timeout = c.shutdown_timeout;
  o.exit_barrier_timeout = c.exit_barrier_timeout;
  o.redirects = c.redirects;
  o.tee = c.tee;
  o.local_ranks_filter = c.local_ranks_filter;
  o.duplicate_stdout_filters = c.duplicate_stdout_filters;
  o.duplicate_stderr_filters = c.duplicate_stderr_filters;
  o.virtual_local_rank = c.virtual_local_rank;
  for (const Binding& b : *numa) {
    o.worker_cpus.emplace_back(b.cpus.begin(), b.cpus.end());
    o.worker_memory_node.push_back(b.memory_node);
  }
  if (auto it = env.find("TORCHELASTIC_LOG_LINE_PREFIX_TEMPLATE"); it != env.end()) {
    o.log_line_prefix_template = it->second;
  }
  o.stop_signals = StopSignals();
  o.program_argv = *argv;
  o.program_name = c.training_script;
  o.base_env = env;
  o.local_world_size = *nproc;
  o.fake_gpus = c.fake_gpus > 0 ? c.fake_gpus : 0;
  o.node.set_node_id(NodeId(host));
  o.node.set_host(host);
  o.node.set_local_world_size(*nproc);
  o.node.set_static_node_rank(c.rdzv_backend == RdzvBackend::kStatic ? c.node_rank : -1);
  o.run_options.set_min_nodes(c.min_nodes);
  o.run_options.set_max_nodes(c.max_nodes);
  o.run_options.set_join_timeout_s(ConfSeconds(c, "join_timeout", ConfSeconds(c, "timeout", 600)));
  o.run_options.set_last_call_timeout_s(ConfSeconds(c, "last_call_timeout", 30));
  o.run_options.set_close_timeout_s(ConfSeconds(c, "close_timeout", 30));
  o.run_options.set_keep_alive_interval_s(ConfSeconds(c, "keep_alive_interval", 5));
  o.run_options.set_keep_alive_max_attempt(
      static_cast<int>(ConfSeconds(c, "keep_alive_max_attempt", 3)));
  // Static: MASTER_PORT is --master_port when given, and always for a
  // multi-node static job (torchrun's 29500 default), as under torchrun.
  // Static: MASTER_ADDR is --master_addr (torchrun's), as given.
  if (c.rdzv_backend == RdzvBackend::kStatic) o.fixed_master_addr = c.master_addr;
  o.fixed_master_port =
      (c.rdzv_backend == RdzvBackend::kStatic && (c.master_port_given || c.rdzv_endpoint_from_master))
          ? c.master_port
          : 0;
  o.log_root = (*run_dir)->log_root();
  o.agent_socket = agent_service ? (*run_dir)->socket_path() : "";
  o.rdzv_endpoint_for_workers = endpoint;
  o.rdzv_token_file = token_file;
  o.rdzv_ca_file = client_ca;

  auto ports = NewRealPortFinder();
  RoundMonitorOptions mo;
  mo.client = client.get();
  mo.progress = &board;
  mo.run_id = c.rdzv_id;
  mo.node = o.node;
  mo.run_options = o.run_options;
  mo.keep_alive_interval = absl::Seconds(o.run_options.keep_alive_interval_s());
  auto monitor = NewRoundMonitor(mo);

  o.clock = rdzv::RealClock();
  o.processes = processes->get();
  o.rdzv = client.get();
  o.ports = ports.get();
  o.progress = &board;
  o.round_monitor = monitor.get();
  o.print_summary = [](const std::string& s) { WriteConsole(2, s); };
  // The event log, in this launcher's log folder (event_log.h); torchrun's
  // --event_log_handler console also logs each event.
  std::unique_ptr<EventLog> events =
      NewFileEventLog((*run_dir)->log_root() + "/events.jsonl", c.event_log_handler == "console");
  o.events = events.get();

  if (uses_gpus || c.fake_gpus > 0) {
    spdlog::debug("{} workers on {} {}GPUs", *nproc, *nproc, c.fake_gpus > 0 ? "fake " : "");
  }
  ElasticAgent agent(o);
  AgentResult result = agent.Run();

  if (server != nullptr && !loopback_embed) {
    // Other nodes still talk to the rendezvous this node serves (the exit
    // barrier's stragglers, Leave, a closed run's Watch): stay until they
    // have left, within a bound.
    const absl::Time linger_until = absl::Now() + absl::Seconds(10);
    while (absl::Now() < linger_until) {
      auto st = client->RunStatus(c.rdzv_id);
      if (!st.ok() || st->nodes_size() == 0) break;
      absl::SleepFor(absl::Milliseconds(50));
    }
  }
  // The agent service is not shut down (gRPC's shutdown takes tens of
  // milliseconds): the process ends below, and its socket is removed.
  (*run_dir)->Finish(/*keep_logs=*/c.redirects.all || c.tee.all || c.redirects.per_rank_form ||
                  c.tee.per_rank_form);
  // Threads blocked in long polls (the round monitor, a helper that
  // outlived a signal) are not waited for: the process ends here.
  spdlog::shutdown();
  std::fflush(stdout);
  std::fflush(stderr);
  _exit(result.exit_code);
}

}  // namespace
}  // namespace cpptorchrun::launcher

int main(int argc, char** argv) {
  using namespace cpptorchrun::launcher;
  std::vector<std::string> args(argv, argv + argc);
  std::map<std::string, std::string> env = Environment();
  auto parsed = ParseCommandLine(args, env);
  if (!parsed.ok()) return UsageError(parsed.status());
  if (parsed->kind == ParsedCommandLine::Kind::kLaunch) {
    // Before any thread exists, so every thread inherits the mask and only
    // the process launcher's signalfd sees these signals.
    BlockLauncherSignals(HandledSignals(parsed->launch));
  }
  switch (parsed->kind) {
    case ParsedCommandLine::Kind::kHelp:
    case ParsedCommandLine::Kind::kVersion:
      std::printf("%s\n", parsed->text.c_str());
      return 0;
    case ParsedCommandLine::Kind::kStatus:
      SetUpConsoleLog(parsed->status.log_level);
      return RunStatusCommand(parsed->status, env);
    case ParsedCommandLine::Kind::kLaunch:
      break;
  }
  SetUpConsoleLog(parsed->launch.log_level);
  for (const std::string& note : parsed->launch.notes) spdlog::info("{}", note);
  for (const std::string& warning : parsed->launch.warnings) spdlog::warn("{}", warning);
  spdlog::debug("cpptorchrun {} starting", kVersion);
  return Launch(parsed->launch, env);
}
