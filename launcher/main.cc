// cpptorchrun's entry point: parses the command line, resolves devices and
// the program, sets up the rendezvous (an embedded server for a single node
// or --standalone, else a client of --rdzv_endpoint), the agent service and
// the real process launcher, runs the elastic agent, and exits with its code.
#include <sched.h>
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
#include "base/become.h"
#include "base/flags.h"
#include "base/signals.h"
#include "base/token.h"
#include "launcher/workers/worker_env.h"
#include "launcher/agent/agent_service.h"
#include "launcher/agent/elastic_agent.h"
#include "base/http_server.h"
#include "base/prometheus.h"
#include "launcher/agent/event_log.h"
#include "launcher/agent/launcher_metrics.h"
#include "launcher/agent/progress_board.h"
#include "launcher/agent/round_monitor.h"
#include "launcher/config/cli.h"
#include "launcher/config/devices.h"
#include "launcher/config/hosting.h"
#include "launcher/config/numa.h"
#include "launcher/config/program.h"
#include "launcher/config/slurm.h"
#include "launcher/status_cmd.h"
#include "launcher/workers/console_log.h"
#include "launcher/workers/file_timer.h"
#include "launcher/workers/ports.h"
#include "launcher/workers/process.h"
#include "launcher/workers/run_dir.h"
#include "launcher/agent/warm_pool.h"
#include "rendezvous/client.h"
#include "rendezvous/connect.h"
#include "base/clock.h"
#include "rendezvous/endpoint.h"
#include "rendezvous/rules.h"
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

// What this node runs, resolved on this machine before anything starts.
// Any problem here is a usage error (InvalidArgument): nothing started.
struct LocalPlan {
  int nproc = 0;
  bool uses_gpus = false;
  std::vector<std::string> argv;
  std::vector<Binding> numa;
  std::string token, token_file;
  TlsConf tls;
};

absl::StatusOr<LocalPlan> PlanLocal(const LaunchConfig& c, const std::map<std::string, std::string>& env) {
  LocalPlan plan;
  std::unique_ptr<DeviceEnumerator> devices =
      c.fake_gpus > 0 ? NewFakeDeviceEnumerator(c.fake_gpus)
                      : NewRealDeviceEnumerator(env.count("CUDA_VISIBLE_DEVICES")
                                                    ? std::optional<std::string>(env.at("CUDA_VISIBLE_DEVICES"))
                                                    : std::nullopt);
  absl::StatusOr<int> nproc = ResolveNprocPerNode(c, *devices, &plan.uses_gpus);
  if (!nproc.ok()) return nproc.status();
  plan.nproc = *nproc;
  absl::StatusOr<std::vector<std::string>> argv = ResolveProgram(c, env);
  if (!argv.ok()) return argv.status();
  plan.argv = *argv;
  absl::StatusOr<std::vector<Binding>> numa = NumaBindings(c, *devices, plan.nproc, plan.uses_gpus);
  if (!numa.ok()) return numa.status();
  plan.numa = *numa;
  if (auto it = c.rdzv_conf.find("token_file"); it != c.rdzv_conf.end()) {
    absl::StatusOr<std::string> read = base::ReadTokenFile(it->second);
    if (!read.ok()) {
      return absl::InvalidArgumentError(absl::StrCat("--rdzv_conf token_file: ", read.status().message()));
    }
    plan.token = *read;
    plan.token_file = it->second;
  }
  absl::StatusOr<TlsConf> tls = ReadTlsConf(c.rdzv_conf);
  if (!tls.ok()) return tls.status();
  plan.tls = *tls;
  return plan;
}

// This node's address: what other nodes reach it at (launcher/config/hosting.h).
std::string ThisNodeAddress(const LaunchConfig& c, const LocalHost& local,
                            const std::vector<std::string>& endpoint_addresses) {
  AddressInput in;
  in.local_addr_flag = c.local_addr;
  in.single_node = c.max_nodes == 1;
  in.endpoint_host = c.rdzv_endpoint.host;
  if (!endpoint_addresses.empty()) {
    in.endpoint_address = endpoint_addresses.front();
    in.route_source = RouteSource(endpoint_addresses.front());
  }
  const AddressChoice address = ChooseNodeAddress(in, local);
  if (in.single_node) {
    spdlog::debug("this node's address: {} ({})", address.address, address.why);
  } else {
    spdlog::info("this node's address: {} ({})", address.address, address.why);
  }
  return address.address;
}

// Who serves the rendezvous (launcher/config/hosting.h).
HostingDecision DecideHostingFor(const LaunchConfig& c, const LocalHost& local,
                        const std::vector<std::string>& endpoint_addresses) {
  HostingInput in;
  in.standalone = c.standalone;
  in.single_node = c.max_nodes == 1;
  in.has_endpoint = c.has_rdzv_endpoint;
  in.endpoint_from_master = c.rdzv_endpoint_from_master;
  in.node_rank = c.node_rank;
  in.endpoint_host = c.rdzv_endpoint.host;
  in.endpoint_addresses = endpoint_addresses;
  if (auto it = c.rdzv_conf.find("is_host"); it != c.rdzv_conf.end()) {
    in.is_host = base::ParseBool(it->second, "--rdzv_conf is_host").value_or(false);
  }
  HostingDecision hosting = DecideHosting(in, local);
  spdlog::debug("rendezvous hosting: {}", hosting.why);
  return hosting;
}

// The rendezvous as this node sees it: the server it runs (if any), its
// client, and what the workers are told.
struct RendezvousSide {
  std::unique_ptr<rdzv::RendezvousServer> server;
  std::unique_ptr<rdzv::RendezvousClient> client;
  std::string endpoint;   // host:port for the workers
  std::string client_ca;  // empty: plaintext
  // etcd: this node's client certificate and key (empty: none).
  std::string client_cert, client_key;
  bool loopback_embed = false;
};

// Serves the endpoint when the hosting decision says so. InvalidArgument is
// a usage error; another error ends the launch (exit 1).
absl::Status ServeIfHosting(const LaunchConfig& c, const LocalPlan& plan, const HostingDecision& hosting,
                            const std::vector<std::string>& endpoint_addresses, RendezvousSide* side) {
  const std::string bind_host =
      side->loopback_embed ? "127.0.0.1" : BindAddress(c.rdzv_endpoint.host, endpoint_addresses);
  const int bind_port = side->loopback_embed ? 0 : c.rdzv_endpoint.port;
  bool serve = hosting.hosting == Hosting::kEmbedded || hosting.hosting == Hosting::kServe;
  if (hosting.hosting == Hosting::kServeIfFree) {
    // Quietly: another launcher on this machine may have bound it first.
    serve = bind_port == 0 || PortIsFree(bind_host, bind_port);
    if (!serve) spdlog::debug("port {} is taken here: a client of the launcher that serves it", bind_port);
  }
  if (!serve) {
    if (c.rdzv_endpoint.port == 0) {
      return absl::InvalidArgumentError(absl::StrCat("--rdzv_endpoint ", rdzv::FormatEndpoint(c.rdzv_endpoint),
                                                     ": port 0 (pick a free port) needs this node to serve it, but ",
                                                     hosting.why));
    }
    return absl::OkStatus();
  }
  if (!side->loopback_embed && !plan.tls.ca.empty() && plan.tls.cert.empty()) {
    return absl::InvalidArgumentError(absl::StrCat(
        "this node serves the rendezvous (", hosting.why, ") and the job uses TLS (--rdzv_conf cacert): "
        "give it the server's certificate and key too (--rdzv_conf cert=...,key=...)"));
  }
  rdzv::ServerOptions so;
  so.host = bind_host;
  so.port = bind_port;
  so.token = plan.token;
  so.rpc_metrics = c.metrics_port >= 0;  // served on the launcher's own metrics port
  if (!side->loopback_embed) {
    so.tls_cert_file = plan.tls.cert;
    so.tls_key_file = plan.tls.key;
  }
  auto started = rdzv::RendezvousServer::Start(so);
  if (!started.ok()) {
    if (side->loopback_embed) {
      return absl::UnavailableError(absl::StrCat("cannot start the embedded rendezvous on 127.0.0.1: ",
                                                 started.status().ToString()));
    }
    if (hosting.hosting == Hosting::kServe || bind_port == 0) {
      return absl::UnavailableError(absl::StrCat("cannot serve the rendezvous at ",
                                                 rdzv::FormatEndpoint(c.rdzv_endpoint), " (", hosting.why,
                                                 "): ", started.status().ToString()));
    }
    // Lost the race for the port to another launcher: be its client.
    spdlog::debug("not hosting the rendezvous: {}", started.status().ToString());
    return absl::OkStatus();
  }
  side->server = std::move(*started);
  if (side->loopback_embed || bind_port == 0) {
    side->endpoint = rdzv::FormatEndpoint(
        rdzv::Endpoint{side->loopback_embed ? "127.0.0.1" : c.rdzv_endpoint.host, side->server->port()});
  }
  const std::string shown = side->endpoint.empty() ? rdzv::FormatEndpoint(c.rdzv_endpoint) : side->endpoint;
  spdlog::info("serving the rendezvous at {} (cpptorchrun status --rdzv_endpoint {} --rdzv_id {})", shown, shown,
               c.rdzv_id);
  return absl::OkStatus();
}

// The run's options from --nnodes and --rdzv_conf (torchrun's defaults). Pure.
rdzv::v1::RunOptions RunOptionsFor(const LaunchConfig& c) {
  rdzv::v1::RunOptions r;
  r.set_min_nodes(c.min_nodes);
  r.set_max_nodes(c.max_nodes);
  // torchrun's c10d backend reads join_timeout only; its etcd backend
  // takes `timeout` as the join deadline, and so does ours.
  const double join_fallback = c.rdzv_backend == RdzvBackend::kEtcd ? ConfSeconds(c, "timeout", 600) : 600;
  r.set_join_timeout_s(ConfSeconds(c, "join_timeout", join_fallback));
  r.set_last_call_timeout_s(ConfSeconds(c, "last_call_timeout", 30));
  r.set_close_timeout_s(ConfSeconds(c, "close_timeout", 30));
  r.set_keep_alive_interval_s(ConfSeconds(c, "keep_alive_interval", 5));
  r.set_keep_alive_max_attempt(static_cast<int>(ConfSeconds(c, "keep_alive_max_attempt", 3)));
  // 0 on the wire takes the rendezvous's default; off travels as -1.
  const int quarantine_after = static_cast<int>(ConfSeconds(c, "quarantine_after", rdzv::kDefaultQuarantineAfter));
  r.set_quarantine_after(quarantine_after > 0 ? quarantine_after : -1);
  r.set_quarantine_window_s(
      ConfSeconds(c, "quarantine_window", absl::ToDoubleSeconds(rdzv::kDefaultQuarantineWindow)));
  r.set_quarantine_cooldown_s(
      ConfSeconds(c, "quarantine_cooldown", absl::ToDoubleSeconds(rdzv::kDefaultQuarantineCooldown)));
  r.set_job_max_restarts(c.job_max_restarts);
  return r;
}

absl::StatusOr<RendezvousSide> SetUpRendezvous(const LaunchConfig& c, const LocalPlan& plan, const LocalHost& local,
                                               const std::vector<std::string>& endpoint_addresses) {
  if (c.rdzv_backend == RdzvBackend::kEtcd) {
    // No server to host or find: every node applies the round rules on etcd.
    RendezvousSide side;
    side.endpoint = c.rdzv_target;
    side.client_ca = plan.tls.ca;
    side.client_cert = plan.tls.cert;
    side.client_key = plan.tls.key;
    rdzv::ClientOptions co;
    co.endpoint = side.endpoint;
    co.token = plan.token;
    co.tls_root_cert_file = plan.tls.ca;
    co.tls_cert_file = plan.tls.cert;
    co.tls_key_file = plan.tls.key;
    // A keep-alive that takes longer than its interval is a missed one: an
    // etcd call waits at most that long (1 to 10 s) for members and quorum.
    co.call_timeout = std::clamp(absl::Seconds(RunOptionsFor(c).keep_alive_interval_s()), absl::Seconds(1),
                                 absl::Seconds(10));
    absl::StatusOr<std::unique_ptr<rdzv::RendezvousClient>> client = rdzv::CreateRendezvousClient(co);
    if (!client.ok()) return client.status();
    side.client = std::move(*client);
    spdlog::info("rendezvous on etcd: {}", side.endpoint);
    return side;
  }
  const HostingDecision hosting = DecideHostingFor(c, local, endpoint_addresses);
  RendezvousSide side;
  side.loopback_embed = hosting.hosting == Hosting::kEmbedded;
  if (absl::Status s = ServeIfHosting(c, plan, hosting, endpoint_addresses, &side); !s.ok()) return s;
  if (side.endpoint.empty()) side.endpoint = rdzv::FormatEndpoint(c.rdzv_endpoint);
  // A rendezvous embedded on loopback stays plaintext: it never leaves the machine.
  side.client_ca = side.loopback_embed ? "" : plan.tls.ca;
  spdlog::debug("rendezvous {} ready", side.endpoint);
  rdzv::ClientOptions co;
  co.endpoint = side.endpoint;
  co.token = plan.token;
  co.tls_root_cert_file = side.client_ca;
  side.client = rdzv::NewGrpcRendezvousClient(co);
  return side;
}


// The agent's options that come from the command line, the plan and the
// environment (the collaborators are set by Launch).
AgentOptions AgentOptionsFor(const LaunchConfig& c, const LocalPlan& plan, const std::map<std::string, std::string>& env,
                             const std::string& host) {
  AgentOptions o;
  o.run_id = c.rdzv_id;
  o.role = c.role;
  o.max_restarts = c.max_restarts;
  o.failures_without_progress = c.failures_without_progress;
  o.stragglers.factor = c.straggler_factor;
  o.stragglers.window = static_cast<size_t>(c.straggler_window);
  ParseStragglerPolicy(c.straggler_policy, &o.straggler_policy);
  o.in_place = c.recovery == "in_place";
  o.python_stacks = ModeOf(c) != ProgramMode::kExecutable;
  o.health_check.command = c.health_check;
  o.health_check.timeout = c.health_check_timeout;
  o.health_check.give_up_after = c.health_check_give_up;
  o.monitor_interval = c.monitor_interval;
  o.hang.fixed_silence = c.worker_timeout;
  o.shutdown_timeout = c.shutdown_timeout;
  o.exit_barrier_timeout = c.exit_barrier_timeout;
  o.redirects = c.redirects;
  o.tee = c.tee;
  o.local_ranks_filter = c.local_ranks_filter;
  o.duplicate_stdout_filters = c.duplicate_stdout_filters;
  o.duplicate_stderr_filters = c.duplicate_stderr_filters;
  o.virtual_local_rank = c.virtual_local_rank;
  for (const Binding& b : plan.numa) {
    o.worker_cpus.emplace_back(b.cpus.begin(), b.cpus.end());
    o.worker_memory_node.push_back(b.memory_node);
  }
  if (auto it = env.find("TORCHELASTIC_LOG_LINE_PREFIX_TEMPLATE"); it != env.end()) {
    o.log_line_prefix_template = it->second;
  }
  o.stop_signals = StopSignals();
  o.inside_slurm_step = InsideSlurmStep(env);
  o.program_argv = plan.argv;
  o.program_name = c.training_script;
  o.base_env = env;
  o.local_world_size = plan.nproc;
  o.fake_gpus = c.fake_gpus > 0 ? c.fake_gpus : 0;
  o.node.set_node_id(NodeId(host));
  o.node.set_host(host);
  o.node.set_local_world_size(plan.nproc);
  o.node.set_static_node_rank(c.rdzv_backend == RdzvBackend::kStatic ? c.node_rank : -1);
  o.run_options = RunOptionsFor(c);
  // Static: MASTER_ADDR is --master_addr as given, and MASTER_PORT is
  // --master_port when given, and always for a multi-node static job
  // (torchrun's 29500 default), as under torchrun.
  if (c.rdzv_backend == RdzvBackend::kStatic) o.fixed_master_addr = c.master_addr;
  o.fixed_master_port =
      (c.rdzv_backend == RdzvBackend::kStatic && (c.master_port_given || c.rdzv_endpoint_from_master))
          ? c.master_port
          : 0;
  o.rdzv_token_file = plan.token_file;
  return o;
}

// Other nodes still talk to the rendezvous this node serves (the exit
// barrier's stragglers, Leave, a closed run's Watch): stay until they have
// left, within a bound.
// After a stop signal, only within what is left of the shutdown grace.
void LingerWhileOthersUseIt(rdzv::RendezvousClient* client, const std::string& run_id, absl::Time exit_by) {
  const absl::Time linger_until = std::min(absl::Now() + absl::Seconds(10), exit_by);
  while (absl::Now() < linger_until) {
    auto st = client->RunStatus(run_id);
    if (!st.ok() || st->nodes_size() == 0) break;
    absl::SleepFor(absl::Milliseconds(50));
  }
}

// --metrics_port: this launcher's metrics (and, when it serves the
// rendezvous, the server's metrics and job page) over HTTP(S) on this
// node's address, with the job's token and TLS files. Null when off.
absl::StatusOr<std::unique_ptr<base::HttpServer>> ServeMetrics(const LaunchConfig& c, const LocalPlan& plan,
                                                              const std::string& host,
                                                              rdzv::RendezvousServer* server,
                                                              MetricsEventLog* events, ProgressBoard* board) {
  if (c.metrics_port < 0) return std::unique_ptr<base::HttpServer>();
  auto launcher_part = [events, board](base::prom::Exposition* out) {
    AppendLauncherMetrics(events->Counters(), board->Snapshot(), board->clock()->Now(), out);
  };
  std::vector<std::pair<std::string, base::HttpHandler>> routes;
  if (server != nullptr) {
    routes = server->OperatorRoutes(launcher_part);
  } else {
    routes.emplace_back("/metrics", [launcher_part](const base::HttpRequest&) {
      base::prom::Exposition exposition;
      launcher_part(&exposition);
      base::HttpResponse r;
      r.content_type = "text/plain; version=0.0.4; charset=utf-8";
      r.body = exposition.Text();
      return r;
    });
  }
  base::HttpServerOptions ho;
  ho.host = host;
  ho.port = c.metrics_port;
  ho.token = plan.token;
  ho.tls_cert_file = plan.tls.cert;
  ho.tls_key_file = plan.tls.key;
  auto http = base::HttpServer::Start(ho, std::move(routes));
  if (!http.ok()) {
    return absl::UnavailableError(absl::StrCat("--metrics_port: ", http.status().message()));
  }
  spdlog::info("metrics on {}/metrics{}", (*http)->url(), server != nullptr ? ", job page at /" : "");
  return http;
}

int ExitCodeFor(const absl::Status& status) {
  if (absl::IsInvalidArgument(status)) return UsageError(status);
  spdlog::error("{}", std::string(status.message()));
  return 1;
}

// Before the job's first restart, spares where the workers leave CPUs idle
// (launcher/agent/warm_pool.h): this launcher's CPUs against the workers'
// threads (WorkerThreads: OMP_NUM_THREADS as they will have it).
WarmPoolOptions::Before SparesBeforeRestartHere(int nproc, const std::map<std::string, std::string>& env) {
  cpu_set_t set;
  CPU_ZERO(&set);
  const int cpus = sched_getaffinity(0, sizeof(set), &set) == 0 ? CPU_COUNT(&set) : 1;
  const int threads = WorkerThreads(env, nproc, cpus);
  const bool reversible = base::IdlePriorityReversible();
  const WarmPoolOptions::Before before = SparesBeforeRestart(cpus, nproc, threads, reversible);
  if (before == WarmPoolOptions::Before::kNone) {
    spdlog::info("warm spares: {} workers x {} threads keep this node's {} CPUs busy; spares start after the "
                 "job's first restart", nproc, threads, cpus);
  } else if (before == WarmPoolOptions::Before::kNormal) {
    spdlog::info("warm spares load at the workers' priority: this launcher may not bring a SCHED_IDLE process "
                 "back (no CAP_SYS_NICE, RLIMIT_NICE below 20 - nice), or it is not at SCHED_OTHER");
  }
  return before;
}

// Warm starts (launcher/agent/warm_pool.h): Python workers forked from
// the forkserver under --start_method forkserver|fork, warm spares for
// programs that say they can wait warm (train).
WarmPoolOptions WarmPoolOptionsFor(const LaunchConfig& c, const LocalPlan& plan,
                                   const std::map<std::string, std::string>& env, const AgentOptions& o,
                                   EventLog* event_sink, const std::string& private_dir) {
  WarmPoolOptions wo;
  wo.spares = c.warm_spares;
  if (wo.spares) wo.before_restart = SparesBeforeRestartHere(plan.nproc, env);
  wo.program_argv = plan.argv;
  wo.base_env = env;
  // Which job a warm process belongs to, for operators (ps e) and sweeps:
  // the round's environment replaces all of it at the hand-over.
  wo.base_env["TORCHELASTIC_RUN_ID"] = c.rdzv_id;
  wo.local_world_size = plan.nproc;
  wo.cpus = o.worker_cpus;
  wo.memory_node = o.worker_memory_node;
  wo.events = event_sink;
  if (c.start_method != "spawn") {
    if (ModeOf(c) == ProgramMode::kExecutable) {
      spdlog::info("--start_method {}: {} is not run by python; its workers are exec'd", c.start_method,
                   c.training_script);
    } else if (auto path = WriteForkserver(private_dir); path.ok()) {
      wo.forkserver_argv = {plan.argv[0], "-u", *path};
      wo.forkserver_argv.insert(wo.forkserver_argv.end(), c.forkserver_preload.begin(), c.forkserver_preload.end());
    } else {
      spdlog::warn("no forkserver ({}): workers are spawned", path.status().ToString());
    }
  }
  return wo;
}

// torchrun's file-timer watchdog (launcher/workers/file_timer.h): with
// TORCHELASTIC_ENABLE_FILE_TIMER=1, a named pipe at TORCHELASTIC_TIMER_FILE
// (or in the private folder), whose expired timers kill their worker when
// it is one of this node's. A path the user set reaches the workers either
// way, as under torchrun. Null when not enabled.
absl::StatusOr<std::unique_ptr<FileTimerServer>> ServeFileTimers(const std::map<std::string, std::string>& env,
                                                                  const std::string& private_dir,
                                                                  ProgressBoard* board, EventLog* events,
                                                                  std::map<std::string, std::string>* worker_env) {
  auto enabled = env.find("TORCHELASTIC_ENABLE_FILE_TIMER");
  if (enabled == env.end() || enabled->second != "1") return std::unique_ptr<FileTimerServer>();
  auto given = env.find("TORCHELASTIC_TIMER_FILE");
  const std::string path = given != env.end() && !given->second.empty() ? given->second : private_dir + "/watchdog_timer";
  auto reap = [board, events](const FileTimerRequest& r) {
    std::optional<int> local_rank = board->LocalRankOf(r.pid);
    if (!local_rank.has_value()) {
      spdlog::warn("file timer '{}' of pid {} expired, but pid {} is not a worker of this node: not killed",
                   r.scope_id, r.pid, r.pid);
      return;
    }
    spdlog::warn("file timer '{}' of worker local rank {} (pid {}) expired: sending it {}", r.scope_id, *local_rank,
                 r.pid, SignalName(r.signal));
    events->Record("file_timer_expired", {{"local_rank", int64_t{*local_rank}}, {"pid", r.pid},
                                          {"scope_id", r.scope_id}, {"signal", SignalName(r.signal)}});
    ::kill(static_cast<pid_t>(r.pid), r.signal);
  };
  auto warn = [](const std::string& w) { spdlog::warn("{}", w); };
  absl::StatusOr<std::unique_ptr<FileTimerServer>> server = FileTimerServer::Start(path, reap, warn);
  if (!server.ok()) {
    return absl::FailedPreconditionError(
        absl::StrCat("TORCHELASTIC_ENABLE_FILE_TIMER=1: cannot serve the file timer: ", server.status().message()));
  }
  spdlog::info("file timer watchdog on {}", path);
  (*worker_env)["TORCHELASTIC_TIMER_FILE"] = path;
  return server;
}

int Launch(LaunchConfig c, const std::map<std::string, std::string>& env) {
  // torchrun names a --standalone run with a fresh UUID (an explicit
  // --rdzv_id is kept here, where torchrun would ignore it).
  if (c.standalone && !c.rdzv_id_given) c.rdzv_id = RandomUuid();
  absl::StatusOr<LocalPlan> plan = PlanLocal(c, env);
  if (!plan.ok()) return UsageError(plan.status());
  auto processes = NewRealProcessLauncher({HandledSignals(c), /*subreaper=*/true});
  if (!processes.ok()) return ExitCodeFor(absl::InternalError(processes.status().ToString()));
  // The private folder: the agent socket, and the logs without --log_dir.
  auto run_dir = RunDir::Create(c.log_dir, c.rdzv_id);
  if (!run_dir.ok()) return UsageError(run_dir.status());
  if (!c.log_dir.empty()) spdlog::info("worker logs: {}", (*run_dir)->log_root());

  const LocalHost local = ReadLocalHost();
  const std::vector<std::string> endpoint_addresses =
      c.has_rdzv_endpoint ? ResolveHost(c.rdzv_endpoint.host) : std::vector<std::string>{};
  const std::string host = ThisNodeAddress(c, local, endpoint_addresses);
  absl::StatusOr<RendezvousSide> rdzv = SetUpRendezvous(c, *plan, local, endpoint_addresses);
  if (!rdzv.ok()) return ExitCodeFor(rdzv.status());

  // The event log, in this launcher's log folder (event_log.h); torchrun's
  // --event_log_handler console also logs each event.
  std::unique_ptr<EventLog> events =
      NewFileEventLog((*run_dir)->log_root() + "/events.jsonl", c.event_log_handler == "console");
  // With --metrics_port the events are also counted on their way to the log.
  MetricsEventLog metric_events(events.get());
  EventLog* event_sink = c.metrics_port >= 0 ? &metric_events : events.get();
  ProgressBoard board(base::RealClock(), event_sink);
  RoundNotices notices;
  std::unique_ptr<AgentService> agent_service;
  if (auto svc = AgentService::Start((*run_dir)->socket_path(), &board, &notices); svc.ok()) {
    agent_service = std::move(*svc);
  } else {
    spdlog::warn("agent service unavailable ({}): heartbeats are not watched", svc.status().ToString());
  }
  AgentOptions o = AgentOptionsFor(c, *plan, env, host);
  absl::StatusOr<std::unique_ptr<FileTimerServer>> file_timers =
      ServeFileTimers(env, (*run_dir)->private_dir(), &board, event_sink, &o.base_env);
  if (!file_timers.ok()) return ExitCodeFor(file_timers.status());
  o.log_root = (*run_dir)->log_root();
  o.agent_socket = agent_service ? (*run_dir)->socket_path() : "";
  o.rdzv_endpoint_for_workers = rdzv->endpoint;
  o.rdzv_ca_file = rdzv->client_ca;
  o.rdzv_cert_file = rdzv->client_cert;
  o.rdzv_key_file = rdzv->client_key;

  auto ports = NewRealPortFinder();
  RoundMonitorOptions mo;
  mo.client = rdzv->client.get();
  mo.progress = &board;
  mo.run_id = c.rdzv_id;
  mo.node = o.node;
  mo.run_options = o.run_options;
  mo.keep_alive_interval = absl::Seconds(o.run_options.keep_alive_interval_s());
  mo.straggler_window = o.stragglers.window;
  auto monitor = NewRoundMonitor(mo);

  WarmPool pool(processes->get(), WarmPoolOptionsFor(c, *plan, env, o, event_sink, (*run_dir)->private_dir()));
  pool.Begin();

  o.clock = base::RealClock();
  o.processes = &pool;
  o.rdzv = rdzv->client.get();
  o.ports = ports.get();
  o.progress = &board;
  o.notices = agent_service ? &notices : nullptr;
  o.round_monitor = monitor.get();
  o.print_summary = [](const std::string& s) { WriteConsole(2, s); };
  o.events = event_sink;
  absl::StatusOr<std::unique_ptr<base::HttpServer>> metrics_http =
      ServeMetrics(c, *plan, host, rdzv->server.get(), &metric_events, &board);
  if (!metrics_http.ok()) return ExitCodeFor(metrics_http.status());
  ElasticAgent agent(o);
  const AgentResult result = agent.Run();
  if (rdzv->server != nullptr && !rdzv->loopback_embed) LingerWhileOthersUseIt(rdzv->client.get(), c.rdzv_id, result.exit_by);
  (*run_dir)->Finish(/*keep_logs=*/c.redirects.all || c.tee.all || c.redirects.per_rank_form ||
                     c.tee.per_rank_form);
  // An orderly end: calls still in flight on the rendezvous client (a Join
  // that outlived a signal, the round monitor's Watch) end now, so the
  // threads this launcher started are joined as the objects above go: the
  // agent's helpers, the round monitor, the agent service and the embedded
  // server, in reverse order of their making.
  rdzv->client->Cancel();
  return result.exit_code;
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
  const int code = Launch(parsed->launch, env);
  spdlog::shutdown();
  return code;
}
