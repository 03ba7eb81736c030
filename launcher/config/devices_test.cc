// Tests of device counting: CUDA_VISIBLE_DEVICES narrowing, fake GPUs, and
// what gpu|cpu|auto resolve to.
#include "launcher/config/devices.h"

#include "gtest/gtest.h"

namespace cpptorchrun::launcher {
namespace {

TEST(VisibleGpuCount, CudaRules) {
  EXPECT_EQ(VisibleGpuCount(4, "0,1"), 2);
  EXPECT_EQ(VisibleGpuCount(4, "3"), 1);
  EXPECT_EQ(VisibleGpuCount(4, ""), 0);
  EXPECT_EQ(VisibleGpuCount(4, "-1"), 0);
  EXPECT_EQ(VisibleGpuCount(2, "0,5,1"), 1);  // stops at the first invalid index
  EXPECT_EQ(VisibleGpuCount(4, "1,1"), 1);    // a repeat is invalid
  EXPECT_EQ(VisibleGpuCount(4, "GPU-abc,MIG-def"), 2);
  EXPECT_EQ(VisibleGpuCount(4, " 0 , 2 "), 2);
  EXPECT_EQ(VisibleGpuCount(0, "0"), 0);
}

LaunchConfig WithNproc(NprocKind kind, int n = 1) {
  LaunchConfig c;
  c.nproc_kind = kind;
  c.nproc_per_node = n;
  return c;
}

TEST(ResolveNproc, FakeGpus) {
  auto fake = NewFakeDeviceEnumerator(3, 16);
  bool gpus = false;
  EXPECT_EQ(*ResolveNprocPerNode(WithNproc(NprocKind::kGpu), *fake, &gpus), 3);
  EXPECT_TRUE(gpus);
  EXPECT_EQ(*ResolveNprocPerNode(WithNproc(NprocKind::kAuto), *fake, &gpus), 3);
  EXPECT_TRUE(gpus);
  EXPECT_EQ(*ResolveNprocPerNode(WithNproc(NprocKind::kCpu), *fake, &gpus), 16);
  EXPECT_FALSE(gpus);
  EXPECT_EQ(*ResolveNprocPerNode(WithNproc(NprocKind::kCount, 2), *fake, &gpus), 2);
  EXPECT_TRUE(gpus);
  auto too_many = ResolveNprocPerNode(WithNproc(NprocKind::kCount, 4), *fake, &gpus);
  ASSERT_FALSE(too_many.ok());
  EXPECT_NE(too_many.status().message().find("--fake_gpus"), std::string::npos);
}

TEST(ResolveNproc, NoGpuMeansCpuForAutoAndErrorForGpu) {
  auto none = NewFakeDeviceEnumerator(0, 6);
  bool gpus = true;
  auto g = ResolveNprocPerNode(WithNproc(NprocKind::kGpu), *none, &gpus);
  ASSERT_FALSE(g.ok());
  EXPECT_NE(g.status().message().find("--nproc_per_node=gpu"), std::string::npos);
  EXPECT_EQ(*ResolveNprocPerNode(WithNproc(NprocKind::kAuto), *none, &gpus), 6);
  EXPECT_FALSE(gpus);
}

TEST(RealDevices, CountsWithoutCrashing) {
  // This machine may or may not have a GPU; the count must be sane either way.
  auto real = NewRealDeviceEnumerator(std::nullopt);
  auto n = real->CountGpus();
  ASSERT_TRUE(n.ok()) << n.status();
  EXPECT_GE(*n, 0);
  EXPECT_GE(real->CountCpus(), 1);
  EXPECT_FALSE(real->fake());
  auto hidden = NewRealDeviceEnumerator(std::string(""));
  EXPECT_EQ(*hidden->CountGpus(), 0);
}

TEST(VisibleBusIds, CudaVisibleDevicesByIndexOrUuidInItsOrder) {
  const std::vector<std::vector<std::string>> gpus = {{"0", "GPU-aaa", "00000000:1B:00.0"},
                                                      {"1", "GPU-bbb", "00000000:1C:00.0"},
                                                      {"2", "GPU-ccc", "00000000:9B:00.0"}};
  EXPECT_EQ(VisibleBusIds(gpus, std::nullopt),
            (std::vector<std::string>{"00000000:1B:00.0", "00000000:1C:00.0", "00000000:9B:00.0"}));
  EXPECT_EQ(VisibleBusIds(gpus, std::string("2,0")),
            (std::vector<std::string>{"00000000:9B:00.0", "00000000:1B:00.0"}));
  EXPECT_EQ(VisibleBusIds(gpus, std::string("GPU-bb")), std::vector<std::string>{"00000000:1C:00.0"});
  EXPECT_EQ(VisibleBusIds(gpus, std::string("1,7,0")), std::vector<std::string>{"00000000:1C:00.0"})
      << "CUDA stops at the first invalid entry";
}

}  // namespace
}  // namespace cpptorchrun::launcher
