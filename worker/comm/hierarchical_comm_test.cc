// Tests of the hierarchical communicator: the layout rules, the order of its
// stages (over recording fakes), what a failed stage does, and real worlds
// of several "nodes" (threads sharing an in-memory store: shared memory
// within a node, Gloo on 127.0.0.1 among the leaders). The contract every
// communicator keeps is tested on it too, in comm_test.
#include "worker/comm/hierarchical_comm.h"

#include <thread>
#include <vector>

#include "absl/synchronization/mutex.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "rendezvous/store.h"
#include "worker/comm/recording_comm.h"

namespace cpptorchrun::worker {
namespace {

using ::testing::ElementsAre;
using ::testing::HasSubstr;

TEST(Layout, ChecksAndMapsRanksToNodes) {
  EXPECT_TRUE(CheckLayout({{0, 2, 5}, 6}).ok());
  EXPECT_FALSE(CheckLayout({{}, 1}).ok());
  EXPECT_FALSE(CheckLayout({{1, 2}, 3}).ok());
  EXPECT_FALSE(CheckLayout({{0, 2, 2}, 4}).ok());
  EXPECT_FALSE(CheckLayout({{0, 4}, 4}).ok());
  const NodeLayout layout{{0, 2, 5}, 6};
  std::vector<int> nodes;
  for (int r = 0; r < 6; ++r) nodes.push_back(NodeOfRank(layout, r));
  EXPECT_THAT(nodes, ElementsAre(0, 0, 1, 1, 1, 2));
}

// The calls each part saw, prefixed with the part's name.
struct Log {
  absl::Mutex mu;
  std::vector<std::string> lines;
  std::function<void(const std::string&)> Part(const std::string& name) {
    return [this, name](const std::string& line) {
      absl::MutexLock lock(&mu);
      lines.push_back(name + " " + line);
    };
  }
};

TEST(Compose, LeaderAllReducesWithinThenAmongThenBack) {
  Log log;
  std::unique_ptr<Communicator> comm = ComposeHierarchical(
      std::make_unique<RecordingCommunicator>(log.Part("local")),
      std::make_unique<RecordingCommunicator>(log.Part("leaders")), {{0, 2}, 4}, 2);
  std::vector<float> v = {4.0f, 8.0f};
  ASSERT_TRUE(comm->AllReduce(v.data(), 2, DType::kFloat32, ReduceOp::kAverage).ok());
  EXPECT_THAT(log.lines, ElementsAre("local allreduce 2", "leaders allreduce 2", "local broadcast 2"));
  // The fakes sum nothing: the average divides what came back by the world.
  EXPECT_FLOAT_EQ(v[0], 1.0f);
  EXPECT_FLOAT_EQ(v[1], 2.0f);
  EXPECT_EQ(comm->world_size(), 4);
  EXPECT_EQ(comm->rank(), 2);
}

TEST(Compose, NonLeaderStaysOnItsNode) {
  Log log;
  std::unique_ptr<Communicator> comm = ComposeHierarchical(
      std::make_unique<RecordingCommunicator>(log.Part("local")), nullptr, {{0, 2}, 4}, 3);
  std::vector<double> v = {1.0};
  ASSERT_TRUE(comm->AllReduce(v.data(), 1, DType::kFloat64, ReduceOp::kSum).ok());
  ASSERT_TRUE(comm->Barrier().ok());
  EXPECT_THAT(log.lines,
              ElementsAre("local allreduce 1", "local broadcast 1", "local barrier", "local barrier"));
  std::vector<int64_t> i = {1};
  EXPECT_EQ(comm->AllReduce(i.data(), 1, DType::kInt64, ReduceOp::kAverage).code(),
            absl::StatusCode::kInvalidArgument);
}

TEST(Compose, BroadcastGoesThroughTheRootsNodeThenTheLeaders) {
  Log log;
  // Rank 0, leader of node 0, broadcasting from rank 3 (node 1).
  std::unique_ptr<Communicator> comm = ComposeHierarchical(
      std::make_unique<RecordingCommunicator>(log.Part("local")),
      std::make_unique<RecordingCommunicator>(log.Part("leaders")), {{0, 2}, 4}, 0);
  std::vector<float> v(3);
  ASSERT_TRUE(comm->Broadcast(v.data(), 3, DType::kFloat32, 3).ok());
  EXPECT_THAT(log.lines, ElementsAre("leaders broadcast 3", "local broadcast 3"));
  EXPECT_EQ(comm->Broadcast(v.data(), 3, DType::kFloat32, 4).code(),
            absl::StatusCode::kInvalidArgument);
}

// A communicator whose collectives fail, recording its aborts.
class FailingCommunicator final : public Communicator {
 public:
  explicit FailingCommunicator(std::vector<std::string>* aborts) : aborts_(aborts) {}
  int rank() const override { return 0; }
  int world_size() const override { return 2; }
  std::string backend() const override { return "failing"; }
  std::shared_ptr<Work> AllReduceAsync(void*, int64_t, DType, ReduceOp) override {
    return CompletedWork(absl::UnavailableError("peer gone"));
  }
  std::shared_ptr<Work> BroadcastAsync(void*, int64_t, DType, int) override {
    return CompletedWork(absl::UnavailableError("peer gone"));
  }
  absl::Status Barrier() override { return absl::UnavailableError("peer gone"); }
  void Abort(const std::string& reason) override { aborts_->push_back(reason); }

 private:
  std::vector<std::string>* aborts_;
};

TEST(Compose, AFailedStageAbortsTheNodeSoItsPeersFailFast) {
  Log log;
  std::vector<std::string> aborts;
  std::unique_ptr<Communicator> comm = ComposeHierarchical(
      std::make_unique<RecordingCommunicator>(log.Part("local")),
      std::make_unique<FailingCommunicator>(&aborts), {{0, 2}, 4}, 0);
  std::vector<float> v(1);
  absl::Status s = comm->AllReduce(v.data(), 1, DType::kFloat32, ReduceOp::kSum);
  EXPECT_EQ(s.code(), absl::StatusCode::kUnavailable);
  EXPECT_THAT(s.message(), HasSubstr("among the nodes' leaders"));
  EXPECT_THAT(s.message(), HasSubstr("peer gone"));
  // The node's shared-memory part was aborted (its peers wait on it), and
  // the broadcast back was never issued.
  EXPECT_THAT(log.lines, ElementsAre("local allreduce 1", testing::StartsWith("local abort")));
  EXPECT_EQ(aborts.size(), 1u);
}

// Nodes of the given sizes, one thread per rank, sharing one store.
template <typename Body>
void RunNodes(const std::vector<int>& sizes, Body body) {
  std::unique_ptr<rdzv::Store> store = rdzv::NewInMemoryStore();
  int world = 0;
  for (int s : sizes) world += s;
  std::vector<std::thread> threads;
  int rank = 0;
  for (int g = 0; g < static_cast<int>(sizes.size()); ++g) {
    for (int l = 0; l < sizes[g]; ++l, ++rank) {
      HierarchicalOptions o;
      o.store = store.get();
      o.rank = rank;
      o.world_size = world;
      o.local_rank = l;
      o.local_world_size = sizes[g];
      o.group_rank = g;
      o.group_world_size = static_cast<int>(sizes.size());
      o.timeout = absl::Seconds(20);
      threads.emplace_back([o, &body] { body(o, NewHierarchicalCommunicator(o)); });
    }
  }
  for (auto& t : threads) t.join();
}

TEST(Hierarchical, UnevenNodesSumAverageAndBroadcast) {
  RunNodes({2, 3, 1}, [](const HierarchicalOptions& o,
                         absl::StatusOr<std::unique_ptr<Communicator>> comm) {
    ASSERT_TRUE(comm.ok()) << comm.status();
    Communicator& c = **comm;
    EXPECT_EQ(c.backend(), "hierarchical");
    // Each rank contributes rank + i % 7 to element i.
    std::vector<float> v(5000);
    for (int i = 0; i < 5000; ++i) v[i] = float(o.rank + i % 7);
    ASSERT_TRUE(c.AllReduce(v.data(), v.size(), DType::kFloat32, ReduceOp::kSum).ok());
    for (int i = 0; i < 5000; i += 997) EXPECT_FLOAT_EQ(v[i], float(15 + 6 * (i % 7))) << i;
    std::vector<double> d = {double(o.rank)};
    ASSERT_TRUE(c.AllReduce(d.data(), 1, DType::kFloat64, ReduceOp::kAverage).ok());
    EXPECT_DOUBLE_EQ(d[0], 15.0 / 6);
    for (int root = 0; root < 6; ++root) {
      std::vector<int64_t> b = {o.rank * 100 + 1};
      ASSERT_TRUE(c.Broadcast(b.data(), 1, DType::kInt64, root).ok());
      EXPECT_EQ(b[0], root * 100 + 1) << "root " << root;
    }
    EXPECT_TRUE(c.Barrier().ok());
  });
}

TEST(Hierarchical, RefusesNodesWhoseRanksAreNotContiguous) {
  std::unique_ptr<rdzv::Store> store = rdzv::NewInMemoryStore();
  // Node 0 claims ranks [0, 2), node 1 says it starts at rank 3.
  ASSERT_TRUE(store->Set("hier/node/1", "3,1").ok());
  HierarchicalOptions o;
  o.store = store.get();
  o.world_size = 4;
  o.local_world_size = 2;
  o.group_world_size = 2;
  o.timeout = absl::Seconds(5);
  absl::StatusOr<std::unique_ptr<Communicator>> comm = NewHierarchicalCommunicator(o);
  EXPECT_EQ(comm.status().code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_THAT(comm.status().message(), HasSubstr("contiguous"));
}

TEST(Hierarchical, RefusesInconsistentRanksAndGarbageInTheStore) {
  std::unique_ptr<rdzv::Store> store = rdzv::NewInMemoryStore();
  HierarchicalOptions o;
  o.store = store.get();
  o.world_size = 4;
  o.local_rank = 2;
  o.local_world_size = 2;
  EXPECT_EQ(NewHierarchicalCommunicator(o).status().code(), absl::StatusCode::kInvalidArgument);
  ASSERT_TRUE(store->Set("hier/node/1", "three").ok());
  o.local_rank = 0;
  o.group_world_size = 2;
  o.timeout = absl::Seconds(5);
  absl::StatusOr<std::unique_ptr<Communicator>> comm = NewHierarchicalCommunicator(o);
  EXPECT_EQ(comm.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(comm.status().message(), HasSubstr("'three'"));
}

}  // namespace
}  // namespace cpptorchrun::worker
