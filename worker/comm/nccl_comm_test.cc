// Tests of the NCCL communicator: a world of one on GPU 0 where there is a
// GPU; otherwise skipped, saying why. Without NCCL in the build, the clear
// error is checked.
#include "worker/comm/nccl_comm.h"

#include <vector>

#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "rendezvous/store.h"

namespace cpptorchrun::worker {
namespace {

TEST(NcclComm, WorldOfOneOnAGpu) {
  std::unique_ptr<rdzv::Store> store = rdzv::NewInMemoryStore();
  NcclOptions options;
  options.store = store.get();
  if (!NcclBuilt()) {
    absl::StatusOr<std::unique_ptr<Communicator>> comm = NewNcclCommunicator(options);
    EXPECT_EQ(comm.status().code(), absl::StatusCode::kUnimplemented);
    EXPECT_THAT(comm.status().message(), ::testing::HasSubstr("built without CUDA and NCCL"));
    return;
  }
  if (CudaDeviceCount() == 0) GTEST_SKIP() << "NCCL is built but no CUDA device is visible here";
  absl::StatusOr<std::unique_ptr<Communicator>> comm = NewNcclCommunicator(options);
  ASSERT_TRUE(comm.ok()) << comm.status();
  std::vector<float> host = {1.5f, -2.0f};
  ASSERT_TRUE((*comm)->AllReduce(host.data(), 2, DType::kFloat32, ReduceOp::kAverage).ok());
  EXPECT_FLOAT_EQ(host[0], 1.5f);
  std::vector<double> b = {7};
  ASSERT_TRUE((*comm)->Broadcast(b.data(), 1, DType::kFloat64, 0).ok());
  EXPECT_DOUBLE_EQ(b[0], 7);
  ASSERT_TRUE((*comm)->Barrier().ok());
  (*comm)->Abort("test");
  EXPECT_EQ((*comm)->Barrier().code(), absl::StatusCode::kAborted);
}

TEST(NcclComm, MissingDeviceIsNamed) {
  if (!NcclBuilt()) GTEST_SKIP() << "NCCL is not built in";
  std::unique_ptr<rdzv::Store> store = rdzv::NewInMemoryStore();
  NcclOptions options;
  options.store = store.get();
  options.device = CudaDeviceCount() + 3;
  absl::StatusOr<std::unique_ptr<Communicator>> comm = NewNcclCommunicator(options);
  EXPECT_EQ(comm.status().code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_THAT(comm.status().message(), ::testing::HasSubstr("is not there"));
}

}  // namespace
}  // namespace cpptorchrun::worker
