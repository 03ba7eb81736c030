// `train`: the bundled worker. Reads its rank and round from the launcher's
// environment (docs/ENVIRONMENT.md), opens the round's rendezvous store,
// builds the communicator (--backend), trains the seed's MLP on
// Fashion-MNIST with DDP, heartbeats to the agent, prints progress on rank 0,
// and on an uncaught error writes a torchrun-compatible error file.
#include <malloc.h>
#include <unistd.h>

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <exception>
#include <iostream>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "CLI/CLI.hpp"
#include "absl/status/statusor.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"
#include "base/become.h"
#include "base/token.h"
#include "rendezvous/client.h"
#include "rendezvous/connect.h"
#include "rendezvous/store.h"
#include "worker/comm/backend.h"
#include "worker/comm/comm.h"
#include "worker/comm/flight_recorder.h"
#include "worker/data/data_file.h"
#include "worker/agent/env.h"
#include "worker/agent/error_file.h"
#include "worker/agent/heartbeat.h"
#include "worker/agent/round_watch.h"
#include "worker/agent/signals.h"
#include "base/signals.h"
#include "worker/data/idx.h"
#include "worker/training/metrics.h"
#include "worker/comm/nccl_comm.h"
#include "worker/training/progress.h"
#include "worker/training/sample_log.h"
#include "worker/agent/startup.h"
#include "worker/training/trainer.h"
#include "worker/train_setup.h"

namespace cpptorchrun::worker {
namespace {

constexpr char kVersion[] = "train 0.1.0";

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

int Fail(const Reporting& reporting, const std::string& type, const absl::Status& status,
         const std::string& context) {
  return Fail(reporting, type, std::string(status.message()), context);
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
  options.tls_cert_file = env.rdzv_cert_file;
  options.tls_key_file = env.rdzv_key_file;
  if (!env.rdzv_token_file.empty()) {
    absl::StatusOr<std::string> token = base::ReadTokenFile(env.rdzv_token_file);
    if (!token.ok()) return token.status();
    options.token = *token;
  }
  absl::StatusOr<std::unique_ptr<rdzv::RendezvousClient>> created = rdzv::CreateRendezvousClient(options);
  if (!created.ok()) return created.status();
  *client = *std::move(created);
  std::unique_ptr<rdzv::Store> store = (*client)->OpenStore(env.run_id, env.rdzv_round);
  if (store == nullptr) {
    return absl::UnavailableError(absl::StrCat("cannot open the store of run ", env.run_id,
                                               " round ", env.rdzv_round, " at ",
                                               env.rdzv_endpoint));
  }
  return store;
}

// The communicator of the round's store, with the backend `kind`, on GPU `device` (NCCL).
absl::StatusOr<std::unique_ptr<Communicator>> OpenCommunicator(const Flags& flags,
                                                               const WorkerEnv& env,
                                                               BackendKind kind,
                                                               rdzv::Store* store, int device) {
  CommSetup setup;
  setup.device = device;
  setup.kind = kind;
  setup.store = store;
  setup.rank = env.rank;
  setup.world_size = env.world_size;
  setup.local_rank = env.local_rank;
  setup.local_world_size = env.local_world_size;
  setup.group_rank = env.group_rank;
  setup.group_world_size = env.group_world_size;
  setup.fake_gpu = env.fake_gpu;
  setup.local_addr = env.local_addr;
  setup.timeout = absl::Seconds(flags.comm_timeout);
  return MakeCommunicator(setup);
}

// In-place recovery (docs/DESIGN.md): how long a worker whose communicator
// failed waits for its launcher's next round before it fails as before.
constexpr absl::Duration kNextRoundWait = absl::Seconds(60);

// What this worker holds of one round: its rendezvous client and store, its
// communicator and the flight-recorded wrapper training uses.
struct RoundComm {
  std::unique_ptr<rdzv::RendezvousClient> client;
  std::unique_ptr<rdzv::Store> store;
  std::unique_ptr<Communicator> comm;
  std::unique_ptr<Communicator> recorded;
};

// The communicator in use, for the round watcher's thread: when the
// launcher says the round is changing, its collective in flight is aborted.
class CurrentComm {
 public:
  void Set(Communicator* comm) {
    absl::MutexLock lock(&mu_);
    comm_ = comm;
  }
  void Abort(const std::string& reason) {
    absl::MutexLock lock(&mu_);
    if (comm_ != nullptr) comm_->Abort(absl::StrCat("the round is changing: ", reason));
  }

 private:
  absl::Mutex mu_;
  Communicator* comm_ ABSL_GUARDED_BY(mu_) = nullptr;
};

// The backend --backend means for this round's layout (the same on every
// rank: the layout is the round's).
absl::StatusOr<BackendKind> BackendFor(const Flags& flags, const WorkerEnv& env) {
  return ChooseBackend(flags.backend, env.fake_gpu.has_value(), NcclBuilt(),
                       flags.backend == "gloo" ? 0 : CudaDeviceCount(), env.world_size, env.local_world_size,
                       env.group_world_size);
}

// In-place recovery's part in the binary (TrainDeps::recover): waits for the
// launcher's next round, opens its store and communicator, and moves this
// worker's identity (environment, heartbeats, error reports, sample log)
// to it. Everything is borrowed from Run.
// How many rounds one in-place recovery tries to join when each ends while
// its communicator forms.
constexpr int kRoundsInARecovery = 8;

struct NextRound {
  const Flags& flags;
  WorkerEnv& env;
  Reporting& reporting;
  HeartbeatReporter& heartbeat;
  RoundWatcher& watcher;
  FlightRecorder& recorder;
  CurrentComm& current;
  SampleLog* sample_log;  // may be null
  std::vector<RoundComm>& rounds;
  int device;  // the first round's LOCAL_RANK: this process's GPU for good

  absl::StatusOr<Communicator*> operator()(const absl::Status& failure) const {
    std::fprintf(stderr, "train[rank %d]: %s; waiting for the next round\n", env.rank,
                 std::string(failure.message()).c_str());
    // This round is left for good: a change pending at a step boundary is
    // not escalated any more, and peers still in a collective of it fail
    // at once instead of at their timeout.
    watcher.TakeChange();
    current.Abort(std::string(failure.message()));
    heartbeat.OnRecovering(std::string(failure.message()), env.rdzv_round);
    // A round can end while its communicator forms (a spare became ready,
    // a peer was lost again): the next one is joined, a bounded number of
    // times, instead of failing the worker.
    int64_t after = env.rdzv_round;
    for (int tries = 1;; ++tries) {
      int64_t joining = -1;
      absl::StatusOr<Communicator*> joined = Join(after, &joining);
      if (joined.ok() || joining < 0 || tries >= kRoundsInARecovery || !watcher.Superseded(joining)) return joined;
      std::fprintf(stderr, "train[rank %d]: round %lld ended while its communicator formed (%s); joining the next\n",
                   env.rank, static_cast<long long>(joining), std::string(joined.status().message()).c_str());
      after = joining;
    }
  }

  // Joins the first round after `after` the launcher assigns: its
  // communicator, then this worker's rank in it. *round: the round tried
  // (-1: none was assigned).
  absl::StatusOr<Communicator*> Join(int64_t after, int64_t* round) const {
    absl::StatusOr<std::map<std::string, std::string>> assigned = watcher.AwaitAssignment(after, kNextRoundWait);
    if (!assigned.ok()) return assigned.status();
    absl::StatusOr<WorkerEnv> next = ParseWorkerEnv([&assigned](const char* name) -> const char* {
      auto it = assigned->find(name);
      return it == assigned->end() ? nullptr : it->second.c_str();
    });
    if (!next.ok()) return next.status();
    *round = next->rdzv_round;
    absl::StatusOr<BackendKind> kind = BackendFor(flags, *next);
    if (!kind.ok()) return kind.status();
    RoundComm joined;
    absl::StatusOr<std::unique_ptr<rdzv::Store>> store = OpenStore(*next, &joined.client);
    if (!store.ok()) return store.status();
    joined.store = *std::move(store);
    absl::StatusOr<std::unique_ptr<Communicator>> comm = OpenCommunicator(flags, *next, *kind, joined.store.get(), device);
    if (!comm.ok()) return comm.status();
    joined.comm = *std::move(comm);
    recorder.Reset();
    joined.recorded = NewFlightRecordedCommunicator(joined.comm.get(), &recorder);
    current.Set(joined.comm.get());
    env = *std::move(next);
    reporting.rank = env.rank;
    heartbeat.OnRejoined(env.rank);
    heartbeat.OnCommunicatorReady();
    if (sample_log != nullptr) {
      if (absl::Status s = sample_log->NextRound(env.rdzv_round, env.rank, env.world_size); !s.ok()) return s;
    }
    std::fprintf(stderr, "train[rank %d]: round %lld: rank %d of %d, backend %s\n", env.rank,
                 static_cast<long long>(env.rdzv_round), env.rank, env.world_size, joined.comm->backend().c_str());
    rounds.push_back(std::move(joined));
    return rounds.back().recorded.get();
  }
};

// The training and test splits.
struct Data {
  Dataset train;
  Dataset test;
};

absl::StatusOr<Data> LoadData(const Flags& flags) {
  absl::StatusOr<Dataset> train = LoadMnistSplit(flags.data_dir, Split::kTrain, flags.limit, flags.data_cache);
  if (!train.ok()) return train.status();
  absl::StatusOr<Dataset> test = LoadMnistSplit(flags.data_dir, Split::kTest, 0, flags.data_cache);
  if (!test.ok()) return test.status();
  return Data{*std::move(train), *std::move(test)};
}

// A SIGTERM that cannot be acted on at a batch boundary (training has not
// begun, or no step ends within kSigtermStepBound: stuck in a collective
// whose peer is gone) ends the worker as a SIGTERM'd one, at once.
constexpr absl::Duration kSigtermStepBound = absl::Seconds(2);

[[noreturn]] void ExitOnSigterm() {
  std::fprintf(stderr, "train: SIGTERM: stopping now, without a checkpoint (training had not begun, or no step "
                       "ended within %s)\n", absl::FormatDuration(kSigtermStepBound).c_str());
  std::fflush(stderr);
  ::_exit(kStoppedExitCode);
}

// The scheduler's signals as this worker takes them (worker/agent/signals.h).
struct Signals {
  SignalCounter counter;
  SigtermDeadline deadline{kSigtermStepBound, ExitOnSigterm};
};

// What observes training: rank 0's console progress, the heartbeats, the
// sample log; owned here, lent to TrainDeps.
struct Observers {
  std::optional<ConsoleProgress> progress;
  std::unique_ptr<SampleLog> sample_log;
  std::vector<TrainObserver*> all;
};

absl::Status AddObservers(const Flags& flags, const WorkerEnv& env, HeartbeatReporter* heartbeat,
                          Observers& observers) {
  if (env.rank == 0 && flags.progress != "none") {
    const bool terminal = ::isatty(STDOUT_FILENO) == 1;
    observers.progress.emplace(stdout, flags.progress == "bar" || (flags.progress == "auto" && terminal));
    observers.all.push_back(&*observers.progress);
  }
  if (heartbeat != nullptr) observers.all.push_back(heartbeat);
  if (!flags.sample_log.empty()) {
    absl::StatusOr<std::unique_ptr<SampleLog>> opened =
        SampleLog::Open(flags.sample_log, env.rdzv_round, env.rank, env.world_size);
    if (!opened.ok()) return opened.status();
    observers.sample_log = *std::move(opened);
    observers.all.push_back(observers.sample_log.get());
  }
  return absl::OkStatus();
}

// Trains with everything opened, and turns the result into the exit code:
// the metrics file on success, the stop on the launcher's request, or the
// failure reported.
int TrainAndEnd(const Flags& flags, WorkerEnv& env, const TrainConfig& config,
                TrainDeps& deps, std::optional<HeartbeatReporter>& heartbeat,
                Reporting& reporting, Signals& signals) {
  if (heartbeat.has_value()) {
    deps.stop_requested = [&heartbeat] { return heartbeat->stop_requested(); };
  }
  // A scheduler's signals (worker/agent/signals.h): each reported once to
  // the launcher, acted on at the next optimizer step.
  bool terminated = false;
  deps.signal_request = [&] {
    signals.deadline.AtBoundary();
    SignalRequest request = SignalRequest::kNone;
    for (int signo : signals.counter.TakeNew()) {
      const SignalRequest r = SignalRequestFor(signo);
      request = std::max(request, r);
      if (r == SignalRequest::kCheckpointAndStop) terminated = true;
      std::fprintf(stderr, "train[rank %d]: received %s: %s at the next optimizer step, then %s\n", env.rank,
                   SignalName(signo).c_str(),
                   config.checkpoint_dir.empty() ? "no --checkpoint_dir, so no checkpoint" : "a checkpoint",
                   r == SignalRequest::kCheckpointAndStop ? "stopping" : "training goes on");
      if (heartbeat.has_value()) heartbeat->OnSignal(signo);
    }
    return request;
  };
  deps.on_signal_checkpoint = [&](int64_t step, bool stopping) {
    if (env.rank == 0 && !config.checkpoint_dir.empty()) {
      std::fprintf(stderr, "train[rank 0]: checkpoint of step %lld written for the signal; %s\n",
                   static_cast<long long>(step), stopping ? "stopping" : "training goes on");
    }
    if (heartbeat.has_value()) heartbeat->OnSignalCheckpoint(step, stopping);
  };
  signals.deadline.TrainingStarted();
  // Train has aborted the communicator on any failure.
  absl::StatusOr<TrainMetrics> metrics = Train(config, deps);
  switch (EndingOf(metrics.status(), heartbeat.has_value() && heartbeat->stop_requested(), terminated)) {
    case Ending::kStopped:
      std::fprintf(stderr, "train[rank %d]: %s\n", env.rank,
                   std::string(metrics.status().message()).c_str());
      reporting.heartbeat = nullptr;
      return kStoppedExitCode;
    case Ending::kFailed:
      return Fail(reporting, StatusType(metrics.status()), metrics.status(),
                  absl::StrCat("training, rank ", env.rank, " of ", env.world_size));
    case Ending::kFinished:
      break;
  }
  if (!flags.metrics_json.empty() && env.rank == 0) {
    if (absl::Status written = WriteMetricsJson(flags.metrics_json, *metrics); !written.ok()) {
      return Fail(reporting, "IOError", written, "--metrics_json");
    }
  }
  reporting.heartbeat = nullptr;
  return 0;
}

// Opens the first round's store and communicator into `round`; when one
// cannot be, the exit code of the failure (reported with its own type).
std::optional<int> OpenFirstRound(const Flags& flags, const WorkerEnv& env, BackendKind kind,
                                  Reporting& reporting, RoundComm& round) {
  absl::StatusOr<std::unique_ptr<rdzv::Store>> store = OpenStore(env, &round.client);
  if (!store.ok()) return Fail(reporting, "RendezvousError", store.status(), "");
  round.store = *std::move(store);
  absl::StatusOr<std::unique_ptr<Communicator>> comm =
      OpenCommunicator(flags, env, kind, round.store.get(), env.local_rank);
  if (!comm.ok()) {
    return Fail(reporting, "CommunicatorError", comm.status(), absl::StrCat("backend ", BackendName(kind)));
  }
  round.comm = *std::move(comm);
  return std::nullopt;
}

// The whole worker: environment, config, heartbeats (first, so a slow
// start still heartbeats), data, store, communicator, observers, training.
// Each step's failure is reported with its own error type and context.
//
// `preloaded`: a warm spare's data, loaded before it became this worker;
// its start-up is counted from the hand-over (nothing before main).
int Run(const Flags& flags, Reporting& reporting, Signals& signals,
        std::optional<Data> preloaded = std::nullopt) {
  StartupPhases startup;
  const double main_at = MonotonicSeconds();
  if (preloaded.has_value()) {
    startup.before_main = 0;
  } else if (std::optional<double> since = SecondsSinceProcessStart(); since.has_value()) {
    startup.before_main = *since;
  }
  absl::StatusOr<WorkerEnv> env = ParseWorkerEnv([](const char* name) { return std::getenv(name); });
  if (!env.ok()) return Fail(reporting, "InvalidEnvironment", env.status(), "");
  reporting.error_file = env->error_file;
  reporting.rank = env->rank;

  absl::StatusOr<TrainConfig> config = ConfigFromFlags(flags, *env);
  if (!config.ok()) return Fail(reporting, "InvalidArgument", config.status(), "flags");
  absl::StatusOr<BackendKind> kind = BackendFor(flags, *env);
  if (!kind.ok()) return Fail(reporting, "InvalidArgument", kind.status(), "flags");
  SetTorchThreads(flags.threads);

  std::unique_ptr<AgentClient> agent =
      env->agent_socket.empty() ? NewNullAgentClient() : NewGrpcAgentClient(env->agent_socket);
  // Declared before the heartbeats, which read it until they stop.
  FlightRecorder recorder;
  std::optional<HeartbeatReporter> heartbeat;
  if (!env->agent_socket.empty()) {
    heartbeat.emplace(agent.get(), HeartbeatOptionsFor(flags, *env, ::getpid()));
    reporting.heartbeat = &*heartbeat;
  }

  const double data_at = MonotonicSeconds();
  absl::StatusOr<Data> data = preloaded.has_value() ? *std::move(preloaded) : LoadData(flags);
  if (!data.ok()) return Fail(reporting, "DataError", data.status(), flags.data_dir);

  const double comm_at = MonotonicSeconds();
  startup.data = comm_at - data_at;
  // Each round's communicator; the first is this one. Older ones are kept
  // until the end (a collective of theirs still on the wire ends at its
  // timeout, not while training uses the new one).
  std::vector<RoundComm> rounds(1);
  if (std::optional<int> failed = OpenFirstRound(flags, *env, *kind, reporting, rounds[0]); failed.has_value()) {
    return *failed;
  }
  startup.communicator = MonotonicSeconds() - comm_at;
  if (heartbeat.has_value()) heartbeat->OnCommunicatorReady();
  if (startup.before_main >= 0) startup.total = startup.before_main + MonotonicSeconds() - main_at;

  Observers observers;
  if (absl::Status added = AddObservers(flags, *env, heartbeat ? &*heartbeat : nullptr, observers);
      !added.ok()) {
    return Fail(reporting, "InvalidArgument", added, "flags");
  }
  if (env->rank == 0) {
    std::fputs(OpeningLines(*env, rounds[0].comm->backend(), data->train.size(), *config,
                            FormatStartup(startup)).c_str(), stdout);
    std::fflush(stdout);
  }
  // Every collective numbered, its numbers in each heartbeat: on a hang the
  // launchers tell a rank that never issued the collective its peers wait in.
  rounds[0].recorded = NewFlightRecordedCommunicator(rounds[0].comm.get(), &recorder);
  if (heartbeat.has_value()) {
    heartbeat->WatchCollectives([&recorder] {
      const CollectiveProgress p = recorder.Progress();
      return CollectiveCount{p.issued, p.finished};
    });
  }
  CurrentComm current;
  current.Set(rounds[0].comm.get());
  // The launcher's word on this worker's round (in-place recovery): a
  // change aborts the collective in flight at once. Declared after what
  // its thread touches, so it is joined first.
  std::optional<RoundWatcher> watcher;
  if (heartbeat.has_value() && env->in_place) {
    RoundWatchOptions wo;
    wo.local_rank = env->local_rank;
    wo.pid = ::getpid();
    watcher.emplace(agent.get(), wo, [&current](const std::string& reason) { current.Abort(reason); });
  }
  TrainDeps deps;
  deps.comm = rounds[0].recorded.get();
  // Only under a launcher that keeps its workers through a round change
  // (CPPTORCHRUN_RECOVERY=in_place); else a failed collective fails the
  // worker, as under torchrun.
  if (watcher.has_value()) {
    deps.round_changing = [&watcher, &env] { return watcher->ChangeAtBoundary(env->rdzv_round); };
    deps.recover = NextRound{flags, *env, reporting, *heartbeat, *watcher, recorder, current,
                             observers.sample_log.get(), rounds, env->local_rank};
  }
  deps.on_state_received = [&](int64_t step, const std::string& from) {
    if (observers.sample_log != nullptr) observers.sample_log->OnResumed(step);
    if (observers.progress.has_value()) observers.progress->OnRoundChanged();
    if (heartbeat.has_value()) heartbeat->OnRecovered(step, from);
    if (env->rank == 0) std::fprintf(stderr, "train[rank 0]: state of step %lld from %s\n", static_cast<long long>(step), from.c_str());
  };
  deps.train = &data->train;
  deps.test = &data->test;
  deps.observers = observers.all;
  return TrainAndEnd(flags, *env, *config, deps, heartbeat, reporting, signals);
}

// A warm spare (CPPTORCHRUN_WARM_FD, base/become.h): LibTorch is loaded
// (this process is running), the data set is loaded now; then it says
// ready and waits for the launcher to hand it a worker's environment, cwd,
// streams and CPUs. The data once this process is that worker; nullopt
// with *exit_code when it is not (the launcher closed the socket: 0).
std::optional<Data> WaitWarm(const Flags& flags, int fd, int* exit_code) {
  absl::StatusOr<Data> data = LoadData(flags);
  if (!data.ok()) {
    std::fprintf(stderr, "train[spare]: cannot load the data set: %s\n", std::string(data.status().message()).c_str());
    (void)base::SendWarmMessage(fd, absl::StrCat("error ", data.status().message()));
    *exit_code = 1;
    return std::nullopt;
  }
  if (absl::Status s = base::SendWarmMessage(fd, "ready"); !s.ok()) {
    *exit_code = 0;
    return std::nullopt;
  }
  absl::StatusOr<base::ReceivedBecome> got = base::ReceiveBecome(fd);
  if (!got.ok()) {
    // The launcher went (or is stopping its spares): nothing to do.
    if (!absl::IsUnavailable(got.status())) {
      std::fprintf(stderr, "train[spare]: %s\n", std::string(got.status().message()).c_str());
    }
    *exit_code = absl::IsUnavailable(got.status()) ? 0 : 1;
    return std::nullopt;
  }
  absl::Status applied = base::ApplyBecome(*got);
  (void)base::AnswerBecome(fd, applied);
  ::close(fd);
  if (!applied.ok()) {
    *exit_code = 1;
    return std::nullopt;
  }
  return *std::move(data);
}

// CPPTORCHRUN_WARM_FD's fd; -1 when unset or not a number.
int WarmFd() {
  const char* v = std::getenv(base::kWarmFdEnv);
  int fd = -1;
  if (v == nullptr || !absl::SimpleAtoi(v, &fd) || fd < 0) return -1;
  return fd;
}

}  // namespace

// The flags of the training itself: backend, schedule, optimizer.
void AddTrainingFlags(CLI::App& app, Flags& flags) {
  app.add_option("--backend", flags.backend,
                 "auto (NCCL on real GPUs, fake GPUs when given, shared memory when every rank is "
                 "on this node, hierarchical across nodes with several ranks each, Gloo "
                 "otherwise), nccl, gloo, shm (shared memory, one node only), hierarchical "
                 "(shared memory within each node, Gloo among one leader per node)")
      ->check(CLI::IsMember({"auto", "nccl", "gloo", "shm", "hierarchical"}));
  app.add_option("--epochs", flags.train.epochs, "passes over the training set")->check(CLI::PositiveNumber);
  app.add_option("--batch_size", flags.train.batch_size, "samples per rank and step")->check(CLI::PositiveNumber);
  app.add_option("--lr", flags.train.lr,
                 "base learning rate, before --scale_lr (default: the optimizer's: adam 1e-3, "
                 "sgd 0.03, lars 0.1, lamb 0.01)")
      ->check(CLI::PositiveNumber)
      ->default_str("per --optimizer");
  app.add_option("--optimizer", flags.optimizer,
                 "adam, sgd (with momentum), lars or lamb (LARS/LAMB: a per-layer trust ratio "
                 "for large effective batches; biases excluded)")
      ->check(CLI::IsMember({"adam", "sgd", "lars", "lamb"}));
  app.add_option("--weight_decay", flags.train.optimizer.weight_decay,
                 "L2 weight decay (lars and lamb: weight matrices only)")->check(CLI::NonNegativeNumber);
  app.add_option("--momentum", flags.train.optimizer.momentum, "momentum of sgd and lars")
      ->check(CLI::Range(0.0, 0.999999));
  app.add_option("--trust_coefficient", flags.train.optimizer.trust_coefficient,
                 "LARS's eta: a layer's step relative to its weight norm at rate 1")
      ->check(CLI::PositiveNumber);
}

// The flags of the run around it: data, checkpoints, reporting, fault
// injection.
void AddRunFlags(CLI::App& app, Flags& flags) {
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
  app.add_option("--comm_hook", flags.comm_hook,
                 "what DDP does to a bucket's gradients: allreduce (float32), fp16 or bf16 (16-bit "
                 "all-reduce), powersgd (low-rank, error feedback; torch's hooks)");
  app.add_option("--powersgd_rank", flags.train.comm_hook.powersgd_rank,
                 "PowerSGD's matrix approximation rank");
  app.add_option("--powersgd_start_iter", flags.train.comm_hook.powersgd_start_iter,
                 "synchronised steps all-reduced uncompressed before PowerSGD starts");
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
                 "(worker/training/sample_log.h)");
  app.add_option("--threads", flags.threads, "LibTorch intra-op threads per worker")->check(CLI::PositiveNumber);
  app.add_option("--progress", flags.progress, "auto (a bar on a terminal), bar, lines, none")
      ->check(CLI::IsMember({"auto", "bar", "lines", "none"}));
  app.add_option("--fail_after_steps", flags.train.fail_after_steps,
                 "fault injection for tests: fail after N batches (first attempt only)")->group("");
  app.add_option("--fail_at_step", flags.train.fail_at_step,
                 "fault injection for tests: fail before global step N in every attempt")->group("");
  app.add_option("--die_in_state_transfer_at_restart", flags.train.die_in_state_transfer_at_restart,
                 "fault injection for tests: a new rank whose TORCHELASTIC_RESTART_COUNT is N kills itself "
                 "while receiving a survivor's state (in-place recovery)")
      ->group("");
}

// glibc maps blocks over its mmap threshold (128 KB at first) afresh and
// gives them back at each free; it raises the threshold only as larger
// blocks are freed. A fresh process (a replacement healing from its peers)
// and a first large tensor (a recovery's 3 MB of optimizer state) so pay
// their page faults on the recovery's path: 13 ms for one such tensor
// here, and a replacement's model and optimizer state took 26 ms against 5
// with the threshold at its largest. Steady training is the same either
// way (the threshold has risen by then). Freed memory is kept for the next
// allocation from the start, as jemalloc or tcmalloc do for PyTorch users,
// unless the user tuned malloc already (GLIBC_TUNABLES, MALLOC_*_).
void KeepFreedMemory() {
  for (const char* tuned : {"GLIBC_TUNABLES", "MALLOC_MMAP_THRESHOLD_", "MALLOC_TRIM_THRESHOLD_"}) {
    if (std::getenv(tuned) != nullptr) return;
  }
  mallopt(M_MMAP_THRESHOLD, 32 << 20);  // glibc's largest
  mallopt(M_TRIM_THRESHOLD, 1 << 30);
}

}  // namespace cpptorchrun::worker

int main(int argc, char** argv) {
  cpptorchrun::worker::KeepFreedMemory();
  using cpptorchrun::worker::Flags;
  Flags flags;
  CLI::App app{"train: the seed's MLP on Fashion-MNIST with data-parallel SGD (DDP over Gloo, "
               "NCCL or fake GPUs). Run it under cpptorchrun; alone it trains as a world of one."};
  app.set_version_flag("--version", cpptorchrun::worker::kVersion);
  app.option_defaults()->always_capture_default();
  cpptorchrun::worker::AddTrainingFlags(app, flags);
  cpptorchrun::worker::AddRunFlags(app, flags);
  try {
    app.parse(argc, argv);
  } catch (const CLI::ParseError& e) {
    return app.exit(e);
  }
  // Before anything slow: Slurm signals every process of a step, warm
  // spares included, and SIGUSR1's default would end the process.
  cpptorchrun::worker::InstallSignalCounters();
  cpptorchrun::worker::Reporting reporting;
  try {
    if (const int fd = cpptorchrun::worker::WarmFd(); fd >= 0) {
      int code = 0;
      std::optional<cpptorchrun::worker::Data> data;
      {
        // A waiting spare has nothing to save: SIGTERM ends it at once.
        cpptorchrun::worker::SigtermDeadline waiting(cpptorchrun::worker::kSigtermStepBound,
                                                     cpptorchrun::worker::ExitOnSigterm);
        data = cpptorchrun::worker::WaitWarm(flags, fd, &code);
      }
      if (!data.has_value()) return code;
      // What a spare received before it became this worker is not its.
      cpptorchrun::worker::Signals signals;
      return cpptorchrun::worker::Run(flags, reporting, signals, std::move(data));
    }
    cpptorchrun::worker::Signals signals;
    return cpptorchrun::worker::Run(flags, reporting, signals);
  } catch (const std::exception& e) {
    return cpptorchrun::worker::Fail(reporting, "std::exception", e.what(), "uncaught in train");
  }
}
