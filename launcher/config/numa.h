// --numa_binding (torchrun 2.x): each worker's CPUs, and its preferred
// memory node, from the machine's topology and the NUMA node of its GPU.
//   node          the CPUs of the GPU's NUMA node
//   socket        the CPUs of every NUMA node of the GPU's socket
//   exclusive     a share of the GPU's NUMA node, whole physical cores,
//                 disjoint from the other GPUs of that node (the lower GPUs
//                 get the remainder's extra cores); an error when the node
//                 has fewer cores than GPUs
//   core-complex  one last-level-cache domain of the GPU's NUMA node (the
//                 largest first), shared only when the GPUs outnumber them
// Always within the launcher's own affinity mask. Memory: preferred (not
// bound) on the GPU's NUMA node, as torchrun's `numactl --preferred`.
//
// The topology is read from a sysfs tree (`/sys`, or a fixture in tests);
// the decisions are pure functions of it. A GPU's node comes from
// /sys/bus/pci/devices/<bus id>/numa_node (-1 on single-node machines: 0);
// fake GPUs, which have no PCI address, are spread round-robin over the
// nodes that have CPUs.
#ifndef CPPTORCHRUN_LAUNCHER_NUMA_H_
#define CPPTORCHRUN_LAUNCHER_NUMA_H_

#include <map>
#include <optional>
#include <set>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"

namespace cpptorchrun::launcher {

enum class NumaMode { kNode, kSocket, kExclusive, kCoreComplex };

// "node", "socket", "exclusive", "core-complex" (torchrun's names).
absl::StatusOr<NumaMode> ParseNumaMode(absl::string_view text);

// "0-2,4,6-7" (a sysfs cpulist) -> {0,1,2,4,6,7}. InvalidArgument for
// anything else.
absl::StatusOr<std::set<int>> ParseCpuList(absl::string_view text);
// The reverse, compact: {0,1,2,4} -> "0-2,4".
std::string FormatCpuList(const std::set<int>& cpus);

struct Topology {
  std::map<int, std::set<int>> node_cpus;   // NUMA node -> its CPUs
  std::map<int, int> cpu_socket;            // CPU -> physical package
  std::map<int, std::set<int>> cpu_core;    // CPU -> the CPUs of its physical core
  std::map<int, std::set<int>> cpu_llc;     // CPU -> the CPUs sharing its last-level cache
  std::vector<int> gpu_node;                // GPU index -> NUMA node
};

// Reads the topology under `sysfs_root` for the GPUs with these PCI bus ids
// (nvidia-smi's form "00000000:1B:00.0" or sysfs's "0000:1b:00.0"), or
// `fake_gpus` GPUs without one. Errors name the file that is missing or
// malformed.
absl::StatusOr<Topology> ReadTopology(const std::string& sysfs_root,
                                      const std::vector<std::string>& gpu_bus_ids, int fake_gpus);

struct Binding {
  std::set<int> cpus;
  int memory_node = -1;
};

// Worker `gpu`'s binding under `mode`, within `allowed` (the launcher's
// affinity). FailedPrecondition when the GPU is unknown, its node has no
// allowed CPU, or (exclusive) the node has fewer cores than GPUs.
absl::StatusOr<Binding> BindingFor(NumaMode mode, int gpu, const Topology& topology,
                                   const std::set<int>& allowed);

// The bindings of local ranks 0..n-1 (worker i uses GPU i). Errors as
// BindingFor's.
absl::StatusOr<std::vector<Binding>> BindingsFor(NumaMode mode, int n, const Topology& topology,
                                                 const std::set<int>& allowed);

// The launcher's own CPU affinity.
std::set<int> AllowedCpus();

}  // namespace cpptorchrun::launcher

#endif  // CPPTORCHRUN_LAUNCHER_NUMA_H_
