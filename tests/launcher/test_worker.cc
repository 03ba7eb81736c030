// A small worker for the launcher's integration tests. Flags (applied in
// this order; "rank-scoped" flags take RANK:VALUE and apply only on that
// global rank, or on every rank with *:VALUE):
//   --record DIR         write DIR/env.<rank>.<restart> (the environment)
//                        and DIR/pid.<rank>.<restart> (pid, pgid)
//   --on_signal SIG      on SIG write DIR/got.<SIG>.<rank> and exit 0
//   --ignore_sigterm     ignore SIGTERM
//   --flood N            N lines of varying length to stdout and to stderr
//   --print TEXT         one line to stdout
//   --error_file MSG     rank-scoped: write TORCHELASTIC_ERROR_FILE
//   --fail_until K       rank-scoped (R:K): exit 1 while restart count < K
//   --fail_once PATH     rank-scoped: exit 1 if PATH does not exist (creating it)
//   --exit CODE          rank-scoped: exit with CODE
//   --raise SIG          rank-scoped: die of SIG
//   --heartbeats N       send N heartbeats to CPPTORCHRUN_AGENT_SOCKET
//   --hang               wait for signals forever (bounded: 10 minutes)
//   --wait_file PATH     rank-scoped: wait (bounded: 10 minutes) until PATH exists
#include <signal.h>
#include <unistd.h>

#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <string>
#include <thread>
#include <vector>

#include "grpcpp/grpcpp.h"
#include "proto/agent.grpc.pb.h"

extern char** environ;

namespace {

std::string record_dir;
int rank = 0;
int restart = 0;

int EnvInt(const char* name) {
  const char* v = std::getenv(name);
  return v == nullptr ? 0 : std::atoi(v);
}

int SignalByName(const std::string& n) {
  if (n == "SIGTERM") return SIGTERM;
  if (n == "SIGINT") return SIGINT;
  if (n == "SIGHUP") return SIGHUP;
  if (n == "SIGQUIT") return SIGQUIT;
  if (n == "SIGUSR1") return SIGUSR1;
  if (n == "SIGUSR2") return SIGUSR2;
  if (n == "SIGSEGV") return SIGSEGV;
  if (n == "SIGABRT") return SIGABRT;
  if (n == "SIGKILL") return SIGKILL;
  std::fprintf(stderr, "test_worker: unknown signal %s\n", n.c_str());
  std::exit(100);
}

// "R:VALUE" or "*:VALUE": the value when it applies to this rank.
bool ForMe(const std::string& arg, std::string* value) {
  size_t colon = arg.find(':');
  if (colon == std::string::npos) {
    *value = arg;
    return true;
  }
  std::string who = arg.substr(0, colon);
  *value = arg.substr(colon + 1);
  return who == "*" || std::atoi(who.c_str()) == rank;
}

volatile sig_atomic_t got_signal = 0;
void OnSignal(int s) { got_signal = s; }

std::string Name(int s) {
  switch (s) {
    case SIGTERM: return "SIGTERM";
    case SIGINT: return "SIGINT";
    case SIGHUP: return "SIGHUP";
    case SIGQUIT: return "SIGQUIT";
    case SIGUSR1: return "SIGUSR1";
    case SIGUSR2: return "SIGUSR2";
  }
  return std::to_string(s);
}

// Waits until a handled signal arrives or `until` returns true, at most 10
// minutes; exits 0 after recording a signal.
template <typename F>
void WaitFor(F until) {
  auto deadline = std::chrono::steady_clock::now() + std::chrono::minutes(10);
  while (std::chrono::steady_clock::now() < deadline) {
    if (got_signal != 0) {
      std::ofstream(record_dir + "/got." + Name(got_signal) + "." + std::to_string(rank)) << getpid();
      std::exit(0);
    }
    if (until()) return;
    // A signal interrupts this wait at once.
    struct timespec ts = {0, 20 * 1000 * 1000};
    nanosleep(&ts, nullptr);
  }
  std::exit(101);
}

}  // namespace

int main(int argc, char** argv) {
  rank = EnvInt("RANK");
  restart = EnvInt("TORCHELASTIC_RESTART_COUNT");
  std::vector<std::string> args(argv + 1, argv + argc);
  for (size_t i = 0; i < args.size(); ++i) {
    const std::string& a = args[i];
    auto next = [&]() -> std::string {
      if (i + 1 >= args.size()) {
        std::fprintf(stderr, "test_worker: %s needs a value\n", a.c_str());
        std::exit(100);
      }
      return args[++i];
    };
    std::string v;
    if (a == "--record") {
      record_dir = next();
      std::string suffix = std::to_string(rank) + "." + std::to_string(restart);
      {
        // Written under a temporary name and renamed: a worker stopped while
        // writing (a peer failed first) leaves no env file, never a partial
        // one, and a test that sees the pid file reads a whole environment.
        std::string tmp = record_dir + "/.env." + suffix;
        {
          std::ofstream env(tmp);
          for (char** e = environ; *e != nullptr; ++e) env << *e << "\n";
        }
        std::rename(tmp.c_str(), (record_dir + "/env." + suffix).c_str());
      }
      std::ofstream(record_dir + "/pid." + suffix) << getpid() << " " << getpgid(0) << "\n";
    } else if (a == "--on_signal") {
      struct sigaction sa {};
      sa.sa_handler = OnSignal;
      sigaction(SignalByName(next()), &sa, nullptr);
    } else if (a == "--ignore_sigterm") {
      signal(SIGTERM, SIG_IGN);
    } else if (a == "--flood") {
      int n = std::atoi(next().c_str());
      std::string out, err;
      for (int k = 0; k < n; ++k) {
        std::string body(static_cast<size_t>((k * 37 + rank * 11) % 300), static_cast<char>('a' + rank % 26));
        out += "out" + std::to_string(rank) + ":" + std::to_string(k) + ":" + body + ":end\n";
        err += "err" + std::to_string(rank) + ":" + std::to_string(k) + ":" + body + ":end\n";
        if (out.size() > 3000) {
          // Odd-sized writes so lines straddle pipe reads.
          fwrite(out.data(), 1, out.size(), stdout);
          fwrite(err.data(), 1, err.size(), stderr);
          out.clear();
          err.clear();
        }
      }
      fwrite(out.data(), 1, out.size(), stdout);
      fwrite(err.data(), 1, err.size(), stderr);
      fflush(stdout);
      fflush(stderr);
    } else if (a == "--print") {
      std::printf("%s\n", next().c_str());
      std::fflush(stdout);
    } else if (a == "--error_file") {
      if (ForMe(next(), &v)) {
        const char* path = std::getenv("TORCHELASTIC_ERROR_FILE");
        if (path != nullptr) {
          std::ofstream(path) << "{\"message\": {\"message\": \"RuntimeError: " << v
                              << "\", \"extraInfo\": {\"py_callstack\": \"test_worker main\", "
                                 "\"timestamp\": \""
                              << time(nullptr) << "\"}}}";
        }
      }
    } else if (a == "--fail_until") {
      if (ForMe(next(), &v) && restart < std::atoi(v.c_str())) return 1;
    } else if (a == "--fail_once") {
      if (ForMe(next(), &v) && access(v.c_str(), F_OK) != 0) {
        std::ofstream(v) << rank;
        return 1;
      }
    } else if (a == "--exit") {
      if (ForMe(next(), &v)) return std::atoi(v.c_str());
    } else if (a == "--raise") {
      if (ForMe(next(), &v)) {
        signal(SignalByName(v), SIG_DFL);
        raise(SignalByName(v));
      }
    } else if (a == "--heartbeats") {
      int n = std::atoi(next().c_str());
      const char* sock = std::getenv("CPPTORCHRUN_AGENT_SOCKET");
      if (sock == nullptr) return 102;
      auto stub = cpptorchrun::agent::v1::Agent::NewStub(
          grpc::CreateChannel(std::string("unix:") + sock, grpc::InsecureChannelCredentials()));
      for (int k = 0; k < n; ++k) {
        cpptorchrun::agent::v1::Heartbeat hb;
        hb.set_rank(rank);
        hb.set_local_rank(EnvInt("LOCAL_RANK"));
        hb.set_pid(getpid());
        hb.set_step(k);
        hb.set_loss(1.0 / (k + 1));
        cpptorchrun::agent::v1::HeartbeatAck ack;
        grpc::ClientContext ctx;
        ctx.set_deadline(std::chrono::system_clock::now() + std::chrono::seconds(10));
        grpc::Status st = stub->SendHeartbeat(&ctx, hb, &ack);
        if (!st.ok()) {
          std::fprintf(stderr, "heartbeat failed: %s\n", st.error_message().c_str());
          return 103;
        }
      }
    } else if (a == "--hang") {
      WaitFor([] { return false; });
    } else if (a == "--wait_file") {
      if (ForMe(next(), &v)) WaitFor([&] { return access(v.c_str(), F_OK) == 0; });
    } else {
      std::fprintf(stderr, "test_worker: unknown flag %s\n", a.c_str());
      return 100;
    }
  }
  return 0;
}
