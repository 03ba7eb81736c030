// rendezvous_bench: how long N agents take to form one round over loopback,
// and how long 8*N ranks then take to read the round's NCCL unique id from
// the store; with the server's peak resident memory.
//
//   bazel run --config=bench //rendezvous:rendezvous_bench -- --sizes=100,1000,10000
//
// --json prints one JSON object per size (n, round_s, store_s, gets,
// server_peak_rss_mib, ok) for bench runners.
//
// --overhead=R measures what metrics and the job page cost the server: for
// each size, R runs without --metrics_port and R with it, interleaved, the
// latter while a scraper in the parent fetches /metrics and the run's page
// JSON (/api/run/<id>) every --scrape_ms (1000: what a page open asks, and
// a Prometheus scraping every second, 15 times its default); it prints each
// run and the median calls/s (the Joins and Gets of both phases over their
// time) of each kind.
//
// The server is the rendezvous_server binary in its own process. The agents
// are spread over --procs client processes (forked before any gRPC use),
// each driving its share with gRPC's callback client API over --channels
// connections, so no process comes near the 20,000 descriptor limit.
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <thread>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <optional>
#include <memory>
#include <string>
#include <vector>

#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "absl/synchronization/mutex.h"
#include "absl/synchronization/notification.h"
#include "httplib.h"
#include "absl/time/clock.h"
#include "absl/time/time.h"
#include "grpcpp/grpcpp.h"
#include "proto/rendezvous.grpc.pb.h"

namespace {

namespace v1 = cpptorchrun::rdzv::v1;

struct Flags {
  std::vector<int> sizes = {100, 1000, 10000};
  int procs = 8;
  int channels = 4;
  std::string server;
  // One JSON object per size instead of the table line.
  bool json = false;
  // --overhead=R: R runs without metrics and R with, interleaved.
  int overhead_repeats = 0;
  int scrape_ms = 1000;
};

// --- line protocol over pipes between the parent and its children ----------

bool WriteLine(int fd, const std::string& line) {
  std::string text = line + "\n";
  return write(fd, text.data(), text.size()) == static_cast<ssize_t>(text.size());
}

std::string ReadLine(int fd) {
  std::string line;
  char c;
  while (read(fd, &c, 1) == 1 && c != '\n') line.push_back(c);
  return line;
}

// --- the child: a share of the agents and ranks -----------------------------

class Agents {
 public:
  Agents(const std::string& endpoint, int channels) {
    for (int i = 0; i < channels; ++i) {
      grpc::ChannelArguments args;
      args.SetInt("cpptorchrun.bench_channel", i);  // one connection each
      args.SetMaxReceiveMessageSize(64 << 20);
      auto channel =
          grpc::CreateCustomChannel(endpoint, grpc::InsecureChannelCredentials(), args);
      stubs_.push_back(v1::Rendezvous::NewStub(channel));
    }
  }

  // Joins agents [first, last) of `n`; returns the round, or -1.
  int64_t JoinAll(const std::string& run, int first, int last, int n) {
    Phase phase(last - first);
    for (int i = first; i < last; ++i) {
      auto call = std::make_shared<JoinCall>();
      call->request.set_run_id(run);
      v1::NodeInfo* node = call->request.mutable_node();
      node->set_node_id(absl::StrCat("agent-", 1000000 + i));
      node->set_host("127.0.0.1");
      node->set_local_world_size(8);
      node->set_static_node_rank(-1);
      node->set_free_port(29500);
      call->request.mutable_options()->set_min_nodes(n);
      call->request.mutable_options()->set_max_nodes(n);
      call->request.mutable_options()->set_join_timeout_s(300);
      call->stub = stubs_[i % stubs_.size()].get();
      IssueJoin(call, &phase);
    }
    phase.done.WaitForNotificationWithTimeout(absl::Minutes(5));
    absl::MutexLock lock(&phase.mu);
    return phase.failures == 0 && phase.remaining == 0 ? phase.round : -1;
  }

  // `ranks` Gets of the round's id (the first child Sets it first).
  bool ReadAll(const std::string& run, int64_t round, int ranks, bool set_first) {
    v1::Scope scope;
    scope.set_run_id(run);
    scope.set_round(round);
    if (set_first) {
      grpc::ClientContext ctx;
      ctx.set_deadline(std::chrono::system_clock::now() + std::chrono::seconds(30));
      v1::SetRequest set;
      *set.mutable_scope() = scope;
      set.set_key("nccl_id");
      set.set_value(std::string(128, '\x5a'));
      v1::SetResponse ignored;
      if (!stubs_[0]->Set(&ctx, set, &ignored).ok()) return false;
    }
    Phase phase(ranks);
    std::vector<std::unique_ptr<GetCall>> calls;
    calls.reserve(ranks);
    for (int i = 0; i < ranks; ++i) {
      auto call = std::make_unique<GetCall>();
      *call->request.mutable_scope() = scope;
      call->request.set_key("nccl_id");
      call->request.set_timeout_ms(120000);
      call->ctx.set_deadline(std::chrono::system_clock::now() + std::chrono::seconds(150));
      GetCall* raw = call.get();
      stubs_[i % stubs_.size()]->async()->Get(&raw->ctx, &raw->request, &raw->response,
                                                [&phase, raw](grpc::Status status) {
                                                  phase.Finish(status.ok() &&
                                                               raw->response.value().size() == 128,
                                                               0);
                                                });
      calls.push_back(std::move(call));
    }
    phase.done.WaitForNotificationWithTimeout(absl::Minutes(5));
    absl::MutexLock lock(&phase.mu);
    return phase.failures == 0 && phase.remaining == 0;
  }

 private:
  struct Phase {
    explicit Phase(int count) : remaining(count) {
      if (count == 0) done.Notify();
    }
    void Finish(bool ok, int64_t got_round) {
      absl::MutexLock lock(&mu);
      if (!ok) ++failures;
      if (got_round > 0) round = got_round;
      if (--remaining == 0) done.Notify();
    }
    absl::Mutex mu;
    int remaining ABSL_GUARDED_BY(mu);
    int failures ABSL_GUARDED_BY(mu) = 0;
    int64_t round ABSL_GUARDED_BY(mu) = 0;
    absl::Notification done;
  };
  struct JoinCall {
    v1::JoinRequest request;
    v1::Rendezvous::Stub* stub = nullptr;
    // One context and response per attempt; kept until the phase ends.
    std::vector<std::unique_ptr<grpc::ClientContext>> contexts;
    std::vector<std::unique_ptr<v1::JoinResponse>> responses;
    int attempts = 0;
  };
  struct GetCall {
    grpc::ClientContext ctx;
    v1::GetRequest request;
    v1::GetResponse response;
  };

  static void IssueJoin(const std::shared_ptr<JoinCall>& call, Phase* phase) {
    auto ctx = std::make_unique<grpc::ClientContext>();
    ctx->set_deadline(std::chrono::system_clock::now() + std::chrono::seconds(60));
    auto response = std::make_unique<v1::JoinResponse>();
    grpc::ClientContext* raw_ctx = ctx.get();
    v1::JoinResponse* raw_response = response.get();
    call->contexts.push_back(std::move(ctx));
    call->responses.push_back(std::move(response));
    ++call->attempts;
    call->stub->async()->Join(raw_ctx, &call->request, raw_response,
                              [call, phase, raw_response](grpc::Status status) {
                                if (status.ok() &&
                                    raw_response->outcome() != v1::JoinResponse::COMPLETE &&
                                    call->attempts < 1000) {
                                  IssueJoin(call, phase);  // PENDING: ask again
                                  return;
                                }
                                if (!status.ok()) {
                                  std::fprintf(stderr, "Join failed: %s\n",
                                               status.error_message().c_str());
                                }
                                phase->Finish(status.ok(), raw_response->assignment().round());
                              });
  }

  std::vector<std::unique_ptr<v1::Rendezvous::Stub>> stubs_;
};

int ChildMain(int index, const std::string& endpoint, int channels, int first, int last, int n,
              int from_parent, int to_parent) {
  Agents agents(endpoint, channels);
  const std::string run = absl::StrCat("bench-", n);
  WriteLine(to_parent, "ready");
  for (;;) {
    std::string command = ReadLine(from_parent);
    if (command == "join") {
      int64_t round = agents.JoinAll(run, first, last, n);
      WriteLine(to_parent, absl::StrCat("joined ", round));
    } else if (absl::StartsWith(command, "store ")) {
      int64_t round = 0;
      (void)absl::SimpleAtoi(command.substr(6), &round);
      bool ok = agents.ReadAll(run, round, 8 * (last - first), index == 0);
      WriteLine(to_parent, ok ? "stored ok" : "stored failed");
    } else {
      return 0;  // "exit" or the parent went away
    }
  }
}

// --- the parent ---------------------------------------------------------------

struct Server {
  pid_t pid = -1;
  std::string endpoint;
  int metrics_port = -1;
};

Server StartServer(const std::string& binary, bool metrics) {
  int out[2];
  if (pipe(out) != 0) return {};
  pid_t pid = fork();
  if (pid == 0) {
    dup2(out[1], 1);
    close(out[0]);
    close(out[1]);
    execl(binary.c_str(), binary.c_str(), "--host", "127.0.0.1", "--port", "0", "--log_level",
          "warn", "--max_keys_per_run", "1000000", "--metrics_port", metrics ? "0" : "-1",
          static_cast<char*>(nullptr));
    std::perror("exec rendezvous_server");
    _exit(127);
  }
  close(out[1]);
  std::string line = ReadLine(out[0]);
  std::string metrics_line = metrics ? ReadLine(out[0]) : "";
  close(out[0]);
  const std::string prefix = "rendezvous_server listening on ";
  if (line.rfind(prefix, 0) != 0) {
    std::fprintf(stderr, "rendezvous_server did not start: '%s'\n", line.c_str());
    kill(pid, SIGKILL);
    waitpid(pid, nullptr, 0);
    return {};
  }
  Server server{pid, line.substr(prefix.size())};
  if (metrics) {
    // "rendezvous_server metrics on http://127.0.0.1:PORT (...)"
    const size_t colon = metrics_line.rfind(':', metrics_line.find(" ("));
    if (colon == std::string::npos ||
        !absl::SimpleAtoi(metrics_line.substr(colon + 1, metrics_line.find(" (") - colon - 1),
                          &server.metrics_port)) {
      std::fprintf(stderr, "rendezvous_server printed no metrics port: '%s'\n", metrics_line.c_str());
      kill(pid, SIGKILL);
      waitpid(pid, nullptr, 0);
      return {};
    }
  }
  return server;
}

double PeakRssMiB(pid_t pid) {
  std::ifstream status(absl::StrCat("/proc/", pid, "/status"));
  std::string line;
  while (std::getline(status, line)) {
    if (line.rfind("VmHWM:", 0) == 0) {
      int64_t kb = 0;
      std::vector<std::string> parts = absl::StrSplit(line, ' ', absl::SkipEmpty());
      if (parts.size() >= 2 && absl::SimpleAtoi(parts[1], &kb)) return kb / 1024.0;
    }
  }
  return -1;
}

struct Child {
  pid_t pid;
  int to;
  int from;
};

struct SizeResult {
  bool ok = false;
  double join_s = -1, store_s = -1, rss = -1;
  int scrapes = 0;  // with metrics: scrapes and page fetches answered 200
  double CallsPerSecond(int n) const { return (9.0 * n + 1) / (join_s + store_s); }
};

// Fetches /metrics and the run's page JSON every 100 ms until stopped.
class Scraper {
 public:
  Scraper(int port, std::string run, int interval_ms)
      : client_("127.0.0.1", port), run_(std::move(run)), interval_(absl::Milliseconds(interval_ms)) {
    thread_ = std::thread([this] { Loop(); });
  }
  int Stop() {
    stop_.Notify();
    thread_.join();
    return ok_;
  }

 private:
  void Loop() {
    // The first fetch at once (the run is already being formed), then every interval.
    do {
      auto metrics = client_.Get("/metrics");
      auto page = client_.Get(("/api/run/" + run_).c_str());
      ok_ += (metrics && metrics->status == 200) + (page && (page->status == 200 || page->status == 404));
    } while (!stop_.WaitForNotificationWithTimeout(interval_));
  }
  httplib::Client client_;
  std::string run_;
  absl::Duration interval_;
  absl::Notification stop_;
  int ok_ = 0;
  std::thread thread_;
};

// Forks the agent processes (each runs ChildMain over its share of the n
// agents); an empty list when a pipe cannot be made.
std::vector<Child> ForkAgents(const Flags& flags, int n, const std::string& endpoint) {
  const int procs = std::max(1, std::min(flags.procs, n));
  std::vector<Child> children;
  for (int p = 0; p < procs; ++p) {
    int down[2], up[2];
    if (pipe(down) != 0 || pipe(up) != 0) return {};
    int first = static_cast<int>(static_cast<int64_t>(n) * p / procs);
    int last = static_cast<int>(static_cast<int64_t>(n) * (p + 1) / procs);
    pid_t pid = fork();
    if (pid == 0) {
      close(down[1]);
      close(up[0]);
      for (const Child& c : children) {
        close(c.to);
        close(c.from);
      }
      _exit(ChildMain(p, endpoint, flags.channels, first, last, n, down[0], up[1]));
    }
    close(down[0]);
    close(up[1]);
    children.push_back(Child{pid, down[1], up[0]});
  }
  return children;
}

// Tells every agent process to exit and reaps it, then the server.
void StopAll(const std::vector<Child>& children, const Server& server) {
  for (const Child& c : children) {
    WriteLine(c.to, "exit");
    close(c.to);
    close(c.from);
    waitpid(c.pid, nullptr, 0);
  }
  kill(server.pid, SIGTERM);
  waitpid(server.pid, nullptr, 0);
}

void PrintSize(const Flags& flags, int n, bool metrics, const SizeResult& r) {
  if (flags.json) {
    std::printf(
        "{\"n\": %d, \"round_s\": %.4f, \"store_s\": %.4f, \"gets\": %d, "
        "\"server_peak_rss_mib\": %.1f, \"metrics\": %s, \"calls_per_s\": %.0f, \"ok\": %s}\n",
        n, r.join_s, r.store_s, 8 * n, r.rss, metrics ? "true" : "false", r.CallsPerSecond(n),
        r.ok ? "true" : "false");
  } else {
    std::printf(
        "N=%-6d round: %7.3f s   store (%d Gets): %7.3f s   server peak RSS: %7.1f MiB   %8.0f calls/s%s%s\n",
        n, r.join_s, 8 * n, r.store_s, r.rss, r.CallsPerSecond(n),
        metrics ? absl::StrCat("   metrics+page (", r.scrapes, " fetches)").c_str() : "",
        r.ok ? "" : "   FAILED");
  }
  std::fflush(stdout);
}

// One size: n agents form a round (timed), then read its keys (timed).
SizeResult RunSize(const Flags& flags, int n, bool metrics) {
  SizeResult result;
  Server server = StartServer(flags.server, metrics);
  if (server.pid < 0) return result;
  std::vector<Child> children = ForkAgents(flags, n, server.endpoint);
  bool ok = !children.empty();
  for (const Child& c : children) ok &= ReadLine(c.from) == "ready";

  // After the forks: the children must not inherit a thread.
  std::unique_ptr<Scraper> scraper;
  if (metrics && std::getenv("RDZV_BENCH_NO_SCRAPER") == nullptr) {
    scraper = std::make_unique<Scraper>(server.metrics_port, absl::StrCat("bench-", n), flags.scrape_ms);
  }
  absl::Time start = absl::Now();
  for (const Child& c : children) WriteLine(c.to, "join");
  int64_t round = -1;
  for (const Child& c : children) {
    std::string line = ReadLine(c.from);
    int64_t r = -1;
    if (!absl::StartsWith(line, "joined ") || !absl::SimpleAtoi(line.substr(7), &r) || r <= 0) {
      ok = false;
    }
    round = r;
  }
  result.join_s = absl::ToDoubleSeconds(absl::Now() - start);
  result.store_s = -1;
  if (ok) {
    start = absl::Now();
    for (const Child& c : children) WriteLine(c.to, absl::StrCat("store ", round));
    for (const Child& c : children) ok &= ReadLine(c.from) == "stored ok";
    result.store_s = absl::ToDoubleSeconds(absl::Now() - start);
  }
  if (scraper != nullptr) result.scrapes = scraper->Stop();
  result.rss = PeakRssMiB(server.pid);
  StopAll(children, server);
  result.ok = ok;
  PrintSize(flags, n, metrics, result);
  return result;
}

double Median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  return v.empty() ? 0 : v.size() % 2 ? v[v.size() / 2] : (v[v.size() / 2 - 1] + v[v.size() / 2]) / 2;
}

// R runs without metrics and R with, interleaved; the medians and the change.
bool RunOverhead(const Flags& flags, int n) {
  // Each pair's two runs share the machine's load of the moment; the
  // median of the pairs' ratios is steadier than the ratio of the medians
  // on a machine others use too.
  std::vector<double> off, on, ratios;
  bool ok = true;
  for (int r = 0; r < flags.overhead_repeats; ++r) {
    double pair[2] = {0, 0};
    for (bool metrics : {false, true}) {
      SizeResult result = RunSize(flags, n, metrics);
      ok &= result.ok;
      pair[metrics] = result.CallsPerSecond(n);
      (metrics ? on : off).push_back(pair[metrics]);
    }
    ratios.push_back(pair[1] / pair[0]);
  }
  const double base = Median(off), with = Median(on);
  std::printf("N=%-6d median calls/s: %.0f without metrics, %.0f with a scraper and a page open "
              "(%+.1f%%); median of the %d pairs' ratios %+.1f%%\n",
              n, base, with, 100.0 * (with - base) / base, flags.overhead_repeats,
              100.0 * (Median(ratios) - 1));
  std::fflush(stdout);
  return ok;
}

std::string SiblingBinary(const char* name) {
  char self[4096];
  ssize_t len = readlink("/proc/self/exe", self, sizeof(self) - 1);
  if (len <= 0) return name;
  std::string path(self, len);
  return path.substr(0, path.rfind('/') + 1) + name;
}

}  // namespace

int main(int argc, char** argv) {
  Flags flags;
  flags.server = SiblingBinary("rendezvous_server");
  for (int i = 1; i < argc; ++i) {
    absl::string_view arg = argv[i];
    auto value = [&](absl::string_view name) -> std::optional<std::string> {
      if (!absl::StartsWith(arg, name)) return std::nullopt;
      return std::string(arg.substr(name.size()));
    };
    if (auto v = value("--sizes=")) {
      flags.sizes.clear();
      for (absl::string_view s : absl::StrSplit(*v, ',')) {
        int n = 0;
        if (!absl::SimpleAtoi(s, &n) || n < 1) {
          std::fprintf(stderr, "rendezvous_bench: bad size '%s' in --sizes\n",
                       std::string(s).c_str());
          return 2;
        }
        flags.sizes.push_back(n);
      }
    } else if (auto v = value("--procs=")) {
      if (!absl::SimpleAtoi(*v, &flags.procs) || flags.procs < 1) {
        std::fprintf(stderr, "rendezvous_bench: bad --procs '%s'\n", v->c_str());
        return 2;
      }
    } else if (auto v = value("--channels=")) {
      if (!absl::SimpleAtoi(*v, &flags.channels) || flags.channels < 1) {
        std::fprintf(stderr, "rendezvous_bench: bad --channels '%s'\n", v->c_str());
        return 2;
      }
    } else if (auto v = value("--server=")) {
      flags.server = *v;
    } else if (arg == "--json") {
      flags.json = true;
    } else if (auto v = value("--scrape_ms=")) {
      if (!absl::SimpleAtoi(*v, &flags.scrape_ms) || flags.scrape_ms < 1) {
        std::fprintf(stderr, "rendezvous_bench: bad --scrape_ms '%s'\n", v->c_str());
        return 2;
      }
    } else if (auto v = value("--overhead=")) {
      if (!absl::SimpleAtoi(*v, &flags.overhead_repeats) || flags.overhead_repeats < 1) {
        std::fprintf(stderr, "rendezvous_bench: bad --overhead '%s'\n", v->c_str());
        return 2;
      }
    } else {
      std::fprintf(stderr,
                   "usage: rendezvous_bench [--sizes=100,1000,10000] [--procs=8] [--channels=4] "
                   "[--server=PATH] [--json] [--overhead=R [--scrape_ms=1000]]\nunknown argument '%s'\n",
                   argv[i]);
      return 2;
    }
  }
  if (!flags.json) {
    std::printf("rendezvous_bench: %d client processes x %d channels, server %s\n", flags.procs,
                flags.channels, flags.server.c_str());
  }
  bool ok = true;
  for (int n : flags.sizes) {
    ok &= flags.overhead_repeats > 0 ? RunOverhead(flags, n) : RunSize(flags, n, false).ok;
  }
  return ok ? 0 : 1;
}
