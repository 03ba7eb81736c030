// The command line: CLI11 collects raw strings, then each value is validated
// here with a message that names its source (flag or PET_* variable).
#include "launcher/config/cli.h"

#include <algorithm>
#include <csignal>
#include <cstdlib>
#include <set>
#include <utility>

#include "CLI/CLI.hpp"
#include "absl/status/status.h"
#include "absl/strings/ascii.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/strings/str_replace.h"
#include "absl/strings/str_split.h"
#include "absl/strings/strip.h"
#include "base/flags.h"
#include "base/signals.h"
#include "launcher/config/numa.h"
#include "launcher/config/slurm.h"

namespace cpptorchrun::launcher {
namespace {

absl::Status Bad(const std::string& what, const std::string& allowed, const std::string& got) {
  return absl::InvalidArgumentError(absl::StrCat(what, ": expected ", allowed, "; got '", got, "'"));
}

absl::StatusOr<int> ParseInt(const std::string& text, const std::string& what, int min, int max,
                             const std::string& allowed) {
  int value = 0;
  if (!absl::SimpleAtoi(text, &value) || value < min || value > max) {
    return Bad(what, allowed, text);
  }
  return value;
}

absl::StatusOr<absl::Duration> ParseSeconds(const std::string& text, const std::string& what,
                                            bool allow_zero) {
  double seconds = 0;
  if (!absl::SimpleAtod(text, &seconds) || !(seconds >= 0) || seconds > 1e7 ||
      (!allow_zero && seconds == 0)) {
    return Bad(what, allow_zero ? "seconds >= 0" : "seconds > 0", text);
  }
  return absl::Seconds(seconds);
}


absl::StatusOr<int> ParseStdMask(const std::string& text, const std::string& what) {
  int v = 0;
  if (!absl::SimpleAtoi(text, &v) || v < 0 || v > 3) {
    return Bad(what, "0 (none), 1 (stdout), 2 (stderr), 3 (both), or LOCAL_RANK:VALUE,...", text);
  }
  return v;
}

absl::StatusOr<StdSpec> ParseStdSpec(const std::string& text, const std::string& what) {
  StdSpec spec;
  if (text.find(':') == std::string::npos) {
    auto mask = ParseStdMask(text, what);
    if (!mask.ok()) return mask.status();
    spec.all = *mask;
    return spec;
  }
  spec.per_rank_form = true;
  for (absl::string_view item : absl::StrSplit(text, ',')) {
    std::vector<std::string> kv = absl::StrSplit(item, ':');
    int rank = 0;
    if (kv.size() != 2 || !absl::SimpleAtoi(kv[0], &rank) || rank < 0) {
      return Bad(what, "0..3 or LOCAL_RANK:VALUE,... (e.g. 0:1,1:2)", text);
    }
    auto mask = ParseStdMask(kv[1], what);
    if (!mask.ok()) return Bad(what, "0..3 or LOCAL_RANK:VALUE,... (e.g. 0:1,1:2)", text);
    if (!spec.per_rank.emplace(rank, *mask).second) {
      return Bad(what, "each local rank at most once", text);
    }
  }
  return spec;
}

bool ValidRunId(const std::string& id) {
  // It names a folder under --log_dir: never "." or "..".
  if (id.empty() || id.size() > 128 || id == "." || id == "..") return false;
  for (char c : id) {
    if (!(absl::ascii_isalnum(c) || c == '-' || c == '_' || c == '.')) return false;
  }
  return true;
}

bool ValidHost(const std::string& host) {
  if (host.empty() || host.size() > 253) return false;
  for (char c : host) {
    if (!(absl::ascii_isalnum(c) || c == '-' || c == '.' || c == '_' || c == ':' || c == '%')) {
      return false;
    }
  }
  return true;
}

// rdzv_conf keys and what their values must be.
enum class ConfKind { kSeconds, kCount, kBool, kString };
const std::map<std::string, ConfKind>& ConfKeys() {
  static const auto* keys = new std::map<std::string, ConfKind>{
      {"join_timeout", ConfKind::kSeconds},   {"last_call_timeout", ConfKind::kSeconds},
      {"close_timeout", ConfKind::kSeconds},  {"keep_alive_interval", ConfKind::kSeconds},
      {"keep_alive_max_attempt", ConfKind::kCount}, {"timeout", ConfKind::kSeconds},
      {"read_timeout", ConfKind::kSeconds},   {"is_host", ConfKind::kBool},
      {"use_libuv", ConfKind::kBool},         {"token_file", ConfKind::kString},
      // TLS to the rendezvous: the CA that signed its certificate; a node
      // that serves the endpoint serves it with cert and key.
      {"cacert", ConfKind::kString},          {"cert", ConfKind::kString},
      {"key", ConfKind::kString},
  };
  return *keys;
}

absl::StatusOr<std::map<std::string, std::string>> ParseRdzvConf(const std::string& text,
                                                                 const std::string& what,
                                                                 std::vector<std::string>* warnings) {
  std::map<std::string, std::string> conf;
  if (text.empty()) return conf;
  std::vector<std::string> names;
  for (const auto& [k, v] : ConfKeys()) names.push_back(k);
  const std::string allowed = absl::StrCat("KEY=VALUE,... with KEY one of ", absl::StrJoin(names, " "));
  for (absl::string_view item : absl::StrSplit(text, ',')) {
    std::vector<std::string> kv = absl::StrSplit(item, absl::MaxSplits('=', 1));
    if (kv.size() != 2 || kv[0].empty()) return Bad(what, allowed, text);
    auto it = ConfKeys().find(kv[0]);
    if (it == ConfKeys().end()) {
      // torchrun passes every key to its backend, which ignores what it
      // does not use (store_type=tcp, ...): a warning, not an error.
      bool printable = std::all_of(kv[0].begin(), kv[0].end(), [](char ch) {
        return absl::ascii_isalnum(ch) || ch == '_' || ch == '-' || ch == '.';
      });
      if (!printable || kv[0].size() > 64) return Bad(what, allowed, std::string(item));
      warnings->push_back(absl::StrCat(what, ": key '", kv[0], "' is not used by cpptorchrun (ignored; known: ",
                                       absl::StrJoin(names, " "), ")"));
      continue;
    }
    const std::string key_what = absl::StrCat(what, " ", kv[0]);
    switch (it->second) {
      case ConfKind::kSeconds:
        if (auto d = ParseSeconds(kv[1], key_what, /*allow_zero=*/false); !d.ok()) return d.status();
        break;
      case ConfKind::kCount:
        if (auto n = ParseInt(kv[1], key_what, 1, 1000000, "a positive integer"); !n.ok()) {
          return n.status();
        }
        break;
      case ConfKind::kBool:
        if (auto b = base::ParseBool(kv[1], key_what); !b.ok()) return b.status();
        break;
      case ConfKind::kString:
        if (kv[1].empty()) return Bad(key_what, "a non-empty value", kv[1]);
        break;
    }
    conf[kv[0]] = kv[1];
  }
  return conf;
}

// The signals --signals_to_handle may name.
const std::set<int>& HandleableSignals() {
  static const auto* s = new std::set<int>{SIGINT, SIGTERM, SIGHUP, SIGQUIT, SIGUSR1, SIGUSR2};
  return *s;
}

std::string HelpFooter() {
  return "Environment: each torchrun flag may also come from PET_<FLAG> (e.g. PET_NNODES);\n"
         "--fake_gpus from CPPTORCHRUN_FAKE_GPUS. Exit codes: 0 success, 2 bad usage,\n"
         "the root-cause worker's exit code, or 128+signal. See docs/FLAGS.md.";
}

absl::StatusOr<ParsedCommandLine> ParseStatus(const std::vector<std::string>& argv,
                                              const std::map<std::string, std::string>& env) {
  CLI::App app{"cpptorchrun status: print a job's nodes, ranks and progress", "cpptorchrun status"};
  std::string endpoint, id, level = "warn", conf_text;
  // PET_* from `env` (this stays a pure function of argv and env).
  if (auto it = env.find("PET_RDZV_ENDPOINT"); it != env.end()) endpoint = it->second;
  if (auto it = env.find("PET_RDZV_ID"); it != env.end()) id = it->second;
  if (auto it = env.find("PET_RDZV_CONF"); it != env.end()) conf_text = it->second;
  app.add_option("--rdzv_endpoint,--rdzv-endpoint", endpoint, "rendezvous service host:port (PET_RDZV_ENDPOINT)");
  app.add_option("--rdzv_id,--rdzv-id", id, "the job's run id (PET_RDZV_ID)");
  app.add_option("--rdzv_conf,--rdzv-conf", conf_text,
                 "token_file=F,cacert=C: the job's token and the CA of the rendezvous's TLS certificate");
  app.add_option("--log_level,--log-level", level, "trace|debug|info|warn|error");
  ParsedCommandLine out;
  out.kind = ParsedCommandLine::Kind::kStatus;
  try {
    std::vector<std::string> args(argv.rbegin(), argv.rend() - 2);
    app.parse(args);
  } catch (const CLI::CallForHelp&) {
    out.kind = ParsedCommandLine::Kind::kHelp;
    out.text = app.help();
    return out;
  } catch (const CLI::ParseError& e) {
    return absl::InvalidArgumentError(absl::StrCat("status: ", e.what()));
  }
  if (endpoint.empty()) {
    return absl::InvalidArgumentError("status: --rdzv_endpoint: required (host:port of the rendezvous service)");
  }
  auto hp = ParseEndpointFlag(endpoint, kDefaultC10dPort, "--rdzv_endpoint");
  if (!hp.ok()) return hp.status();
  if (!ValidRunId(id)) {
    return Bad("--rdzv_id", "1..128 characters of [A-Za-z0-9_.-]", id);
  }
  std::vector<std::string> ignored;
  auto conf = ParseRdzvConf(conf_text, "--rdzv_conf", &ignored);
  if (!conf.ok()) return conf.status();
  out.status.rdzv_endpoint = *hp;
  out.status.rdzv_id = id;
  out.status.log_level = level;
  if (auto it = conf->find("token_file"); it != conf->end()) out.status.token_file = it->second;
  if (auto it = conf->find("cacert"); it != conf->end()) out.status.ca_file = it->second;
  return out;
}

}  // namespace

absl::StatusOr<rdzv::Endpoint> ParseEndpointFlag(const std::string& text, int default_port,
                                                 const std::string& what) {
  // A bare IPv6 address (two ':' or more, no brackets) is taken as "[v6]";
  // the endpoint parser itself insists on brackets.
  const absl::string_view stripped = absl::StripAsciiWhitespace(text);
  std::string endpoint_text = text;
  if (!stripped.empty() && stripped.front() != '[' &&
      std::count(stripped.begin(), stripped.end(), ':') >= 2) {
    endpoint_text = absl::StrCat("[", stripped, "]");
  }
  absl::StatusOr<rdzv::Endpoint> endpoint = rdzv::ParseEndpoint(endpoint_text, default_port);
  if (!endpoint.ok()) {
    return absl::InvalidArgumentError(absl::StrCat(what, ": ", endpoint.status().message()));
  }
  if (endpoint->host.size() > 253) return Bad(what, "a host of at most 253 characters", text);
  return endpoint;
}

ProgramMode ModeOf(const LaunchConfig& config) {
  if (config.no_python) return ProgramMode::kExecutable;
  if (config.module) return ProgramMode::kModule;
  if (config.run_path) return ProgramMode::kPython;
  const std::string& s = config.training_script;
  if (s.size() >= 3 && s.compare(s.size() - 3, 3, ".py") == 0) return ProgramMode::kPython;
  return ProgramMode::kExecutable;
}

absl::StatusOr<std::vector<std::string>> ExpandFlagPrefixes(const std::vector<std::string>& argv,
                                                          const std::vector<LongFlag>& flags) {
  std::vector<std::string> out = argv;
  // Canonical key of a spelling: dashes and underscores are one.
  auto canon = [](std::string s) {
    std::replace(s.begin(), s.end(), '-', '_');
    return s;
  };
  for (size_t i = 1; i < out.size(); ++i) {
    const std::string& arg = out[i];
    if (arg == "--") break;
    if (arg.size() < 2 || arg[0] != '-') break;  // the program: its flags are its own
    if (arg[1] != '-') {
      // Short flags: -r/-t take a value unless attached (-r3); -m does not.
      if ((arg == "-r" || arg == "-t") && i + 1 < out.size()) ++i;
      continue;
    }
    const size_t eq = arg.find('=');
    const std::string name = canon(arg.substr(2, eq == std::string::npos ? std::string::npos : eq - 2));
    const LongFlag* exact = nullptr;
    std::vector<const LongFlag*> matches;
    for (const LongFlag& f : flags) {
      if (f.key == name) exact = &f;
      if (!name.empty() && absl::StartsWith(f.key, name)) matches.push_back(&f);
    }
    const LongFlag* chosen = exact;
    if (chosen == nullptr && matches.size() == 1) {
      chosen = matches[0];
      out[i] = absl::StrCat("--", chosen->key, eq == std::string::npos ? "" : arg.substr(eq));
    } else if (chosen == nullptr && matches.size() > 1) {
      std::vector<std::string> names;
      for (const LongFlag* m : matches) names.push_back("--" + m->key);
      std::sort(names.begin(), names.end());
      return absl::InvalidArgumentError(absl::StrCat("ambiguous flag '", arg.substr(0, eq), "': could be ",
                                                     absl::StrJoin(names, ", ")));
    }
    if (chosen != nullptr && chosen->takes_value && eq == std::string::npos) ++i;  // its value
  }
  return out;
}

absl::StatusOr<ParsedCommandLine> ParseCommandLine(const std::vector<std::string>& argv,
                                                   const std::map<std::string, std::string>& env) {
  if (argv.size() >= 2 && argv[1] == "status") return ParseStatus(argv, env);

  CLI::App app{"cpptorchrun: a torchrun-compatible distributed launcher (C++)", "cpptorchrun"};
  app.prefix_command();
  app.footer(HelpFooter());
  app.get_formatter()->column_width(40);

  // Raw values; empty optional: not on the command line.
  struct Raw {
    std::string flag;     // the canonical (underscored) spelling, for messages
    std::string env;      // PET_* name
    std::string value;
    bool given = false;
    CLI::Option* opt = nullptr;
  };
  std::map<std::string, Raw> raw;
  auto add = [&](const std::string& key, const std::string& names, const std::string& env_name,
                 const std::string& help) {
    Raw& r = raw[key];
    r.flag = "--" + key;
    r.env = env_name;
    r.opt = app.add_option(names, r.value, help);
    r.opt->multi_option_policy(CLI::MultiOptionPolicy::TakeLast);
  };
  struct RawFlag {
    std::string env;
    bool value = false;
    CLI::Option* opt = nullptr;
  };
  std::map<std::string, RawFlag> flags;
  auto add_flag = [&](const std::string& key, const std::string& names, const std::string& env_name,
                      const std::string& help) {
    RawFlag& f = flags[key];
    f.env = env_name;
    f.opt = app.add_flag(names, f.value, help);
  };

  add("nnodes", "--nnodes", "PET_NNODES", "N or MIN:MAX nodes (default 1:1)");
  add("nproc_per_node", "--nproc_per_node,--nproc-per-node", "PET_NPROC_PER_NODE",
      "workers per node: an integer, gpu, cpu or auto (default 1)");
  add("node_rank", "--node_rank,--node-rank", "PET_NODE_RANK",
      "this node's rank with the static backend (default 0)");
  add("rdzv_backend", "--rdzv_backend,--rdzv-backend", "PET_RDZV_BACKEND",
      "c10d (the gRPC rendezvous) or static (default static)");
  add("rdzv_endpoint", "--rdzv_endpoint,--rdzv-endpoint", "PET_RDZV_ENDPOINT",
      "rendezvous service HOST[:PORT], [IPV6]:PORT");
  add("rdzv_id", "--rdzv_id,--rdzv-id", "PET_RDZV_ID", "the job's run id (default none)");
  add("rdzv_conf", "--rdzv_conf,--rdzv-conf", "PET_RDZV_CONF",
      "KEY=VALUE,...: join_timeout, last_call_timeout, close_timeout, keep_alive_interval, "
      "keep_alive_max_attempt, timeout, read_timeout, is_host, use_libuv, token_file");
  add_flag("standalone", "--standalone", "PET_STANDALONE",
           "single node: embed the rendezvous on loopback, on a free port");
  add("max_restarts", "--max_restarts,--max-restarts", "PET_MAX_RESTARTS",
      "worker-group restarts before failing (default 0)");
  add("monitor_interval", "--monitor_interval,--monitor-interval", "PET_MONITOR_INTERVAL",
      "seconds between periodic checks of the workers (default 5)");
  add("start_method", "--start_method,--start-method", "PET_START_METHOD",
      "spawn|fork|forkserver: accepted for compatibility; workers are always exec'd");
  add("role", "--role", "PET_ROLE", "the workers' role name (default default)");
  add_flag("module", "-m,--module", "PET_MODULE", "run the program as a Python module (python -m)");
  add_flag("no_python", "--no_python,--no-python", "PET_NO_PYTHON",
           "exec the program directly, without python");
  add_flag("run_path", "--run_path,--run-path", "PET_RUN_PATH",
           "run the program as a Python file (python FILE)");
  add("log_dir", "--log_dir,--log-dir", "PET_LOG_DIR",
      "folder for <run_id>/attempt_<k>/<local_rank>/{stdout,stderr}.log and error.json");
  add("redirects", "-r,--redirects", "PET_REDIRECTS",
      "streams to files only: 0 none, 1 stdout, 2 stderr, 3 both; or LOCAL_RANK:VALUE,...");
  add("tee", "-t,--tee", "PET_TEE", "streams to files and console, as --redirects");
  add("local_ranks_filter", "--local_ranks_filter,--local-ranks-filter", "PET_LOCAL_RANKS_FILTER",
      "comma-separated local ranks whose output reaches the console");
  add("duplicate_stdout_filters", "--duplicate_stdout_filters,--duplicate-stdout-filters",
      "PET_DUPLICATE_STDOUT_FILTERS",
      "comma-separated strings (',,' for a comma): tee'd stdout lines holding any are copied to "
      "attempt_<k>/filtered_stdout.log");
  add("duplicate_stderr_filters", "--duplicate_stderr_filters,--duplicate-stderr-filters",
      "PET_DUPLICATE_STDERR_FILTERS", "as --duplicate_stdout_filters, for stderr");
  add("event_log_handler", "--event_log_handler,--event-log-handler", "PET_EVENT_LOG_HANDLER",
      "torchrun's event handler name: accepted; cpptorchrun's events are in its own log");
  add("numa_binding", "--numa_binding,--numa-binding", "PET_NUMA_BINDING",
      "node|socket|exclusive|core-complex: bind each worker's CPUs (and prefer its memory) near its GPU");
  add_flag("virtual_local_rank", "--virtual_local_rank,--virtual-local-rank", "PET_VIRTUAL_LOCAL_RANK",
           "LOCAL_RANK=0 for every worker, CUDA_VISIBLE_DEVICES its own GPU only");
  add("master_addr", "--master_addr,--master-addr", "PET_MASTER_ADDR",
      "static backend: rank-0 node address (default 127.0.0.1)");
  add("master_port", "--master_port,--master-port", "PET_MASTER_PORT",
      "static backend: MASTER_PORT to use (default: a free port each round)");
  add("local_addr", "--local_addr,--local-addr", "PET_LOCAL_ADDR",
      "the address other nodes reach this node at");
  add("signals_to_handle", "--signals_to_handle,--signals-to-handle", "PET_SIGNALS_TO_HANDLE",
      "signals forwarded to the workers (default SIGTERM,SIGINT,SIGHUP,SIGQUIT; also SIGUSR1, "
      "SIGUSR2)");
  add("fake_gpus", "--fake_gpus,--fake-gpus", "CPPTORCHRUN_FAKE_GPUS",
      "N fake GPUs on this node (0: real devices)");
  add("worker_timeout", "--worker_timeout,--worker-timeout", "PET_WORKER_TIMEOUT",
      "seconds of heartbeat silence after which a worker is hung (default 300)");
  add("shutdown_timeout", "--shutdown_timeout,--shutdown-timeout", "PET_SHUTDOWN_TIMEOUT",
      "seconds between SIGTERM and SIGKILL when stopping workers (default 30)");
  add("exit_barrier_timeout", "--exit_barrier_timeout,--exit-barrier-timeout",
      "PET_EXIT_BARRIER_TIMEOUT", "seconds to wait for the other nodes at exit (default 300)");
  add("logs_specs", "--logs_specs,--logs-specs", "PET_LOGS_SPECS",
      "torchrun's logs-specs plugin: only the default is available (it is a Python entry point)");
  add("log_level", "--log_level,--log-level", "PET_LOG_LEVEL",
      "trace|debug|info|warn|error|critical|off (default info)");
  bool version = false;
  app.add_flag("--version", version, "print the version and exit");

  ParsedCommandLine out;
  std::vector<std::string> rest;
  // argparse's habit, which torchrun users have: an unambiguous prefix of
  // a long flag names it (--nproc=2, --redirect 3).
  std::vector<LongFlag> long_flags;
  for (const auto& [key, r] : raw) long_flags.push_back({key, /*takes_value=*/true});
  for (const auto& [key, f] : flags) long_flags.push_back({key, /*takes_value=*/false});
  long_flags.push_back({"version", false});
  long_flags.push_back({"help", false});
  absl::StatusOr<std::vector<std::string>> expanded = ExpandFlagPrefixes(argv, long_flags);
  if (!expanded.ok()) return expanded.status();
  try {
    std::vector<std::string> args(expanded->rbegin(), expanded->rend() - 1);
    app.parse(args);
    rest = app.remaining();
  } catch (const CLI::CallForHelp&) {
    out.kind = ParsedCommandLine::Kind::kHelp;
    out.text = app.help();
    return out;
  } catch (const CLI::ParseError& e) {
    std::string msg = e.what();
    for (char& c : msg) {
      if (c == '\n') c = ' ';
    }
    return absl::InvalidArgumentError(msg);
  }
  if (version) {
    out.kind = ParsedCommandLine::Kind::kVersion;
    out.text = absl::StrCat("cpptorchrun ", kVersion);
    return out;
  }
  if (!rest.empty() && rest[0] == "--") rest.erase(rest.begin());
  if (!rest.empty() && rest[0].size() > 1 && rest[0][0] == '-') {
    return absl::InvalidArgumentError(absl::StrCat(
        "unknown flag '", rest[0], "' (see cpptorchrun --help; the program's own flags go after it)"));
  }

  // Slurm's job step supplies what neither the command line nor PET_*
  // gives (launcher/config/slurm.h); never with --standalone.
  absl::StatusOr<SlurmDefaults> slurm = SlurmDefaultsFrom(env);
  if (!slurm.ok()) return slurm.status();
  {
    const RawFlag& standalone = flags.at("standalone");
    if (standalone.opt->count() > 0 || env.count(standalone.env) > 0) *slurm = SlurmDefaults{};
  }
  std::vector<std::string> from_slurm;
  // Resolves each raw value: command line, else environment, else Slurm,
  // else default.
  auto value = [&](const std::string& key, const std::string& def,
                   std::string* source) -> std::string {
    Raw& r = raw.at(key);
    if (r.opt->count() > 0) {
      *source = r.flag;
      return r.value;
    }
    auto it = env.find(r.env);
    if (it != env.end()) {
      *source = r.env;
      return it->second;
    }
    if (auto s = slurm->values.find(key); s != slurm->values.end()) {
      *source = absl::StrCat(r.flag, " (from ", slurm->sources.at(key), ")");
      from_slurm.push_back(absl::StrCat(r.flag, " ", s->second, " (", slurm->sources.at(key), ")"));
      return s->second;
    }
    *source = r.flag;
    return def;
  };
  auto given = [&](const std::string& key) {
    Raw& r = raw.at(key);
    return r.opt->count() > 0 || env.count(r.env) > 0;
  };
  auto flag = [&](const std::string& key) -> absl::StatusOr<bool> {
    RawFlag& f = flags.at(key);
    if (f.opt->count() > 0) return f.value;
    auto it = env.find(f.env);
    if (it != env.end()) return base::ParseBool(it->second, f.env);
    return false;
  };

  LaunchConfig& c = out.launch;
  std::string src;

  // --nnodes
  {
    std::string v = value("nnodes", "1:1", &src);
    const std::string allowed = "N or MIN:MAX with 1 <= MIN <= MAX";
    std::vector<std::string> parts = absl::StrSplit(v, ':');
    if (parts.size() == 1) {
      auto n = ParseInt(parts[0], src, 1, 1 << 20, allowed);
      if (!n.ok()) return n.status();
      c.min_nodes = c.max_nodes = *n;
    } else if (parts.size() == 2) {
      int lo = 0, hi = 0;
      if (!absl::SimpleAtoi(parts[0], &lo) || !absl::SimpleAtoi(parts[1], &hi) || lo < 1 ||
          hi < lo || hi > (1 << 20)) {
        return Bad(src, allowed, v);
      }
      c.min_nodes = lo;
      c.max_nodes = hi;
    } else {
      return Bad(src, allowed, v);
    }
  }
  // --nproc_per_node
  {
    std::string v = absl::AsciiStrToLower(value("nproc_per_node", "1", &src));
    if (v == "gpu") {
      c.nproc_kind = NprocKind::kGpu;
    } else if (v == "cpu") {
      c.nproc_kind = NprocKind::kCpu;
    } else if (v == "auto") {
      c.nproc_kind = NprocKind::kAuto;
    } else {
      auto n = ParseInt(v, src, 1, 4096, "a positive integer (1..4096), gpu, cpu or auto");
      if (!n.ok()) return n.status();
      c.nproc_kind = NprocKind::kCount;
      c.nproc_per_node = *n;
    }
  }
  {
    auto n = ParseInt(value("node_rank", "0", &src), src, 0, 1 << 20, "an integer >= 0");
    if (!n.ok()) return n.status();
    c.node_rank = *n;
  }
  {
    std::string v = value("rdzv_backend", "static", &src);
    if (v == "c10d") {
      c.rdzv_backend = RdzvBackend::kC10d;
    } else if (v == "static") {
      c.rdzv_backend = RdzvBackend::kStatic;
    } else {
      return Bad(src, "c10d (the gRPC rendezvous) or static", v);
    }
  }
  {
    std::string v = value("rdzv_endpoint", "", &src);
    if (!v.empty()) {
      auto hp = ParseEndpointFlag(v, kDefaultC10dPort, src);
      if (!hp.ok()) return hp.status();
      c.rdzv_endpoint = *hp;
      c.has_rdzv_endpoint = true;
    }
  }
  {
    std::string v = value("rdzv_id", "none", &src);
    if (!ValidRunId(v)) return Bad(src, "1..128 characters of [A-Za-z0-9_.-]", v);
    c.rdzv_id = v;
    c.rdzv_id_given = given("rdzv_id");
  }
  {
    auto conf = ParseRdzvConf(value("rdzv_conf", "", &src), src, &c.warnings);
    if (!conf.ok()) return conf.status();
    c.rdzv_conf = *conf;
  }
  for (const char* key : {"standalone", "module", "no_python", "run_path"}) {
    auto b = flag(key);
    if (!b.ok()) return b.status();
    if (std::string(key) == "standalone") c.standalone = *b;
    if (std::string(key) == "module") c.module = *b;
    if (std::string(key) == "no_python") c.no_python = *b;
    if (std::string(key) == "run_path") c.run_path = *b;
  }
  {
    auto n = ParseInt(value("max_restarts", "0", &src), src, 0, 1000000, "an integer >= 0");
    if (!n.ok()) return n.status();
    c.max_restarts = *n;
  }
  {
    auto d = ParseSeconds(value("monitor_interval", "5", &src), src, /*allow_zero=*/false);
    if (!d.ok()) return d.status();
    c.monitor_interval = *d;
  }
  {
    std::string v = value("start_method", "spawn", &src);
    if (v != "spawn" && v != "fork" && v != "forkserver") {
      return Bad(src, "spawn, fork or forkserver", v);
    }
    c.start_method = v;
  }
  {
    std::string v = value("role", "default", &src);
    if (v.empty() || v.size() > 64 || v.find_first_of(" \t\n/") != std::string::npos) {
      return Bad(src, "a non-empty name without spaces or '/' (at most 64 characters)", v);
    }
    c.role = v;
  }
  c.log_dir = value("log_dir", "", &src);
  {
    auto r = ParseStdSpec(value("redirects", "0", &src), src);
    if (!r.ok()) return r.status();
    c.redirects = *r;
    auto t = ParseStdSpec(value("tee", "0", &src), src);
    if (!t.ok()) return t.status();
    c.tee = *t;
  }
  {
    std::string v = value("local_ranks_filter", "", &src);
    if (!v.empty()) {
      std::set<int> seen;
      for (absl::string_view item : absl::StrSplit(v, ',')) {
        int r = 0;
        if (!absl::SimpleAtoi(item, &r) || r < 0 || !seen.insert(r).second) {
          return Bad(src, "comma-separated distinct local ranks >= 0 (e.g. 0,1)", v);
        }
        c.local_ranks_filter.push_back(r);
      }
    }
  }
  {
    c.master_addr_given = given("master_addr");
    std::string v = value("master_addr", "127.0.0.1", &src);
    std::string host = v;
    if (host.size() > 2 && host.front() == '[' && host.back() == ']') host = host.substr(1, host.size() - 2);
    if (!ValidHost(host)) return Bad(src, "a host name or IP address", v);
    c.master_addr = host;
    c.master_port_given = given("master_port");
    auto n = ParseInt(value("master_port", "29500", &src), src, 1, 65535, "a port in 1..65535");
    if (!n.ok()) return n.status();
    c.master_port = *n;
  }
  {
    std::string v = value("local_addr", "", &src);
    std::string host = v;
    if (host.size() > 2 && host.front() == '[' && host.back() == ']') host = host.substr(1, host.size() - 2);
    if (!v.empty() && !ValidHost(host)) return Bad(src, "a host name or IP address", v);
    c.local_addr = host;
  }
  {
    std::string v = value("signals_to_handle", "SIGTERM,SIGINT,SIGHUP,SIGQUIT", &src);
    const std::string allowed =
        "a comma-separated list of SIGINT, SIGTERM, SIGHUP, SIGQUIT, SIGUSR1, SIGUSR2";
    if (v.empty()) return Bad(src, allowed, v);
    for (absl::string_view item : absl::StrSplit(v, ',')) {
      auto s = SignalFromName(std::string(item));
      if (!s.ok() || HandleableSignals().count(*s) == 0) return Bad(src, allowed, v);
      if (std::find(c.signals_to_handle.begin(), c.signals_to_handle.end(), *s) ==
          c.signals_to_handle.end()) {
        c.signals_to_handle.push_back(*s);
      }
    }
  }
  {
    auto n = ParseInt(value("fake_gpus", "0", &src), src, 0, 4096, "an integer in 0..4096");
    if (!n.ok()) return n.status();
    c.fake_gpus = *n;
  }
  {
    auto d = ParseSeconds(value("worker_timeout", "300", &src), src, /*allow_zero=*/false);
    if (!d.ok()) return d.status();
    c.worker_timeout = *d;
    // torchrun 2.x: TORCH_ELASTIC_SHUTDOWN_TIMEOUT when the flag is not given.
    std::string text = value("shutdown_timeout", "30", &src);
    if (auto it = env.find("TORCH_ELASTIC_SHUTDOWN_TIMEOUT"); it != env.end() && !given("shutdown_timeout")) {
      text = it->second;
      src = it->first;
    }
    d = ParseSeconds(text, src, /*allow_zero=*/true);
    if (!d.ok()) return d.status();
    c.shutdown_timeout = *d;
    d = ParseSeconds(value("exit_barrier_timeout", "300", &src), src, /*allow_zero=*/true);
    if (!d.ok()) return d.status();
    c.exit_barrier_timeout = *d;
  }
  {
    std::string v = absl::AsciiStrToLower(value("log_level", "info", &src));
    static const std::set<std::string> kLevels = {"trace", "debug", "info", "warn",
                                                  "warning", "error", "critical", "off"};
    if (kLevels.count(v) == 0) return Bad(src, "trace, debug, info, warn, error, critical or off", v);
    c.log_level = v == "warning" ? "warn" : v;
  }

  // The program.
  if (rest.empty()) {
    return absl::InvalidArgumentError(
        "training_script: missing (the program to run, e.g. train, script.py, or -m module)");
  }
  c.training_script = rest[0];
  c.training_script_args.assign(rest.begin() + 1, rest.end());

  // Combinations.
  {
    // torchrun's comma_separated_list: ",," is a literal comma.
    auto filters = [&](const std::string& key, std::vector<std::string>* out) {
      std::string v = value(key, "", &src);
      if (v.empty()) return;
      const std::string placeholder = std::string(1, '\0');
      v = absl::StrReplaceAll(v, {{",,", placeholder}});
      for (absl::string_view item : absl::StrSplit(v, ',')) {
        out->push_back(absl::StrReplaceAll(item, {{placeholder, ","}}));
      }
    };
    filters("duplicate_stdout_filters", &c.duplicate_stdout_filters);
    filters("duplicate_stderr_filters", &c.duplicate_stderr_filters);
    c.event_log_handler = value("event_log_handler", "null", &src);
    c.numa_binding = value("numa_binding", "", &src);
    if (!c.numa_binding.empty()) {
      if (auto mode = ParseNumaMode(c.numa_binding); !mode.ok()) {
        return Bad(src, "node, socket, exclusive or core-complex", c.numa_binding);
      }
    }
    auto virtual_rank = flag("virtual_local_rank");
    if (!virtual_rank.ok()) return virtual_rank.status();
    c.virtual_local_rank = *virtual_rank;
  }
  {
    // torchrun's default specs (DefaultLogsSpecs, entry point "default") are
    // what cpptorchrun does; anything else is a Python plugin it cannot load.
    std::string v = value("logs_specs", "", &src);
    if (!v.empty() && v != "default" && v != "DefaultLogsSpecs") {
      return Bad(src, "the default logs specs ('default' or 'DefaultLogsSpecs'); other specs are Python "
                      "plugins (torchrun.logs_specs entry points) that cpptorchrun cannot load",
                 v);
    }
  }
  if (c.module && c.no_python) {
    return absl::InvalidArgumentError("--module/-m and --no_python: not both (a module needs python)");
  }
  if (c.run_path && c.no_python) {
    return absl::InvalidArgumentError("--run_path and --no_python: not both (a path run needs python)");
  }
  if (c.module && c.run_path) {
    return absl::InvalidArgumentError("--module/-m and --run_path: not both");
  }
  if (c.standalone) {
    if (c.max_nodes != 1) {
      return absl::InvalidArgumentError(absl::StrCat(
          "--standalone: needs --nnodes=1 (the rendezvous is on loopback); got --nnodes=",
          c.min_nodes, ":", c.max_nodes));
    }
    if (c.has_rdzv_endpoint) {
      return absl::InvalidArgumentError(
          "--standalone and --rdzv_endpoint: not both (--standalone embeds its own rendezvous)");
    }
    c.rdzv_backend = RdzvBackend::kC10d;
  }
  if (c.rdzv_backend == RdzvBackend::kStatic) {
    if (c.min_nodes != c.max_nodes) {
      return absl::InvalidArgumentError(absl::StrCat(
          "--nnodes: MIN:MAX (", c.min_nodes, ":", c.max_nodes, ") needs --rdzv_backend=c10d"));
    }
    if (c.node_rank >= c.max_nodes) {
      return absl::InvalidArgumentError(absl::StrCat("--node_rank: expected 0..", c.max_nodes - 1,
                                                     " (below --nnodes); got ", c.node_rank));
    }
  }
  if (c.has_rdzv_endpoint && c.rdzv_endpoint.port == 0 && c.max_nodes > 1) {
    return absl::InvalidArgumentError(absl::StrCat(
        "--rdzv_endpoint: port 0 (a free port picked by this node) works for a single node only "
        "(--nnodes=1): other nodes could not find it; got --nnodes=",
        c.min_nodes, ":", c.max_nodes));
  }
  if (c.max_nodes > 1 && !c.has_rdzv_endpoint && c.rdzv_backend == RdzvBackend::kC10d) {
    return absl::InvalidArgumentError(
        "--rdzv_endpoint: required with --rdzv_backend=c10d and more than one node");
  }
  if (c.rdzv_backend == RdzvBackend::kStatic && c.max_nodes > 1 && !c.has_rdzv_endpoint) {
    // torchrun's static rendezvous: node rank 0 at MASTER_ADDR. MASTER_PORT
    // itself is the workers' (their own TCPStore listens there, as under
    // torchrun), so the rendezvous takes the port above it.
    if (c.master_port >= 65535) {
      return absl::InvalidArgumentError(absl::StrCat(
          "--master_port ", c.master_port, ": a static multi-node job also needs the port above it "
          "(the rendezvous); give a lower one, or --rdzv_endpoint"));
    }
    c.rdzv_endpoint = rdzv::Endpoint{c.master_addr, c.master_port + 1};
    c.has_rdzv_endpoint = true;
    c.rdzv_endpoint_from_master = true;
  }
  if (!from_slurm.empty()) {
    std::sort(from_slurm.begin(), from_slurm.end());
    from_slurm.erase(std::unique(from_slurm.begin(), from_slurm.end()), from_slurm.end());
    c.notes.push_back(absl::StrCat(slurm->job, ": took ", absl::StrJoin(from_slurm, ", ")));
  }
  return out;
}

}  // namespace cpptorchrun::launcher
