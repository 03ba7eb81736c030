// Slurm: what a launcher started by `srun` (one task per node) can take from
// the job's environment when the command line does not say it, so that the
// same `srun cpptorchrun --nproc_per_node=gpu train.py` runs on any
// allocation (torchrun leaves this to hand-written scripts):
//   --nnodes         SLURM_NNODES (else SLURM_JOB_NUM_NODES)
//   --rdzv_backend   c10d
//   --rdzv_endpoint  the first host of SLURM_JOB_NODELIST, port 29400
//   --rdzv_id        SLURM_JOB_ID
//   --signals_to_handle  adds SIGUSR1 and SIGUSR2 (Slurm's preemption and
//                    time-limit signals, `--signal=USR1@90`) to the default.
// Only inside a job step (SLURM_STEP_ID set, as srun sets it), never with
// --standalone, and never when CPPTORCHRUN_SLURM=0. Pure functions of the
// environment.
#ifndef CPPTORCHRUN_LAUNCHER_SLURM_H_
#define CPPTORCHRUN_LAUNCHER_SLURM_H_

#include <map>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"

namespace cpptorchrun::launcher {

// Expands a Slurm hostlist ("node[01-04,07],gpu-a,rack[1-2]-n[1-2]"):
// comma-separated items, each with any number of bracket groups of numbers
// and ranges (zero padding kept from the range's start), in Slurm's order.
// InvalidArgument naming the problem (unbalanced brackets, a bad range, more
// than `max_hosts` hosts).
absl::StatusOr<std::vector<std::string>> ExpandHostlist(absl::string_view hostlist,
                                                        size_t max_hosts = 1 << 20);

struct SlurmDefaults {
  // Launcher flag (underscored key, as in cli.cc) -> value, and where it
  // came from (for the log: "SLURM_NNODES").
  std::map<std::string, std::string> values;
  std::map<std::string, std::string> sources;
  // "Slurm job 123 step 0 (node 1)"; empty when not inside a job step.
  std::string job;
};

// What Slurm's environment supplies (empty when not inside a job step).
// InvalidArgument when the job step's variables are malformed (names the
// variable).
absl::StatusOr<SlurmDefaults> SlurmDefaultsFrom(const std::map<std::string, std::string>& env);

}  // namespace cpptorchrun::launcher

#endif  // CPPTORCHRUN_LAUNCHER_SLURM_H_
