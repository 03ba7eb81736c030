#include "launcher/config/numa.h"

#include <sys/stat.h>

#include <fstream>

#include "absl/strings/str_cat.h"
#include "gtest/gtest.h"

namespace cpptorchrun::launcher {
namespace {

std::set<int> Range(int lo, int hi) {
  std::set<int> s;
  for (int c = lo; c <= hi; ++c) s.insert(c);
  return s;
}

void MakeDirs(const std::string& path) {
  for (size_t i = 1; i <= path.size(); ++i) {
    if (i == path.size() || path[i] == '/') mkdir(path.substr(0, i).c_str(), 0755);
  }
}

void Write(const std::string& path, const std::string& text) {
  MakeDirs(path.substr(0, path.rfind('/')));
  std::ofstream(path) << text << "\n";
}

// A sysfs tree: `sockets` packages of `nodes_per_socket` NUMA nodes, each of
// `l3_per_node` last-level caches of `cores_per_l3` cores of two threads
// (CPUs numbered consecutively, siblings adjacent).
std::string Fixture(const std::string& name, int sockets, int nodes_per_socket, int l3_per_node, int cores_per_l3) {
  const std::string root = absl::StrCat(::testing::TempDir(), "/sys-", name);
  int cpu = 0;
  int node = 0;
  for (int s = 0; s < sockets; ++s) {
    for (int n = 0; n < nodes_per_socket; ++n, ++node) {
      const int first = cpu;
      for (int l = 0; l < l3_per_node; ++l) {
        const int l3_first = cpu;
        const int l3_last = cpu + 2 * cores_per_l3 - 1;
        for (int c = 0; c < 2 * cores_per_l3; ++c, ++cpu) {
          const std::string dir = absl::StrCat(root, "/devices/system/cpu/cpu", cpu);
          Write(dir + "/topology/physical_package_id", absl::StrCat(s));
          const int sibling = cpu % 2 == 0 ? cpu : cpu - 1;
          Write(dir + "/topology/thread_siblings_list", absl::StrCat(sibling, "-", sibling + 1));
          Write(dir + "/cache/index0/type", "Instruction");
          Write(dir + "/cache/index0/level", "1");
          Write(dir + "/cache/index0/shared_cpu_list", absl::StrCat(sibling, "-", sibling + 1));
          Write(dir + "/cache/index2/type", "Unified");
          Write(dir + "/cache/index2/level", "2");
          Write(dir + "/cache/index2/shared_cpu_list", absl::StrCat(sibling, "-", sibling + 1));
          Write(dir + "/cache/index3/type", "Unified");
          Write(dir + "/cache/index3/level", "3");
          Write(dir + "/cache/index3/shared_cpu_list", absl::StrCat(l3_first, "-", l3_last));
        }
      }
      Write(absl::StrCat(root, "/devices/system/node/node", node, "/cpulist"), absl::StrCat(first, "-", cpu - 1));
    }
  }
  return root;
}

TEST(CpuList, ParseAndFormat) {
  EXPECT_EQ(*ParseCpuList("0-2,4,6-7"), (std::set<int>{0, 1, 2, 4, 6, 7}));
  EXPECT_EQ(*ParseCpuList(""), std::set<int>{});
  EXPECT_FALSE(ParseCpuList("3-1").ok());
  EXPECT_FALSE(ParseCpuList("x").ok());
  EXPECT_FALSE(ParseCpuList("0-999999999").ok());
  EXPECT_EQ(FormatCpuList({0, 1, 2, 4, 6, 7}), "0-2,4,6-7");
  EXPECT_EQ(ParseNumaMode("core-complex").value(), NumaMode::kCoreComplex);
  EXPECT_NE(ParseNumaMode("cores").status().message().find("node, socket, exclusive or core-complex"),
            std::string::npos);
}

class NumaBindingTest : public ::testing::Test {
 protected:
  // 2 sockets x 1 node, 3 L3 of 3 cores (6 CPUs) each: node 0 = CPUs 0-17,
  // node 1 = 18-35; 4 GPUs, two per node, found by their PCI addresses.
  void SetUp() override {
    root_ = Fixture("two-sockets", 2, 1, 3, 3);
    Write(root_ + "/bus/pci/devices/0000:1b:00.0/numa_node", "0");
    Write(root_ + "/bus/pci/devices/0000:1c:00.0/numa_node", "0");
    Write(root_ + "/bus/pci/devices/0000:9b:00.0/numa_node", "1");
    Write(root_ + "/bus/pci/devices/0000:9c:00.0/numa_node", "1");
    auto t = ReadTopology(root_, {"00000000:1B:00.0", "00000000:1C:00.0", "00000000:9B:00.0", "0000:9c:00.0"}, 0);
    ASSERT_TRUE(t.ok()) << t.status();
    topo_ = *t;
  }
  std::set<int> Cpus(NumaMode mode, int gpu, std::set<int> allowed = Range(0, 35)) {
    auto b = BindingFor(mode, gpu, topo_, allowed);
    EXPECT_TRUE(b.ok()) << b.status();
    return b.ok() ? b->cpus : std::set<int>{};
  }
  std::string root_;
  Topology topo_;
};

TEST_F(NumaBindingTest, TopologyReadOffTheTree) {
  EXPECT_EQ(topo_.gpu_node, (std::vector<int>{0, 0, 1, 1}));
  EXPECT_EQ(topo_.node_cpus.at(1), Range(18, 35));
  EXPECT_EQ(topo_.cpu_socket.at(20), 1);
  EXPECT_EQ(topo_.cpu_core.at(25), (std::set<int>{24, 25}));
  EXPECT_EQ(topo_.cpu_llc.at(25), Range(24, 29)) << "the highest data/unified cache";
}

TEST_F(NumaBindingTest, EachMode) {
  EXPECT_EQ(Cpus(NumaMode::kNode, 3), Range(18, 35));
  EXPECT_EQ(Cpus(NumaMode::kSocket, 0), Range(0, 17));
  // 9 cores for 2 GPUs: the first gets 5, the second 4, never shared.
  EXPECT_EQ(Cpus(NumaMode::kExclusive, 2), Range(18, 27));
  EXPECT_EQ(Cpus(NumaMode::kExclusive, 3), Range(28, 35));
  // GPU 3 is the second GPU of node 1: its second L3.
  EXPECT_EQ(Cpus(NumaMode::kCoreComplex, 3), Range(24, 29));
  EXPECT_EQ(BindingFor(NumaMode::kNode, 3, topo_, Range(0, 35))->memory_node, 1);
}

TEST_F(NumaBindingTest, OnlyWithinTheLaunchersAffinity) {
  EXPECT_EQ(Cpus(NumaMode::kNode, 3, Range(0, 19)), (std::set<int>{18, 19}));
  auto none = BindingFor(NumaMode::kNode, 3, topo_, Range(0, 17));
  ASSERT_FALSE(none.ok());
  EXPECT_NE(none.status().message().find("no CPU this launcher may use"), std::string::npos);
}

TEST(NumaBinding, SocketSpansItsNodesAndExclusiveNeedsACorePerGpu) {
  // 1 socket x 2 nodes, 1 L3 of 1 core each.
  const std::string root = Fixture("one-socket", 1, 2, 1, 1);
  auto t = ReadTopology(root, {}, 4);  // fake GPUs: round-robin over nodes
  ASSERT_TRUE(t.ok()) << t.status();
  EXPECT_EQ(t->gpu_node, (std::vector<int>{0, 1, 0, 1}));
  EXPECT_EQ(BindingFor(NumaMode::kSocket, 1, *t, Range(0, 3))->cpus, Range(0, 3));
  EXPECT_EQ(BindingFor(NumaMode::kNode, 1, *t, Range(0, 3))->cpus, Range(2, 3));
  auto exclusive = BindingFor(NumaMode::kExclusive, 0, *t, Range(0, 3));
  ASSERT_FALSE(exclusive.ok());
  EXPECT_NE(exclusive.status().message().find("has 1 physical cores for 2 GPUs"), std::string::npos);
  // Core complexes are shared when the GPUs outnumber them.
  EXPECT_EQ(BindingFor(NumaMode::kCoreComplex, 2, *t, Range(0, 3))->cpus, Range(0, 1));
}

TEST(NumaBinding, MissingFilesNameThemAndSingleNodeMachinesSayMinusOne) {
  const std::string root = Fixture("single", 1, 1, 1, 2);
  Write(root + "/bus/pci/devices/0000:01:00.0/numa_node", "-1");
  auto t = ReadTopology(root, {"0000:01:00.0"}, 0);
  ASSERT_TRUE(t.ok());
  EXPECT_EQ(t->gpu_node, std::vector<int>{0});
  auto missing = ReadTopology(root, {"0000:02:00.0"}, 0);
  ASSERT_FALSE(missing.ok());
  EXPECT_NE(missing.status().message().find("0000:02:00.0/numa_node"), std::string::npos);
}

TEST(NumaBinding, ThisMachine) {
  auto t = ReadTopology("/sys", {}, 2);
  ASSERT_TRUE(t.ok()) << t.status();
  EXPECT_FALSE(t->node_cpus.empty());
  EXPECT_FALSE(AllowedCpus().empty());
  auto b = BindingFor(NumaMode::kNode, 0, *t, AllowedCpus());
  ASSERT_TRUE(b.ok()) << b.status();
  EXPECT_FALSE(b->cpus.empty());
}

}  // namespace
}  // namespace cpptorchrun::launcher
