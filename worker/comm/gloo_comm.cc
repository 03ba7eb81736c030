// The Gloo communicator: a gloo::rendezvous::Context over TCP and a
// CommThread that runs its blocking collectives in order.
#include "worker/comm/gloo_comm.h"

#include <atomic>
#include <chrono>
#include <exception>

#include "absl/strings/str_cat.h"
#include "gloo/allreduce.h"
#include "gloo/barrier.h"
#include "gloo/broadcast.h"
#include "gloo/math.h"
#include "gloo/rendezvous/context.h"
#include "gloo/transport/tcp/device.h"
#include "worker/comm/comm_thread.h"
#include "worker/comm/float16.h"
#include "worker/comm/gloo_store.h"

namespace cpptorchrun::worker {
namespace {

template <typename T>
void Scale(void* data, int64_t count, double factor) {
  T* p = static_cast<T*>(data);
  for (int64_t i = 0; i < count; ++i) p[i] = static_cast<T>(p[i] * factor);
}

template <typename T>
void GlooAllReduce(const std::shared_ptr<gloo::Context>& context, void* data, int64_t count,
                   uint32_t tag, std::chrono::milliseconds timeout) {
  gloo::AllreduceOptions opts(context);
  opts.setOutput(static_cast<T*>(data), count);
  opts.setReduceFunction(
      static_cast<void (*)(void*, const void*, const void*, size_t)>(&gloo::sum<T>));
  opts.setTag(tag);
  opts.setTimeout(timeout);
  gloo::allreduce(opts);
}

// Gloo's reduce functions for the 16-bit floats (raw uint16_t bits).
void SumHalf(void* c, const void* a, const void* b, size_t n) {
  AddSixteen(DType::kFloat16, static_cast<uint16_t*>(c), static_cast<const uint16_t*>(a),
             static_cast<const uint16_t*>(b), static_cast<int64_t>(n));
}

void SumBFloat16(void* c, const void* a, const void* b, size_t n) {
  AddSixteen(DType::kBFloat16, static_cast<uint16_t*>(c), static_cast<const uint16_t*>(a),
             static_cast<const uint16_t*>(b), static_cast<int64_t>(n));
}

void GlooAllReduceSixteen(const std::shared_ptr<gloo::Context>& context, void* data,
                          int64_t count, DType dtype, uint32_t tag,
                          std::chrono::milliseconds timeout) {
  gloo::AllreduceOptions opts(context);
  opts.setOutput(static_cast<uint16_t*>(data), count);
  opts.setReduceFunction(dtype == DType::kFloat16 ? &SumHalf : &SumBFloat16);
  opts.setTag(tag);
  opts.setTimeout(timeout);
  gloo::allreduce(opts);
}

template <typename T>
void GlooBroadcast(const std::shared_ptr<gloo::Context>& context, void* data, int64_t count,
                   int root, uint32_t tag, std::chrono::milliseconds timeout) {
  gloo::BroadcastOptions opts(context);
  opts.setOutput(static_cast<T*>(data), count);
  opts.setRoot(root);
  opts.setTag(tag);
  opts.setTimeout(timeout);
  gloo::broadcast(opts);
}

class GlooCommunicator final : public Communicator {
 public:
  GlooCommunicator(std::shared_ptr<gloo::Context> context, absl::Duration timeout)
      : context_(std::move(context)),
        timeout_(absl::ToInt64Milliseconds(timeout)) {
    thread_->SetAfterAbort([this] { CloseConnections(); });
  }

  ~GlooCommunicator() override { thread_.reset(); }

  int rank() const override { return context_->rank; }
  int world_size() const override { return context_->size; }
  std::string backend() const override { return "gloo"; }

  std::shared_ptr<Work> AllReduceAsync(void* data, int64_t count, DType dtype,
                                       ReduceOp op) override {
    if (op == ReduceOp::kAverage && (dtype == DType::kInt64 || dtype == DType::kUint8)) {
      return CompletedWork(absl::InvalidArgumentError(
          absl::StrCat("average all-reduce of ", DTypeName(dtype), " is not supported")));
    }
    const int world = world_size();
    return thread_->Submit([this, data, count, dtype, op, world]() -> absl::Status {
      const uint32_t tag = next_tag_++;
      return Guard("all-reduce", [&] {
        switch (dtype) {
          case DType::kFloat32:
            GlooAllReduce<float>(context_, data, count, tag, timeout_);
            if (op == ReduceOp::kAverage) Scale<float>(data, count, 1.0 / world);
            break;
          case DType::kFloat64:
            GlooAllReduce<double>(context_, data, count, tag, timeout_);
            if (op == ReduceOp::kAverage) Scale<double>(data, count, 1.0 / world);
            break;
          case DType::kInt64:
            GlooAllReduce<int64_t>(context_, data, count, tag, timeout_);
            break;
          case DType::kUint8:
            GlooAllReduce<uint8_t>(context_, data, count, tag, timeout_);
            break;
          case DType::kFloat16:
          case DType::kBFloat16:
            GlooAllReduceSixteen(context_, data, count, dtype, tag, timeout_);
            if (op == ReduceOp::kAverage) {
              ScaleSixteen(dtype, static_cast<uint16_t*>(data), count, 1.0 / world);
            }
            break;
        }
      });
    });
  }

  std::shared_ptr<Work> BroadcastAsync(void* data, int64_t count, DType dtype,
                                       int root) override {
    if (root < 0 || root >= world_size()) {
      return CompletedWork(absl::InvalidArgumentError(
          absl::StrCat("broadcast root ", root, " is outside [0, ", world_size(), ")")));
    }
    return thread_->Submit([this, data, count, dtype, root]() -> absl::Status {
      const uint32_t tag = next_tag_++;
      return Guard("broadcast", [&] {
        // Bytes are bytes: broadcast every type as uint8.
        GlooBroadcast<uint8_t>(context_, data, count * DTypeSize(dtype), root, tag, timeout_);
      });
    });
  }

  absl::Status Barrier() override {
    return thread_
        ->Submit([this]() -> absl::Status {
          const uint32_t tag = next_tag_++;
          return Guard("barrier", [&] {
            gloo::BarrierOptions opts(context_);
            opts.setTag(tag);
            opts.setTimeout(timeout_);
            gloo::barrier(opts);
          });
        })
        ->Wait();
  }

  // Closing the connections makes a peer's collective on the wire fail at
  // once (its event loop reads the end of the stream) instead of at its
  // timeout. A rank closes them only while no collective of its own runs:
  // closing takes its sockets off Gloo's event loop, so its own wait would
  // then last until the timeout. A collective running at the abort is
  // waiting for a peer, which is dead (the kernel ended its streams) or is
  // aborted too and closes; the connections close when it ends.
  void Abort(const std::string& reason) override { thread_->Abort(reason); }

 private:
  template <typename F>
  absl::Status Guard(const char* what, F&& f) {
    try {
      f();
      return absl::OkStatus();
    } catch (const std::exception& e) {
      return absl::UnavailableError(absl::StrCat("gloo ", what, " failed: ", e.what()));
    }
  }

  void CloseConnections() {
    if (closed_.exchange(true)) return;
    try {
      context_->closeConnections();
    } catch (const std::exception&) {
      // Already broken: nothing left to end.
    }
  }

  std::shared_ptr<gloo::Context> context_;
  const std::chrono::milliseconds timeout_;
  std::atomic<bool> closed_{false};
  // Touched only on the comm thread, so every rank numbers its collectives
  // in issue order.
  uint32_t next_tag_ = 0;
  std::unique_ptr<CommThread> thread_ = std::make_unique<CommThread>();
};

}  // namespace

absl::StatusOr<std::unique_ptr<Communicator>> NewGlooCommunicator(const GlooOptions& options) {
  if (options.store == nullptr) return absl::InvalidArgumentError("gloo: no rendezvous store");
  if (options.world_size < 1 || options.rank < 0 || options.rank >= options.world_size) {
    return absl::InvalidArgumentError(absl::StrCat("gloo: rank ", options.rank,
                                                   " of world size ", options.world_size));
  }
  try {
    gloo::transport::tcp::attr attr;
    attr.hostname = options.hostname;
    auto device = gloo::transport::tcp::CreateDevice(attr);
    auto context = std::make_shared<gloo::rendezvous::Context>(options.rank, options.world_size);
    context->setTimeout(std::chrono::milliseconds(absl::ToInt64Milliseconds(options.timeout)));
    GlooStore store(options.store, options.key_prefix, options.timeout);
    context->connectFullMesh(store, device);
    return std::unique_ptr<Communicator>(
        std::make_unique<GlooCommunicator>(std::move(context), options.timeout));
  } catch (const std::exception& e) {
    return absl::UnavailableError(absl::StrCat("gloo: cannot connect rank ", options.rank, " of ",
                                               options.world_size, " on ", options.hostname,
                                               ": ", e.what()));
  }
}

}  // namespace cpptorchrun::worker
