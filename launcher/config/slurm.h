// Slurm: what a launcher started by `srun` (one task per node) can take from
// the job step's environment when the command line does not say it, so that
// the same `srun cpptorchrun --nproc_per_node=gpu train.py` runs on any
// allocation (torchrun leaves this to hand-written scripts):
//   --nnodes         SLURM_STEP_NUM_NODES (else SLURM_NNODES, SLURM_JOB_NUM_NODES)
//   --rdzv_backend   c10d
//   --rdzv_endpoint  the first host of the step's node list
//                    (SLURM_STEP_NODELIST, else SLURM_JOB_NODELIST,
//                    SLURM_NODELIST), port SlurmRendezvousPort(job, step):
//                    a step on part of an allocation meets on its own
//                    nodes, two steps at once on different ports
//   --rdzv_id        "<SLURM_JOB_ID>.<SLURM_STEP_ID>", as Slurm names the step
//                    (two steps at once are two runs)
//   --signals_to_handle  adds SIGUSR1 and SIGUSR2 (Slurm's preemption and
//                    time-limit signals, `--signal=USR1@90`) to the default.
// Several tasks of the step on this node (SLURM_STEP_TASKS_PER_NODE) are an
// error naming the variable: one launcher per node is the rule.
// Only inside a job step (SLURM_STEP_ID set, as srun sets it), never with
// --standalone, and never when CPPTORCHRUN_SLURM=0. Pure functions of the
// environment.
#ifndef CPPTORCHRUN_LAUNCHER_SLURM_H_
#define CPPTORCHRUN_LAUNCHER_SLURM_H_

#include <cstdint>
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

// The step's tasks on node `node_index` (SLURM_NODEID) from Slurm's
// tasks-per-node notation ("2(x3),1": 2 tasks on each of nodes 0-2, 1 on
// node 3). InvalidArgument naming the problem.
absl::StatusOr<int> TasksOnNode(absl::string_view tasks_per_node, int node_index);

// The rendezvous port of a Slurm step: kSlurmBasePort + (job x 97 + step)
// mod kSlurmPorts. Every node of the step computes the same; as 97 is prime
// to 100, the first 100 steps of a job get 100 different ports, and so does
// one step of 100 jobs in a row, so that steps sharing a first host do not
// meet at one port. Below torchrun's MASTER_PORT default (29500).
inline constexpr int kSlurmBasePort = 29400;
inline constexpr int kSlurmPorts = 100;
int SlurmRendezvousPort(uint64_t job_id, uint64_t step_id);

// Whether this process runs inside a Slurm job step (SLURM_JOB_ID and
// SLURM_STEP_ID set, as srun sets them), whatever CPPTORCHRUN_SLURM says:
// Slurm then signals every process of the step itself.
bool InsideSlurmStep(const std::map<std::string, std::string>& env);

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
