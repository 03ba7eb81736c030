// The launcher's flags as one table: each flag's spellings, its PET_*
// variable, help, default and how its value lands in a LaunchConfig; then
// the rules between flags. cli.cc reads the command line with CLI11 from
// this table, resolves each value (command line, environment, Slurm,
// default) and applies the entries in table order.
#ifndef CPPTORCHRUN_LAUNCHER_CONFIG_LAUNCH_FLAGS_H_
#define CPPTORCHRUN_LAUNCHER_CONFIG_LAUNCH_FLAGS_H_

#include <functional>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "launcher/config/cli.h"

namespace cpptorchrun::launcher {

// One flag's value, resolved.
struct FlagValue {
  std::string text;    // as written, or the flag's default
  std::string source;  // what an error names: "--nnodes", "PET_NNODES", ...
  bool given = false;  // on the command line or in the environment
};

struct FlagSpec {
  std::string key;    // underscored, without "--"
  std::string names;  // CLI11's spellings, e.g. "--nproc_per_node,--nproc-per-node"
  std::string env;    // the environment variable that stands in for it
  std::string help;
  std::string default_value;
  bool is_switch = false;  // takes no value (its text is "true", or the variable's)
  // Read after `env`, before Slurm and the default (torchrun's
  // TORCH_ELASTIC_SHUTDOWN_TIMEOUT); empty: none.
  std::string fallback_env;
  std::function<absl::Status(const FlagValue&, LaunchConfig*)> apply;
};

// Every launcher flag, in the order values are checked (and --help lists
// them).
const std::vector<FlagSpec>& LaunchFlags();

// The rules between flags, once every flag is applied: conflicting choices
// are InvalidArgument naming both; --standalone implies the c10d backend; a
// static multi-node job without --rdzv_endpoint meets at --master_addr,
// --master_port + 1. Pure.
absl::Status CheckCombinations(LaunchConfig* c);

}  // namespace cpptorchrun::launcher

#endif  // CPPTORCHRUN_LAUNCHER_CONFIG_LAUNCH_FLAGS_H_
