// The training loop: model, data tensors, the optimizer, DDP, checkpoints, resume,
// evaluation and the final figures. Train is the boundary: inside it,
// LibTorch's exceptions become statuses and every failure aborts the
// communicator.
#include "worker/training/trainer.h"

#include <ATen/CPUGeneratorImpl.h>
#include <torch/torch.h>

#include <sys/resource.h>

#include <algorithm>
#include <csignal>
#include <cstdio>
#include <cmath>
#include <iostream>
#include <memory>
#include <optional>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_join.h"
#include "worker/training/allreduce_mode.h"
#include "worker/training/checkpoint.h"
#include "worker/training/checkpoint_writer.h"
#include "worker/training/ddp.h"
#include "worker/data/sampler.h"
#include "worker/training/optimizers.h"
#include "worker/training/schedule.h"
#include "worker/training/step_plan.h"
#include "worker/data/torch_random.h"

namespace cpptorchrun::worker {
namespace {

constexpr int64_t kInputs = 784;
constexpr int64_t kClasses = 10;
// Bounds on --hidden: a typo must not allocate the machine away.
constexpr size_t kMaxHiddenLayers = 16;
constexpr int64_t kMaxHiddenWidth = 16384;
// Recoveries in a row that fail before training goes on (a spare lost
// during each transfer): past this many, Train fails (a gang restart).
constexpr int kMaxRecoveriesInARow = 10;

#define CPPTORCHRUN_RETURN_IF_ERROR(expr)       \
  do {                                          \
    absl::Status status_ = (expr);              \
    if (!status_.ok()) return status_;          \
  } while (false)

// The seed's model, Linear(784, 512), ReLU, Linear(512, 10), or with other
// hidden widths: Linear layers fc1, fc2, ... with a ReLU between them.
struct MlpImpl : torch::nn::Module {
  explicit MlpImpl(const std::vector<int64_t>& hidden) {
    int64_t in = kInputs;
    for (size_t i = 0; i <= hidden.size(); ++i) {
      const int64_t out = i < hidden.size() ? hidden[i] : kClasses;
      layers.push_back(register_module(absl::StrCat("fc", i + 1), torch::nn::Linear(in, out)));
      in = out;
    }
  }

  torch::Tensor forward(torch::Tensor x) {
    for (size_t i = 0; i < layers.size(); ++i) {
      x = layers[i](x);
      if (i + 1 < layers.size()) x = torch::relu(x);
    }
    return x;
  }

  // PyTorch's default Linear initialisation (uniform in +-1/sqrt(fan_in)
  // for weight and bias), drawn from a generator of our own so that
  // concurrent ranks in one process do not share LibTorch's global one.
  void Initialise(uint64_t seed) {
    torch::NoGradGuard no_grad;
    at::Generator generator = at::detail::createCPUGenerator(seed);
    for (torch::nn::Linear& layer : layers) {
      const double bound = 1.0 / std::sqrt(static_cast<double>(layer->weight.size(1)));
      layer->weight.uniform_(-bound, bound, generator);
      layer->bias.uniform_(-bound, bound, generator);
    }
  }

  std::vector<torch::nn::Linear> layers;
};
TORCH_MODULE(Mlp);

// The images as bytes, borrowed (no copy): a batch is scaled to [0, 1] when
// it is drawn (Rows), so a worker never holds a float copy of the whole set
// (188 MB for Fashion-MNIST) nor spends its start-up making one.
torch::Tensor ImagesTensor(const Dataset& data) {
  return torch::from_blob(const_cast<uint8_t*>(data.images.pixels.data()),
                          {data.size(), data.features()}, torch::kUInt8);
}

// Rows `rows` of ImagesTensor as floats in [0, 1], as ToTensor scales them.
torch::Tensor Rows(const torch::Tensor& images, const torch::Tensor& rows) {
  return images.index_select(0, rows).to(torch::kFloat).div_(255.0);
}

torch::Tensor LabelsTensor(const Dataset& data) {
  return torch::from_blob(const_cast<uint8_t*>(data.labels.labels.data()), {data.size()},
                          torch::kUInt8)
      .to(torch::kLong);
}

TensorBlob ToBlob(const std::string& name, const torch::Tensor& t) {
  torch::Tensor c = t.detach().contiguous().to(torch::kFloat);
  TensorBlob blob;
  blob.name = name;
  blob.shape.assign(c.sizes().begin(), c.sizes().end());
  blob.data.assign(c.data_ptr<float>(), c.data_ptr<float>() + c.numel());
  return blob;
}

absl::Status FromBlob(const CheckpointState& state, const std::string& name, torch::Tensor& t) {
  const TensorBlob* blob = state.Tensor(name);
  if (blob == nullptr) return absl::DataLossError(absl::StrCat("checkpoint has no tensor ", name));
  if (blob->shape != std::vector<int64_t>(t.sizes().begin(), t.sizes().end())) {
    return absl::FailedPreconditionError(
        absl::StrCat("checkpoint tensor ", name, " has another shape than the model's"));
  }
  torch::NoGradGuard no_grad;
  t.copy_(torch::from_blob(const_cast<float*>(blob->data.data()), t.sizes(), torch::kFloat));
  return absl::OkStatus();
}

// Where training stands: what a checkpoint records.
struct Position {
  int64_t epoch = 0;
  int64_t samples_in_epoch = 0;  // consumed by the whole group
  int64_t global_step = 0;       // batches since the job began
  int64_t opt_step = 0;
};

// The checkpoint names of parameter i's optimizer state: "<optimizer>.<field>.<i>"
// and "<optimizer>.step.<i>" ("adam.exp_avg.0", as before version 2).
std::string StateName(const ModelOptimizer& optimizer, const std::string& field, size_t i) {
  return absl::StrCat(OptimizerName(optimizer.kind()), ".", field, ".", i);
}

CheckpointState Snapshot(const std::vector<torch::Tensor>& params, ModelOptimizer& optimizer,
                         const Position& pos, int world_size, const TrainConfig& config) {
  CheckpointState state;
  state.ints["epoch"] = pos.epoch;
  state.ints["samples_in_epoch"] = pos.samples_in_epoch;
  state.ints["global_step"] = pos.global_step;
  state.ints["opt_step"] = pos.opt_step;
  state.ints["world_size"] = world_size;
  state.ints["batch_size"] = config.batch_size;
  state.ints["seed"] = static_cast<int64_t>(config.seed);
  state.strings["optimizer"] = OptimizerName(optimizer.kind());
  for (size_t i = 0; i < params.size(); ++i) {
    state.tensors.push_back(ToBlob(absl::StrCat("param.", i), params[i]));
    if (optimizer.CountsSteps()) {
      state.ints[StateName(optimizer, "step", i)] = optimizer.StepCount(i);
    }
    for (const StateTensor& field : optimizer.State(i)) {
      state.tensors.push_back(ToBlob(StateName(optimizer, field.field, i), field.tensor));
    }
  }
  return state;
}

// FailedPrecondition naming both when the checkpoint's optimizer is not
// this run's. A version-1 checkpoint (older builds) names none: Adam, the
// only one there was.
absl::Status CheckSameOptimizer(const CheckpointState& state, const ModelOptimizer& optimizer) {
  const std::string written = state.StringOr("optimizer", OptimizerName(OptimizerKind::kAdam));
  const std::string ours = OptimizerName(optimizer.kind());
  if (written == ours) return absl::OkStatus();
  return absl::FailedPreconditionError(absl::StrCat(
      "the checkpoint was written with --optimizer ", written, " but this run has --optimizer ",
      ours, ": resume with --optimizer ", written, ", or start afresh in another --checkpoint_dir"));
}

absl::Status Restore(const CheckpointState& state, std::vector<torch::Tensor>& params,
                     ModelOptimizer& optimizer, Position* pos) {
  CPPTORCHRUN_RETURN_IF_ERROR(CheckSameOptimizer(state, optimizer));
  for (const char* key : {"epoch", "samples_in_epoch", "global_step", "opt_step"}) {
    if (!state.Int(key).ok()) return state.Int(key).status();
  }
  pos->epoch = *state.Int("epoch");
  pos->samples_in_epoch = *state.Int("samples_in_epoch");
  pos->global_step = *state.Int("global_step");
  pos->opt_step = *state.Int("opt_step");
  for (size_t i = 0; i < params.size(); ++i) {
    CPPTORCHRUN_RETURN_IF_ERROR(FromBlob(state, absl::StrCat("param.", i), params[i]));
    if (optimizer.CountsSteps()) {
      absl::StatusOr<int64_t> step = state.Int(StateName(optimizer, "step", i));
      if (!step.ok()) return step.status();
      optimizer.SetStepCount(i, *step);
    }
    for (StateTensor& field : optimizer.State(i)) {
      CPPTORCHRUN_RETURN_IF_ERROR(
          FromBlob(state, StateName(optimizer, field.field, i), field.tensor));
    }
  }
  return absl::OkStatus();
}

// Every rank receives rank `root`'s optimizer state: step counts (zeros for
// kinds without), then every state field flattened, in parameter and field
// order.
absl::Status BroadcastOptimizerState(Communicator& comm, std::vector<torch::Tensor>& params,
                                     ModelOptimizer& optimizer, int root) {
  std::vector<int64_t> steps;
  std::vector<torch::Tensor> fields;
  for (size_t i = 0; i < params.size(); ++i) {
    steps.push_back(optimizer.StepCount(i));
    for (const StateTensor& field : optimizer.State(i)) fields.push_back(field.tensor.reshape({-1}));
  }
  CPPTORCHRUN_RETURN_IF_ERROR(comm.Broadcast(steps.data(), steps.size(), DType::kInt64, root));
  torch::Tensor flat = torch::cat(fields);
  CPPTORCHRUN_RETURN_IF_ERROR(comm.Broadcast(flat.data_ptr<float>(), flat.numel(), DType::kFloat32, root));
  int64_t offset = 0;
  for (size_t i = 0; i < params.size(); ++i) {
    optimizer.SetStepCount(i, steps[i]);
    for (StateTensor& field : optimizer.State(i)) {
      torch::NoGradGuard no_grad;
      field.tensor.copy_(flat.narrow(0, offset, field.tensor.numel()).view_as(field.tensor));
      offset += field.tensor.numel();
    }
  }
  return absl::OkStatus();
}

// Rank 0 reads the newest valid checkpoint; everyone receives the position
// and the optimizer state from it (parameters follow in DDP's broadcast),
// so only rank 0 needs to see the checkpoint folder.
absl::StatusOr<bool> Resume(const TrainConfig& config, Communicator& comm,
                            std::vector<torch::Tensor>& params, ModelOptimizer& optimizer,
                            Position* pos, const std::function<void(const std::string&)>& warn) {
  int64_t meta[5] = {0, 0, 0, 0, 0};
  if (comm.rank() == 0 && !config.checkpoint_dir.empty()) {
    std::vector<std::string> warnings;
    std::optional<LoadedCheckpoint> loaded = LoadNewestCheckpoint(config.checkpoint_dir, &warnings);
    for (const std::string& w : warnings) warn(w);
    if (loaded.has_value()) {
      absl::Status restored = Restore(loaded->state, params, optimizer, pos);
      if (!restored.ok()) {
        // Tell the others before giving up, so they fail now rather than at
        // their collective timeout.
        meta[0] = -1;
        std::string message = absl::StrCat(loaded->path, ": ", restored.message());
        if (absl::Status told = comm.Broadcast(meta, 5, DType::kInt64, 0); !told.ok()) {
          absl::StrAppend(&message, " (and telling the other ranks failed: ", told.message(), ")");
        }
        return absl::Status(restored.code(), message);
      }
      meta[0] = 1;
      meta[1] = pos->epoch;
      meta[2] = pos->samples_in_epoch;
      meta[3] = pos->global_step;
      meta[4] = pos->opt_step;
    }
  }
  CPPTORCHRUN_RETURN_IF_ERROR(comm.Broadcast(meta, 5, DType::kInt64, 0));
  if (meta[0] < 0) {
    return absl::FailedPreconditionError("rank 0 could not restore its newest checkpoint");
  }
  if (meta[0] == 0) return false;
  *pos = Position{meta[1], meta[2], meta[3], meta[4]};
  CPPTORCHRUN_RETURN_IF_ERROR(BroadcastOptimizerState(comm, params, optimizer, 0));
  return true;
}

// Rank r scores test rows r, r + W, ...; the counts are summed.
absl::StatusOr<double> Evaluate(Mlp& model, const Dataset& test, Communicator& comm) {
  torch::NoGradGuard no_grad;
  torch::Tensor images = ImagesTensor(test);
  torch::Tensor labels = LabelsTensor(test);
  torch::Tensor rows = torch::arange(comm.rank(), test.size(), comm.world_size(), torch::kLong);
  int64_t counts[2] = {0, rows.numel()};
  for (int64_t start = 0; start < rows.numel(); start += 2000) {
    torch::Tensor chunk = rows.narrow(0, start, std::min<int64_t>(2000, rows.numel() - start));
    torch::Tensor predicted = model->forward(Rows(images, chunk)).argmax(1);
    counts[0] += predicted.eq(labels.index_select(0, chunk)).sum().item<int64_t>();
  }
  CPPTORCHRUN_RETURN_IF_ERROR(comm.AllReduce(counts, 2, DType::kInt64, ReduceOp::kSum));
  return counts[1] > 0 ? static_cast<double>(counts[0]) / static_cast<double>(counts[1]) : 0.0;
}

// This process's CPU time (all threads), in seconds.
double ProcessCpuSeconds() {
  struct rusage usage;
  getrusage(RUSAGE_SELF, &usage);
  auto seconds = [](const timeval& t) { return t.tv_sec + t.tv_usec * 1e-6; };
  return seconds(usage.ru_utime) + seconds(usage.ru_stime);
}

// One call of Train on this rank: the model with its optimizer and DDP, the
// training set as tensors, the sampler, where training stands, and what
// this run has measured. The phases are Start (resume and agree on the
// parameters), then RunEpoch per epoch, then Finish (the job's figures and
// the evaluation). May throw LibTorch's exceptions; Train converts them.
class TrainingRun {
 public:
  TrainingRun(const TrainConfig& config, const TrainDeps& deps);

  absl::Status Start();
  bool Done() const { return pos_.epoch >= config_.epochs; }
  // After a failed RunEpoch, Start or Recover: whether the failure was the
  // communicator's and TrainDeps::recover may replace it.
  bool Recoverable() const;
  // In-place recovery: the next round's communicator, the state agreed on,
  // the rest of the epoch re-sharded. Its error may be Recoverable again.
  absl::Status Recover(const absl::Status& failure);
  absl::Status RunEpoch();
  // The signal request pending now (polled); kCheckpointAndStop wins.
  SignalRequest PollSignals();
  // After a failed batch: rank 0 writes the last optimizer step's state
  // when a stop was asked for (the failure is a peer that stopped first).
  void SaveBeforeStopping();
  absl::StatusOr<TrainMetrics> Finish();

 private:
  // Forward, backward, DDP and (on the window's last batch) the optimizer
  // step for the rows `rows`. Returns the batch's loss.
  absl::StatusOr<double> TrainBatch(const torch::Tensor& rows, const BatchPlan& plan,
                                    AllReduceMode mode);
  // DDP over comm_ (its hooks on the parameters).
  absl::Status MakeDdp();
  // Collective: every rank takes the newest state any rank holds (`live`:
  // this rank holds one, last_opt_step_'s), or rank 0's checkpoint when
  // none does. Returns where it came from: "rank R", "checkpoint", "none".
  absl::StatusOr<std::string> SyncState(bool live);
  // The sampler (and what follows the world size) for comm_'s world.
  absl::Status MakeSampler();
  // The observers' report of the batch just done.
  void Report(double loss, absl::Span<const int64_t> samples, int64_t step_in_epoch);
  // Rank 0 snapshots `at` in memory and hands it to the background writer
  // when checkpoints are on; the others do nothing. Returns the error of
  // an earlier background write.
  absl::Status Save(const Position& at);
  // Save, then wait until the checkpoint is on disk (a scheduler's signal
  // asked for it: it must be there before the worker says so or stops).
  absl::Status SaveDurably(const Position& at);
  // Waits for the background writer; the wait is added to
  // checkpoint_wait_seconds_.
  absl::Status FlushCheckpoints();
  // The job's figures: samples summed, rank 0's clock, CPU time summed,
  // the last epoch's loss averaged.
  absl::Status AgreeOnFigures(TrainMetrics& metrics);
  // Rank 0's parameter fingerprint, and how many ranks' parameters differ
  // from rank 0's (0 for data parallelism, unless --allreduce off/rotate).
  absl::Status CompareReplicas(TrainMetrics& metrics);

  const TrainConfig& config_;
  const TrainDeps& deps_;
  Communicator* comm_;  // deps.comm, then each recovery's
  const std::function<void(const std::string&)> warn_;
  const std::function<double()> now_;

  Mlp model_;
  std::vector<torch::Tensor> params_;
  ModelOptimizer optimizer_;
  std::unique_ptr<DistributedDataParallel> ddp_;
  std::optional<DistributedSampler> sampler_;
  LrSchedule schedule_;
  const torch::Tensor images_;
  const torch::Tensor labels_;
  int64_t full_epoch_steps_ = 0;

  Position pos_;
  TrainMetrics metrics_;
  double start_ = 0;
  double cpu_start_ = 0;
  int64_t run_batches_ = 0;
  int64_t local_samples_ = 0;
  std::vector<double> step_seconds_;
  double backward_seconds_ = 0;
  double last_compute_seconds_ = 0;  // the last batch's, without the all-reduce wait
  ModeTallies tallies_;
  double last_epoch_loss_ = std::nan("");
  // Signals (TrainDeps::signal_request): what is pending, where the last
  // optimizer step left training, and the last step written.
  SignalRequest pending_signal_ = SignalRequest::kNone;
  Position last_opt_step_;
  int64_t saved_step_ = -1;
  // Rank 0's, when checkpoints are on: writes them off the training path.
  std::unique_ptr<CheckpointWriter> writer_;
  // The last failure was a collective's (TrainDeps::recover may help).
  bool comm_failed_ = false;
  double checkpoint_wait_seconds_ = 0;
  // False while (and after) this rank's receipt of another's state broke
  // off: its parameters may be half of each step (SyncState).
  bool state_intact_ = true;
};

Mlp InitialisedMlp(const TrainConfig& config) {
  Mlp model(config.hidden);
  model->Initialise(config.seed);
  return model;
}

std::function<void(const std::string&)> WarnOrStderr(const TrainDeps& deps) {
  if (deps.warn) return deps.warn;
  return [](const std::string& w) { std::cerr << "warning: " << w << std::endl; };
}

TrainingRun::TrainingRun(const TrainConfig& config, const TrainDeps& deps)
    : config_(config),
      deps_(deps),
      comm_(deps.comm),
      warn_(WarnOrStderr(deps)),
      now_(deps.now ? deps.now : std::function<double()>(SteadySeconds)),
      model_(InitialisedMlp(config)),
      params_(model_->parameters()),
      optimizer_(config.optimizer, params_, BaseLearningRate(config)),
      images_(ImagesTensor(*deps.train)),
      labels_(LabelsTensor(*deps.train)) {
  schedule_.base_lr = BaseLearningRate(config);
  schedule_.scale = int64_t{comm_->world_size()} * config.grad_accum_steps;
  schedule_.scale_lr = config.scale_lr;
  schedule_.warmup_steps = config.warmup_steps;
  metrics_.world_size = comm_->world_size();
  metrics_.epochs = config.epochs;
  metrics_.restart_count = config.restart_count;
  metrics_.backend = comm_->backend();
  metrics_.allreduce = AllReduceModeName(config.allreduce);
  metrics_.hidden = absl::StrJoin(config.hidden, ",");
  metrics_.optimizer = OptimizerName(config.optimizer.kind);
  metrics_.comm_hook = CommHookName(config.comm_hook.kind);
  metrics_.base_lr = BaseLearningRate(config);
}

absl::Status TrainingRun::MakeDdp() {
  DdpOptions ddp_options;
  ddp_options.bucket_cap_bytes = config_.bucket_cap_bytes;
  ddp_options.first_bucket_cap_bytes = config_.first_bucket_cap_bytes;
  ddp_options.overlap = config_.allreduce == AllReduceMode::kOverlap;
  ddp_options.comm_hook = config_.comm_hook;
  ddp_options.comm_hook.seed = config_.seed;
  absl::StatusOr<std::unique_ptr<DistributedDataParallel>> ddp =
      DistributedDataParallel::Create(params_, model_->buffers(), comm_, ddp_options);
  if (!ddp.ok()) return ddp.status();
  ddp_ = *std::move(ddp);
  return absl::OkStatus();
}

absl::StatusOr<std::string> TrainingRun::SyncState(bool live) {
  // Who holds a state, and of which step: slot r is rank r's last
  // optimizer step + 1 (0: none, a new rank).
  const int world = comm_->world_size();
  std::vector<int64_t> held(static_cast<size_t>(world), 0);
  // A rank whose receipt of a state broke off holds a mix of two steps:
  // none.
  if (live && state_intact_) held[comm_->rank()] = last_opt_step_.global_step + 1;
  CPPTORCHRUN_RETURN_IF_ERROR(comm_->AllReduce(held.data(), world, DType::kInt64, ReduceOp::kSum));
  int source = -1;
  for (int r = 0; r < world; ++r) {
    if (held[r] > 0 && (source < 0 || held[r] > held[source])) source = r;
  }
  if (source < 0) {
    // Nobody holds one: a start, or every rank was lost. Rank 0's checkpoint.
    absl::StatusOr<bool> resumed = Resume(config_, *comm_, params_, optimizer_, &pos_, warn_);
    if (!resumed.ok()) return resumed.status();
    CPPTORCHRUN_RETURN_IF_ERROR(ddp_->BroadcastState(0));
    last_opt_step_ = pos_;
    return std::string(*resumed ? "checkpoint" : "none");
  }
  // The newest state any rank holds (a survivor that finished the
  // interrupted step's all-reduce is ahead of one that did not: the step is
  // complete there, and everyone takes it). Its parameters and optimizer
  // change only at an optimizer step: last_opt_step_ is where they are.
  int64_t meta[4] = {last_opt_step_.epoch, last_opt_step_.samples_in_epoch, last_opt_step_.global_step,
                     last_opt_step_.opt_step};
  if (comm_->rank() != source) state_intact_ = false;
  CPPTORCHRUN_RETURN_IF_ERROR(comm_->Broadcast(meta, 4, DType::kInt64, source));
  if (!live && config_.die_in_state_transfer_at_restart >= 0 &&
      config_.die_in_state_transfer_at_restart == config_.restart_count) {
    std::fprintf(stderr, "train[rank %d]: fault injection: killed during the state transfer\n", comm_->rank());
    std::fflush(stderr);
    raise(SIGKILL);
  }
  CPPTORCHRUN_RETURN_IF_ERROR(BroadcastOptimizerState(*comm_, params_, optimizer_, source));
  CPPTORCHRUN_RETURN_IF_ERROR(ddp_->BroadcastState(source));
  state_intact_ = true;
  pos_ = Position{meta[0], meta[1], meta[2], meta[3]};
  last_opt_step_ = pos_;
  return absl::StrCat("rank ", source);
}

absl::Status TrainingRun::MakeSampler() {
  SamplerOptions sampler_options;
  sampler_options.dataset_size = deps_.train->size();
  sampler_options.world_size = comm_->world_size();
  sampler_options.rank = comm_->rank();
  sampler_options.seed = config_.seed;
  sampler_options.drop_last = config_.drop_last;
  CPPTORCHRUN_RETURN_IF_ERROR(DistributedSampler::Validate(sampler_options, TorchRandperm));
  sampler_.emplace(sampler_options, TorchRandperm);
  full_epoch_steps_ = (sampler_->NumSamples(0) + config_.batch_size - 1) / config_.batch_size;
  // The global batch is the world's: the linear scaling rule follows it.
  schedule_.scale = int64_t{comm_->world_size()} * config_.grad_accum_steps;
  metrics_.world_size = comm_->world_size();
  return absl::OkStatus();
}

absl::Status TrainingRun::Start() {
  CPPTORCHRUN_RETURN_IF_ERROR(MakeDdp());
  absl::StatusOr<std::string> from = SyncState(/*live=*/false);
  if (!from.ok()) {
    comm_failed_ = true;
    return from.status();
  }
  if (*from == "checkpoint") {
    metrics_.resumed_from_step = pos_.global_step;
    for (TrainObserver* o : deps_.observers) o->OnResumed(pos_.global_step);
  } else if (*from != "none" && deps_.on_state_received) {
    deps_.on_state_received(pos_.global_step, *from);
  }
  CPPTORCHRUN_RETURN_IF_ERROR(MakeSampler());
  start_ = now_();
  cpu_start_ = ProcessCpuSeconds();
  return absl::OkStatus();
}

bool TrainingRun::Recoverable() const {
  return deps_.recover && comm_failed_ && pending_signal_ != SignalRequest::kCheckpointAndStop;
}

absl::Status TrainingRun::Recover(const absl::Status& failure) {
  comm_failed_ = false;
  // The interrupted batch is dropped: its gradients, its DDP state.
  ddp_.reset();
  for (torch::Tensor& p : params_) p.mutable_grad().reset();
  pos_ = last_opt_step_;
  absl::StatusOr<Communicator*> next = deps_.recover(failure);
  if (!next.ok()) {
    return absl::Status(failure.code(), absl::StrCat(failure.message(), "; no in-place recovery: ",
                                                     next.status().message()));
  }
  comm_ = *next;
  ++metrics_.recoveries;
  CPPTORCHRUN_RETURN_IF_ERROR(MakeDdp());
  absl::StatusOr<std::string> from = SyncState(/*live=*/true);
  if (!from.ok()) {
    comm_failed_ = true;  // a rank lost during the transfer: recover again
    return from.status();
  }
  CPPTORCHRUN_RETURN_IF_ERROR(MakeSampler());
  if (deps_.on_state_received) deps_.on_state_received(pos_.global_step, *from);
  return absl::OkStatus();
}

absl::Status TrainingRun::RunEpoch() {
  const int64_t batch = config_.batch_size;
  sampler_->SetEpoch(pos_.epoch);
  std::vector<int64_t> order = sampler_->Indices(pos_.samples_in_epoch);
  const int64_t local = static_cast<int64_t>(order.size());
  const int64_t batches = (local + batch - 1) / batch;
  const int64_t done_before = full_epoch_steps_ - batches;
  torch::Tensor order_t = torch::from_blob(order.data(), {local}, torch::kLong).clone();
  double loss_sum = 0;
  for (int64_t b = 0; b < batches; ++b) {
    const int64_t len = std::min(batch, local - b * batch);
    const BatchPlan plan = PlanBatch(b, batches, config_.grad_accum_steps);
    const AllReduceMode mode = ModeForOptimizerStep(config_.allreduce, pos_.opt_step);
    if (config_.fail_at_step > 0 && pos_.global_step + 1 == config_.fail_at_step) {
      return absl::AbortedError(
          absl::StrCat("fault injection: global step ", config_.fail_at_step, " fails in every attempt"));
    }
    if (!deps_.observers.empty()) {
      StepReport starting;
      starting.rank = comm_->rank();
      starting.epoch = pos_.epoch;
      starting.global_step = pos_.global_step + 1;
      starting.samples = absl::MakeConstSpan(order.data() + b * batch, len);
      for (TrainObserver* o : deps_.observers) o->OnBatchStart(starting);
    }
    absl::StatusOr<double> loss = TrainBatch(order_t.narrow(0, b * batch, len), plan, mode);
    if (!loss.ok()) {
      comm_failed_ = true;
      SaveBeforeStopping();
      return loss.status();
    }
    loss_sum += *loss;
    ++pos_.global_step;
    ++run_batches_;
    local_samples_ += len;
    pos_.samples_in_epoch += batch * comm_->world_size();
    Report(*loss, absl::MakeConstSpan(order.data() + b * batch, len), done_before + b + 1);

    if (config_.fail_after_steps > 0 && run_batches_ == config_.fail_after_steps) {
      return absl::AbortedError(
          absl::StrCat("fault injection: stopped after ", run_batches_, " batches"));
    }
    if (plan.sync) last_opt_step_ = pos_;
    if (MidEpochCheckpointDue(plan, pos_.opt_step, config_.checkpoint_every)) {
      CPPTORCHRUN_RETURN_IF_ERROR(Save(pos_));
    }
    if (const SignalRequest request = PollSignals(); request != SignalRequest::kNone && plan.sync) {
      pending_signal_ = SignalRequest::kNone;
      CPPTORCHRUN_RETURN_IF_ERROR(saved_step_ != pos_.global_step ? SaveDurably(pos_) : FlushCheckpoints());
      const bool stopping = request == SignalRequest::kCheckpointAndStop;
      if (deps_.on_signal_checkpoint) deps_.on_signal_checkpoint(pos_.global_step, stopping);
      if (stopping) {
        return absl::CancelledError(absl::StrCat("stopped on a signal after step ", pos_.global_step,
                                                 config_.checkpoint_dir.empty() ? " (no --checkpoint_dir)"
                                                                                : ", its checkpoint written"));
      }
    }
    if (deps_.stop_requested && deps_.stop_requested()) {
      return absl::CancelledError(absl::StrCat("stopped at the launcher's request after step ",
                                               pos_.global_step));
    }
    if (plan.sync && deps_.recover && deps_.round_changing && deps_.round_changing()) {
      comm_failed_ = true;  // Recoverable: the next round, from this very step
      return absl::AbortedError(absl::StrCat("the round changes at the step boundary after step ",
                                             pos_.global_step));
    }
  }
  last_epoch_loss_ = batches > 0 ? loss_sum / batches : std::nan("");
  ++pos_.epoch;
  pos_.samples_in_epoch = 0;
  return Save(pos_);
}

SignalRequest TrainingRun::PollSignals() {
  if (deps_.signal_request) pending_signal_ = std::max(pending_signal_, deps_.signal_request());
  return pending_signal_;
}

void TrainingRun::SaveBeforeStopping() {
  if (PollSignals() != SignalRequest::kCheckpointAndStop || saved_step_ == last_opt_step_.global_step) return;
  // The parameters and the optimizer change only at an optimizer step,
  // which the failed batch did not reach: they are last_opt_step_'s.
  if (absl::Status saved = SaveDurably(last_opt_step_); !saved.ok()) {
    warn_(absl::StrCat("stopping on a signal: the checkpoint of step ", last_opt_step_.global_step,
                       " could not be written: ", saved.message()));
    return;
  }
  if (deps_.on_signal_checkpoint) deps_.on_signal_checkpoint(last_opt_step_.global_step, true);
}

absl::StatusOr<double> TrainingRun::TrainBatch(const torch::Tensor& rows, const BatchPlan& plan,
                                               AllReduceMode mode) {
  const DdpStats ddp_before = ddp_->stats();
  const double step_start = now_();
  ddp_->set_overlap(mode == AllReduceMode::kOverlap);
  // With the all-reduce off, every step is a local one to DDP.
  ddp_->PrepareBackward(plan.sync && mode != AllReduceMode::kOff);
  torch::Tensor loss = torch::nn::functional::cross_entropy(model_->forward(Rows(images_, rows)),
                                                            labels_.index_select(0, rows));
  const double backward_start = now_();
  (plan.window > 1 ? loss / static_cast<double>(plan.window) : loss).backward();
  backward_seconds_ += now_() - backward_start;
  CPPTORCHRUN_RETURN_IF_ERROR(ddp_->FinishBackward());
  if (plan.sync) {
    optimizer_.Step(LearningRate(schedule_, pos_.opt_step));
    for (torch::Tensor& p : params_) p.mutable_grad().reset();
    ++pos_.opt_step;
  }
  step_seconds_.push_back(now_() - step_start);
  const DdpStats ddp_step = ddp_->stats() - ddp_before;
  tallies_.Add(mode, step_seconds_.back(), ddp_step);
  last_compute_seconds_ = std::max(0.0, step_seconds_.back() - ddp_step.wait_seconds);
  return loss.item<double>();
}

void TrainingRun::Report(double loss, absl::Span<const int64_t> samples, int64_t step_in_epoch) {
  StepReport report;
  report.rank = comm_->rank();
  report.epoch = pos_.epoch;
  report.epochs = config_.epochs;
  report.step_in_epoch = step_in_epoch;
  report.steps_in_epoch = full_epoch_steps_;
  report.global_step = pos_.global_step;
  report.total_steps = full_epoch_steps_ * config_.epochs;
  report.loss = loss;
  report.elapsed_seconds = now_() - start_;
  report.compute_seconds = last_compute_seconds_;
  report.samples = samples;
  report.samples_per_s = report.elapsed_seconds > 0
                             ? local_samples_ * comm_->world_size() / report.elapsed_seconds
                             : 0;
  for (TrainObserver* o : deps_.observers) o->OnStep(report);
}

absl::Status TrainingRun::Save(const Position& at) {
  // Rank 0 writes; after an in-place recovery that may be another process
  // than at the start, so its writer is made when first needed.
  if (comm_->rank() != 0 || config_.checkpoint_dir.empty()) return absl::OkStatus();
  if (writer_ == nullptr) {
    writer_ = std::make_unique<CheckpointWriter>(
        CheckpointWriter::WriteTo(config_.checkpoint_dir, config_.keep_checkpoints));
  }
  saved_step_ = at.global_step;
  CheckpointState snapshot = Snapshot(params_, optimizer_, at, comm_->world_size(), config_);
  const double start = now_();
  absl::Status submitted = writer_->Submit(at.global_step, std::move(snapshot));
  checkpoint_wait_seconds_ += now_() - start;
  return submitted;
}

absl::Status TrainingRun::SaveDurably(const Position& at) {
  CPPTORCHRUN_RETURN_IF_ERROR(Save(at));
  return FlushCheckpoints();
}

absl::Status TrainingRun::FlushCheckpoints() {
  if (writer_ == nullptr) return absl::OkStatus();
  const double start = now_();
  absl::Status flushed = writer_->Flush();
  checkpoint_wait_seconds_ += now_() - start;
  return flushed;
}

absl::Status TrainingRun::AgreeOnFigures(TrainMetrics& metrics) {
  double seconds = now_() - start_;
  // In-process tests run ranks as threads of one process: the figure then
  // counts the process once per rank.
  double cpu_seconds = ProcessCpuSeconds() - cpu_start_;
  int64_t samples = local_samples_;
  CPPTORCHRUN_RETURN_IF_ERROR(comm_->AllReduce(&samples, 1, DType::kInt64, ReduceOp::kSum));
  CPPTORCHRUN_RETURN_IF_ERROR(comm_->Broadcast(&seconds, 1, DType::kFloat64, 0));
  CPPTORCHRUN_RETURN_IF_ERROR(comm_->AllReduce(&cpu_seconds, 1, DType::kFloat64, ReduceOp::kSum));
  double loss = std::isnan(last_epoch_loss_) ? 0.0 : last_epoch_loss_;
  CPPTORCHRUN_RETURN_IF_ERROR(comm_->AllReduce(&loss, 1, DType::kFloat64, ReduceOp::kAverage));
  metrics.samples = samples;
  metrics.train_seconds = seconds;
  metrics.samples_per_s = seconds > 0 ? samples / seconds : 0;
  metrics.cpu_seconds = cpu_seconds;
  metrics.final_loss = loss;
  return absl::OkStatus();
}

absl::Status TrainingRun::CompareReplicas(TrainMetrics& metrics) {
  // FNV-1a over the parameters' bytes in registration order: equal on two
  // ranks exactly when (barring a collision) their parameters are bitwise equal.
  uint64_t hash = 14695981039346656037ull;
  for (const torch::Tensor& p : params_) {
    torch::Tensor c = p.detach().contiguous();
    const auto* bytes = static_cast<const unsigned char*>(c.data_ptr());
    for (size_t i = 0, n = c.numel() * sizeof(float); i < n; ++i) {
      hash = (hash ^ bytes[i]) * 1099511628211ull;
    }
  }
  int64_t root_hash = static_cast<int64_t>(hash);
  CPPTORCHRUN_RETURN_IF_ERROR(comm_->Broadcast(&root_hash, 1, DType::kInt64, 0));
  int64_t differing = root_hash == static_cast<int64_t>(hash) ? 0 : 1;
  CPPTORCHRUN_RETURN_IF_ERROR(comm_->AllReduce(&differing, 1, DType::kInt64, ReduceOp::kSum));
  metrics.parameters_fingerprint = absl::StrFormat("%016x", hash);
  metrics.replicas_differing = differing;
  return absl::OkStatus();
}

absl::StatusOr<TrainMetrics> TrainingRun::Finish() {
  TrainMetrics metrics = metrics_;
  CPPTORCHRUN_RETURN_IF_ERROR(AgreeOnFigures(metrics));
  // The training time ends with the last step; the last checkpoint's write
  // is waited for here and reported on its own.
  CPPTORCHRUN_RETURN_IF_ERROR(FlushCheckpoints());
  if (writer_ != nullptr) {
    const CheckpointWriter::Stats stats = writer_->stats();
    metrics.checkpoints_written = stats.written;
    metrics.checkpoint_wait_seconds = checkpoint_wait_seconds_;
  }
  CPPTORCHRUN_RETURN_IF_ERROR(CompareReplicas(metrics));
  metrics.steps = run_batches_;
  if (!step_seconds_.empty()) {
    double sum = 0;
    for (double t : step_seconds_) sum += t;
    metrics.step_seconds_mean = sum / step_seconds_.size();
    metrics.step_seconds_median = Median(step_seconds_);
  }
  metrics.by_mode = tallies_.Figures();
  metrics.backward_seconds_mean = run_batches_ > 0 ? backward_seconds_ / run_batches_ : 0;
  const DdpStats& ddp_stats = ddp_->stats();
  metrics.comm_wait_seconds = ddp_stats.wait_seconds;
  metrics.allreduce_timed_steps = ddp_stats.timed_steps;
  metrics.allreduce_seconds = ddp_stats.allreduce_seconds;
  metrics.allreduce_hidden_seconds = ddp_stats.hidden_seconds;
  metrics.bytes_sent = ddp_stats.bytes_sent;
  metrics.bytes_sent_per_step =
      ddp_stats.steps > 0 ? static_cast<double>(ddp_stats.bytes_sent) / ddp_stats.steps : 0;
  if (deps_.test != nullptr) {
    absl::StatusOr<double> accuracy = Evaluate(model_, *deps_.test, *comm_);
    if (!accuracy.ok()) return accuracy.status();
    metrics.test_accuracy = *accuracy;
  }
  if (deps_.final_parameters != nullptr) {
    deps_.final_parameters->clear();
    for (const torch::Tensor& p : params_) {
      torch::Tensor c = p.detach().contiguous();
      deps_.final_parameters->insert(deps_.final_parameters->end(), c.data_ptr<float>(),
                                     c.data_ptr<float>() + c.numel());
    }
  }
  for (TrainObserver* o : deps_.observers) o->OnFinished(metrics);
  return metrics;
}

// Train without the exception boundary.
absl::StatusOr<TrainMetrics> TrainThrowing(const TrainConfig& config, const TrainDeps& deps) {
  TrainingRun run(config, deps);
  absl::Status started = run.Start();
  for (int i = 0; !started.ok() && run.Recoverable() && i < kMaxRecoveriesInARow; ++i) {
    started = run.Recover(started);
  }
  CPPTORCHRUN_RETURN_IF_ERROR(started);
  while (!run.Done()) {
    absl::Status epoch = run.RunEpoch();
    // A collective failed (a peer lost): the next round, in place.
    for (int i = 0; !epoch.ok() && run.Recoverable() && i < kMaxRecoveriesInARow; ++i) {
      epoch = run.Recover(epoch);
    }
    CPPTORCHRUN_RETURN_IF_ERROR(epoch);
  }
  return run.Finish();
}

absl::Status CheckInputs(const TrainConfig& config, const TrainDeps& deps) {
  CPPTORCHRUN_RETURN_IF_ERROR(ValidateConfig(config));
  if (deps.train->features() != kInputs) {
    return absl::InvalidArgumentError(absl::StrCat("training images have ", deps.train->features(),
                                                   " pixels, the model takes ", kInputs));
  }
  return absl::OkStatus();
}

}  // namespace

void SetTorchThreads(int threads) { torch::set_num_threads(std::max(1, threads)); }

absl::Status ValidateConfig(const TrainConfig& c) {
  auto bad = [](const std::string& what) { return absl::InvalidArgumentError(what); };
  if (c.epochs < 1) return bad(absl::StrCat("--epochs must be at least 1, got ", c.epochs));
  if (c.batch_size < 1) return bad(absl::StrCat("--batch_size must be at least 1, got ", c.batch_size));
  if (!(c.lr >= 0) || !std::isfinite(c.lr)) return bad(absl::StrCat("--lr must be positive, got ", c.lr));
  CPPTORCHRUN_RETURN_IF_ERROR(ValidateOptimizerOptions(c.optimizer));
  CPPTORCHRUN_RETURN_IF_ERROR(ValidateCommHookOptions(c.comm_hook));
  if (c.grad_accum_steps < 1) {
    return bad(absl::StrCat("--grad_accum_steps must be at least 1, got ", c.grad_accum_steps));
  }
  if (c.warmup_steps < 0) return bad("--warmup_steps must not be negative");
  if (c.bucket_cap_bytes < 1) return bad("--bucket_cap_mb must be positive");
  if (c.checkpoint_every < 0) return bad("--checkpoint_every must not be negative");
  if (c.keep_checkpoints < 1) return bad("--keep_checkpoints must be at least 1");
  if (c.hidden.size() > kMaxHiddenLayers) {
    return bad(absl::StrCat("--hidden has ", c.hidden.size(), " layers, at most ", kMaxHiddenLayers));
  }
  for (int64_t width : c.hidden) {
    if (width < 1 || width > kMaxHiddenWidth) {
      return bad(absl::StrCat("--hidden widths must be in [1, ", kMaxHiddenWidth, "], got ", width));
    }
  }
  return absl::OkStatus();
}

double BaseLearningRate(const TrainConfig& config) {
  return config.lr > 0 ? config.lr : DefaultLearningRate(config.optimizer.kind);
}

absl::StatusOr<TrainMetrics> Train(const TrainConfig& config, const TrainDeps& deps) {
  if (deps.comm == nullptr || deps.train == nullptr) {
    return absl::InvalidArgumentError("Train: a communicator and a training set are required");
  }
  absl::StatusOr<TrainMetrics> result;
  try {
    absl::Status inputs = CheckInputs(config, deps);
    result = inputs.ok() ? TrainThrowing(config, deps) : absl::StatusOr<TrainMetrics>(inputs);
  } catch (const c10::Error& e) {
    result = absl::InternalError(absl::StrCat("LibTorch: ", e.what_without_backtrace()));
  } catch (const std::exception& e) {
    result = absl::InternalError(absl::StrCat("training: ", e.what()));
  }
  // The other ranks may be blocked in a collective with this one: abort it
  // so that they fail now rather than at their collective timeout.
  if (!result.ok()) deps.comm->Abort(std::string(result.status().message()));
  return result;
}

}  // namespace cpptorchrun::worker
