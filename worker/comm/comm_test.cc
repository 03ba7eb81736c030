// Tests of the communicators, one thread per rank sharing an in-memory
// rendezvous store, Gloo over TCP on 127.0.0.1. Every test runs on every
// backend that can run here (Gloo, fake GPUs, shared memory; the last with a
// small slot, so that the tests' counts travel in several chunks).
#include <chrono>
#include <optional>
#include <thread>
#include <vector>

#include "absl/strings/str_cat.h"
#include "gmock/gmock.h"
#include "absl/synchronization/notification.h"
#include "gtest/gtest.h"
#include "rendezvous/store.h"
#include "worker/comm/comm.h"
#include "worker/comm/comm_thread.h"
#include "worker/comm/fake_gpu_comm.h"
#include "worker/comm/float16.h"
#include "worker/comm/gloo_comm.h"
#include "worker/comm/hierarchical_comm.h"
#include "worker/comm/nccl_bootstrap.h"
#include "worker/comm/shm_comm.h"

namespace cpptorchrun::worker {
namespace {

using ::testing::HasSubstr;
using ::testing::Not;

enum class Backend { kGloo, kFakeGpu, kShm, kHierarchical };

absl::StatusOr<std::unique_ptr<Communicator>> Make(Backend backend, rdzv::Store* store, int rank,
                                                   int world) {
  GlooOptions gloo;
  gloo.store = store;
  gloo.rank = rank;
  gloo.world_size = world;
  gloo.timeout = absl::Seconds(20);
  if (backend == Backend::kGloo) return NewGlooCommunicator(gloo);
  if (backend == Backend::kHierarchical) {
    // Two nodes: ranks [0, ceil(world/2)) and the rest (world 2: one rank
    // each, leaders only; world 3: shared memory on the first node too).
    const int group = rank * 2 / world;
    const int first = (group * world + 1) / 2;
    const int next = group == 0 ? (world + 1) / 2 : world;
    HierarchicalOptions h;
    h.store = store;
    h.rank = rank;
    h.world_size = world;
    h.local_rank = rank - first;
    h.local_world_size = next - first;
    h.group_rank = group;
    h.group_world_size = 2;
    h.timeout = gloo.timeout;
    return NewHierarchicalCommunicator(h);
  }
  if (backend == Backend::kShm) {
    ShmOptions shm;
    shm.store = store;
    shm.rank = rank;
    shm.world_size = world;
    shm.slot_bytes = 1024;
    shm.timeout = gloo.timeout;
    return NewShmCommunicator(shm);
  }
  FakeGpuOptions fake;
  fake.gloo = gloo;
  fake.device = rank;
  return NewFakeGpuCommunicator(fake);
}

// Runs `body(rank, comm)` on `world` threads, each with its own communicator.
template <typename Body>
void RunRanks(Backend backend, int world, Body body) {
  std::unique_ptr<rdzv::Store> store = rdzv::NewInMemoryStore();
  std::vector<std::thread> threads;
  for (int rank = 0; rank < world; ++rank) {
    threads.emplace_back([&, rank] {
      absl::StatusOr<std::unique_ptr<Communicator>> comm = Make(backend, store.get(), rank, world);
      ASSERT_TRUE(comm.ok()) << comm.status();
      EXPECT_EQ((*comm)->rank(), rank);
      EXPECT_EQ((*comm)->world_size(), world);
      body(rank, **comm);
    });
  }
  for (auto& t : threads) t.join();
}

class CommTest : public ::testing::TestWithParam<Backend> {};

TEST_P(CommTest, AllReduceSumAndAverage) {
  RunRanks(GetParam(), 3, [](int rank, Communicator& comm) {
    std::vector<float> f = {float(rank), float(rank * 10), 1.0f};
    std::vector<double> d = {double(rank + 1)};
    std::vector<int64_t> i = {int64_t{1} << (rank + 40)};
    ASSERT_TRUE(comm.AllReduce(f.data(), f.size(), DType::kFloat32, ReduceOp::kSum).ok());
    ASSERT_TRUE(comm.AllReduce(d.data(), d.size(), DType::kFloat64, ReduceOp::kAverage).ok());
    ASSERT_TRUE(comm.AllReduce(i.data(), i.size(), DType::kInt64, ReduceOp::kSum).ok());
    EXPECT_FLOAT_EQ(f[0], 3.0f);
    EXPECT_FLOAT_EQ(f[1], 30.0f);
    EXPECT_FLOAT_EQ(f[2], 3.0f);
    EXPECT_DOUBLE_EQ(d[0], 2.0);
    EXPECT_EQ(i[0], (int64_t{1} << 40) + (int64_t{1} << 41) + (int64_t{1} << 42));
    absl::Status bad = comm.AllReduce(i.data(), 1, DType::kInt64, ReduceOp::kAverage);
    EXPECT_EQ(bad.code(), absl::StatusCode::kInvalidArgument);
  });
}

TEST_P(CommTest, AllReducesSixteenBitFloats) {
  // 700 elements: several chunks of shared memory's 1 KiB slot. Every value
  // and sum is exact in both formats, so any summation order agrees.
  RunRanks(GetParam(), 3, [](int rank, Communicator& comm) {
    constexpr int kCount = 700;
    std::vector<uint16_t> half(kCount), bf(kCount);
    for (int i = 0; i < kCount; ++i) {
      half[i] = FloatToHalf(0.25f * (i % 8) + rank);
      bf[i] = FloatToBFloat16(-0.5f * (i % 4) - rank);
    }
    ASSERT_TRUE(comm.AllReduce(half.data(), kCount, DType::kFloat16, ReduceOp::kSum).ok());
    ASSERT_TRUE(comm.AllReduce(bf.data(), kCount, DType::kBFloat16, ReduceOp::kAverage).ok());
    for (int i = 0; i < kCount; ++i) {
      ASSERT_EQ(HalfToFloat(half[i]), 0.75f * (i % 8) + 3.0f) << i;
      ASSERT_EQ(BFloat16ToFloat(bf[i]), -0.5f * (i % 4) - 1.0f) << i;
    }
  });
}

TEST_P(CommTest, ManyAsyncAllReducesCompleteInOrder) {
  RunRanks(GetParam(), 2, [](int rank, Communicator& comm) {
    constexpr int kOps = 16;
    std::vector<std::vector<float>> buffers(kOps);
    std::vector<std::shared_ptr<Work>> works;
    for (int k = 0; k < kOps; ++k) {
      buffers[k].assign(1000 + k, float(k + rank));
      works.push_back(comm.AllReduceAsync(buffers[k].data(), buffers[k].size(), DType::kFloat32,
                                          ReduceOp::kSum));
    }
    for (int k = 0; k < kOps; ++k) {
      ASSERT_TRUE(works[k]->Wait().ok());
      EXPECT_TRUE(works[k]->IsCompleted());
      EXPECT_FLOAT_EQ(buffers[k].back(), float(2 * k + 1));
    }
  });
}

TEST_P(CommTest, BroadcastFromEachRootAndBarrier) {
  RunRanks(GetParam(), 3, [](int rank, Communicator& comm) {
    for (int root = 0; root < 3; ++root) {
      std::vector<double> v = {double(rank), double(rank) * 2};
      ASSERT_TRUE(comm.Broadcast(v.data(), v.size(), DType::kFloat64, root).ok());
      EXPECT_DOUBLE_EQ(v[0], root);
      EXPECT_DOUBLE_EQ(v[1], root * 2);
      ASSERT_TRUE(comm.Barrier().ok());
    }
    std::vector<float> v(1);
    EXPECT_EQ(comm.Broadcast(v.data(), 1, DType::kFloat32, 3).code(),
              absl::StatusCode::kInvalidArgument);
  });
}

TEST_P(CommTest, AbortFailsLaterCollectives) {
  RunRanks(GetParam(), 2, [](int rank, Communicator& comm) {
    std::vector<float> v = {1.0f};
    ASSERT_TRUE(comm.AllReduce(v.data(), 1, DType::kFloat32, ReduceOp::kSum).ok());
    comm.Abort("test abort");
    absl::Status after = comm.AllReduce(v.data(), 1, DType::kFloat32, ReduceOp::kSum);
    EXPECT_EQ(after.code(), absl::StatusCode::kAborted);
    EXPECT_THAT(after.message(), HasSubstr("test abort"));
  });
}

// In-place recovery aborts a communicator whose collective is on the wire,
// waiting for a peer that will never send: the wait must end at once (not
// at the collective's timeout), on the rank that aborts and on its peers.
TEST_P(CommTest, APeersAbortEndsACollectiveOnTheWire) {
  absl::Notification issued;
  RunRanks(GetParam(), 2, [&](int rank, Communicator& comm) {
    std::vector<float> v = {1.0f};
    if (rank == 0) {
      std::shared_ptr<Work> work = comm.AllReduceAsync(v.data(), 1, DType::kFloat32, ReduceOp::kSum);
      issued.Notify();
      absl::Status status = work->Wait();
      EXPECT_FALSE(status.ok());
      EXPECT_THAT(status.message(), Not(HasSubstr("imed out")));
      EXPECT_NE(status.code(), absl::StatusCode::kDeadlineExceeded) << status;
    } else {
      issued.WaitForNotification();
      comm.Abort("the round is changing");
    }
  });
}

// Every rank of the round is told to abort, the one waiting on the wire
// first: its wait ends too (Gloo: when the peer closes its connections).
TEST_P(CommTest, AnAbortOfEveryRankEndsACollectiveOnTheWire) {
  absl::Notification aborted;
  RunRanks(GetParam(), 2, [&](int rank, Communicator& comm) {
    std::vector<float> v = {1.0f};
    if (rank == 0) {
      std::shared_ptr<Work> work = comm.AllReduceAsync(v.data(), 1, DType::kFloat32, ReduceOp::kSum);
      comm.Abort("the round is changing");
      aborted.Notify();
      absl::Status status = work->Wait();
      EXPECT_FALSE(status.ok());
      EXPECT_THAT(status.message(), Not(HasSubstr("imed out")));
      EXPECT_NE(status.code(), absl::StatusCode::kDeadlineExceeded) << status;
    } else {
      // Never issues it.
      aborted.WaitForNotification();
      comm.Abort("the round is changing");
    }
  });
}

INSTANTIATE_TEST_SUITE_P(Backends, CommTest,
                         ::testing::Values(Backend::kGloo, Backend::kFakeGpu, Backend::kShm,
                                           Backend::kHierarchical),
                         [](const auto& info) {
                           switch (info.param) {
                             case Backend::kGloo:
                               return "Gloo";
                             case Backend::kFakeGpu:
                               return "FakeGpu";
                             case Backend::kShm:
                               return "Shm";
                             case Backend::kHierarchical:
                               return "Hierarchical";
                           }
                           return "?";
                         });

TEST(Comm, SingleProcessIsIdentity) {
  std::unique_ptr<Communicator> comm = NewSingleProcessCommunicator();
  std::vector<float> v = {2.5f};
  ASSERT_TRUE(comm->AllReduce(v.data(), 1, DType::kFloat32, ReduceOp::kAverage).ok());
  EXPECT_FLOAT_EQ(v[0], 2.5f);
  EXPECT_TRUE(comm->Barrier().ok());
  comm->Abort("done");
  EXPECT_EQ(comm->Barrier().code(), absl::StatusCode::kAborted);
}

TEST(Comm, GlooRejectsBadOptions) {
  std::unique_ptr<rdzv::Store> store = rdzv::NewInMemoryStore();
  GlooOptions options;
  options.store = store.get();
  options.rank = 2;
  options.world_size = 2;
  EXPECT_EQ(NewGlooCommunicator(options).status().code(), absl::StatusCode::kInvalidArgument);
  options.store = nullptr;
  options.rank = 0;
  EXPECT_EQ(NewGlooCommunicator(options).status().code(), absl::StatusCode::kInvalidArgument);
}

TEST(Comm, GlooBootstrapTimesOutWithoutPeers) {
  std::unique_ptr<rdzv::Store> store = rdzv::NewInMemoryStore();
  GlooOptions options;
  options.store = store.get();
  options.rank = 1;
  options.world_size = 2;
  options.timeout = absl::Milliseconds(300);
  absl::StatusOr<std::unique_ptr<Communicator>> comm = NewGlooCommunicator(options);
  ASSERT_FALSE(comm.ok());
  EXPECT_THAT(comm.status().message(), HasSubstr("gloo: cannot connect rank 1 of 2"));
}

TEST(NcclBootstrap, SharesRankZerosIdAndDetectsAMismatch) {
  std::unique_ptr<rdzv::Store> store = rdzv::NewInMemoryStore();
  std::string made(kNcclUniqueIdBytes, 'x');
  absl::StatusOr<std::string> zero =
      ShareNcclUniqueId(*store, 0, [&]() -> absl::StatusOr<std::string> { return made; },
                        absl::Seconds(1));
  ASSERT_TRUE(zero.ok());
  absl::StatusOr<std::string> one = ShareNcclUniqueId(
      *store, 1, []() -> absl::StatusOr<std::string> { return absl::InternalError("unused"); },
      absl::Seconds(1));
  ASSERT_TRUE(one.ok()) << one.status();
  EXPECT_EQ(*one, made);

  std::string other = made;
  other[100] = 'y';
  std::thread peer([&] { (void)VerifySameUniqueId(*store, 1, 2, other, absl::Seconds(5)); });
  absl::Status mismatch = VerifySameUniqueId(*store, 0, 2, made, absl::Seconds(5));
  peer.join();
  EXPECT_EQ(mismatch.code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_THAT(mismatch.message(), HasSubstr("rank 1 holds a different NCCL unique id"));
}

TEST(NcclBootstrap, WrongLengthAndMissingId) {
  std::unique_ptr<rdzv::Store> store = rdzv::NewInMemoryStore();
  absl::StatusOr<std::string> missing =
      ShareNcclUniqueId(*store, 1, RandomUniqueId, absl::Milliseconds(50));
  EXPECT_EQ(missing.status().code(), absl::StatusCode::kDeadlineExceeded);
  ASSERT_TRUE(store->Set(kNcclUniqueIdKey, "short").ok());
  absl::StatusOr<std::string> short_id =
      ShareNcclUniqueId(*store, 1, RandomUniqueId, absl::Milliseconds(50));
  EXPECT_EQ(short_id.status().code(), absl::StatusCode::kInvalidArgument);
  absl::StatusOr<std::string> random = RandomUniqueId();
  ASSERT_TRUE(random.ok());
  EXPECT_EQ(random->size(), kNcclUniqueIdBytes);
}

TEST(CommThread, AbortFailsQueuedWork) {
  CommThread thread;
  absl::Mutex mu;
  bool started = false;
  bool release = false;
  auto first = thread.Submit([&] {
    absl::MutexLock lock(&mu);
    started = true;
    mu.Await(absl::Condition(&release));
    return absl::OkStatus();
  });
  {
    // Abort only once the first task is running: queued ones fail, it does not.
    absl::MutexLock lock(&mu);
    mu.Await(absl::Condition(&started));
  }
  EXPECT_FALSE(first->Times().has_value()) << "times of a collective still running";
  auto second = thread.Submit([] { return absl::OkStatus(); });
  thread.Abort("stop");
  EXPECT_EQ(second->Wait().code(), absl::StatusCode::kAborted);
  EXPECT_FALSE(second->Times().has_value()) << "an aborted collective never ran";
  {
    absl::MutexLock lock(&mu);
    release = true;
  }
  EXPECT_TRUE(first->Wait().ok());
  EXPECT_TRUE(first->Times().has_value());
  EXPECT_EQ(thread.Submit([] { return absl::OkStatus(); })->Wait().code(),
            absl::StatusCode::kAborted);
}

TEST(CommThread, TimesBracketTheCollectiveOnTheSteadyClock) {
  CommThread thread;
  double inside = 0;
  auto now = [] {
    return std::chrono::duration<double>(std::chrono::steady_clock::now().time_since_epoch())
        .count();
  };
  const double before = now();
  auto work = thread.Submit([&] {
    inside = now();
    return absl::OkStatus();
  });
  ASSERT_TRUE(work->Wait().ok());
  std::optional<WorkTimes> times = work->Times();
  ASSERT_TRUE(times.has_value());
  EXPECT_LE(before, times->started);
  EXPECT_LE(times->started, inside);
  EXPECT_LE(inside, times->finished);
  EXPECT_LE(times->finished, now());
  // A failed collective has no times: its figures would mislead.
  auto failed = thread.Submit([] { return absl::InternalError("wire"); });
  EXPECT_FALSE(failed->Wait().ok());
  EXPECT_FALSE(failed->Times().has_value());
}

}  // namespace
}  // namespace cpptorchrun::worker
