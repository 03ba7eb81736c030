// Tests of the backend choice rule.
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "worker/comm/backend.h"

namespace cpptorchrun::worker {
namespace {

using ::testing::HasSubstr;

TEST(Backend, Rule) {
  EXPECT_EQ(*ChooseBackend("auto", true, true, 8), BackendKind::kFakeGpu);
  EXPECT_EQ(*ChooseBackend("auto", false, true, 1), BackendKind::kNccl);
  EXPECT_EQ(*ChooseBackend("auto", false, true, 0), BackendKind::kGloo);
  EXPECT_EQ(*ChooseBackend("auto", false, false, 4), BackendKind::kGloo);
  EXPECT_EQ(*ChooseBackend("gloo", true, true, 4), BackendKind::kGloo);
  EXPECT_EQ(*ChooseBackend("nccl", true, false, 0), BackendKind::kFakeGpu);
  EXPECT_EQ(*ChooseBackend("nccl", false, true, 2), BackendKind::kNccl);
  EXPECT_THAT(ChooseBackend("nccl", false, false, 0).status().message(),
              HasSubstr("built without CUDA and NCCL"));
  EXPECT_THAT(ChooseBackend("nccl", false, true, 0).status().message(),
              HasSubstr("no CUDA device"));
  EXPECT_THAT(ChooseBackend("mpi", false, true, 0).status().message(),
              HasSubstr("--backend 'mpi' is not one of auto, nccl, gloo"));
}

}  // namespace
}  // namespace cpptorchrun::worker
