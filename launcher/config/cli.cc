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
#include "rendezvous/target.h"
#include "base/flags.h"
#include "base/signals.h"
#include "launcher/config/flag_values.h"
#include "launcher/config/launch_flags.h"
#include "launcher/config/slurm.h"

namespace cpptorchrun::launcher {
namespace {

std::string HelpFooter() {
  return "Environment: each torchrun flag may also come from PET_<FLAG> (e.g. PET_NNODES);\n"
         "--fake_gpus from CPPTORCHRUN_FAKE_GPUS. Exit codes: 0 success, 2 bad usage,\n"
         "the root-cause worker's exit code, or 128+signal. See docs/FLAGS.md.";
}

absl::StatusOr<ParsedCommandLine> ParseStatus(const std::vector<std::string>& argv,
                                              const std::map<std::string, std::string>& env) {
  CLI::App app{"cpptorchrun status: print a job's nodes, ranks and progress", "cpptorchrun status"};
  std::string endpoint, id, level = "warn", conf_text, interval_text, backend = "c10d";
  bool json = false, watch = false;
  // PET_* from `env` (this stays a pure function of argv and env).
  if (auto it = env.find("PET_RDZV_ENDPOINT"); it != env.end()) endpoint = it->second;
  if (auto it = env.find("PET_RDZV_ID"); it != env.end()) id = it->second;
  if (auto it = env.find("PET_RDZV_CONF"); it != env.end()) conf_text = it->second;
  if (auto it = env.find("PET_RDZV_BACKEND"); it != env.end()) backend = it->second;
  app.add_option("--rdzv_backend,--rdzv-backend", backend,
                 "c10d (the rendezvous service, default) or etcd (--rdzv_endpoint lists its members)");
  app.add_option("--rdzv_endpoint,--rdzv-endpoint", endpoint, "rendezvous service host:port (PET_RDZV_ENDPOINT)");
  app.add_option("--rdzv_id,--rdzv-id", id, "the job's run id (PET_RDZV_ID)");
  app.add_option("--rdzv_conf,--rdzv-conf", conf_text,
                 "token_file=F,cacert=C: the job's token and the CA of the rendezvous's TLS certificate");
  app.add_option("--log_level,--log-level", level, "trace|debug|info|warn|error");
  app.add_flag("--json", json, "print one JSON object (with --watch, one a line per refresh)");
  app.add_flag("--watch", watch, "refresh until the run is over (SIGINT/SIGTERM to stop)");
  CLI::Option* interval_flag =
      app.add_option("--interval", interval_text, "seconds between refreshes with --watch (default 1)");
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
  if (backend == "etcd-v2") backend = "etcd";
  if (backend != "c10d" && backend != "etcd" && backend != "static") {
    return Bad("--rdzv_backend", "c10d or etcd", backend);
  }
  std::vector<std::string> conf_warnings;
  auto early_conf = ParseRdzvConf(conf_text, "--rdzv_conf", &conf_warnings);
  if (!early_conf.ok()) return early_conf.status();
  absl::StatusOr<rdzv::Endpoint> hp = rdzv::Endpoint{};
  if (backend == "etcd") {
    absl::StatusOr<rdzv::RendezvousTarget> target = EtcdTargetFromFlags(endpoint, *early_conf);
    if (!target.ok()) return target.status();
    out.status.rdzv_target = rdzv::FormatRendezvousTarget(*target);
    if (auto it = early_conf->find("cert"); it != early_conf->end()) out.status.cert_file = it->second;
    if (auto it = early_conf->find("key"); it != early_conf->end()) out.status.key_file = it->second;
  } else {
    hp = ParseEndpointFlag(endpoint, kDefaultC10dPort, "--rdzv_endpoint");
    if (!hp.ok()) return hp.status();
  }
  if (!ValidRunId(id)) {
    return Bad("--rdzv_id", "1..128 characters of [A-Za-z0-9_.-]", id);
  }
  const auto& conf = early_conf;
  if (interval_flag->count() > 0) {
    if (!watch) return absl::InvalidArgumentError("--interval: only with --watch");
    // Not below 0.1 s: each refresh is a call to the job's rendezvous.
    absl::StatusOr<absl::Duration> interval = ParseSeconds(interval_text, "--interval", false);
    if (!interval.ok() || *interval < absl::Milliseconds(100) || *interval > absl::Hours(1)) {
      return Bad("--interval", "seconds from 0.1 to 3600", interval_text);
    }
    out.status.interval = *interval;
  }
  out.status.json = json;
  out.status.watch = watch;
  out.status.rdzv_endpoint = *hp;
  out.status.rdzv_id = id;
  out.status.log_level = level;
  if (auto it = conf->find("token_file"); it != conf->end()) out.status.token_file = it->second;
  if (auto it = conf->find("cacert"); it != conf->end()) out.status.ca_file = it->second;
  return out;
}

// What the command line says: the launcher flags given on it (text as
// written; a switch's is "true"), and the program with its arguments.
struct CommandLine {
  ParsedCommandLine::Kind kind = ParsedCommandLine::Kind::kLaunch;
  std::string text;  // --help / --version output
  std::map<std::string, std::string> given;
  std::vector<std::string> program;
};

// CLI11 over LaunchFlags(), after argparse's prefix rule (--nproc=2).
absl::StatusOr<CommandLine> ReadCommandLine(const std::vector<std::string>& argv) {
  CLI::App app{"cpptorchrun: a torchrun-compatible distributed launcher (C++)", "cpptorchrun"};
  app.prefix_command();
  app.footer(HelpFooter());
  app.get_formatter()->column_width(40);
  // Storage CLI11 writes into; map nodes do not move.
  std::map<std::string, std::string> values;
  std::map<std::string, bool> switches;
  std::map<std::string, CLI::Option*> options;
  std::vector<LongFlag> long_flags;
  for (const FlagSpec& f : LaunchFlags()) {
    options[f.key] = f.is_switch ? app.add_flag(f.names, switches[f.key], f.help)
                                 : app.add_option(f.names, values[f.key], f.help)
                                       ->multi_option_policy(CLI::MultiOptionPolicy::TakeLast);
    long_flags.push_back({f.key, /*takes_value=*/!f.is_switch});
  }
  bool version = false;
  app.add_flag("--version", version, "print the version and exit");
  long_flags.push_back({"version", false});
  long_flags.push_back({"help", false});
  absl::StatusOr<std::vector<std::string>> expanded = ExpandFlagPrefixes(argv, long_flags);
  if (!expanded.ok()) return expanded.status();
  CommandLine out;
  try {
    app.parse(std::vector<std::string>(expanded->rbegin(), expanded->rend() - 1));
  } catch (const CLI::CallForHelp&) {
    out.kind = ParsedCommandLine::Kind::kHelp;
    out.text = app.help();
    return out;
  } catch (const CLI::ParseError& e) {
    std::string msg = e.what();
    std::replace(msg.begin(), msg.end(), '\n', ' ');
    return absl::InvalidArgumentError(msg);
  }
  if (version) {
    out.kind = ParsedCommandLine::Kind::kVersion;
    out.text = absl::StrCat("cpptorchrun ", kVersion);
    return out;
  }
  for (const FlagSpec& f : LaunchFlags()) {
    if (options[f.key]->count() > 0) out.given[f.key] = f.is_switch ? (switches[f.key] ? "true" : "false") : values[f.key];
  }
  out.program = app.remaining();
  if (!out.program.empty() && out.program[0] == "--") out.program.erase(out.program.begin());
  if (!out.program.empty() && out.program[0].size() > 1 && out.program[0][0] == '-') {
    return absl::InvalidArgumentError(absl::StrCat(
        "unknown flag '", out.program[0], "' (see cpptorchrun --help; the program's own flags go after it)"));
  }
  return out;
}

// Each flag's value: the command line, else its variable, else its fallback
// variable, else Slurm's, else its default; with the source an error names.
class FlagResolver {
 public:
  FlagResolver(const CommandLine& cl, const std::map<std::string, std::string>& env, SlurmDefaults slurm)
      : cl_(cl), env_(env), slurm_(std::move(slurm)) {}

  FlagValue Resolve(const FlagSpec& f) {
    const std::string flag = "--" + f.key;
    if (auto it = cl_.given.find(f.key); it != cl_.given.end()) return {it->second, flag, true};
    if (auto it = env_.find(f.env); it != env_.end()) return {it->second, f.env, true};
    if (!f.fallback_env.empty()) {
      if (auto it = env_.find(f.fallback_env); it != env_.end()) return {it->second, f.fallback_env, false};
    }
    if (auto it = slurm_.values.find(f.key); it != slurm_.values.end()) {
      const std::string& variable = slurm_.sources.at(f.key);
      from_slurm_.push_back(absl::StrCat(flag, " ", it->second, " (", variable, ")"));
      return {it->second, absl::StrCat(flag, " (from ", variable, ")"), false};
    }
    return {f.default_value, flag, false};
  }

  // "<job>: took --nnodes 2 (SLURM_NNODES), ..." or empty.
  std::string SlurmNote() {
    if (from_slurm_.empty()) return "";
    std::sort(from_slurm_.begin(), from_slurm_.end());
    from_slurm_.erase(std::unique(from_slurm_.begin(), from_slurm_.end()), from_slurm_.end());
    return absl::StrCat(slurm_.job, ": took ", absl::StrJoin(from_slurm_, ", "));
  }

 private:
  const CommandLine& cl_;
  const std::map<std::string, std::string>& env_;
  const SlurmDefaults slurm_;
  std::vector<std::string> from_slurm_;
};

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
  absl::StatusOr<CommandLine> cl = ReadCommandLine(argv);
  if (!cl.ok()) return cl.status();
  ParsedCommandLine out;
  if (cl->kind != ParsedCommandLine::Kind::kLaunch) {
    out.kind = cl->kind;
    out.text = cl->text;
    return out;
  }
  // Slurm's job step supplies what neither the command line nor PET_*
  // gives (launcher/config/slurm.h); never with --standalone.
  absl::StatusOr<SlurmDefaults> slurm = SlurmDefaultsFrom(env);
  if (!slurm.ok()) return slurm.status();
  if (cl->given.count("standalone") > 0 || env.count("PET_STANDALONE") > 0) *slurm = SlurmDefaults{};
  FlagResolver resolver(*cl, env, *slurm);

  LaunchConfig& c = out.launch;
  for (const FlagSpec& flag : LaunchFlags()) {
    if (absl::Status s = flag.apply(resolver.Resolve(flag), &c); !s.ok()) return s;
  }
  if (cl->program.empty()) {
    return absl::InvalidArgumentError(
        "training_script: missing (the program to run, e.g. train, script.py, or -m module)");
  }
  c.training_script = cl->program[0];
  c.training_script_args.assign(cl->program.begin() + 1, cl->program.end());
  if (absl::Status s = CheckCombinations(&c); !s.ok()) return s;
  if (std::string note = resolver.SlurmNote(); !note.empty()) c.notes.push_back(note);
  return out;
}

}  // namespace cpptorchrun::launcher
