// The hierarchical communicator: shared memory within a node, Gloo among
// the nodes' leaders. See hierarchical_comm.h.
#include "worker/comm/hierarchical_comm.h"

#include <algorithm>
#include <utility>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "worker/comm/comm_thread.h"
#include "worker/comm/float16.h"
#include "worker/comm/gloo_comm.h"
#include "worker/comm/shm_comm.h"

namespace cpptorchrun::worker {

absl::Status CheckLayout(const NodeLayout& layout) {
  const std::vector<int>& first = layout.first_rank;
  if (first.empty() || first[0] != 0) {
    return absl::InvalidArgumentError("the first node's ranks must start at rank 0");
  }
  for (size_t g = 0; g < first.size(); ++g) {
    const int end = g + 1 < first.size() ? first[g + 1] : layout.world_size;
    if (end <= first[g]) {
      return absl::InvalidArgumentError(absl::StrCat("node ", g, " (ranks from ", first[g],
                                                     ") holds no rank below ", end));
    }
  }
  return absl::OkStatus();
}

int NodeOfRank(const NodeLayout& layout, int rank) {
  const std::vector<int>& first = layout.first_rank;
  return static_cast<int>(std::upper_bound(first.begin(), first.end(), rank) - first.begin()) - 1;
}

namespace {

// An average is defined for floating types only.
absl::Status CheckAverageable(DType dtype) {
  if (dtype == DType::kFloat32 || dtype == DType::kFloat64 || IsSixteenBitFloat(dtype)) {
    return absl::OkStatus();
  }
  return absl::InvalidArgumentError(
      absl::StrCat("an average of ", DTypeName(dtype), " is not defined; use a sum"));
}

// Divides the `count` elements at `data` by `divisor` (floating types).
absl::Status DivideInPlace(void* data, int64_t count, DType dtype, int divisor) {
  if (dtype == DType::kFloat32) {
    float* v = static_cast<float*>(data);
    const float f = 1.0f / static_cast<float>(divisor);
    for (int64_t i = 0; i < count; ++i) v[i] *= f;
    return absl::OkStatus();
  }
  if (dtype == DType::kFloat64) {
    double* v = static_cast<double*>(data);
    const double f = 1.0 / divisor;
    for (int64_t i = 0; i < count; ++i) v[i] *= f;
    return absl::OkStatus();
  }
  if (IsSixteenBitFloat(dtype)) {
    ScaleSixteen(dtype, static_cast<uint16_t*>(data), count, 1.0 / divisor);
    return absl::OkStatus();
  }
  return CheckAverageable(dtype);
}

class HierarchicalCommunicator final : public Communicator {
 public:
  HierarchicalCommunicator(std::unique_ptr<Communicator> local,
                           std::unique_ptr<Communicator> leaders, NodeLayout layout, int rank)
      : local_(std::move(local)),
        leaders_(std::move(leaders)),
        layout_(std::move(layout)),
        rank_(rank),
        node_(NodeOfRank(layout_, rank)) {}

  ~HierarchicalCommunicator() override { thread_.Abort("communicator destroyed"); }

  int rank() const override { return rank_; }
  int world_size() const override { return layout_.world_size; }
  std::string backend() const override { return "hierarchical"; }

  std::shared_ptr<Work> AllReduceAsync(void* data, int64_t count, DType dtype,
                                       ReduceOp op) override {
    if (op == ReduceOp::kAverage) {
      if (absl::Status s = CheckAverageable(dtype); !s.ok()) return CompletedWork(s);
    }
    return thread_.Submit([=] { return Guard(AllReduce(data, count, dtype, op)); });
  }

  std::shared_ptr<Work> BroadcastAsync(void* data, int64_t count, DType dtype,
                                       int root) override {
    if (root < 0 || root >= layout_.world_size) {
      return CompletedWork(absl::InvalidArgumentError(
          absl::StrCat("broadcast root ", root, " is outside [0, ", layout_.world_size, ")")));
    }
    return thread_.Submit([=] { return Guard(Broadcast(data, count, dtype, root)); });
  }

  absl::Status Barrier() override {
    return thread_
        .Submit([this] {
          absl::Status s = local_->Barrier();
          if (s.ok() && leaders_ != nullptr) s = leaders_->Barrier();
          if (s.ok()) s = local_->Barrier();
          return Guard(s);
        })
        ->Wait();
  }

  void Abort(const std::string& reason) override {
    thread_.Abort(reason);
    local_->Abort(reason);
    if (leaders_ != nullptr) leaders_->Abort(reason);
  }

 private:
  // Sum within the node, sum among the leaders, the result back to the node.
  absl::Status AllReduce(void* data, int64_t count, DType dtype, ReduceOp op) {
    absl::Status s = local_->AllReduce(data, count, dtype, ReduceOp::kSum);
    if (!s.ok()) return Stage("within the node", s);
    if (leaders_ != nullptr) {
      s = leaders_->AllReduce(data, count, dtype, ReduceOp::kSum);
      if (!s.ok()) return Stage("among the nodes' leaders", s);
    }
    s = local_->Broadcast(data, count, dtype, 0);
    if (!s.ok()) return Stage("back within the node", s);
    if (op == ReduceOp::kAverage) return DivideInPlace(data, count, dtype, layout_.world_size);
    return absl::OkStatus();
  }

  // From the root to its node's leader, among the leaders, then to every
  // other node's ranks.
  absl::Status Broadcast(void* data, int64_t count, DType dtype, int root) {
    const int root_node = NodeOfRank(layout_, root);
    absl::Status s;
    if (node_ == root_node) {
      s = local_->Broadcast(data, count, dtype, root - layout_.first_rank[root_node]);
      if (!s.ok()) return Stage("within the root's node", s);
    }
    if (leaders_ != nullptr) {
      s = leaders_->Broadcast(data, count, dtype, root_node);
      if (!s.ok()) return Stage("among the nodes' leaders", s);
    }
    if (node_ != root_node) {
      s = local_->Broadcast(data, count, dtype, 0);
      if (!s.ok()) return Stage("within the node", s);
    }
    return absl::OkStatus();
  }

  static absl::Status Stage(const char* where, const absl::Status& s) {
    return absl::Status(s.code(), absl::StrCat("hierarchical collective, ", where, ": ",
                                               s.message()));
  }

  // A failed stage leaves the node's other ranks (or the other leaders)
  // waiting on a collective this rank will not finish: abort both inner
  // communicators so that they fail now instead of at their timeout.
  absl::Status Guard(absl::Status s) {
    if (!s.ok()) {
      local_->Abort(std::string(s.message()));
      if (leaders_ != nullptr) leaders_->Abort(std::string(s.message()));
    }
    return s;
  }

  const std::unique_ptr<Communicator> local_;
  const std::unique_ptr<Communicator> leaders_;
  const NodeLayout layout_;
  const int rank_;
  const int node_;
  CommThread thread_;
};

// Every node's first rank, as its leader published it: "first_rank,size".
absl::StatusOr<NodeLayout> ExchangeLayout(const HierarchicalOptions& o) {
  const std::string key_of_node = absl::StrCat(o.key_prefix, "node/");
  if (o.local_rank == 0) {
    absl::Status s = o.store->Set(absl::StrCat(key_of_node, o.group_rank),
                                  absl::StrCat(o.rank, ",", o.local_world_size));
    if (!s.ok()) return s;
  }
  std::vector<std::string> keys;
  for (int g = 0; g < o.group_world_size; ++g) keys.push_back(absl::StrCat(key_of_node, g));
  absl::StatusOr<std::vector<std::string>> values = o.store->MultiGet(keys, o.timeout);
  if (!values.ok()) return values.status();
  NodeLayout layout;
  layout.world_size = o.world_size;
  int expected_first = 0;
  for (int g = 0; g < o.group_world_size; ++g) {
    std::vector<std::string> parts = absl::StrSplit((*values)[g], ',');
    int first = 0, size = 0;
    if (parts.size() != 2 || !absl::SimpleAtoi(parts[0], &first) ||
        !absl::SimpleAtoi(parts[1], &size)) {
      return absl::InvalidArgumentError(
          absl::StrCat("node ", g, " published '", (*values)[g], "', not 'first_rank,size'"));
    }
    if (first != expected_first || size < 1) {
      return absl::FailedPreconditionError(absl::StrCat(
          "the hierarchical backend needs each node's ranks contiguous, in group-rank order: "
          "node ",
          g, " holds ranks from ", first, " (", size, " of them), expected from ", expected_first,
          "; use --backend gloo"));
    }
    layout.first_rank.push_back(first);
    expected_first = first + size;
  }
  if (expected_first != o.world_size) {
    return absl::FailedPreconditionError(absl::StrCat("the nodes hold ", expected_first,
                                                      " ranks but WORLD_SIZE is ", o.world_size));
  }
  return layout;
}

absl::Status CheckOptions(const HierarchicalOptions& o) {
  if (o.store == nullptr) return absl::InvalidArgumentError("hierarchical: no store");
  if (o.rank < 0 || o.rank >= o.world_size || o.local_rank < 0 ||
      o.local_rank >= o.local_world_size || o.group_rank < 0 ||
      o.group_rank >= o.group_world_size || o.local_rank > o.rank) {
    return absl::InvalidArgumentError(absl::StrCat(
        "hierarchical: inconsistent ranks: rank ", o.rank, " of ", o.world_size, ", local rank ",
        o.local_rank, " of ", o.local_world_size, ", group rank ", o.group_rank, " of ",
        o.group_world_size));
  }
  return absl::OkStatus();
}

}  // namespace

std::unique_ptr<Communicator> ComposeHierarchical(std::unique_ptr<Communicator> local,
                                                  std::unique_ptr<Communicator> leaders,
                                                  NodeLayout layout, int rank) {
  return std::make_unique<HierarchicalCommunicator>(std::move(local), std::move(leaders),
                                                    std::move(layout), rank);
}

absl::StatusOr<std::unique_ptr<Communicator>> NewHierarchicalCommunicator(
    const HierarchicalOptions& options) {
  if (absl::Status s = CheckOptions(options); !s.ok()) return s;
  absl::StatusOr<NodeLayout> layout = ExchangeLayout(options);
  if (!layout.ok()) return layout.status();
  if (options.rank - options.local_rank != layout->first_rank[options.group_rank]) {
    return absl::FailedPreconditionError(
        absl::StrCat("rank ", options.rank, " (local rank ", options.local_rank,
                     ") is not on node ", options.group_rank, ", which starts at rank ",
                     layout->first_rank[options.group_rank]));
  }
  std::unique_ptr<Communicator> local;
  if (options.local_world_size == 1) {
    local = NewSingleProcessCommunicator();
  } else {
    ShmOptions shm;
    shm.store = options.store;
    shm.rank = options.local_rank;
    shm.world_size = options.local_world_size;
    shm.key = absl::StrCat(options.key_prefix, "shm/", options.group_rank);
    shm.timeout = options.timeout;
    absl::StatusOr<std::unique_ptr<Communicator>> made = NewShmCommunicator(shm);
    if (!made.ok()) return made.status();
    local = *std::move(made);
  }
  std::unique_ptr<Communicator> leaders;
  if (options.local_rank == 0) {
    if (options.group_world_size == 1) {
      leaders = NewSingleProcessCommunicator();
    } else {
      GlooOptions gloo;
      gloo.store = options.store;
      gloo.rank = options.group_rank;
      gloo.world_size = options.group_world_size;
      gloo.hostname = options.local_addr;
      gloo.key_prefix = absl::StrCat(options.key_prefix, "gloo/");
      gloo.timeout = options.timeout;
      absl::StatusOr<std::unique_ptr<Communicator>> made = NewGlooCommunicator(gloo);
      if (!made.ok()) return made.status();
      leaders = *std::move(made);
    }
  }
  return ComposeHierarchical(std::move(local), std::move(leaders), *std::move(layout),
                             options.rank);
}

}  // namespace cpptorchrun::worker
