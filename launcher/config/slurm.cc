#include "launcher/config/slurm.h"

#include "absl/status/status.h"
#include "absl/strings/ascii.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/strings/str_split.h"

namespace cpptorchrun::launcher {
namespace {

absl::Status Bad(absl::string_view hostlist, absl::string_view why) {
  return absl::InvalidArgumentError(absl::StrCat("hostlist '", hostlist, "': ", why));
}

// The numbers of one bracket group's contents ("01-04,07") as strings.
absl::StatusOr<std::vector<std::string>> ExpandGroup(absl::string_view hostlist, absl::string_view group,
                                                     size_t max_hosts) {
  std::vector<std::string> out;
  for (absl::string_view part : absl::StrSplit(group, ',')) {
    std::vector<absl::string_view> ends = absl::StrSplit(part, absl::MaxSplits('-', 1));
    for (absl::string_view e : ends) {
      if (e.empty() || !std::all_of(e.begin(), e.end(), absl::ascii_isdigit) || e.size() > 18) {
        return Bad(hostlist, absl::StrCat("'", part, "' is not a number or a range of numbers"));
      }
    }
    uint64_t lo = 0, hi = 0;
    absl::SimpleAtoi(ends[0], &lo);
    hi = lo;
    if (ends.size() == 2) absl::SimpleAtoi(ends[1], &hi);
    if (hi < lo) return Bad(hostlist, absl::StrCat("the range '", part, "' runs backwards"));
    if (hi - lo >= max_hosts || out.size() + (hi - lo + 1) > max_hosts) {
      return Bad(hostlist, absl::StrCat("more than ", max_hosts, " hosts"));
    }
    const size_t width = ends[0].size();
    for (uint64_t n = lo; n <= hi; ++n) {
      std::string s = absl::StrCat(n);
      if (s.size() < width) s.insert(0, width - s.size(), '0');
      out.push_back(std::move(s));
    }
  }
  return out;
}

}  // namespace

absl::StatusOr<std::vector<std::string>> ExpandHostlist(absl::string_view hostlist, size_t max_hosts) {
  std::vector<std::string> hosts;
  // Split at top-level commas.
  std::vector<absl::string_view> items;
  int depth = 0;
  size_t start = 0;
  for (size_t i = 0; i < hostlist.size(); ++i) {
    const char c = hostlist[i];
    if (c == '[') {
      if (++depth > 1) return Bad(hostlist, "nested brackets");
    } else if (c == ']') {
      if (--depth < 0) return Bad(hostlist, "a ']' without its '['");
    } else if (c == ',' && depth == 0) {
      items.push_back(hostlist.substr(start, i - start));
      start = i + 1;
    }
  }
  if (depth != 0) return Bad(hostlist, "a '[' without its ']'");
  items.push_back(hostlist.substr(start));
  for (absl::string_view item : items) {
    item = absl::StripAsciiWhitespace(item);
    if (item.empty()) continue;
    // The item's expansions, growing group by group (Slurm's order: the
    // first group varies slowest).
    std::vector<std::string> partial = {""};
    size_t pos = 0;
    while (pos < item.size()) {
      size_t open = item.find('[', pos);
      std::string literal(item.substr(pos, open == absl::string_view::npos ? absl::string_view::npos : open - pos));
      for (std::string& p : partial) p += literal;
      if (open == absl::string_view::npos) break;
      size_t close = item.find(']', open);
      auto numbers = ExpandGroup(hostlist, item.substr(open + 1, close - open - 1), max_hosts);
      if (!numbers.ok()) return numbers.status();
      if (partial.size() * numbers->size() + hosts.size() > max_hosts) {
        return Bad(hostlist, absl::StrCat("more than ", max_hosts, " hosts"));
      }
      std::vector<std::string> next;
      next.reserve(partial.size() * numbers->size());
      for (const std::string& p : partial) {
        for (const std::string& n : *numbers) next.push_back(p + n);
      }
      partial = std::move(next);
      pos = close + 1;
    }
    for (std::string& h : partial) hosts.push_back(std::move(h));
  }
  if (hosts.empty()) return Bad(hostlist, "no hosts");
  return hosts;
}

absl::StatusOr<int> TasksOnNode(absl::string_view tasks_per_node, int node_index) {
  auto bad = [&](absl::string_view why) {
    return absl::InvalidArgumentError(absl::StrCat("'", tasks_per_node, "': ", why));
  };
  if (node_index < 0) return bad("a negative node index");
  int64_t seen = 0;
  for (absl::string_view item : absl::StrSplit(tasks_per_node, ',')) {
    // "N" or "N(xR)": N tasks on each of the next R nodes.
    absl::string_view count_text = item;
    int64_t repeat = 1;
    if (size_t open = item.find('('); open != absl::string_view::npos) {
      absl::string_view rest = item.substr(open);
      count_text = item.substr(0, open);
      if (rest.size() < 4 || rest.substr(0, 2) != "(x" || rest.back() != ')' ||
          !absl::SimpleAtoi(rest.substr(2, rest.size() - 3), &repeat) || repeat < 1) {
        return bad(absl::StrCat("'", item, "' is not N or N(xR)"));
      }
    }
    int count = 0;
    if (!absl::SimpleAtoi(count_text, &count) || count < 0) {
      return bad(absl::StrCat("'", item, "' is not N or N(xR)"));
    }
    if (node_index < seen + repeat) return count;
    seen += repeat;
    if (seen > (int64_t{1} << 40)) return bad("too many nodes");
  }
  return bad(absl::StrCat("no entry for node ", node_index));
}

int SlurmRendezvousPort(uint64_t job_id, uint64_t step_id) {
  return kSlurmBasePort + static_cast<int>((job_id % kSlurmPorts * 97 + step_id) % kSlurmPorts);
}

bool InsideSlurmStep(const std::map<std::string, std::string>& env) {
  auto set = [&](const char* name) {
    auto it = env.find(name);
    return it != env.end() && !it->second.empty();
  };
  return set("SLURM_JOB_ID") && set("SLURM_STEP_ID");
}

absl::StatusOr<SlurmDefaults> SlurmDefaultsFrom(const std::map<std::string, std::string>& env) {
  SlurmDefaults out;
  auto get = [&](const std::string& name) -> std::string {
    auto it = env.find(name);
    return it == env.end() ? "" : it->second;
  };
  // The first of `names` that is set (Slurm's step variables before the
  // job's: a step may run on part of its allocation).
  auto first = [&](std::initializer_list<const char*> names) -> std::string {
    for (const char* n : names) {
      if (!get(n).empty()) return n;
    }
    return "";
  };
  if (get("CPPTORCHRUN_SLURM") == "0" || !InsideSlurmStep(env)) return out;
  uint64_t job_id = 0, step_id = 0;
  if (!absl::SimpleAtoi(get("SLURM_JOB_ID"), &job_id)) {
    return absl::InvalidArgumentError(absl::StrCat("SLURM_JOB_ID=", get("SLURM_JOB_ID"), " is not a job id"));
  }
  if (!absl::SimpleAtoi(get("SLURM_STEP_ID"), &step_id)) {
    return absl::InvalidArgumentError(absl::StrCat("SLURM_STEP_ID=", get("SLURM_STEP_ID"), " is not a step id"));
  }
  // One launcher per node: it starts the node's workers itself. A step with
  // several tasks on a node (--ntasks-per-node from a GPU batch script)
  // would start several launchers there, each a node of its own world.
  const std::string tasks_var = first({"SLURM_STEP_TASKS_PER_NODE", "SLURM_TASKS_PER_NODE"});
  const std::string node_var = first({"SLURM_NODEID"});
  if (!tasks_var.empty() && !node_var.empty()) {
    int node = 0;
    if (!absl::SimpleAtoi(get(node_var), &node)) {
      return absl::InvalidArgumentError(absl::StrCat(node_var, "=", get(node_var), " is not a node index"));
    }
    absl::StatusOr<int> tasks = TasksOnNode(get(tasks_var), node);
    if (!tasks.ok()) return absl::InvalidArgumentError(absl::StrCat(tasks_var, ": ", tasks.status().message()));
    if (*tasks > 1) {
      return absl::InvalidArgumentError(absl::StrCat(
          "Slurm started ", *tasks, " tasks of this step on this node (", tasks_var, "=", get(tasks_var),
          "), so ", *tasks, " launchers: cpptorchrun is one launcher per node, which starts the node's workers "
          "itself (--nproc_per_node). Run it with srun --ntasks-per-node=1 (in a batch script that asked for "
          "more tasks per node: srun --ntasks-per-node=1 cpptorchrun ...), or set CPPTORCHRUN_SLURM=0 to make "
          "cpptorchrun ignore Slurm's variables"));
    }
  }
  auto take = [&](const std::string& key, const std::string& value, const std::string& source) {
    out.values[key] = value;
    out.sources[key] = source;
  };
  const std::string nodelist_var = first({"SLURM_STEP_NODELIST", "SLURM_JOB_NODELIST", "SLURM_NODELIST"});
  if (!nodelist_var.empty()) {
    auto hosts = ExpandHostlist(get(nodelist_var));
    if (!hosts.ok()) return absl::InvalidArgumentError(absl::StrCat(nodelist_var, ": ", hosts.status().message()));
    take("rdzv_backend", "c10d", "Slurm");
    const int port = SlurmRendezvousPort(job_id, step_id);
    take("rdzv_endpoint", absl::StrCat(hosts->front(), ":", port),
         absl::StrCat("the first host of ", nodelist_var, "; port ", kSlurmBasePort, " + (job x 97 + step) mod ",
                      kSlurmPorts));
  }
  const std::string nnodes_var = first({"SLURM_STEP_NUM_NODES", "SLURM_NNODES", "SLURM_JOB_NUM_NODES"});
  if (!nnodes_var.empty()) {
    const std::string n = get(nnodes_var);
    int v = 0;
    if (!absl::SimpleAtoi(n, &v) || v < 1) {
      return absl::InvalidArgumentError(absl::StrCat(nnodes_var, "=", n, " is not a node count"));
    }
    take("nnodes", n, nnodes_var);
  }
  take("rdzv_id", absl::StrCat(job_id, ".", step_id), "SLURM_JOB_ID.SLURM_STEP_ID");
  take("signals_to_handle", "SIGTERM,SIGINT,SIGHUP,SIGQUIT,SIGUSR1,SIGUSR2",
       "Slurm's preemption signals SIGUSR1/SIGUSR2");
  out.job = absl::StrCat("Slurm job ", job_id, " step ", step_id,
                         get("SLURM_NODEID").empty() ? "" : absl::StrCat(" (node ", get("SLURM_NODEID"), ")"));
  return out;
}

}  // namespace cpptorchrun::launcher
