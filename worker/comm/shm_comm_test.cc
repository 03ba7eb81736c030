// Tests of the shared-memory communicator beyond the contract (comm_test.cc
// runs that on it too): counts that are odd or span many chunks, abort and
// timeouts seen by a peer, no /dev/shm entry left behind, and kill -9 of a
// rank mid-collective (real processes, forked).
#include <poll.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <cstdlib>
#include <string>
#include <thread>
#include <vector>

#include "absl/strings/str_cat.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "rendezvous/store.h"
#include "worker/comm/comm.h"
#include "worker/comm/shm_comm.h"

namespace cpptorchrun::worker {
namespace {

using ::testing::HasSubstr;

ShmOptions Options(rdzv::Store* store, int rank, int world) {
  ShmOptions o;
  o.store = store;
  o.rank = rank;
  o.world_size = world;
  o.timeout = absl::Seconds(30);
  return o;
}

bool SegmentExists(const std::string& name) {
  return ::access(absl::StrCat("/dev/shm", name).c_str(), F_OK) == 0;
}

// Opens one communicator per rank, concurrently (the bootstrap waits for
// all), with `tweak` applied to each rank's options.
template <typename Tweak>
std::vector<std::unique_ptr<Communicator>> OpenAll(rdzv::Store* store, int world, Tweak tweak) {
  std::vector<std::unique_ptr<Communicator>> comms(world);
  std::vector<std::thread> threads;
  for (int rank = 0; rank < world; ++rank) {
    threads.emplace_back([&, rank] {
      ShmOptions o = Options(store, rank, world);
      tweak(o);
      absl::StatusOr<std::unique_ptr<Communicator>> comm = NewShmCommunicator(o);
      ASSERT_TRUE(comm.ok()) << comm.status();
      comms[rank] = *std::move(comm);
    });
  }
  for (auto& t : threads) t.join();
  return comms;
}

// Runs body(rank, comm) on a thread per rank.
template <typename Body>
void OnEachRank(std::vector<std::unique_ptr<Communicator>>& comms, Body body) {
  std::vector<std::thread> threads;
  for (int rank = 0; rank < int(comms.size()); ++rank) {
    threads.emplace_back([&, rank] { body(rank, *comms[rank]); });
  }
  for (auto& t : threads) t.join();
}

TEST(ShmComm, OddCountsAndCountsLargerThanTheSlot) {
  std::unique_ptr<rdzv::Store> store = rdzv::NewInMemoryStore();
  auto comms = OpenAll(store.get(), 3, [](ShmOptions& o) { o.slot_bytes = 256; });
  ASSERT_EQ(comms.size(), 3u);
  OnEachRank(comms, [](int rank, Communicator& comm) {
    for (int64_t count : {0, 1, 2, 7, 63, 64, 65, 1001, 20000}) {
      std::vector<float> f(count);
      std::vector<double> d(count);
      std::vector<int64_t> i(count);
      std::vector<uint8_t> u(count);
      for (int64_t k = 0; k < count; ++k) {
        f[k] = float(k % 97) + rank;
        d[k] = double(k) * (rank + 1);
        i[k] = (int64_t{1} << 40) * rank + k;
        u[k] = uint8_t(k + rank);
      }
      ASSERT_TRUE(comm.AllReduce(f.data(), count, DType::kFloat32, ReduceOp::kSum).ok());
      ASSERT_TRUE(comm.AllReduce(d.data(), count, DType::kFloat64, ReduceOp::kAverage).ok());
      ASSERT_TRUE(comm.AllReduce(i.data(), count, DType::kInt64, ReduceOp::kSum).ok());
      ASSERT_TRUE(comm.AllReduce(u.data(), count, DType::kUint8, ReduceOp::kSum).ok());
      for (int64_t k = 0; k < count; ++k) {
        ASSERT_FLOAT_EQ(f[k], 3 * float(k % 97) + 3) << "count " << count << " at " << k;
        ASSERT_DOUBLE_EQ(d[k], double(k) * 2) << "count " << count << " at " << k;
        ASSERT_EQ(i[k], (int64_t{1} << 40) * 3 + 3 * k);
        ASSERT_EQ(u[k], uint8_t(3 * k + 3));
      }
      std::vector<uint8_t> b(count * 3 + 5, uint8_t(rank));
      ASSERT_TRUE(comm.Broadcast(b.data(), b.size(), DType::kUint8, 2).ok());
      for (uint8_t x : b) ASSERT_EQ(x, 2);
    }
  });
}

TEST(ShmComm, AbortWakesAWaitingPeerAndNamesTheRank) {
  std::unique_ptr<rdzv::Store> store = rdzv::NewInMemoryStore();
  // A missed wake-up would show as the liveness slice (30 s) here.
  auto comms = OpenAll(store.get(), 2, [](ShmOptions& o) { o.liveness_interval = absl::Seconds(30); });
  ASSERT_EQ(comms.size(), 2u);
  std::vector<float> v(1000, 1.0f);
  const auto start = std::chrono::steady_clock::now();
  std::shared_ptr<Work> waiting = comms[1]->AllReduceAsync(v.data(), v.size(), DType::kFloat32,
                                                           ReduceOp::kSum);
  comms[0]->Abort("rank 0 stops");
  absl::Status status = waiting->Wait();
  EXPECT_LT(std::chrono::steady_clock::now() - start, std::chrono::seconds(5));
  EXPECT_EQ(status.code(), absl::StatusCode::kAborted);
  EXPECT_THAT(status.message(), HasSubstr("rank 0 aborted the group: rank 0 stops"));
  // Later collectives fail at once on both.
  EXPECT_EQ(comms[1]->Barrier().code(), absl::StatusCode::kAborted);
  EXPECT_EQ(comms[0]->Barrier().code(), absl::StatusCode::kAborted);
}

TEST(ShmComm, TimeoutNamesTheMissingRank) {
  std::unique_ptr<rdzv::Store> store = rdzv::NewInMemoryStore();
  auto comms = OpenAll(store.get(), 2, [](ShmOptions& o) { o.timeout = absl::Milliseconds(300); });
  ASSERT_EQ(comms.size(), 2u);
  std::vector<double> v(10, 1.0);
  absl::Status status = comms[0]->AllReduce(v.data(), v.size(), DType::kFloat64, ReduceOp::kSum);
  EXPECT_EQ(status.code(), absl::StatusCode::kDeadlineExceeded);
  EXPECT_THAT(status.message(), HasSubstr("rank 1 did not arrive"));
  // The ranks' steps no longer line up, so the group is done for: rank 1's
  // next collective fails at once instead of pairing with the wrong step.
  absl::Status late = comms[1]->AllReduce(v.data(), v.size(), DType::kFloat64, ReduceOp::kSum);
  EXPECT_EQ(late.code(), absl::StatusCode::kAborted);
  EXPECT_THAT(late.message(), HasSubstr("rank 0 gave up waiting for rank 1"));
}

TEST(ShmComm, NoSegmentLeftAfterSuccessOrFailedBootstrap) {
  std::unique_ptr<rdzv::Store> store = rdzv::NewInMemoryStore();
  {
    auto comms = OpenAll(store.get(), 2, [](ShmOptions&) {});
    absl::StatusOr<std::string> name = store->Get("shm/segment", absl::ZeroDuration());
    ASSERT_TRUE(name.ok());
    EXPECT_FALSE(SegmentExists(*name)) << *name << " left in /dev/shm while in use";
    std::vector<float> v = {1.0f};
    OnEachRank(comms, [&](int, Communicator& comm) {
      EXPECT_TRUE(comm.AllReduce(v.data(), 0, DType::kFloat32, ReduceOp::kSum).ok());
    });
  }
  // Rank 1 never comes: rank 0 gives up and removes the segment.
  std::unique_ptr<rdzv::Store> lonely = rdzv::NewInMemoryStore();
  ShmOptions o = Options(lonely.get(), 0, 2);
  o.timeout = absl::Milliseconds(200);
  absl::StatusOr<std::unique_ptr<Communicator>> comm = NewShmCommunicator(o);
  EXPECT_EQ(comm.status().code(), absl::StatusCode::kDeadlineExceeded);
  EXPECT_THAT(comm.status().message(), HasSubstr("only 1 of 2 ranks mapped"));
  absl::StatusOr<std::string> name = lonely->Get("shm/segment", absl::ZeroDuration());
  ASSERT_TRUE(name.ok());
  EXPECT_FALSE(SegmentExists(*name)) << *name << " left in /dev/shm after a failed bootstrap";
}

TEST(ShmComm, SlotsAreCappedToFitASmallDevShm) {
  // 1 GiB slots would need 4 GiB of /dev/shm at world 2; the cap keeps the
  // segment within 32 MiB of slots, and the results are the same.
  std::unique_ptr<rdzv::Store> store = rdzv::NewInMemoryStore();
  auto comms = OpenAll(store.get(), 2, [](ShmOptions& o) { o.slot_bytes = int64_t{1} << 30; });
  ASSERT_EQ(comms.size(), 2u);
  OnEachRank(comms, [](int rank, Communicator& comm) {
    std::vector<float> v(100, float(rank + 1));
    ASSERT_TRUE(comm.AllReduce(v.data(), v.size(), DType::kFloat32, ReduceOp::kAverage).ok());
    EXPECT_FLOAT_EQ(v[99], 1.5f);
  });
}

TEST(ShmComm, RejectsBadOptions) {
  ShmOptions o;
  o.rank = 2;
  o.world_size = 2;
  o.segment_name = "/x";
  EXPECT_EQ(NewShmCommunicator(o).status().code(), absl::StatusCode::kInvalidArgument);
  o.rank = 0;
  o.segment_name.clear();
  EXPECT_EQ(NewShmCommunicator(o).status().code(), absl::StatusCode::kInvalidArgument);
}

// A forked rank: all-reduces until a collective fails, then writes the
// error to `out` and exits. Rank `report_ready` writes one byte to `ready`
// after its first success.
[[noreturn]] void ChildRank(const std::string& name, int rank, int world, int out, int ready) {
  ShmOptions o;
  o.segment_name = name;
  o.rank = rank;
  o.world_size = world;
  o.timeout = absl::Seconds(60);
  absl::StatusOr<std::unique_ptr<Communicator>> comm = NewShmCommunicator(o);
  std::string message = comm.ok() ? "" : std::string(comm.status().message());
  if (comm.ok()) {
    std::vector<float> v(1 << 18, 1.0f);
    for (int i = 0;; ++i) {
      absl::Status s = (*comm)->AllReduce(v.data(), v.size(), DType::kFloat32, ReduceOp::kAverage);
      if (!s.ok()) {
        message = absl::StrCat(absl::StatusCodeToString(s.code()), ": ", s.message());
        break;
      }
      if (i == 0 && ready >= 0) (void)!::write(ready, "r", 1);
    }
  }
  (void)!::write(out, message.data(), message.size());
  ::_exit(3);
}

TEST(ShmComm, KillNineOfARankMidCollectiveFailsTheOthersNamingIt) {
  constexpr int kWorld = 3;
  constexpr int kVictim = 2;
  const std::string name = absl::StrCat("/cpptorchrun-shm-test-", ::getpid());
  int ready[2];
  ASSERT_EQ(::pipe(ready), 0);
  std::vector<pid_t> pids(kWorld);
  std::vector<int> outs(kWorld, -1);
  for (int rank = 0; rank < kWorld; ++rank) {
    int out[2];
    ASSERT_EQ(::pipe(out), 0);
    const pid_t pid = ::fork();
    ASSERT_GE(pid, 0);
    if (pid == 0) {
      ::close(out[0]);
      ::close(ready[0]);
      ChildRank(name, rank, kWorld, out[1], rank == kVictim ? ready[1] : -1);
    }
    ::close(out[1]);
    pids[rank] = pid;
    outs[rank] = out[0];
  }
  ::close(ready[1]);
  // Once the victim has finished one all-reduce, every rank is looping on
  // them: whatever instant the kill lands, its peers are in a collective.
  char byte;
  pollfd pr{ready[0], POLLIN, 0};
  ASSERT_EQ(::poll(&pr, 1, 30000), 1) << "the ranks never completed an all-reduce";
  ASSERT_EQ(::read(ready[0], &byte, 1), 1);
  const auto killed_at = std::chrono::steady_clock::now();
  ASSERT_EQ(::kill(pids[kVictim], SIGKILL), 0);
  // The victim is left unreaped (a zombie) until the survivors have spoken:
  // its pid still answers kill(pid, 0), as it would before the launcher
  // reaps it.
  for (int rank = 0; rank < kWorld; ++rank) {
    if (rank == kVictim) continue;
    std::string message;
    char buf[512];
    while (true) {
      pollfd p{outs[rank], POLLIN, 0};
      ASSERT_EQ(::poll(&p, 1, 20000), 1) << "rank " << rank << " is still waiting";
      const ssize_t n = ::read(outs[rank], buf, sizeof buf);
      if (n <= 0) break;
      message.append(buf, n);
    }
    EXPECT_THAT(message, HasSubstr("rank 2 (pid")) << "rank " << rank;
    EXPECT_THAT(message, HasSubstr("died during a collective")) << "rank " << rank;
  }
  EXPECT_LT(std::chrono::steady_clock::now() - killed_at, std::chrono::seconds(10))
      << "the survivors took a timeout's time, not a liveness check's";
  for (int rank = 0; rank < kWorld; ++rank) {
    int status = 0;
    ASSERT_EQ(::waitpid(pids[rank], &status, 0), pids[rank]);
    if (rank == kVictim) {
      EXPECT_TRUE(WIFSIGNALED(status));
    } else {
      EXPECT_TRUE(WIFEXITED(status) && WEXITSTATUS(status) == 3);
    }
    ::close(outs[rank]);
  }
  ::close(ready[0]);
  EXPECT_FALSE(SegmentExists(name)) << name << " left in /dev/shm after a kill -9";
}

}  // namespace
}  // namespace cpptorchrun::worker
