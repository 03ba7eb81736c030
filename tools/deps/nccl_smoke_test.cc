// Smoke test: NCCL and the CUDA runtime link (where /usr/local/cuda exists)
// and, on a machine with a GPU, NCCL makes a unique id and a 1-rank
// communicator. Without a GPU the test skips and says why.
#include "gtest/gtest.h"

#ifdef CPPTORCHRUN_HAS_CUDA
#include <cuda_runtime_api.h>
#include <nccl.h>
#endif

TEST(NcclSmoke, UniqueIdAndOneRankComm) {
#ifndef CPPTORCHRUN_HAS_CUDA
  GTEST_SKIP() << "built without CUDA/NCCL (no /usr/local/cuda or $CUDA_HOME): "
                  "the NCCL targets drop out of this build";
#else
  int version = 0;
  ASSERT_EQ(ncclGetVersion(&version), ncclSuccess);
  EXPECT_GT(version, 0);
  int devices = 0;
  cudaError_t err = cudaGetDeviceCount(&devices);
  if (err != cudaSuccess || devices == 0) {
    GTEST_SKIP() << "NCCL " << version << " linked, but no GPU is present ("
                 << cudaGetErrorString(err) << "): nothing to run NCCL on";
  }
  ncclUniqueId id;
  ASSERT_EQ(ncclGetUniqueId(&id), ncclSuccess);
  ncclComm_t comm;
  ASSERT_EQ(cudaSetDevice(0), cudaSuccess);
  ASSERT_EQ(ncclCommInitRank(&comm, 1, id, 0), ncclSuccess);
  int count = 0;
  ASSERT_EQ(ncclCommCount(comm, &count), ncclSuccess);
  EXPECT_EQ(count, 1);
  ncclCommDestroy(comm);
#endif
}
