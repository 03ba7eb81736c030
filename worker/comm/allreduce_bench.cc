// A benchmark, not a test: the all-reduce of the seed MLP's gradient
// (784*512 + 512 + 512*10 + 10 floats, 1.6 MB) between processes of one
// node, shared memory against Gloo in the same run. Forks --world ranks;
// they bootstrap both communicators through a store of files in a fresh
// temporary folder, then time the two backends in alternating blocks (so a
// busy machine slows both alike) and rank 0 prints the medians.
//
//   bazel run --config=bench //worker/comm:allreduce_bench -- --iters 2000
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <optional>
#include <fstream>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "rendezvous/store.h"
#include "worker/comm/comm.h"
#include "worker/comm/gloo_comm.h"
#include "worker/comm/shm_comm.h"

namespace cpptorchrun::worker {
namespace {

// Set and Get over a folder of files, enough for the two bootstraps
// between forked processes (a key is written to a temporary file and
// renamed, so a reader sees all of it or nothing).
class FolderStore final : public rdzv::Store {
 public:
  explicit FolderStore(std::string dir) : dir_(std::move(dir)) {}

  absl::Status Set(const std::string& key, const std::string& value) override {
    const std::string path = Path(key);
    const std::string tmp = absl::StrCat(path, ".tmp", ::getpid());
    {
      std::ofstream out(tmp, std::ios::binary);
      out << value;
      if (!out) return absl::UnavailableError(absl::StrCat("cannot write ", tmp));
    }
    std::filesystem::rename(tmp, path);
    return absl::OkStatus();
  }
  absl::StatusOr<std::string> Get(const std::string& key, absl::Duration timeout) override {
    const absl::Time deadline = absl::Now() + timeout;
    while (true) {
      std::ifstream in(Path(key), std::ios::binary);
      if (in) {
        std::stringstream all;
        all << in.rdbuf();
        return all.str();
      }
      if (absl::Now() >= deadline) return absl::DeadlineExceededError(absl::StrCat("no ", key));
      std::this_thread::sleep_for(std::chrono::milliseconds(1));
    }
  }
  absl::StatusOr<int64_t> Add(const std::string&, int64_t) override { return Unused(); }
  absl::StatusOr<std::string> CompareSet(const std::string&, const std::optional<std::string>&,
                                         const std::string&, bool*) override {
    return Unused();
  }
  absl::StatusOr<bool> Delete(const std::string&) override { return Unused(); }
  absl::StatusOr<std::vector<std::string>> MultiGet(const std::vector<std::string>& keys,
                                                    absl::Duration timeout) override {
    std::vector<std::string> values;
    for (const std::string& key : keys) {
      absl::StatusOr<std::string> value = Get(key, timeout);
      if (!value.ok()) return value.status();
      values.push_back(*value);
    }
    return values;
  }
  absl::Status MultiSet(const std::vector<std::pair<std::string, std::string>>& entries) override {
    for (const auto& [key, value] : entries) {
      if (absl::Status s = Set(key, value); !s.ok()) return s;
    }
    return absl::OkStatus();
  }

 private:
  static absl::Status Unused() { return absl::UnimplementedError("not used by the bench"); }
  std::string Path(std::string key) const {
    std::replace(key.begin(), key.end(), '/', '_');
    return absl::StrCat(dir_, "/", key);
  }
  const std::string dir_;
};

struct Args {
  int world = 2;
  int iters = 2000;  // timed all-reduces per backend
  int block = 100;   // in blocks of this many, the backends in turn
  int64_t count = 784 * 512 + 512 + 512 * 10 + 10;
  int64_t slot_bytes = ShmOptions().slot_bytes;
  std::string json;  // also write the figures here
};

double Quantile(std::vector<double> v, double q) {
  if (v.empty()) return 0;
  std::sort(v.begin(), v.end());
  return v[std::min(v.size() - 1, size_t(q * (v.size() - 1) + 0.5))];
}

int RunRank(const Args& args, const std::string& dir, int rank) {
  FolderStore store(dir);
  ShmOptions shm;
  shm.store = &store;
  shm.rank = rank;
  shm.world_size = args.world;
  shm.slot_bytes = args.slot_bytes;
  GlooOptions gloo;
  gloo.store = &store;
  gloo.rank = rank;
  gloo.world_size = args.world;
  absl::StatusOr<std::unique_ptr<Communicator>> shm_comm = NewShmCommunicator(shm);
  absl::StatusOr<std::unique_ptr<Communicator>> gloo_comm = NewGlooCommunicator(gloo);
  if (!shm_comm.ok() || !gloo_comm.ok()) {
    std::fprintf(stderr, "rank %d: %s / %s\n", rank, shm_comm.status().ToString().c_str(),
                 gloo_comm.status().ToString().c_str());
    return 1;
  }
  Communicator* comms[2] = {shm_comm->get(), gloo_comm->get()};
  const char* names[2] = {"shm", "gloo"};
  std::vector<float> grad(args.count);
  for (int64_t i = 0; i < args.count; ++i) grad[i] = float((i % 1000) * (rank + 1));
  // Correctness first: the average over ranks of (rank + 1) * x.
  for (Communicator* comm : comms) {
    std::vector<float> g = grad;
    if (!comm->AllReduce(g.data(), g.size(), DType::kFloat32, ReduceOp::kAverage).ok()) return 1;
    const int64_t at = std::min<int64_t>(999, args.count - 1);
    const float expect = float(at) * (args.world + 1) / 2;
    if (g[at] != expect) {
      std::fprintf(stderr, "%s: %g, not %g\n", comm->backend().c_str(), g[at], expect);
      return 1;
    }
  }
  // Per call: the caller's wait, and the collective's own run on the comm
  // thread (Work::Times: without the hand-offs to and from it).
  std::vector<double> ms[2], run_ms[2];
  for (int done = 0; done < args.iters; done += args.block) {
    for (int b = 0; b < 2; ++b) {
      if (!comms[b]->Barrier().ok()) return 1;
      for (int i = 0; i < std::min(args.block, args.iters - done); ++i) {
        const double start = SteadySeconds();
        std::shared_ptr<Work> work =
            comms[b]->AllReduceAsync(grad.data(), grad.size(), DType::kFloat32, ReduceOp::kAverage);
        absl::Status s = work->Wait();
        if (std::optional<WorkTimes> t = work->Times(); t.has_value()) {
          run_ms[b].push_back(1e3 * (t->finished - t->started));
        }
        if (!s.ok()) {
          std::fprintf(stderr, "rank %d %s: %s\n", rank, names[b], s.ToString().c_str());
          return 1;
        }
        ms[b].push_back(1e3 * (SteadySeconds() - start));
      }
    }
  }
  if (rank == 0) {
    std::string json = absl::StrFormat("{\"world\": %d, \"floats\": %d, \"iters\": %d", args.world,
                                       args.count, args.iters);
    for (int b = 0; b < 2; ++b) {
      const double p10 = Quantile(ms[b], 0.1), p50 = Quantile(ms[b], 0.5),
                   p90 = Quantile(ms[b], 0.9);
      const double run = Quantile(run_ms[b], 0.5);
      std::printf("%-5s all-reduce of %lld floats (%.2f MB), world %d: median %.3f ms "
                  "(p10 %.3f, p90 %.3f, n %zu); on the comm thread median %.3f ms\n",
                  names[b], static_cast<long long>(args.count), args.count * 4 / 1e6, args.world,
                  p50, p10, p90, ms[b].size(), run);
      absl::StrAppendFormat(&json,
                            ", \"%s_ms\": {\"p10\": %.4f, \"median\": %.4f, \"p90\": %.4f, "
                            "\"run_median\": %.4f}",
                            names[b], p10, p50, p90, run);
    }
    json += "}\n";
    std::fputs(json.c_str(), stdout);
    if (!args.json.empty()) std::ofstream(args.json) << json;
  }
  return 0;
}

}  // namespace
}  // namespace cpptorchrun::worker

int main(int argc, char** argv) {
  cpptorchrun::worker::Args args;
  for (int i = 1; i + 1 < argc; i += 2) {
    const std::string flag = argv[i];
    const char* value = argv[i + 1];
    if (flag == "--world") {
      args.world = std::atoi(value);
    } else if (flag == "--iters") {
      args.iters = std::atoi(value);
    } else if (flag == "--block") {
      args.block = std::max(1, std::atoi(value));
    } else if (flag == "--count") {
      args.count = std::atoll(value);
    } else if (flag == "--slot_bytes") {
      args.slot_bytes = std::atoll(value);
    } else if (flag == "--json") {
      args.json = value;
    } else {
      std::fprintf(stderr, "usage: allreduce_bench [--world 2] [--iters 2000] [--block 100] "
                           "[--count 407050] [--slot_bytes N] [--json FILE]\n");
      return 2;
    }
  }
  char tmpl[] = "/tmp/allreduce_bench.XXXXXX";
  if (::mkdtemp(tmpl) == nullptr) return 1;
  const std::string dir = tmpl;
  std::fflush(stdout);
  std::vector<pid_t> pids;
  for (int rank = 0; rank < args.world; ++rank) {
    const pid_t pid = ::fork();
    if (pid == 0) {
      const int rc = cpptorchrun::worker::RunRank(args, dir, rank);
      std::fflush(stdout);
      ::_exit(rc);
    }
    pids.push_back(pid);
  }
  int rc = 0;
  for (pid_t pid : pids) {
    int status = 0;
    ::waitpid(pid, &status, 0);
    if (!WIFEXITED(status) || WEXITSTATUS(status) != 0) rc = 1;
  }
  std::filesystem::remove_all(dir);
  return rc;
}
