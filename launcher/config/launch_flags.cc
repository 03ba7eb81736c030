#include "launcher/config/launch_flags.h"

#include <algorithm>
#include <set>
#include <utility>

#include "absl/strings/ascii.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_replace.h"
#include "absl/strings/str_split.h"
#include "base/flags.h"
#include "base/signals.h"
#include "launcher/config/flag_values.h"
#include "launcher/config/numa.h"
#include "rendezvous/target.h"
#include "rendezvous/endpoint.h"

namespace cpptorchrun::launcher {
namespace {

using Apply = std::function<absl::Status(const FlagValue&, LaunchConfig*)>;

// Appliers for the common kinds of value.
Apply IntInto(int LaunchConfig::*field, int min, int max, std::string allowed) {
  return [=](const FlagValue& v, LaunchConfig* c) {
    absl::StatusOr<int> n = ParseInt(v.text, v.source, min, max, allowed);
    if (!n.ok()) return n.status();
    c->*field = *n;
    return absl::OkStatus();
  };
}

Apply SecondsInto(absl::Duration LaunchConfig::*field, bool allow_zero) {
  return [=](const FlagValue& v, LaunchConfig* c) {
    absl::StatusOr<absl::Duration> d = ParseSeconds(v.text, v.source, allow_zero);
    if (!d.ok()) return d.status();
    c->*field = *d;
    return absl::OkStatus();
  };
}

Apply ApplyWorkerTimeout = [](const FlagValue& v, LaunchConfig* c) -> absl::Status {
  if (v.text == "auto") {
    c->worker_timeout.reset();
    return absl::OkStatus();
  }
  absl::StatusOr<absl::Duration> d = ParseSeconds(v.text, v.source, /*allow_zero=*/false);
  if (!d.ok()) return d.status();
  c->worker_timeout = *d;
  return absl::OkStatus();
};

Apply SwitchInto(bool LaunchConfig::*field) {
  return [=](const FlagValue& v, LaunchConfig* c) {
    absl::StatusOr<bool> b = base::ParseBool(v.text, v.source);
    if (!b.ok()) return b.status();
    c->*field = *b;
    return absl::OkStatus();
  };
}

Apply StdSpecInto(StdSpec LaunchConfig::*field) {
  return [=](const FlagValue& v, LaunchConfig* c) {
    absl::StatusOr<StdSpec> spec = ParseStdSpec(v.text, v.source);
    if (!spec.ok()) return spec.status();
    c->*field = *spec;
    return absl::OkStatus();
  };
}

// torchrun's comma_separated_list: ",," is a literal comma.
Apply FiltersInto(std::vector<std::string> LaunchConfig::*field) {
  return [=](const FlagValue& v, LaunchConfig* c) {
    if (v.text.empty()) return absl::OkStatus();
    const std::string placeholder(1, '\0');
    const std::string text = absl::StrReplaceAll(v.text, {{",,", placeholder}});
    for (absl::string_view item : absl::StrSplit(text, ',')) {
      (c->*field).push_back(absl::StrReplaceAll(item, {{placeholder, ","}}));
    }
    return absl::OkStatus();
  };
}

// "[v6]" or a name or address; `allow_empty` for "not given".
absl::StatusOr<std::string> HostOf(const FlagValue& v, bool allow_empty) {
  std::string host = v.text;
  if (host.size() > 2 && host.front() == '[' && host.back() == ']') host = host.substr(1, host.size() - 2);
  if (allow_empty && v.text.empty()) return host;
  if (!ValidHost(host)) return Bad(v.source, "a host name or IP address", v.text);
  return host;
}

absl::Status ApplyNnodes(const FlagValue& v, LaunchConfig* c) {
  const std::string allowed = "N or MIN:MAX with 1 <= MIN <= MAX";
  std::vector<std::string> parts = absl::StrSplit(v.text, ':');
  if (parts.size() == 1) {
    absl::StatusOr<int> n = ParseInt(parts[0], v.source, 1, 1 << 20, allowed);
    if (!n.ok()) return n.status();
    c->min_nodes = c->max_nodes = *n;
    return absl::OkStatus();
  }
  int lo = 0, hi = 0;
  if (parts.size() != 2 || !absl::SimpleAtoi(parts[0], &lo) || !absl::SimpleAtoi(parts[1], &hi) ||
      lo < 1 || hi < lo || hi > (1 << 20)) {
    return Bad(v.source, allowed, v.text);
  }
  c->min_nodes = lo;
  c->max_nodes = hi;
  return absl::OkStatus();
}

absl::Status ApplyNproc(const FlagValue& v, LaunchConfig* c) {
  const std::string text = absl::AsciiStrToLower(v.text);
  if (text == "gpu") {
    c->nproc_kind = NprocKind::kGpu;
  } else if (text == "cpu") {
    c->nproc_kind = NprocKind::kCpu;
  } else if (text == "auto") {
    c->nproc_kind = NprocKind::kAuto;
  } else {
    absl::StatusOr<int> n = ParseInt(text, v.source, 1, 4096, "a positive integer (1..4096), gpu, cpu or auto");
    if (!n.ok()) return n.status();
    c->nproc_kind = NprocKind::kCount;
    c->nproc_per_node = *n;
  }
  return absl::OkStatus();
}

absl::Status ApplyBackend(const FlagValue& v, LaunchConfig* c) {
  if (v.text == "c10d") {
    c->rdzv_backend = RdzvBackend::kC10d;
  } else if (v.text == "static") {
    c->rdzv_backend = RdzvBackend::kStatic;
  } else if (v.text == "etcd" || v.text == "etcd-v2") {
    c->rdzv_backend = RdzvBackend::kEtcd;
    if (v.text == "etcd-v2") {
      c->notes.push_back(absl::StrCat(v.source, " etcd-v2: taken as etcd; cpptorchrun speaks etcd's v3 API (etcd 3.4 and later)"));
    }
  } else {
    return Bad(v.source, "c10d (the gRPC rendezvous), etcd (an etcd cluster, v3 API; etcd-v2 is a synonym) or static", v.text);
  }
  return absl::OkStatus();
}

absl::Status ApplyEndpoint(const FlagValue& v, LaunchConfig* c) {
  if (v.text.empty()) return absl::OkStatus();
  c->rdzv_endpoint_text = v.text;
  // A member list (etcd's) is parsed when the backend is known.
  if (v.text.find(',') != std::string::npos) {
    c->has_rdzv_endpoint = true;
    return absl::OkStatus();
  }
  absl::StatusOr<rdzv::Endpoint> endpoint = ParseEndpointFlag(v.text, kDefaultC10dPort, v.source);
  if (!endpoint.ok()) return endpoint.status();
  c->rdzv_endpoint = *endpoint;
  c->has_rdzv_endpoint = true;
  return absl::OkStatus();
}

absl::Status ApplyRunId(const FlagValue& v, LaunchConfig* c) {
  if (!ValidRunId(v.text)) return Bad(v.source, "1..128 characters of [A-Za-z0-9_.-]", v.text);
  c->rdzv_id = v.text;
  c->rdzv_id_given = v.given;
  return absl::OkStatus();
}

absl::Status ApplyRdzvConf(const FlagValue& v, LaunchConfig* c) {
  auto conf = ParseRdzvConf(v.text, v.source, &c->warnings);
  if (!conf.ok()) return conf.status();
  c->rdzv_conf = *conf;
  return absl::OkStatus();
}

absl::Status ApplyStartMethod(const FlagValue& v, LaunchConfig* c) {
  if (v.text != "spawn" && v.text != "fork" && v.text != "forkserver") {
    return Bad(v.source, "spawn, fork or forkserver", v.text);
  }
  c->start_method = v.text;
  return absl::OkStatus();
}

// A Python module name: dotted identifiers.
bool IsModuleName(absl::string_view name) {
  if (name.empty() || name.size() > 200) return false;
  for (absl::string_view part : absl::StrSplit(name, '.')) {
    if (part.empty() || absl::ascii_isdigit(part[0])) return false;
    for (char ch : part) {
      if (!absl::ascii_isalnum(ch) && ch != '_') return false;
    }
  }
  return true;
}

absl::Status ApplyForkserverPreload(const FlagValue& v, LaunchConfig* c) {
  c->forkserver_preload.clear();
  if (v.text.empty()) return absl::OkStatus();
  for (absl::string_view m : absl::StrSplit(v.text, ',')) {
    if (!IsModuleName(m)) return Bad(v.source, "comma-separated Python module names (e.g. torch,numpy)", v.text);
    c->forkserver_preload.emplace_back(m);
  }
  return absl::OkStatus();
}

absl::Status ApplyStragglerFactor(const FlagValue& v, LaunchConfig* c) {
  double factor = 0;
  if (!absl::SimpleAtod(v.text, &factor) || !(factor == 0 || (factor > 1 && factor <= 100))) {
    return Bad(v.source, "0 (off) or a factor above 1 and at most 100, e.g. 1.5", v.text);
  }
  c->straggler_factor = factor;
  return absl::OkStatus();
}

absl::Status ApplyStragglerPolicy(const FlagValue& v, LaunchConfig* c) {
  if (v.text != "warn" && v.text != "replace") return Bad(v.source, "warn or replace", v.text);
  c->straggler_policy = v.text;
  return absl::OkStatus();
}

absl::Status ApplyRecovery(const FlagValue& v, LaunchConfig* c) {
  if (v.text != "gang" && v.text != "in_place") return Bad(v.source, "gang or in_place", v.text);
  c->recovery = v.text;
  return absl::OkStatus();
}

absl::Status ApplyRole(const FlagValue& v, LaunchConfig* c) {
  if (v.text.empty() || v.text.size() > 64 || v.text.find_first_of(" \t\n/") != std::string::npos) {
    return Bad(v.source, "a non-empty name without spaces or '/' (at most 64 characters)", v.text);
  }
  c->role = v.text;
  return absl::OkStatus();
}

absl::Status ApplyLocalRanksFilter(const FlagValue& v, LaunchConfig* c) {
  if (v.text.empty()) return absl::OkStatus();
  std::set<int> seen;
  for (absl::string_view item : absl::StrSplit(v.text, ',')) {
    int r = 0;
    if (!absl::SimpleAtoi(item, &r) || r < 0 || !seen.insert(r).second) {
      return Bad(v.source, "comma-separated distinct local ranks >= 0 (e.g. 0,1)", v.text);
    }
    c->local_ranks_filter.push_back(r);
  }
  return absl::OkStatus();
}

absl::Status ApplyNuma(const FlagValue& v, LaunchConfig* c) {
  if (!v.text.empty() && !ParseNumaMode(v.text).ok()) {
    return Bad(v.source, "node, socket, exclusive or core-complex", v.text);
  }
  c->numa_binding = v.text;
  return absl::OkStatus();
}

absl::Status ApplyMasterAddr(const FlagValue& v, LaunchConfig* c) {
  absl::StatusOr<std::string> host = HostOf(v, /*allow_empty=*/false);
  if (!host.ok()) return host.status();
  c->master_addr = *host;
  c->master_addr_given = v.given;
  return absl::OkStatus();
}

absl::Status ApplyMasterPort(const FlagValue& v, LaunchConfig* c) {
  absl::StatusOr<int> n = ParseInt(v.text, v.source, 1, 65535, "a port in 1..65535");
  if (!n.ok()) return n.status();
  c->master_port = *n;
  c->master_port_given = v.given;
  return absl::OkStatus();
}

absl::Status ApplyLocalAddr(const FlagValue& v, LaunchConfig* c) {
  absl::StatusOr<std::string> host = HostOf(v, /*allow_empty=*/true);
  if (!host.ok()) return host.status();
  c->local_addr = *host;
  return absl::OkStatus();
}

absl::Status ApplySignals(const FlagValue& v, LaunchConfig* c) {
  const std::string allowed = "a comma-separated list of SIGINT, SIGTERM, SIGHUP, SIGQUIT, SIGUSR1, SIGUSR2";
  if (v.text.empty()) return Bad(v.source, allowed, v.text);
  for (absl::string_view item : absl::StrSplit(v.text, ',')) {
    absl::StatusOr<int> s = SignalFromName(std::string(item));
    if (!s.ok() || HandleableSignals().count(*s) == 0) return Bad(v.source, allowed, v.text);
    if (std::find(c->signals_to_handle.begin(), c->signals_to_handle.end(), *s) == c->signals_to_handle.end()) {
      c->signals_to_handle.push_back(*s);
    }
  }
  return absl::OkStatus();
}

// torchrun's default specs (DefaultLogsSpecs, entry point "default") are
// what cpptorchrun does; anything else is a Python plugin it cannot load.
absl::Status ApplyLogsSpecs(const FlagValue& v, LaunchConfig*) {
  if (!v.text.empty() && v.text != "default" && v.text != "DefaultLogsSpecs") {
    return Bad(v.source,
               "the default logs specs ('default' or 'DefaultLogsSpecs'); other specs are Python "
               "plugins (torchrun.logs_specs entry points) that cpptorchrun cannot load",
               v.text);
  }
  return absl::OkStatus();
}

absl::Status ApplyLogLevel(const FlagValue& v, LaunchConfig* c) {
  const std::string level = absl::AsciiStrToLower(v.text);
  static const std::set<std::string> kLevels = {"trace", "debug", "info", "warn",
                                                "warning", "error", "critical", "off"};
  if (kLevels.count(level) == 0) return Bad(v.source, "trace, debug, info, warn, error, critical or off", level);
  c->log_level = level == "warning" ? "warn" : level;
  return absl::OkStatus();
}

Apply StringInto(std::string LaunchConfig::*field) {
  return [=](const FlagValue& v, LaunchConfig* c) {
    c->*field = v.text;
    return absl::OkStatus();
  };
}

// The table, in four groups (the rendezvous; the program; its output; the
// workers' lifetimes).
void AddRendezvousFlags(std::vector<FlagSpec>* t) {
  t->push_back({"nnodes", "--nnodes", "PET_NNODES", "N or MIN:MAX nodes (default 1:1)", "1:1", false, "",
                ApplyNnodes});
  t->push_back({"nproc_per_node", "--nproc_per_node,--nproc-per-node", "PET_NPROC_PER_NODE",
                "workers per node: an integer, gpu, cpu or auto (default 1)", "1", false, "", ApplyNproc});
  t->push_back({"node_rank", "--node_rank,--node-rank", "PET_NODE_RANK",
                "this node's rank with the static backend (default 0)", "0", false, "",
                IntInto(&LaunchConfig::node_rank, 0, 1 << 20, "an integer >= 0")});
  t->push_back({"rdzv_backend", "--rdzv_backend,--rdzv-backend", "PET_RDZV_BACKEND",
                "c10d (the gRPC rendezvous), etcd (an etcd cluster; etcd-v2 a synonym) or static (default static)",
                "static", false, "", ApplyBackend});
  t->push_back({"rdzv_endpoint", "--rdzv_endpoint,--rdzv-endpoint", "PET_RDZV_ENDPOINT",
                "rendezvous service HOST[:PORT], [IPV6]:PORT; with etcd: its members, HOST[:PORT],...", "", false,
                "", ApplyEndpoint});
  t->push_back({"rdzv_id", "--rdzv_id,--rdzv-id", "PET_RDZV_ID", "the job's run id (default none)", "none",
                false, "", ApplyRunId});
  t->push_back({"rdzv_conf", "--rdzv_conf,--rdzv-conf", "PET_RDZV_CONF",
                "KEY=VALUE,...: join_timeout, last_call_timeout, close_timeout, keep_alive_interval, "
                "keep_alive_max_attempt, timeout, read_timeout, is_host, use_libuv, token_file, "
                "quarantine_after (3; 0: off), quarantine_window (600), quarantine_cooldown (600)",
                "", false, "", ApplyRdzvConf});
  t->push_back({"standalone", "--standalone", "PET_STANDALONE",
                "single node: embed the rendezvous on loopback, on a free port", "false", true, "",
                SwitchInto(&LaunchConfig::standalone)});
  t->push_back({"max_restarts", "--max_restarts,--max-restarts", "PET_MAX_RESTARTS",
                "worker-group restarts before failing (default 0)", "0", false, "",
                IntInto(&LaunchConfig::max_restarts, 0, 1000000, "an integer >= 0")});
  t->push_back({"job_max_restarts", "--job_max_restarts,--job-max-restarts", "CPPTORCHRUN_JOB_MAX_RESTARTS",
                "restarts the whole job may spend, every node's worker failures together (the rendezvous "
                "counts one per failed round and closes the run at one more); --max_restarts still bounds each "
                "node; 0: no job-wide bound (default 0)",
                "0", false, "", IntInto(&LaunchConfig::job_max_restarts, 0, 1000000, "an integer >= 0")});
  t->push_back({"failures_without_progress", "--failures_without_progress,--failures-without-progress",
                "CPPTORCHRUN_FAILURES_WITHOUT_PROGRESS",
                "worker failures in a row whose workers never passed the furthest step reached before, after "
                "which the launcher gives up with exit code 78 (do not requeue); workers that report no steps "
                "are never counted; 0: never (default 5)",
                "5", false, "",
                IntInto(&LaunchConfig::failures_without_progress, 0, 1000000, "an integer >= 0")});
  t->push_back({"straggler_factor", "--straggler_factor,--straggler-factor", "CPPTORCHRUN_STRAGGLER_FACTOR",
                "a worker whose compute time per batch (without its all-reduce wait) is this many times its "
                "peers' (this node's and the other nodes' ranks), over --straggler_window heartbeats, is a straggler; "
                "0: off (default 1.5)",
                "1.5", false, "", ApplyStragglerFactor});
  t->push_back({"straggler_window", "--straggler_window,--straggler-window", "CPPTORCHRUN_STRAGGLER_WINDOW",
                "heartbeats (a second each by default) a straggler must be slow over (default 10)", "10", false, "",
                IntInto(&LaunchConfig::straggler_window, 2, 100000, "an integer >= 2")});
  t->push_back({"straggler_policy", "--straggler_policy,--straggler-policy", "CPPTORCHRUN_STRAGGLER_POLICY",
                "warn: report a straggler (straggler_detected); replace: also treat it as a failed worker, "
                "so that the group restarts without it (default warn)",
                "warn", false, "", ApplyStragglerPolicy});
  t->push_back({"recovery", "--recovery", "CPPTORCHRUN_RECOVERY",
                "what a failed, hung or lost worker costs the others: gang (torchrun's way: every worker "
                "restarts and resumes from the checkpoint) or in_place (workers that declare it, as train "
                "does, keep running; the lost ranks start again and receive the state from them; "
                "docs/DESIGN.md) (default gang)",
                "gang", false, "", ApplyRecovery});
  t->push_back({"health_check", "--health_check,--health-check", "CPPTORCHRUN_HEALTH_CHECK",
                "a shell command run before each join; while it fails (its last output line says why) this "
                "node stays out of the rendezvous and tries again every 10 s (\"\": none)",
                "", false, "", StringInto(&LaunchConfig::health_check)});
  t->push_back({"health_check_timeout", "--health_check_timeout,--health-check-timeout",
                "CPPTORCHRUN_HEALTH_CHECK_TIMEOUT", "seconds one --health_check run may take (default 60)", "60",
                false, "", SecondsInto(&LaunchConfig::health_check_timeout, /*allow_zero=*/false)});
  t->push_back({"health_check_give_up", "--health_check_give_up,--health-check-give-up",
                "CPPTORCHRUN_HEALTH_CHECK_GIVE_UP",
                "seconds a node whose --health_check keeps failing stays out before the launcher exits 1 "
                "(default 600)", "600", false, "",
                SecondsInto(&LaunchConfig::health_check_give_up, /*allow_zero=*/false)});
  t->push_back({"monitor_interval", "--monitor_interval,--monitor-interval", "PET_MONITOR_INTERVAL",
                "seconds between periodic checks of the workers (default 5)", "5", false, "",
                SecondsInto(&LaunchConfig::monitor_interval, /*allow_zero=*/false)});
}

void AddProgramFlags(std::vector<FlagSpec>* t) {
  t->push_back({"start_method", "--start_method,--start-method", "PET_START_METHOD",
                "spawn (exec each Python worker afresh), forkserver or fork (fork Python workers from a "
                "per-node process that imported --forkserver_preload once)", "spawn", false,
                "", ApplyStartMethod});
  t->push_back({"forkserver_preload", "--forkserver_preload,--forkserver-preload", "PET_FORKSERVER_PRELOAD",
                "comma-separated modules the forkserver imports before the first round (\"\": none)",
                "torch,torch.distributed", false, "", ApplyForkserverPreload});
  t->push_back({"warm_spares", "--warm_spares,--warm-spares", "PET_WARM_SPARES",
                "true|false: keep one warm spare per local rank for programs that can wait warm (train), "
                "so a restart hands it the new round instead of exec'ing", "true", false, "",
                SwitchInto(&LaunchConfig::warm_spares)});
  t->push_back({"role", "--role", "PET_ROLE", "the workers' role name (default default)", "default", false, "",
                ApplyRole});
  t->push_back({"module", "-m,--module", "PET_MODULE", "run the program as a Python module (python -m)",
                "false", true, "", SwitchInto(&LaunchConfig::module)});
  t->push_back({"no_python", "--no_python,--no-python", "PET_NO_PYTHON",
                "exec the program directly, without python", "false", true, "",
                SwitchInto(&LaunchConfig::no_python)});
  t->push_back({"run_path", "--run_path,--run-path", "PET_RUN_PATH",
                "run the program as a Python file (python FILE)", "false", true, "",
                SwitchInto(&LaunchConfig::run_path)});
}

void AddOutputFlags(std::vector<FlagSpec>* t) {
  t->push_back({"log_dir", "--log_dir,--log-dir", "PET_LOG_DIR",
                "folder for <run_id>/attempt_<k>/<local_rank>/{stdout,stderr}.log and error.json", "", false,
                "", StringInto(&LaunchConfig::log_dir)});
  t->push_back({"redirects", "-r,--redirects", "PET_REDIRECTS",
                "streams to files only: 0 none, 1 stdout, 2 stderr, 3 both; or LOCAL_RANK:VALUE,...", "0",
                false, "", StdSpecInto(&LaunchConfig::redirects)});
  t->push_back({"tee", "-t,--tee", "PET_TEE", "streams to files and console, as --redirects", "0", false, "",
                StdSpecInto(&LaunchConfig::tee)});
  t->push_back({"local_ranks_filter", "--local_ranks_filter,--local-ranks-filter", "PET_LOCAL_RANKS_FILTER",
                "comma-separated local ranks whose output reaches the console", "", false, "",
                ApplyLocalRanksFilter});
  t->push_back({"duplicate_stdout_filters", "--duplicate_stdout_filters,--duplicate-stdout-filters",
                "PET_DUPLICATE_STDOUT_FILTERS",
                "comma-separated strings (',,' for a comma): tee'd stdout lines holding any are copied to "
                "attempt_<k>/filtered_stdout.log",
                "", false, "", FiltersInto(&LaunchConfig::duplicate_stdout_filters)});
  t->push_back({"duplicate_stderr_filters", "--duplicate_stderr_filters,--duplicate-stderr-filters",
                "PET_DUPLICATE_STDERR_FILTERS", "as --duplicate_stdout_filters, for stderr", "", false, "",
                FiltersInto(&LaunchConfig::duplicate_stderr_filters)});
  t->push_back({"event_log_handler", "--event_log_handler,--event-log-handler", "PET_EVENT_LOG_HANDLER",
                "torchrun's event handler name: accepted; cpptorchrun's events are in its own log", "null",
                false, "", StringInto(&LaunchConfig::event_log_handler)});
  t->push_back({"numa_binding", "--numa_binding,--numa-binding", "PET_NUMA_BINDING",
                "node|socket|exclusive|core-complex: bind each worker's CPUs (and prefer its memory) near its "
                "GPU",
                "", false, "", ApplyNuma});
  t->push_back({"virtual_local_rank", "--virtual_local_rank,--virtual-local-rank", "PET_VIRTUAL_LOCAL_RANK",
                "LOCAL_RANK=0 for every worker, CUDA_VISIBLE_DEVICES its own GPU only", "false", true, "",
                SwitchInto(&LaunchConfig::virtual_local_rank)});
}

void AddWorkerFlags(std::vector<FlagSpec>* t) {
  t->push_back({"master_addr", "--master_addr,--master-addr", "PET_MASTER_ADDR",
                "static backend: rank-0 node address (default 127.0.0.1)", "127.0.0.1", false, "",
                ApplyMasterAddr});
  t->push_back({"master_port", "--master_port,--master-port", "PET_MASTER_PORT",
                "static backend: MASTER_PORT to use (default: a free port each round)", "29500", false, "",
                ApplyMasterPort});
  t->push_back({"local_addr", "--local_addr,--local-addr", "PET_LOCAL_ADDR",
                "the address other nodes reach this node at", "", false, "", ApplyLocalAddr});
  t->push_back({"signals_to_handle", "--signals_to_handle,--signals-to-handle", "PET_SIGNALS_TO_HANDLE",
                "signals forwarded to the workers (default SIGTERM,SIGINT,SIGHUP,SIGQUIT; also SIGUSR1, "
                "SIGUSR2)",
                "SIGTERM,SIGINT,SIGHUP,SIGQUIT", false, "", ApplySignals});
  t->push_back({"fake_gpus", "--fake_gpus,--fake-gpus", "CPPTORCHRUN_FAKE_GPUS",
                "N fake GPUs on this node (0: real devices)", "0", false, "",
                IntInto(&LaunchConfig::fake_gpus, 0, 4096, "an integer in 0..4096")});
  t->push_back({"metrics_port", "--metrics_port,--metrics-port", "CPPTORCHRUN_METRICS_PORT",
                "HTTP(S) port for Prometheus metrics at /metrics (and, when this node serves the "
                "rendezvous, its metrics and job page), on this node's address; 0: a free one; -1: off",
                "-1", false, "", IntInto(&LaunchConfig::metrics_port, -1, 65535, "an integer in -1..65535")});
  t->push_back({"worker_timeout", "--worker_timeout,--worker-timeout", "PET_WORKER_TIMEOUT",
                "auto (default): a worker that heartbeats is hung when its step has not advanced for 10 x "
                "its slowest recent step (10 s to 30 min; 300 s before its first step and after its last); "
                "or seconds of heartbeat silence after which a worker is hung",
                "auto", false, "", ApplyWorkerTimeout});
  t->push_back({"shutdown_timeout", "--shutdown_timeout,--shutdown-timeout", "PET_SHUTDOWN_TIMEOUT",
                "seconds between SIGTERM and SIGKILL when stopping workers (default 30)", "30", false,
                "TORCH_ELASTIC_SHUTDOWN_TIMEOUT", SecondsInto(&LaunchConfig::shutdown_timeout, true)});
  t->push_back({"exit_barrier_timeout", "--exit_barrier_timeout,--exit-barrier-timeout",
                "PET_EXIT_BARRIER_TIMEOUT", "seconds to wait for the other nodes at exit (default 300)", "300",
                false, "", SecondsInto(&LaunchConfig::exit_barrier_timeout, true)});
  t->push_back({"logs_specs", "--logs_specs,--logs-specs", "PET_LOGS_SPECS",
                "torchrun's logs-specs plugin: only the default is available (it is a Python entry point)", "",
                false, "", ApplyLogsSpecs});
  t->push_back({"log_level", "--log_level,--log-level", "PET_LOG_LEVEL",
                "trace|debug|info|warn|error|critical|off (default info)", "info", false, "", ApplyLogLevel});
}

absl::Status CheckProgramKind(const LaunchConfig& c) {
  if (c.module && c.no_python) {
    return absl::InvalidArgumentError("--module/-m and --no_python: not both (a module needs python)");
  }
  if (c.run_path && c.no_python) {
    return absl::InvalidArgumentError("--run_path and --no_python: not both (a path run needs python)");
  }
  if (c.module && c.run_path) return absl::InvalidArgumentError("--module/-m and --run_path: not both");
  return absl::OkStatus();
}

// With --rdzv_backend etcd: the member list and --rdzv_conf prefix as one
// target (rendezvous/target.h); rdzv_endpoint becomes the first member. A
// list without etcd is refused.
absl::Status ResolveEtcdTarget(LaunchConfig* c) {
  if (c->rdzv_backend != RdzvBackend::kEtcd) {
    if (c->rdzv_endpoint_text.find(',') != std::string::npos) {
      return absl::InvalidArgumentError(absl::StrCat("--rdzv_endpoint: a list (", c->rdzv_endpoint_text,
                                                     ") is for --rdzv_backend=etcd; the c10d rendezvous has one address"));
    }
    if (c->rdzv_conf.count("prefix") > 0) {
      return absl::InvalidArgumentError("--rdzv_conf prefix: is etcd's key prefix; it needs --rdzv_backend=etcd");
    }
    return absl::OkStatus();
  }
  if (!c->has_rdzv_endpoint) return absl::OkStatus();  // CheckNodes names it
  absl::StatusOr<rdzv::RendezvousTarget> target = EtcdTargetFromFlags(c->rdzv_endpoint_text, c->rdzv_conf);
  if (!target.ok()) return target.status();
  absl::StatusOr<rdzv::Endpoint> first = rdzv::ParseEndpoint(target->etcd_members[0]);
  if (!first.ok()) return absl::InvalidArgumentError(absl::StrCat("--rdzv_endpoint: ", first.status().message()));
  c->rdzv_endpoint = *first;
  c->rdzv_target = rdzv::FormatRendezvousTarget(*target);
  return absl::OkStatus();
}

absl::Status CheckNodes(const LaunchConfig& c) {
  if (c.rdzv_backend == RdzvBackend::kStatic) {
    if (c.min_nodes != c.max_nodes) {
      return absl::InvalidArgumentError(absl::StrCat("--nnodes: MIN:MAX (", c.min_nodes, ":", c.max_nodes,
                                                     ") needs --rdzv_backend=c10d"));
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
  if (c.rdzv_backend == RdzvBackend::kEtcd && !c.has_rdzv_endpoint) {
    return absl::InvalidArgumentError("--rdzv_endpoint: required with --rdzv_backend=etcd (the etcd members, HOST[:PORT],...)");
  }
  if (c.max_nodes > 1 && !c.has_rdzv_endpoint && c.rdzv_backend == RdzvBackend::kC10d) {
    return absl::InvalidArgumentError("--rdzv_endpoint: required with --rdzv_backend=c10d and more than one node");
  }
  return absl::OkStatus();
}

}  // namespace

const std::vector<FlagSpec>& LaunchFlags() {
  static const auto* table = [] {
    auto* t = new std::vector<FlagSpec>;
    AddRendezvousFlags(t);
    AddProgramFlags(t);
    AddOutputFlags(t);
    AddWorkerFlags(t);
    return t;
  }();
  return *table;
}

absl::Status CheckCombinations(LaunchConfig* c) {
  if (absl::Status s = CheckProgramKind(*c); !s.ok()) return s;
  if (c->standalone && c->rdzv_backend == RdzvBackend::kEtcd) {
    return absl::InvalidArgumentError(
        "--standalone and --rdzv_backend=etcd: not both (--standalone embeds its own rendezvous)");
  }
  if (absl::Status s = ResolveEtcdTarget(c); !s.ok()) return s;
  if (c->standalone) {
    if (c->max_nodes != 1) {
      return absl::InvalidArgumentError(
          absl::StrCat("--standalone: needs --nnodes=1 (the rendezvous is on loopback); got --nnodes=",
                       c->min_nodes, ":", c->max_nodes));
    }
    if (c->has_rdzv_endpoint) {
      return absl::InvalidArgumentError(
          "--standalone and --rdzv_endpoint: not both (--standalone embeds its own rendezvous)");
    }
    c->rdzv_backend = RdzvBackend::kC10d;
  }
  if (absl::Status s = CheckNodes(*c); !s.ok()) return s;
  if (c->rdzv_backend == RdzvBackend::kStatic && c->max_nodes > 1 && !c->has_rdzv_endpoint) {
    // torchrun's static rendezvous: node rank 0 at MASTER_ADDR. MASTER_PORT
    // itself is the workers' (their own TCPStore listens there, as under
    // torchrun), so the rendezvous takes the port above it.
    if (c->master_port >= 65535) {
      return absl::InvalidArgumentError(absl::StrCat(
          "--master_port ", c->master_port,
          ": a static multi-node job also needs the port above it (the rendezvous); give a lower one, or "
          "--rdzv_endpoint"));
    }
    c->rdzv_endpoint = rdzv::Endpoint{c->master_addr, c->master_port + 1};
    c->has_rdzv_endpoint = true;
    c->rdzv_endpoint_from_master = true;
  }
  return absl::OkStatus();
}

}  // namespace cpptorchrun::launcher
