// backends_bench: the rendezvous on etcd beside the gRPC service, through
// the one RendezvousClient interface: N agents (each its own client, as
// each node is its own launcher) join one round of N nodes, then agent 0
// writes the round's NCCL unique id and every agent reads it from the
// round's store. Each size runs on both backends in turn, the gRPC service
// in this process on loopback, etcd a real 3-member cluster on loopback
// (one process a member); the "leader_killed" scenario kills etcd's leader
// with SIGKILL as the agents start joining (the cost of losing a member:
// its election and the clients' failover), then restarts it.
//
//   backends_bench [--sizes=10,50,100] [--repeat=3] [--json]
//
// --json: one object per run: backend, scenario, n, round_s, store_s, ok.
#include <algorithm>
#include <cstdio>
#include <functional>
#include <cstdlib>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "absl/time/clock.h"
#include "absl/time/time.h"
#include "rendezvous/client.h"
#include "rendezvous/connect.h"
#include "rendezvous/etcd/etcd_cluster.h"
#include "rendezvous/server.h"

namespace {

using cpptorchrun::rdzv::ClientOptions;
using cpptorchrun::rdzv::CreateRendezvousClient;
using cpptorchrun::rdzv::RendezvousClient;
namespace v1 = cpptorchrun::rdzv::v1;
namespace etcd = cpptorchrun::rdzv::etcd;

struct Result {
  double round_s = 0;
  double store_s = 0;
  bool ok = false;
  std::string error;
};

// N agents on `target` (a rendezvous target, connect.h); `at_start` runs as
// they begin (the leader's kill).
Result Run(const std::string& target, int n, const std::string& run_id, const std::function<void()>& at_start) {
  std::vector<std::unique_ptr<RendezvousClient>> clients;
  for (int i = 0; i < n; ++i) {
    ClientOptions o;
    o.endpoint = target;
    auto c = CreateRendezvousClient(o);
    if (!c.ok()) return Result{0, 0, false, std::string(c.status().message())};
    clients.push_back(std::move(*c));
  }
  std::vector<v1::Assignment> got(n);
  std::vector<std::string> errors(n);
  std::vector<double> read_done(n, 0);
  const absl::Time start = absl::Now();
  absl::Time formed = absl::InfiniteFuture();
  std::vector<absl::Time> joined(n, absl::InfinitePast());
  std::vector<std::thread> threads;
  for (int i = 0; i < n; ++i) {
    threads.emplace_back([&, i] {
      v1::JoinRequest r;
      r.set_run_id(run_id);
      r.mutable_node()->set_node_id(absl::StrCat("agent-", i));
      r.mutable_node()->set_host("127.0.0.1");
      r.mutable_node()->set_local_world_size(8);
      r.mutable_node()->set_static_node_rank(-1);
      r.mutable_options()->set_min_nodes(n);
      r.mutable_options()->set_max_nodes(n);
      r.mutable_options()->set_join_timeout_s(300);
      auto a = clients[i]->Join(r);
      if (!a.ok()) {
        errors[i] = std::string(a.status().message());
        return;
      }
      got[i] = *a;
      joined[i] = absl::Now();
    });
  }
  at_start();
  for (auto& t : threads) t.join();
  for (int i = 0; i < n; ++i) {
    if (!errors[i].empty()) return Result{0, 0, false, absl::StrCat("agent ", i, ": ", errors[i])};
  }
  formed = *std::max_element(joined.begin(), joined.end());
  // The round's NCCL id: agent 0 writes it, every agent reads it.
  const int64_t round = got[0].round();
  threads.clear();
  const absl::Time store_start = absl::Now();
  std::vector<std::string> read_errors(n);
  for (int i = 0; i < n; ++i) {
    threads.emplace_back([&, i] {
      auto store = clients[i]->OpenStore(run_id, round);
      if (i == 0) {
        absl::Status s = store->Set("nccl_unique_id", std::string(128, 'x'));
        if (!s.ok()) read_errors[i] = std::string(s.message());
      }
      auto v = store->Get("nccl_unique_id", absl::Seconds(60));
      if (!v.ok()) read_errors[i] = std::string(v.status().message());
    });
  }
  for (auto& t : threads) t.join();
  const absl::Time store_end = absl::Now();
  for (int i = 0; i < n; ++i) {
    if (!read_errors[i].empty()) return Result{0, 0, false, absl::StrCat("read ", i, ": ", read_errors[i])};
  }
  (void)clients[0]->Close(run_id, "bench done", "agent-0", got[0].signature());
  return Result{absl::ToDoubleSeconds(formed - start), absl::ToDoubleSeconds(store_end - store_start), true, ""};
}

void Print(bool json, const char* backend, const char* scenario, int n, const Result& r) {
  if (json) {
    std::printf("{\"backend\": \"%s\", \"scenario\": \"%s\", \"n\": %d, \"round_s\": %.6f, \"store_s\": %.6f, "
                "\"ok\": %s}\n",
                backend, scenario, n, r.round_s, r.store_s, r.ok ? "true" : "false");
  } else {
    std::printf("%-5s %-14s N=%-5d round %.3f s, store %.3f s%s%s\n", backend, scenario, n, r.round_s, r.store_s,
                r.ok ? "" : " FAILED: ", r.error.c_str());
  }
  std::fflush(stdout);
}

}  // namespace

int main(int argc, char** argv) {
  std::vector<int> sizes = {10, 50, 100};
  int repeat = 3;
  bool json = false;
  for (int i = 1; i < argc; ++i) {
    std::string a = argv[i];
    if (absl::StartsWith(a, "--sizes=")) {
      sizes.clear();
      for (absl::string_view s : absl::StrSplit(a.substr(8), ',')) {
        int n = 0;
        if (!absl::SimpleAtoi(s, &n) || n < 1 || n > 1000) {
          std::fprintf(stderr, "backends_bench: --sizes: '%s' is not 1..1000\n", std::string(s).c_str());
          return 2;
        }
        sizes.push_back(n);
      }
    } else if (absl::StartsWith(a, "--repeat=")) {
      if (!absl::SimpleAtoi(a.substr(9), &repeat) || repeat < 1 || repeat > 100) {
        std::fprintf(stderr, "backends_bench: --repeat: expected 1..100\n");
        return 2;
      }
    } else if (a == "--json") {
      json = true;
    } else {
      std::fprintf(stderr, "usage: backends_bench [--sizes=10,50,100] [--repeat=3] [--json]\n");
      return 2;
    }
  }
  auto server = cpptorchrun::rdzv::RendezvousServer::Start(cpptorchrun::rdzv::ServerOptions());
  if (!server.ok()) {
    std::fprintf(stderr, "backends_bench: the gRPC rendezvous: %s\n", server.status().ToString().c_str());
    return 1;
  }
  char dir_template[] = "/tmp/backends-bench-XXXXXX";
  const char* dir = mkdtemp(dir_template);
  if (dir == nullptr) return 1;
  auto cluster = etcd::EtcdCluster::Start(3, dir);
  if (!cluster.ok()) {
    std::fprintf(stderr, "backends_bench: etcd: %s\n", cluster.status().ToString().c_str());
    return 1;
  }
  const std::string etcd_target = absl::StrCat(cpptorchrun::rdzv::kEtcdScheme, (*cluster)->EndpointList(), "/bench");
  bool all_ok = true;
  int run = 0;
  for (int r = 0; r < repeat; ++r) {
    for (int n : sizes) {
      const std::string id = absl::StrCat("bench-", n, "-", run++);
      Result g = Run((*server)->endpoint(), n, id, [] {});
      Print(json, "grpc", "steady", n, g);
      Result e = Run(etcd_target, n, id, [] {});
      Print(json, "etcd", "steady", n, e);
      int killed = -1;
      Result k = Run(etcd_target, n, id + "-k", [&] {
        absl::StatusOr<int> leader = (*cluster)->Leader();
        if (leader.ok() && (*cluster)->Kill(*leader).ok()) killed = *leader;
      });
      Print(json, "etcd", "leader_killed", n, k);
      if (killed >= 0 && !(*cluster)->Restart(killed).ok()) all_ok = false;
      all_ok = all_ok && g.ok && e.ok && k.ok && killed >= 0;
    }
  }
  cluster->reset();
  std::string rm = absl::StrCat("rm -rf '", dir, "'");
  (void)std::system(rm.c_str());
  return all_ok ? 0 : 1;
}
