// Tests of the backend choice rule.
#include <thread>
#include <vector>

#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "rendezvous/store.h"
#include "worker/comm/backend.h"

namespace cpptorchrun::worker {
namespace {

using ::testing::HasSubstr;

TEST(Backend, Rule) {
  EXPECT_EQ(*ChooseBackend("auto", true, true, 8, 2, 1), BackendKind::kFakeGpu);
  EXPECT_EQ(*ChooseBackend("auto", false, true, 1, 2, 1), BackendKind::kNccl);
  EXPECT_EQ(*ChooseBackend("auto", false, true, 0, 2, 1), BackendKind::kGloo);
  EXPECT_EQ(*ChooseBackend("auto", false, false, 4, 2, 1), BackendKind::kGloo);
  EXPECT_EQ(*ChooseBackend("gloo", true, true, 4, 2, 1), BackendKind::kGloo);
  EXPECT_EQ(*ChooseBackend("nccl", true, false, 0, 2, 1), BackendKind::kFakeGpu);
  EXPECT_EQ(*ChooseBackend("nccl", false, true, 2, 2, 1), BackendKind::kNccl);
  EXPECT_THAT(ChooseBackend("nccl", false, false, 0, 2, 1).status().message(),
              HasSubstr("built without CUDA and NCCL"));
  EXPECT_THAT(ChooseBackend("nccl", false, true, 0, 2, 1).status().message(),
              HasSubstr("no CUDA device"));
  EXPECT_THAT(ChooseBackend("mpi", false, true, 0, 2, 1).status().message(),
              HasSubstr("--backend 'mpi' is not one of auto, nccl, gloo, shm, hierarchical"));
}

TEST(Backend, SharedMemoryOnlyWhenEveryRankIsOnThisNode) {
  // auto: shared memory for CPU ranks that all share a node, never across nodes.
  EXPECT_EQ(*ChooseBackend("auto", false, false, 0, 2, 2), BackendKind::kShm);
  EXPECT_EQ(*ChooseBackend("auto", false, true, 0, 4, 4), BackendKind::kShm);
  EXPECT_EQ(*ChooseBackend("auto", false, false, 0, 4, 2), BackendKind::kGloo);
  // GPUs, real or fake, keep their path (the fake ones their NCCL bootstrap).
  EXPECT_EQ(*ChooseBackend("auto", true, false, 0, 2, 2), BackendKind::kFakeGpu);
  EXPECT_EQ(*ChooseBackend("auto", false, true, 2, 2, 2), BackendKind::kNccl);
  EXPECT_EQ(*ChooseBackend("gloo", false, false, 0, 2, 2), BackendKind::kGloo);
  EXPECT_EQ(*ChooseBackend("shm", false, false, 0, 2, 2), BackendKind::kShm);
  EXPECT_EQ(*ChooseBackend("shm", true, true, 2, 1, 1), BackendKind::kShm);
  absl::StatusOr<BackendKind> spans = ChooseBackend("shm", false, false, 0, 4, 2);
  EXPECT_EQ(spans.status().code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_THAT(spans.status().message(), HasSubstr("needs every rank on one node"));
  EXPECT_STREQ(BackendName(BackendKind::kShm), "shm");
}

TEST(Backend, HierarchicalAcrossNodesWhenTheNodesAreKnown) {
  // 2 nodes x 2 CPU ranks: shared memory within, Gloo among the leaders.
  EXPECT_EQ(*ChooseBackend("auto", false, false, 0, 4, 2, 2), BackendKind::kHierarchical);
  // One rank per node: nothing to share within a node.
  EXPECT_EQ(*ChooseBackend("auto", false, false, 0, 2, 1, 2), BackendKind::kGloo);
  // The nodes unknown (no GROUP_WORLD_SIZE): flat Gloo.
  EXPECT_EQ(*ChooseBackend("auto", false, false, 0, 4, 2, 0), BackendKind::kGloo);
  // Fake GPUs keep their NCCL-id bootstrap path.
  EXPECT_EQ(*ChooseBackend("auto", true, false, 0, 4, 2, 2), BackendKind::kFakeGpu);
  EXPECT_EQ(*ChooseBackend("gloo", false, false, 0, 4, 2, 2), BackendKind::kGloo);
  EXPECT_EQ(*ChooseBackend("hierarchical", false, false, 0, 4, 2, 2),
            BackendKind::kHierarchical);
  EXPECT_EQ(*ChooseBackend("hierarchical", false, false, 0, 2, 2, 1), BackendKind::kShm);
  absl::StatusOr<BackendKind> unknown = ChooseBackend("hierarchical", false, false, 0, 4, 2, 0);
  EXPECT_EQ(unknown.status().code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_THAT(unknown.status().message(), HasSubstr("GROUP_WORLD_SIZE"));
  EXPECT_STREQ(BackendName(BackendKind::kHierarchical), "hierarchical");
}

TEST(Backend, CpuCollectivesRule) {
  EXPECT_EQ(CpuCollectives(2, 2, 1), BackendKind::kShm);
  EXPECT_EQ(CpuCollectives(1, 1, 0), BackendKind::kShm);
  EXPECT_EQ(CpuCollectives(4, 2, 2), BackendKind::kHierarchical);
  EXPECT_EQ(CpuCollectives(2, 1, 2), BackendKind::kGloo);
  EXPECT_EQ(CpuCollectives(4, 2, 0), BackendKind::kGloo);
}

// Fake GPUs keep their NCCL-id bootstrap, then all-reduce over the CPU
// communicator the rule picks: `sizes` ranks per node, one thread per rank.
void FakeGpusOver(const std::vector<int>& sizes, const std::string& inner) {
  std::unique_ptr<rdzv::Store> store = rdzv::NewInMemoryStore();
  int world = 0;
  for (int s : sizes) world += s;
  std::vector<std::thread> threads;
  int rank = 0;
  for (int g = 0; g < static_cast<int>(sizes.size()); ++g) {
    for (int l = 0; l < sizes[g]; ++l, ++rank) {
      CommSetup setup;
      setup.kind = BackendKind::kFakeGpu;
      setup.store = store.get();
      setup.rank = rank;
      setup.world_size = world;
      setup.local_rank = l;
      setup.local_world_size = sizes[g];
      setup.group_rank = g;
      setup.group_world_size = static_cast<int>(sizes.size());
      setup.fake_gpu = l;
      setup.timeout = absl::Seconds(20);
      threads.emplace_back([setup, world, inner] {
        absl::StatusOr<std::unique_ptr<Communicator>> comm = MakeCommunicator(setup);
        ASSERT_TRUE(comm.ok()) << comm.status();
        EXPECT_EQ((*comm)->backend(), absl::StrCat("fake-gpu:", setup.local_rank, " over ", inner));
        std::vector<float> v = {float(setup.rank), 1.0f};
        ASSERT_TRUE((*comm)->AllReduce(v.data(), 2, DType::kFloat32, ReduceOp::kSum).ok());
        EXPECT_FLOAT_EQ(v[0], world * (world - 1) / 2.0f);
        EXPECT_FLOAT_EQ(v[1], float(world));
      });
    }
  }
  for (auto& t : threads) t.join();
}

TEST(Backend, FakeGpusUseSharedMemoryOnOneNode) { FakeGpusOver({2}, "shm"); }

TEST(Backend, FakeGpusAcrossNodesAllReduceHierarchically) { FakeGpusOver({2, 2}, "hierarchical"); }

TEST(Backend, FakeGpusOneEachAcrossNodesUseGloo) { FakeGpusOver({1, 1}, "gloo"); }

}  // namespace
}  // namespace cpptorchrun::worker
