// `train`: the bundled worker. Reads its rank and round from the launcher's
// environment (docs/ENVIRONMENT.md), opens the round's rendezvous store,
// builds the communicator (--backend), trains the seed's MLP on
// Fashion-MNIST with DDP, heartbeats to the agent, prints progress on rank 0,
// and on an uncaught error writes a torchrun-compatible error file.
#include <unistd.h>

#include <cstdio>
#include <cstdlib>
#include <exception>
#include <iostream>
#include <memory>
#include <optional>
#include <string>

#include "CLI/CLI.hpp"
#include "absl/status/statusor.h"
#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"
#include "base/token.h"
#include "rendezvous/client.h"
#include "rendezvous/store.h"
#include "worker/comm/backend.h"
#include "worker/comm/comm.h"
#include "worker/data/data_file.h"
#include "worker/agent/env.h"
#include "worker/agent/error_file.h"
#include "worker/agent/heartbeat.h"
#include "worker/data/idx.h"
#include "worker/training/metrics.h"
#include "worker/comm/nccl_comm.h"
#include "worker/training/progress.h"
#include "worker/training/sample_log.h"
#include "worker/agent/startup.h"
#include "worker/training/trainer.h"

namespace cpptorchrun::worker {
namespace {

constexpr char kVersion[] = "train 0.1.0";

struct Flags {
  TrainConfig train;
  std::string backend = "auto";
  std::string data_dir = "/usr/share/datasets/fashion-mnist";
  std::string data_cache;
  int64_t limit = 0;
  double bucket_cap_mb = 25;
  std::string allreduce = "overlap";
  double heartbeat_interval = 1.0;
  double comm_timeout = 300;
  std::string metrics_json;
  std::string sample_log;
  int threads = 1;
  std::string progress = "auto";
};

// The error path's state: where to report, filled in as it becomes known.
struct Reporting {
  std::string error_file;
  HeartbeatReporter* heartbeat = nullptr;
  int rank = 0;
};

int Fail(const Reporting& reporting, const std::string& type, const std::string& what,
         const std::string& context) {
  std::fprintf(stderr, "train[rank %d]: error: %s: %s\n", reporting.rank, type.c_str(), what.c_str());
  if (reporting.heartbeat != nullptr) reporting.heartbeat->Failed(absl::StrCat(type, ": ", what));
  if (!reporting.error_file.empty()) {
    absl::Status written = WriteErrorFile(reporting.error_file, type, what, context,
                                          absl::ToUnixSeconds(absl::Now()));
    if (!written.ok()) std::fprintf(stderr, "train: %s\n", std::string(written.message()).c_str());
  }
  return 1;
}

std::string StatusType(const absl::Status& status) {
  return absl::StrCat("absl::Status(", absl::StatusCodeToString(status.code()), ")");
}

absl::StatusOr<std::unique_ptr<rdzv::Store>> OpenStore(
    const WorkerEnv& env, std::unique_ptr<rdzv::RendezvousClient>* client) {
  if (env.rdzv_endpoint.empty()) {
    if (env.world_size > 1) {
      return absl::FailedPreconditionError(absl::StrCat(
          "WORLD_SIZE=", env.world_size,
          " needs the round's rendezvous store, but CPPTORCHRUN_RDZV_ENDPOINT is not set "
          "(start train under cpptorchrun)"));
    }
    return rdzv::NewInMemoryStore();
  }
  rdzv::ClientOptions options;
  options.endpoint = env.rdzv_endpoint;
  options.tls_root_cert_file = env.rdzv_ca_file;
  if (!env.rdzv_token_file.empty()) {
    absl::StatusOr<std::string> token = base::ReadTokenFile(env.rdzv_token_file);
    if (!token.ok()) return token.status();
    options.token = *token;
  }
  *client = rdzv::NewGrpcRendezvousClient(options);
  std::unique_ptr<rdzv::Store> store = (*client)->OpenStore(env.run_id, env.rdzv_round);
  if (store == nullptr) {
    return absl::UnavailableError(absl::StrCat("cannot open the store of run ", env.run_id,
                                               " round ", env.rdzv_round, " at ",
                                               env.rdzv_endpoint));
  }
  return store;
}

int Run(const Flags& flags, Reporting& reporting) {
  StartupPhases startup;
  const double main_at = MonotonicSeconds();
  if (std::optional<double> since = SecondsSinceProcessStart(); since.has_value()) {
    startup.before_main = *since;
  }
  absl::StatusOr<WorkerEnv> env = ParseWorkerEnv([](const char* name) { return std::getenv(name); });
  if (!env.ok()) return Fail(reporting, "InvalidEnvironment", std::string(env.status().message()), "");
  reporting.error_file = env->error_file;
  reporting.rank = env->rank;

  TrainConfig config = flags.train;
  config.bucket_cap_bytes = static_cast<int64_t>(flags.bucket_cap_mb * (1 << 20));
  absl::StatusOr<AllReduceMode> allreduce = ParseAllReduceMode(flags.allreduce);
  if (!allreduce.ok()) return Fail(reporting, "InvalidArgument", std::string(allreduce.status().message()), "flags");
  config.allreduce = *allreduce;
  config.restart_count = env->restart_count;
  // Fault injection kills the first attempt only, so that a restarted
  // group (TORCHELASTIC_RESTART_COUNT > 0) runs to the end.
  if (env->restart_count > 0) config.fail_after_steps = 0;
  if (absl::Status valid = ValidateConfig(config); !valid.ok()) {
    return Fail(reporting, "InvalidArgument", std::string(valid.message()), "flags");
  }
  absl::StatusOr<BackendKind> kind =
      ChooseBackend(flags.backend, env->fake_gpu.has_value(), NcclBuilt(),
                    flags.backend == "gloo" ? 0 : CudaDeviceCount());
  if (!kind.ok()) return Fail(reporting, "InvalidArgument", std::string(kind.status().message()), "flags");
  SetTorchThreads(flags.threads);

  // The agent first, so a slow start (data, bootstrap) still heartbeats.
  std::unique_ptr<AgentClient> agent =
      env->agent_socket.empty() ? NewNullAgentClient() : NewGrpcAgentClient(env->agent_socket);
  HeartbeatOptions heartbeat_options;
  heartbeat_options.interval = absl::Seconds(flags.heartbeat_interval);
  heartbeat_options.rank = env->rank;
  heartbeat_options.local_rank = env->local_rank;
  heartbeat_options.pid = ::getpid();
  std::optional<HeartbeatReporter> heartbeat;
  if (!env->agent_socket.empty()) {
    heartbeat.emplace(agent.get(), heartbeat_options);
    reporting.heartbeat = &*heartbeat;
  }

  const double data_at = MonotonicSeconds();
  absl::StatusOr<Dataset> train = LoadMnistSplit(flags.data_dir, Split::kTrain, flags.limit, flags.data_cache);
  if (!train.ok()) return Fail(reporting, "DataError", std::string(train.status().message()), flags.data_dir);
  absl::StatusOr<Dataset> test = LoadMnistSplit(flags.data_dir, Split::kTest, 0, flags.data_cache);
  if (!test.ok()) return Fail(reporting, "DataError", std::string(test.status().message()), flags.data_dir);

  const double comm_at = MonotonicSeconds();
  startup.data = comm_at - data_at;
  std::unique_ptr<rdzv::RendezvousClient> client;
  absl::StatusOr<std::unique_ptr<rdzv::Store>> store = OpenStore(*env, &client);
  if (!store.ok()) return Fail(reporting, "RendezvousError", std::string(store.status().message()), "");
  CommSetup setup;
  setup.kind = *kind;
  setup.store = store->get();
  setup.rank = env->rank;
  setup.world_size = env->world_size;
  setup.local_rank = env->local_rank;
  setup.fake_gpu = env->fake_gpu;
  setup.local_addr = env->local_addr;
  setup.timeout = absl::Seconds(flags.comm_timeout);
  absl::StatusOr<std::unique_ptr<Communicator>> comm = MakeCommunicator(setup);
  if (!comm.ok()) {
    return Fail(reporting, "CommunicatorError", std::string(comm.status().message()),
                absl::StrCat("backend ", BackendName(*kind)));
  }

  startup.communicator = MonotonicSeconds() - comm_at;
  if (startup.before_main >= 0) startup.total = startup.before_main + MonotonicSeconds() - main_at;
  const bool terminal = ::isatty(STDOUT_FILENO) == 1;
  const bool show = env->rank == 0 && flags.progress != "none";
  ConsoleProgress progress(stdout, flags.progress == "bar" || (flags.progress == "auto" && terminal));
  TrainDeps deps;
  deps.comm = comm->get();
  deps.train = &*train;
  deps.test = &*test;
  if (show) deps.observers.push_back(&progress);
  if (heartbeat.has_value()) deps.observers.push_back(&*heartbeat);
  std::unique_ptr<SampleLog> sample_log;
  if (!flags.sample_log.empty()) {
    absl::StatusOr<std::unique_ptr<SampleLog>> opened =
        SampleLog::Open(flags.sample_log, env->rdzv_round, env->rank, env->world_size);
    if (!opened.ok()) return Fail(reporting, "InvalidArgument", std::string(opened.status().message()), "flags");
    sample_log = *std::move(opened);
    deps.observers.push_back(sample_log.get());
  }
  if (env->rank == 0) {
    std::printf("train: world %d, backend %s, %lld samples, batch %lld per rank, %lld epochs; %s\n",
                env->world_size, (*comm)->backend().c_str(), static_cast<long long>(train->size()),
                static_cast<long long>(config.batch_size), static_cast<long long>(config.epochs),
                FormatStartup(startup).c_str());
    if ((config.allreduce == AllReduceMode::kOff || config.allreduce == AllReduceMode::kRotate) &&
        env->world_size > 1) {
      std::printf("train: --allreduce %s: gradients are not averaged on %s, the replicas drift "
                  "apart (a benchmark, not data parallelism)\n",
                  AllReduceModeName(config.allreduce),
                  config.allreduce == AllReduceMode::kOff ? "any step" : "a third of the steps");
    }
    std::fflush(stdout);
  }
  absl::StatusOr<TrainMetrics> metrics = Train(config, deps);
  if (!metrics.ok()) {
    (*comm)->Abort(std::string(metrics.status().message()));
    return Fail(reporting, StatusType(metrics.status()), std::string(metrics.status().message()),
                absl::StrCat("training, rank ", env->rank, " of ", env->world_size));
  }
  if (!flags.metrics_json.empty() && env->rank == 0) {
    if (absl::Status written = WriteMetricsJson(flags.metrics_json, *metrics); !written.ok()) {
      return Fail(reporting, "IOError", std::string(written.message()), "--metrics_json");
    }
  }
  reporting.heartbeat = nullptr;
  return 0;
}

}  // namespace
}  // namespace cpptorchrun::worker

int main(int argc, char** argv) {
  using cpptorchrun::worker::Flags;
  Flags flags;
  CLI::App app{"train: the seed's MLP on Fashion-MNIST with data-parallel SGD (DDP over Gloo, "
               "NCCL or fake GPUs). Run it under cpptorchrun; alone it trains as a world of one."};
  app.set_version_flag("--version", cpptorchrun::worker::kVersion);
  app.option_defaults()->always_capture_default();
  app.add_option("--backend", flags.backend, "auto (NCCL on real GPUs, Gloo otherwise), nccl, gloo")
      ->check(CLI::IsMember({"auto", "nccl", "gloo"}));
  app.add_option("--epochs", flags.train.epochs, "passes over the training set")->check(CLI::PositiveNumber);
  app.add_option("--batch_size", flags.train.batch_size, "samples per rank and step")->check(CLI::PositiveNumber);
  app.add_option("--lr", flags.train.lr, "Adam's learning rate")->check(CLI::PositiveNumber);
  app.add_option("--seed", flags.train.seed, "seed of the initial weights and of the shuffles");
  app.add_option("--data_dir", flags.data_dir, "folder with the MNIST-format IDX files (gzip or raw)");
  flags.data_cache = cpptorchrun::worker::DefaultDataCacheDir([](const char* n) { return std::getenv(n); });
  app.add_option("--data_cache", flags.data_cache,
                 "folder for inflated copies of gzip data files, so a restart reads them at once "
                 "(default $CPPTORCHRUN_CACHE_DIR, $XDG_CACHE_HOME/cpptorchrun or ~/.cache/cpptorchrun; "
                 "\"\": none)");
  app.add_option("--limit", flags.limit, "train on the first N samples only (0: all)")->check(CLI::NonNegativeNumber);
  app.add_flag("--drop_last", flags.train.drop_last, "drop the tail instead of padding the last shard");
  app.add_option("--grad_accum_steps", flags.train.grad_accum_steps,
                 "batches per optimizer step (all-reduce only on the last)")->check(CLI::PositiveNumber);
  app.add_flag("--scale_lr", flags.train.scale_lr, "linear scaling rule: lr x world x accumulation, with warm-up");
  app.add_option("--warmup_steps", flags.train.warmup_steps, "optimizer steps of warm-up under --scale_lr")
      ->check(CLI::NonNegativeNumber);
  app.add_option("--bucket_cap_mb", flags.bucket_cap_mb, "DDP bucket size cap in MB")->check(CLI::PositiveNumber);
  app.add_option("--allreduce", flags.allreduce,
                 "when DDP all-reduces the gradients: overlap (during the backward pass), "
                 "after_backward, off (no averaging), or rotate (the three in turn, 4 steps each); "
                 "all but overlap are for benchmarks")
      ->check(CLI::IsMember({"overlap", "after_backward", "off", "rotate"}));
  app.add_option("--hidden", flags.train.hidden,
                 "the MLP's hidden layer widths, comma-separated (the seed's: 512)")
      ->delimiter(',')
      ->expected(1, 16);
  app.add_option("--checkpoint_dir", flags.train.checkpoint_dir, "where rank 0 writes checkpoints (empty: none)");
  app.add_option("--checkpoint_every", flags.train.checkpoint_every,
                 "optimizer steps between checkpoints (0: only at epoch ends)")->check(CLI::NonNegativeNumber);
  app.add_option("--keep_checkpoints", flags.train.keep_checkpoints, "checkpoints kept")->check(CLI::PositiveNumber);
  app.add_option("--heartbeat_interval", flags.heartbeat_interval, "seconds between heartbeats to the agent")
      ->check(CLI::PositiveNumber);
  app.add_option("--comm_timeout", flags.comm_timeout, "seconds a bootstrap or collective may take")
      ->check(CLI::PositiveNumber);
  app.add_option("--metrics_json", flags.metrics_json, "write the final figures as JSON here (rank 0)");
  app.add_option("--sample_log", flags.sample_log,
                 "write every batch's sample indices under this folder, a file per round and rank "
                 "(worker/sample_log.h)");
  app.add_option("--threads", flags.threads, "LibTorch intra-op threads per worker")->check(CLI::PositiveNumber);
  app.add_option("--progress", flags.progress, "auto (a bar on a terminal), bar, lines, none")
      ->check(CLI::IsMember({"auto", "bar", "lines", "none"}));
  app.add_option("--fail_after_steps", flags.train.fail_after_steps,
                 "fault injection for tests: fail after N batches (first attempt only)")->group("");
  try {
    app.parse(argc, argv);
  } catch (const CLI::ParseError& e) {
    return app.exit(e);
  }
  cpptorchrun::worker::Reporting reporting;
  try {
    return cpptorchrun::worker::Run(flags, reporting);
  } catch (const std::exception& e) {
    return cpptorchrun::worker::Fail(reporting, "std::exception", e.what(), "uncaught in train");
  }
}
