#include "launcher/config/numa.h"

#include <dirent.h>
#include <sched.h>

#include <algorithm>
#include <fstream>
#include <sstream>

#include "absl/status/status.h"
#include "absl/strings/ascii.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/strings/str_split.h"
#include "absl/strings/strip.h"

namespace cpptorchrun::launcher {
namespace {

constexpr int kMaxCpu = 1 << 16;

absl::StatusOr<std::string> Read(const std::string& path) {
  std::ifstream in(path);
  if (!in) return absl::NotFoundError(absl::StrCat("cannot read ", path));
  std::stringstream s;
  s << in.rdbuf();
  return std::string(absl::StripAsciiWhitespace(s.str()));
}

absl::StatusOr<int> ReadInt(const std::string& path) {
  absl::StatusOr<std::string> text = Read(path);
  if (!text.ok()) return text.status();
  int v = 0;
  if (!absl::SimpleAtoi(*text, &v)) {
    return absl::InvalidArgumentError(absl::StrCat(path, ": '", *text, "' is not a number"));
  }
  return v;
}

absl::StatusOr<std::set<int>> ReadCpus(const std::string& path) {
  absl::StatusOr<std::string> text = Read(path);
  if (!text.ok()) return text.status();
  absl::StatusOr<std::set<int>> cpus = ParseCpuList(*text);
  if (!cpus.ok()) return absl::InvalidArgumentError(absl::StrCat(path, ": ", cpus.status().message()));
  return cpus;
}

// Numbered entries "<prefix>N" of a folder.
std::vector<int> Numbered(const std::string& dir, absl::string_view prefix) {
  std::vector<int> out;
  if (DIR* d = opendir(dir.c_str()); d != nullptr) {
    while (dirent* e = readdir(d)) {
      absl::string_view name(e->d_name);
      int n = 0;
      if (absl::ConsumePrefix(&name, prefix) && absl::SimpleAtoi(name, &n)) out.push_back(n);
    }
    closedir(d);
  }
  std::sort(out.begin(), out.end());
  return out;
}

// "00000000:1B:00.0" -> "0000:1b:00.0".
std::string SysfsBusId(const std::string& id) {
  std::string lower = absl::AsciiStrToLower(absl::StripAsciiWhitespace(id));
  return lower.size() > 12 ? lower.substr(lower.size() - 12) : lower;
}

std::set<int> Intersect(const std::set<int>& a, const std::set<int>& b) {
  std::set<int> out;
  std::set_intersection(a.begin(), a.end(), b.begin(), b.end(), std::inserter(out, out.end()));
  return out;
}

// The GPUs whose node is `node`, in index order.
std::vector<int> GpusOfNode(const Topology& t, int node) {
  std::vector<int> out;
  for (int g = 0; g < static_cast<int>(t.gpu_node.size()); ++g) {
    if (t.gpu_node[g] == node) out.push_back(g);
  }
  return out;
}

// Groups `cpus` by the smallest CPU of `group_of` (physical core, cache).
std::map<int, std::set<int>> GroupBy(const std::set<int>& cpus, const std::map<int, std::set<int>>& group_of) {
  std::map<int, std::set<int>> groups;
  for (int c : cpus) {
    auto it = group_of.find(c);
    int key = (it == group_of.end() || it->second.empty()) ? c : *it->second.begin();
    groups[key].insert(c);
  }
  return groups;
}

}  // namespace

absl::StatusOr<NumaMode> ParseNumaMode(absl::string_view text) {
  if (text == "node") return NumaMode::kNode;
  if (text == "socket") return NumaMode::kSocket;
  if (text == "exclusive") return NumaMode::kExclusive;
  if (text == "core-complex") return NumaMode::kCoreComplex;
  return absl::InvalidArgumentError(
      absl::StrCat("--numa_binding: expected node, socket, exclusive or core-complex; got '", text, "'"));
}

absl::StatusOr<std::set<int>> ParseCpuList(absl::string_view text) {
  std::set<int> cpus;
  for (absl::string_view part : absl::StrSplit(text, ',', absl::SkipWhitespace())) {
    part = absl::StripAsciiWhitespace(part);
    std::vector<absl::string_view> ends = absl::StrSplit(part, absl::MaxSplits('-', 1));
    int lo = 0, hi = 0;
    if (!absl::SimpleAtoi(ends[0], &lo) || (ends.size() == 2 && !absl::SimpleAtoi(ends[1], &hi))) {
      return absl::InvalidArgumentError(absl::StrCat("'", part, "' is not a CPU or a range of CPUs"));
    }
    if (ends.size() == 1) hi = lo;
    if (lo < 0 || hi < lo || hi >= kMaxCpu) {
      return absl::InvalidArgumentError(absl::StrCat("'", part, "' is not a range of CPUs in 0..", kMaxCpu - 1));
    }
    for (int c = lo; c <= hi; ++c) cpus.insert(c);
  }
  return cpus;
}

std::string FormatCpuList(const std::set<int>& cpus) {
  std::vector<std::string> parts;
  for (auto it = cpus.begin(); it != cpus.end();) {
    int lo = *it, hi = lo;
    for (++it; it != cpus.end() && *it == hi + 1; ++it) hi = *it;
    parts.push_back(lo == hi ? absl::StrCat(lo) : absl::StrCat(lo, "-", hi));
  }
  return absl::StrJoin(parts, ",");
}

absl::StatusOr<Topology> ReadTopology(const std::string& sysfs_root, const std::vector<std::string>& gpu_bus_ids,
                                      int fake_gpus) {
  Topology t;
  const std::string nodes_dir = sysfs_root + "/devices/system/node";
  for (int node : Numbered(nodes_dir, "node")) {
    auto cpus = ReadCpus(absl::StrCat(nodes_dir, "/node", node, "/cpulist"));
    if (!cpus.ok()) return cpus.status();
    t.node_cpus[node] = *cpus;
  }
  if (t.node_cpus.empty()) {
    // No NUMA support in the kernel: one node with every CPU.
    auto online = ReadCpus(sysfs_root + "/devices/system/cpu/online");
    if (!online.ok()) return online.status();
    t.node_cpus[0] = *online;
  }
  for (const auto& [node, cpus] : t.node_cpus) {
    for (int c : cpus) {
      const std::string topo = absl::StrCat(sysfs_root, "/devices/system/cpu/cpu", c, "/topology");
      auto socket = ReadInt(topo + "/physical_package_id");
      t.cpu_socket[c] = socket.ok() ? *socket : 0;
      auto core = ReadCpus(topo + "/thread_siblings_list");
      t.cpu_core[c] = core.ok() ? *core : std::set<int>{c};
      // The last-level cache: the highest level of a data or unified cache.
      const std::string cache = absl::StrCat(sysfs_root, "/devices/system/cpu/cpu", c, "/cache");
      int best = -1;
      std::set<int> llc = {c};
      for (int index : Numbered(cache, "index")) {
        const std::string dir = absl::StrCat(cache, "/index", index);
        auto type = Read(dir + "/type");
        auto level = ReadInt(dir + "/level");
        auto shared = ReadCpus(dir + "/shared_cpu_list");
        if (!type.ok() || !level.ok() || !shared.ok() || (*type != "Unified" && *type != "Data")) continue;
        if (*level > best) {
          best = *level;
          llc = *shared;
        }
      }
      t.cpu_llc[c] = llc;
    }
  }
  for (const std::string& id : gpu_bus_ids) {
    const std::string path = absl::StrCat(sysfs_root, "/bus/pci/devices/", SysfsBusId(id), "/numa_node");
    auto node = ReadInt(path);
    if (!node.ok()) return node.status();
    t.gpu_node.push_back(std::max(*node, 0));
  }
  std::vector<int> nodes_with_cpus;
  for (const auto& [node, cpus] : t.node_cpus) {
    if (!cpus.empty()) nodes_with_cpus.push_back(node);
  }
  for (int g = 0; g < fake_gpus && !nodes_with_cpus.empty(); ++g) {
    t.gpu_node.push_back(nodes_with_cpus[g % nodes_with_cpus.size()]);
  }
  return t;
}

absl::StatusOr<Binding> BindingFor(NumaMode mode, int gpu, const Topology& t, const std::set<int>& allowed) {
  if (gpu < 0 || gpu >= static_cast<int>(t.gpu_node.size())) {
    return absl::FailedPreconditionError(absl::StrCat("--numa_binding: GPU ", gpu, " has no known NUMA node"));
  }
  Binding b;
  b.memory_node = t.gpu_node[gpu];
  auto node_cpus = [&](int node) {
    auto it = t.node_cpus.find(node);
    return it == t.node_cpus.end() ? std::set<int>{} : Intersect(it->second, allowed);
  };
  const std::set<int> local = node_cpus(b.memory_node);
  if (local.empty()) {
    return absl::FailedPreconditionError(absl::StrCat("--numa_binding: NUMA node ", b.memory_node, " of GPU ", gpu,
                                                      " has no CPU this launcher may use"));
  }
  switch (mode) {
    case NumaMode::kNode:
      b.cpus = local;
      break;
    case NumaMode::kSocket: {
      const int socket = t.cpu_socket.count(*local.begin()) ? t.cpu_socket.at(*local.begin()) : 0;
      for (const auto& [node, cpus] : t.node_cpus) {
        for (int c : Intersect(cpus, allowed)) {
          if ((t.cpu_socket.count(c) ? t.cpu_socket.at(c) : 0) == socket) b.cpus.insert(c);
        }
      }
      break;
    }
    case NumaMode::kExclusive: {
      const std::vector<int> gpus = GpusOfNode(t, b.memory_node);
      const int index = static_cast<int>(std::find(gpus.begin(), gpus.end(), gpu) - gpus.begin());
      const std::map<int, std::set<int>> cores = GroupBy(local, t.cpu_core);
      const int n = static_cast<int>(gpus.size());
      const int per = static_cast<int>(cores.size()) / n;
      const int extra = static_cast<int>(cores.size()) % n;
      if (per < 1) {
        return absl::FailedPreconditionError(absl::StrCat(
            "--numa_binding exclusive: NUMA node ", b.memory_node, " has ", cores.size(),
            " physical cores for ", n, " GPUs"));
      }
      const int start = index * per + std::min(index, extra);
      const int end = start + per + (index < extra ? 1 : 0);
      int i = 0;
      for (const auto& [key, cpus] : cores) {
        if (i >= start && i < end) b.cpus.insert(cpus.begin(), cpus.end());
        ++i;
      }
      break;
    }
    case NumaMode::kCoreComplex: {
      const std::vector<int> gpus = GpusOfNode(t, b.memory_node);
      const int index = static_cast<int>(std::find(gpus.begin(), gpus.end(), gpu) - gpus.begin());
      std::map<int, std::set<int>> caches = GroupBy(local, t.cpu_llc);
      std::vector<std::pair<int, std::set<int>>> ordered(caches.begin(), caches.end());
      std::stable_sort(ordered.begin(), ordered.end(), [](const auto& x, const auto& y) {
        return x.second.size() > y.second.size();  // the largest first; then by lowest CPU
      });
      b.cpus = ordered[index % ordered.size()].second;
      break;
    }
  }
  return b;
}

absl::StatusOr<std::vector<Binding>> BindingsFor(NumaMode mode, int n, const Topology& topology,
                                                 const std::set<int>& allowed) {
  std::vector<Binding> out;
  for (int gpu = 0; gpu < n; ++gpu) {
    absl::StatusOr<Binding> b = BindingFor(mode, gpu, topology, allowed);
    if (!b.ok()) return b.status();
    out.push_back(*std::move(b));
  }
  return out;
}

std::set<int> AllowedCpus() {
  std::set<int> out;
  cpu_set_t set;
  CPU_ZERO(&set);
  if (sched_getaffinity(0, sizeof(set), &set) == 0) {
    for (int c = 0; c < CPU_SETSIZE; ++c) {
      if (CPU_ISSET(c, &set)) out.insert(c);
    }
  }
  return out;
}

}  // namespace cpptorchrun::launcher
