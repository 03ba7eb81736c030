// The training loop: model, data tensors, Adam, DDP, checkpoints, resume,
// evaluation and the final figures.
#include "worker/training/trainer.h"

#include <ATen/CPUGeneratorImpl.h>
#include <torch/torch.h>

#include <sys/resource.h>

#include <algorithm>
#include <cmath>
#include <iostream>
#include <iterator>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "worker/training/checkpoint.h"
#include "worker/training/ddp.h"
#include "worker/data/sampler.h"
#include "worker/training/schedule.h"
#include "worker/data/torch_random.h"

namespace cpptorchrun::worker {
namespace {

constexpr int64_t kInputs = 784;
constexpr int64_t kClasses = 10;
// Bounds on --hidden: a typo must not allocate the machine away.
constexpr size_t kMaxHiddenLayers = 16;
constexpr int64_t kMaxHiddenWidth = 16384;

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

std::string StateKey(const torch::Tensor& p) {
  return c10::guts::to_string(p.unsafeGetTensorImpl());
}

torch::optim::AdamParamState& AdamState(torch::optim::Adam& optimizer, const torch::Tensor& p) {
  auto& states = optimizer.state();
  auto it = states.find(StateKey(p));
  if (it == states.end()) {
    auto fresh = std::make_unique<torch::optim::AdamParamState>();
    fresh->step(0);
    fresh->exp_avg(torch::zeros_like(p, torch::MemoryFormat::Preserve));
    fresh->exp_avg_sq(torch::zeros_like(p, torch::MemoryFormat::Preserve));
    it = states.emplace(StateKey(p), std::move(fresh)).first;
  }
  return static_cast<torch::optim::AdamParamState&>(*it->second);
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

CheckpointState Snapshot(const std::vector<torch::Tensor>& params, torch::optim::Adam& optimizer,
                         const Position& pos, int world_size, const TrainConfig& config) {
  CheckpointState state;
  state.ints["epoch"] = pos.epoch;
  state.ints["samples_in_epoch"] = pos.samples_in_epoch;
  state.ints["global_step"] = pos.global_step;
  state.ints["opt_step"] = pos.opt_step;
  state.ints["world_size"] = world_size;
  state.ints["batch_size"] = config.batch_size;
  state.ints["seed"] = static_cast<int64_t>(config.seed);
  for (size_t i = 0; i < params.size(); ++i) {
    state.tensors.push_back(ToBlob(absl::StrCat("param.", i), params[i]));
    torch::optim::AdamParamState& adam = AdamState(optimizer, params[i]);
    state.ints[absl::StrCat("adam.step.", i)] = adam.step();
    state.tensors.push_back(ToBlob(absl::StrCat("adam.exp_avg.", i), adam.exp_avg()));
    state.tensors.push_back(ToBlob(absl::StrCat("adam.exp_avg_sq.", i), adam.exp_avg_sq()));
  }
  return state;
}

absl::Status Restore(const CheckpointState& state, std::vector<torch::Tensor>& params,
                     torch::optim::Adam& optimizer, Position* pos) {
  for (const char* key : {"epoch", "samples_in_epoch", "global_step", "opt_step"}) {
    if (!state.Int(key).ok()) return state.Int(key).status();
  }
  pos->epoch = *state.Int("epoch");
  pos->samples_in_epoch = *state.Int("samples_in_epoch");
  pos->global_step = *state.Int("global_step");
  pos->opt_step = *state.Int("opt_step");
  for (size_t i = 0; i < params.size(); ++i) {
    CPPTORCHRUN_RETURN_IF_ERROR(FromBlob(state, absl::StrCat("param.", i), params[i]));
    torch::optim::AdamParamState& adam = AdamState(optimizer, params[i]);
    absl::StatusOr<int64_t> step = state.Int(absl::StrCat("adam.step.", i));
    if (!step.ok()) return step.status();
    adam.step(*step);
    CPPTORCHRUN_RETURN_IF_ERROR(FromBlob(state, absl::StrCat("adam.exp_avg.", i), adam.exp_avg()));
    CPPTORCHRUN_RETURN_IF_ERROR(
        FromBlob(state, absl::StrCat("adam.exp_avg_sq.", i), adam.exp_avg_sq()));
  }
  return absl::OkStatus();
}

// Rank 0 reads the newest valid checkpoint; everyone receives the position
// and the optimizer state from it (parameters follow in DDP's broadcast),
// so only rank 0 needs to see the checkpoint folder.
absl::StatusOr<bool> Resume(const TrainConfig& config, Communicator& comm,
                            std::vector<torch::Tensor>& params, torch::optim::Adam& optimizer,
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
        (void)comm.Broadcast(meta, 5, DType::kInt64, 0);
        return absl::Status(restored.code(),
                            absl::StrCat(loaded->path, ": ", restored.message()));
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
  std::vector<int64_t> steps;
  std::vector<torch::Tensor> moments;
  for (const torch::Tensor& p : params) {
    torch::optim::AdamParamState& adam = AdamState(optimizer, p);
    steps.push_back(adam.step());
    moments.push_back(adam.exp_avg().reshape({-1}));
    moments.push_back(adam.exp_avg_sq().reshape({-1}));
  }
  CPPTORCHRUN_RETURN_IF_ERROR(comm.Broadcast(steps.data(), steps.size(), DType::kInt64, 0));
  torch::Tensor flat = torch::cat(moments);
  CPPTORCHRUN_RETURN_IF_ERROR(comm.Broadcast(flat.data_ptr<float>(), flat.numel(), DType::kFloat32, 0));
  int64_t offset = 0;
  for (size_t i = 0; i < params.size(); ++i) {
    torch::optim::AdamParamState& adam = AdamState(optimizer, params[i]);
    adam.step(steps[i]);
    for (torch::Tensor t : {adam.exp_avg(), adam.exp_avg_sq()}) {
      t.copy_(flat.narrow(0, offset, t.numel()).view_as(t));
      offset += t.numel();
    }
  }
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

// The median (the upper one of an even count); 0 for none. Reorders.
double Median(std::vector<double>& values) {
  if (values.empty()) return 0;
  const size_t mid = values.size() / 2;
  std::nth_element(values.begin(), values.begin() + mid, values.end());
  return values[mid];
}

// --allreduce rotate's order, kRotationBlock optimizer steps in each mode.
// Blocks, not single steps: the ranks drift apart on steps without an
// all-reduce, and the next all-reduce waits for the slower one; step by
// step that wait would always fall on the mode after "off". In blocks it
// falls on a block's first step, which the per-mode median leaves out.
constexpr AllReduceMode kRotation[] = {AllReduceMode::kOff, AllReduceMode::kAfterBackward,
                                       AllReduceMode::kOverlap};
constexpr int64_t kRotationBlock = 4;

// One all-reduce mode's share of a run: its steps' times and DDP figures.
struct ModeTally {
  std::vector<double> step_seconds;
  DdpStats ddp;
};

}  // namespace

void SetTorchThreads(int threads) { torch::set_num_threads(std::max(1, threads)); }

const char* AllReduceModeName(AllReduceMode mode) {
  switch (mode) {
    case AllReduceMode::kOverlap:
      return "overlap";
    case AllReduceMode::kAfterBackward:
      return "after_backward";
    case AllReduceMode::kOff:
      return "off";
    case AllReduceMode::kRotate:
      return "rotate";
  }
  return "?";
}

absl::StatusOr<AllReduceMode> ParseAllReduceMode(const std::string& name) {
  for (AllReduceMode mode : {AllReduceMode::kOverlap, AllReduceMode::kAfterBackward,
                             AllReduceMode::kOff, AllReduceMode::kRotate}) {
    if (name == AllReduceModeName(mode)) return mode;
  }
  return absl::InvalidArgumentError(absl::StrCat(
      "--allreduce must be overlap, after_backward, off or rotate, got \"", name, "\""));
}

absl::Status ValidateConfig(const TrainConfig& c) {
  auto bad = [](const std::string& what) { return absl::InvalidArgumentError(what); };
  if (c.epochs < 1) return bad(absl::StrCat("--epochs must be at least 1, got ", c.epochs));
  if (c.batch_size < 1) return bad(absl::StrCat("--batch_size must be at least 1, got ", c.batch_size));
  if (!(c.lr > 0) || !std::isfinite(c.lr)) return bad(absl::StrCat("--lr must be positive, got ", c.lr));
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

absl::StatusOr<TrainMetrics> Train(const TrainConfig& config, const TrainDeps& deps) {
  CPPTORCHRUN_RETURN_IF_ERROR(ValidateConfig(config));
  if (deps.comm == nullptr || deps.train == nullptr) {
    return absl::InvalidArgumentError("Train: a communicator and a training set are required");
  }
  if (deps.train->features() != kInputs) {
    return absl::InvalidArgumentError(absl::StrCat("training images have ", deps.train->features(),
                                                   " pixels, the model takes ", kInputs));
  }
  Communicator& comm = *deps.comm;
  const int world = comm.world_size();
  const int rank = comm.rank();
  auto warn = deps.warn ? deps.warn
                        : std::function<void(const std::string&)>([](const std::string& w) {
                            std::cerr << "warning: " << w << std::endl;
                          });
  auto now = deps.now ? deps.now : std::function<double()>(SteadySeconds);

  Mlp model(config.hidden);
  model->Initialise(config.seed);
  std::vector<torch::Tensor> params = model->parameters();
  torch::optim::Adam optimizer(params, torch::optim::AdamOptions(config.lr));
  DdpOptions ddp_options;
  ddp_options.bucket_cap_bytes = config.bucket_cap_bytes;
  ddp_options.first_bucket_cap_bytes = config.first_bucket_cap_bytes;
  ddp_options.overlap = config.allreduce == AllReduceMode::kOverlap;
  absl::StatusOr<std::unique_ptr<DistributedDataParallel>> ddp =
      DistributedDataParallel::Create(params, model->buffers(), &comm, ddp_options);
  if (!ddp.ok()) return ddp.status();

  Position pos;
  absl::StatusOr<bool> resumed = Resume(config, comm, params, optimizer, &pos, warn);
  if (!resumed.ok()) return resumed.status();
  CPPTORCHRUN_RETURN_IF_ERROR((*ddp)->BroadcastState(0));
  TrainMetrics metrics;
  metrics.world_size = world;
  metrics.epochs = config.epochs;
  metrics.restart_count = config.restart_count;
  metrics.backend = comm.backend();
  metrics.allreduce = AllReduceModeName(config.allreduce);
  metrics.hidden = absl::StrJoin(config.hidden, ",");
  if (*resumed) {
    metrics.resumed_from_step = pos.global_step;
    for (TrainObserver* o : deps.observers) o->OnResumed(pos.global_step);
  }

  const torch::Tensor images = ImagesTensor(*deps.train);
  const torch::Tensor labels = LabelsTensor(*deps.train);
  SamplerOptions sampler_options;
  sampler_options.dataset_size = deps.train->size();
  sampler_options.world_size = world;
  sampler_options.rank = rank;
  sampler_options.seed = config.seed;
  sampler_options.drop_last = config.drop_last;
  CPPTORCHRUN_RETURN_IF_ERROR(DistributedSampler::Validate(sampler_options, TorchRandperm));
  DistributedSampler sampler(sampler_options, TorchRandperm);
  const int64_t batch = config.batch_size;
  const int64_t full_epoch_steps = (sampler.NumSamples(0) + batch - 1) / batch;
  const int64_t total_steps = full_epoch_steps * config.epochs;

  LrSchedule schedule;
  schedule.base_lr = config.lr;
  schedule.scale = int64_t{world} * config.grad_accum_steps;
  schedule.scale_lr = config.scale_lr;
  schedule.warmup_steps = config.warmup_steps;
  auto& adam_options = static_cast<torch::optim::AdamOptions&>(optimizer.param_groups()[0].options());

  auto save = [&](const Position& at) -> absl::Status {
    if (rank != 0 || config.checkpoint_dir.empty()) return absl::OkStatus();
    return WriteCheckpoint(config.checkpoint_dir, at.global_step,
                           Snapshot(params, optimizer, at, world, config), config.keep_checkpoints);
  };

  const double start = now();
  const double cpu_start = ProcessCpuSeconds();
  int64_t run_batches = 0;
  int64_t local_samples = 0;
  std::vector<double> step_seconds;
  double backward_seconds = 0;
  ModeTally tallies[3];  // indexed as kRotation
  // Not rotating: the one mode's place in kRotation.
  const size_t fixed_mode_index = static_cast<size_t>(
      std::find(std::begin(kRotation), std::end(kRotation), config.allreduce) - std::begin(kRotation));
  double last_epoch_loss = std::nan("");
  for (; pos.epoch < config.epochs; ++pos.epoch, pos.samples_in_epoch = 0) {
    sampler.SetEpoch(pos.epoch);
    std::vector<int64_t> order = sampler.Indices(pos.samples_in_epoch);
    const int64_t local = static_cast<int64_t>(order.size());
    const int64_t batches = (local + batch - 1) / batch;
    const int64_t done_before = full_epoch_steps - batches;
    torch::Tensor order_t = torch::from_blob(order.data(), {local}, torch::kLong).clone();
    double loss_sum = 0;
    int64_t loss_count = 0;
    for (int64_t b = 0; b < batches; ++b) {
      const int64_t len = std::min(batch, local - b * batch);
      torch::Tensor rows = order_t.narrow(0, b * batch, len);
      const int64_t window_start = b / config.grad_accum_steps * config.grad_accum_steps;
      const int64_t window = std::min(config.grad_accum_steps, batches - window_start);
      const bool sync = b == window_start + window - 1;

      // Rotating, a whole accumulation window (one optimizer step) runs in
      // one mode, the same on every rank.
      const size_t mode_index = config.allreduce == AllReduceMode::kRotate
                                    ? static_cast<size_t>(pos.opt_step / kRotationBlock % 3)
                                    : fixed_mode_index;
      const AllReduceMode mode = kRotation[mode_index];
      const DdpStats ddp_before = (*ddp)->stats();
      const double step_start = now();
      (*ddp)->set_overlap(mode == AllReduceMode::kOverlap);
      // With the all-reduce off, every step is a local one to DDP.
      (*ddp)->PrepareBackward(sync && mode != AllReduceMode::kOff);
      torch::Tensor loss = torch::nn::functional::cross_entropy(
          model->forward(Rows(images, rows)), labels.index_select(0, rows));
      const double backward_start = now();
      (window > 1 ? loss / static_cast<double>(window) : loss).backward();
      backward_seconds += now() - backward_start;
      CPPTORCHRUN_RETURN_IF_ERROR((*ddp)->FinishBackward());
      if (sync) {
        adam_options.lr(LearningRate(schedule, pos.opt_step));
        optimizer.step();
        for (torch::Tensor& p : params) p.mutable_grad().reset();
        ++pos.opt_step;
      }
      step_seconds.push_back(now() - step_start);
      ModeTally& tally = tallies[mode_index];
      tally.step_seconds.push_back(step_seconds.back());
      tally.ddp += (*ddp)->stats() - ddp_before;
      const double loss_value = loss.item<double>();
      loss_sum += loss_value;
      ++loss_count;
      ++pos.global_step;
      ++run_batches;
      local_samples += len;
      pos.samples_in_epoch += batch * world;

      StepReport report;
      report.rank = rank;
      report.epoch = pos.epoch;
      report.epochs = config.epochs;
      report.step_in_epoch = done_before + b + 1;
      report.steps_in_epoch = full_epoch_steps;
      report.global_step = pos.global_step;
      report.total_steps = total_steps;
      report.loss = loss_value;
      report.elapsed_seconds = now() - start;
      report.samples = absl::MakeConstSpan(order.data() + b * batch, len);
      report.samples_per_s = report.elapsed_seconds > 0
                                 ? local_samples * world / report.elapsed_seconds
                                 : 0;
      for (TrainObserver* o : deps.observers) o->OnStep(report);

      if (config.fail_after_steps > 0 && run_batches == config.fail_after_steps) {
        return absl::AbortedError(
            absl::StrCat("fault injection: stopped after ", run_batches, " batches"));
      }
      if (sync && config.checkpoint_every > 0 && pos.opt_step % config.checkpoint_every == 0 &&
          b + 1 < batches) {
        CPPTORCHRUN_RETURN_IF_ERROR(save(pos));
      }
    }
    last_epoch_loss = loss_count > 0 ? loss_sum / loss_count : std::nan("");
    CPPTORCHRUN_RETURN_IF_ERROR(save(Position{pos.epoch + 1, 0, pos.global_step, pos.opt_step}));
  }
  double seconds = now() - start;
  // In-process tests run ranks as threads of one process: the figure then
  // counts the process once per rank.
  double cpu_seconds = ProcessCpuSeconds() - cpu_start;

  // The job's figures: samples summed, rank 0's clock, losses averaged.
  int64_t samples = local_samples;
  CPPTORCHRUN_RETURN_IF_ERROR(comm.AllReduce(&samples, 1, DType::kInt64, ReduceOp::kSum));
  CPPTORCHRUN_RETURN_IF_ERROR(comm.Broadcast(&seconds, 1, DType::kFloat64, 0));
  CPPTORCHRUN_RETURN_IF_ERROR(comm.AllReduce(&cpu_seconds, 1, DType::kFloat64, ReduceOp::kSum));
  double loss = std::isnan(last_epoch_loss) ? 0.0 : last_epoch_loss;
  CPPTORCHRUN_RETURN_IF_ERROR(comm.AllReduce(&loss, 1, DType::kFloat64, ReduceOp::kAverage));
  metrics.steps = run_batches;
  metrics.samples = samples;
  metrics.train_seconds = seconds;
  metrics.samples_per_s = seconds > 0 ? samples / seconds : 0;
  metrics.cpu_seconds = cpu_seconds;
  if (!step_seconds.empty()) {
    double sum = 0;
    for (double t : step_seconds) sum += t;
    metrics.step_seconds_mean = sum / step_seconds.size();
    metrics.step_seconds_median = Median(step_seconds);
  }
  for (size_t i = 0; i < 3; ++i) {
    ModeTally& tally = tallies[i];
    if (tally.step_seconds.empty()) continue;
    TrainMetrics::ModeFigures figures;
    figures.mode = AllReduceModeName(kRotation[i]);
    figures.steps = static_cast<int64_t>(tally.step_seconds.size());
    figures.step_seconds_median = Median(tally.step_seconds);
    figures.comm_wait_seconds = tally.ddp.wait_seconds;
    figures.allreduce_timed_steps = tally.ddp.timed_steps;
    figures.allreduce_seconds = tally.ddp.allreduce_seconds;
    figures.allreduce_hidden_seconds = tally.ddp.hidden_seconds;
    metrics.by_mode.push_back(figures);
  }
  metrics.backward_seconds_mean = run_batches > 0 ? backward_seconds / run_batches : 0;
  const DdpStats& ddp_stats = (*ddp)->stats();
  metrics.comm_wait_seconds = ddp_stats.wait_seconds;
  metrics.allreduce_timed_steps = ddp_stats.timed_steps;
  metrics.allreduce_seconds = ddp_stats.allreduce_seconds;
  metrics.allreduce_hidden_seconds = ddp_stats.hidden_seconds;
  metrics.final_loss = loss;
  if (deps.test != nullptr) {
    absl::StatusOr<double> accuracy = Evaluate(model, *deps.test, comm);
    if (!accuracy.ok()) return accuracy.status();
    metrics.test_accuracy = *accuracy;
  }
  if (deps.final_parameters != nullptr) {
    deps.final_parameters->clear();
    for (const torch::Tensor& p : params) {
      torch::Tensor c = p.detach().contiguous();
      deps.final_parameters->insert(deps.final_parameters->end(), c.data_ptr<float>(),
                                    c.data_ptr<float>() + c.numel());
    }
  }
  for (TrainObserver* o : deps.observers) o->OnFinished(metrics);
  return metrics;
}

}  // namespace cpptorchrun::worker
