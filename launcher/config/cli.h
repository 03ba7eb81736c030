// The command line: torchrun's flags (both spellings, PET_* environment
// fallbacks, torchrun's defaults) and cpptorchrun's own, parsed and
// validated into a LaunchConfig, or a StatusConfig for `cpptorchrun status`.
//
// Parsing is a pure function of (argv, environment): nothing is started and
// nothing outside is read. Every bad value, unknown flag or impossible
// combination yields InvalidArgument whose message is one line naming the
// flag (or PET_* variable) and what is allowed; main prints it and exits 2.
#ifndef CPPTORCHRUN_LAUNCHER_CLI_H_
#define CPPTORCHRUN_LAUNCHER_CLI_H_

#include <map>
#include <optional>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/time/time.h"
#include "launcher/workers/std_spec.h"
#include "rendezvous/endpoint.h"

namespace cpptorchrun::launcher {

inline constexpr char kVersion[] = "0.1.0";
inline constexpr int kDefaultC10dPort = rdzv::kDefaultRendezvousPort;

// Parses a rendezvous endpoint flag value with rdzv::ParseEndpoint:
// host[:port], [v6][:port], or a bare IPv6 address (no brackets, so no port)
// standing for [v6]. `default_port` fills a missing port. Errors
// (InvalidArgument) are one line that starts with `what` (the flag or PET_*
// variable) followed by the endpoint parser's reason.
absl::StatusOr<rdzv::Endpoint> ParseEndpointFlag(const std::string& text, int default_port,
                                                 const std::string& what);

enum class NprocKind { kCount, kGpu, kCpu, kAuto };

// kEtcd: the round rules on an etcd cluster (rendezvous/etcd/), no server.
enum class RdzvBackend { kStatic, kC10d, kEtcd };

// How the training program is run.
enum class ProgramMode {
  kPython,      // a .py file under $PYTHON_EXEC (else python3) -u
  kModule,      // -m: python -u -m <module>
  kExecutable,  // --no_python, or an executable that is not a .py file
};

struct LaunchConfig {
  int min_nodes = 1;
  int max_nodes = 1;
  NprocKind nproc_kind = NprocKind::kCount;
  int nproc_per_node = 1;  // meaningful for kCount
  int node_rank = 0;
  RdzvBackend rdzv_backend = RdzvBackend::kStatic;
  // Set when --rdzv_endpoint (or, for static multi-node, master addr/port)
  // names a rendezvous service; empty host: none given.
  rdzv::Endpoint rdzv_endpoint;
  bool has_rdzv_endpoint = false;
  // Static multi-node without --rdzv_endpoint: the endpoint is
  // --master_addr:--master_port, and node rank 0 serves the rendezvous there.
  bool rdzv_endpoint_from_master = false;
  // --rdzv_endpoint as given (an etcd member list is parsed once the
  // backend is known), and with --rdzv_backend etcd the whole target
  // (rendezvous/target.h: etcd://members/prefix); rdzv_endpoint is then the
  // first member (the address this node reaches the rendezvous by).
  std::string rdzv_endpoint_text;
  std::string rdzv_target;
  std::string rdzv_id = "none";
  bool rdzv_id_given = false;  // on the command line or in PET_RDZV_ID
  std::map<std::string, std::string> rdzv_conf;
  bool standalone = false;
  int max_restarts = 0;
  int failures_without_progress = 5;
  // Ours: round ends caused by worker failures the whole run may have (the
  // rendezvous counts them, every node's together); 0: no bound.
  int job_max_restarts = 0;
  // launcher/agent/straggler_policy.h.
  double straggler_factor = 1.5;
  int straggler_window = 10;
  std::string straggler_policy = "warn";
  // --recovery: gang or in_place (launcher/agent/elastic_agent.h).
  std::string recovery = "gang";
  // --health_check (launcher/agent/health_check.h); empty: none.
  std::string health_check;
  absl::Duration health_check_timeout = absl::Seconds(60);
  absl::Duration health_check_give_up = absl::Seconds(600);
  absl::Duration monitor_interval = absl::Seconds(5);
  std::string start_method = "spawn";
  // --start_method forkserver (or fork): the modules the forkserver imports
  // once (launcher/agent/forkserver.py).
  std::vector<std::string> forkserver_preload = {"torch", "torch.distributed"};
  // Warm spares for programs that can wait warm (warm_pool.h).
  bool warm_spares = true;
  std::string role = "default";
  bool module = false;
  bool no_python = false;
  bool run_path = false;
  std::string log_dir;  // empty: a private temporary folder
  StdSpec redirects;
  StdSpec tee;
  std::vector<int> local_ranks_filter;  // empty: every local rank
  // torchrun 2.x: lines of tee'd streams matching any filter are copied to
  // attempt_<k>/filtered_{stdout,stderr}.log.
  std::vector<std::string> duplicate_stdout_filters;
  std::vector<std::string> duplicate_stderr_filters;
  bool virtual_local_rank = false;
  std::string event_log_handler = "null";
  // --numa_binding: node, socket, exclusive, core-complex; empty: none.
  std::string numa_binding;
  std::string master_addr = "127.0.0.1";
  bool master_addr_given = false;
  int master_port = 29500;
  bool master_port_given = false;
  std::string local_addr;  // empty: derived (see main)
  std::vector<int> signals_to_handle;  // signal numbers
  // cpptorchrun's own.
  int fake_gpus = 0;  // 0: real devices
  int metrics_port = -1;  // --metrics_port; -1: off
  // --worker_timeout: a fixed bound on a worker's silence; nullopt (auto,
  // the default): the adaptive deadline of launcher/agent/hang_policy.h.
  std::optional<absl::Duration> worker_timeout;
  absl::Duration shutdown_timeout = absl::Seconds(30);
  absl::Duration exit_barrier_timeout = absl::Seconds(300);
  std::string log_level = "info";

  std::string training_script;
  std::vector<std::string> training_script_args;

  // What the command line asked for that cpptorchrun takes but does not use
  // (unknown --rdzv_conf keys: torchrun hands them to its backend, which
  // ignores what it does not know); the launcher logs each as a warning.
  std::vector<std::string> warnings;
  // Informational lines for the launcher's first log lines (what was taken
  // from Slurm's environment).
  std::vector<std::string> notes;
};

// Derived from the program flags and the script's name.
ProgramMode ModeOf(const LaunchConfig& config);

struct StatusConfig {
  rdzv::Endpoint rdzv_endpoint;
  // --rdzv_backend etcd: the whole target (rendezvous/target.h), and this
  // client's certificate and key (--rdzv_conf cert, key); empty: the service.
  std::string rdzv_target;
  std::string cert_file;
  std::string key_file;
  std::string rdzv_id;
  std::string log_level = "warn";
  // --rdzv_conf token_file / cacert (else CPPTORCHRUN_RDZV_TOKEN_FILE /
  // CPPTORCHRUN_RDZV_CA_FILE, as a worker's environment has them).
  std::string token_file;
  std::string ca_file;
  // --json: one JSON object instead of the table.
  bool json = false;
  // --watch: again every `interval` (--interval, seconds, default 1) until
  // the run is over or a stop signal.
  bool watch = false;
  absl::Duration interval = absl::Seconds(1);
};

struct ParsedCommandLine {
  enum class Kind { kLaunch, kStatus, kHelp, kVersion };
  Kind kind = Kind::kLaunch;
  LaunchConfig launch;
  StatusConfig status;
  std::string text;  // --help / --version output
};

// A long flag of the launcher (its underscored spelling, without "--").
struct LongFlag {
  std::string key;
  bool takes_value = true;
};

// argparse's rule for the launcher's own flags (those before the program):
// an unambiguous prefix of a long flag, in either spelling (dashes or
// underscores), is rewritten as the whole flag ("--nproc=2" ->
// "--nproc_per_node=2"); an exact name always wins; a prefix of several is
// InvalidArgument naming them. Everything from the program on is left as
// it is. argv[0] is the program name.
absl::StatusOr<std::vector<std::string>> ExpandFlagPrefixes(const std::vector<std::string>& argv,
                                                          const std::vector<LongFlag>& flags);

// argv[0] is the program name. `env` holds the environment (PET_*,
// CPPTORCHRUN_FAKE_GPUS); flags given on the command line win over it.
absl::StatusOr<ParsedCommandLine> ParseCommandLine(const std::vector<std::string>& argv,
                                                   const std::map<std::string, std::string>& env);

}  // namespace cpptorchrun::launcher

#endif  // CPPTORCHRUN_LAUNCHER_CLI_H_
