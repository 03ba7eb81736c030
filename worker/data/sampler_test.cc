// Tests of the distributed sampler: PyTorch's lists (computed by
// /usr/bin/python3 when it has torch), disjoint shares, and re-sharding from
// a saved position over a different world size.
#include "worker/data/sampler.h"

#include <cstdio>
#include <set>
#include <sstream>
#include <string>

#include "absl/strings/str_cat.h"
#include "gtest/gtest.h"
#include "worker/data/torch_random.h"

namespace cpptorchrun::worker {
namespace {

struct Case {
  int64_t size;
  int world;
  int rank;
  int64_t epoch;
  bool drop_last;
  uint64_t seed;
};

const Case kCases[] = {
    {10, 3, 0, 0, false, 0},  {10, 3, 2, 1, true, 0},     {101, 4, 3, 5, false, 7},
    {7, 8, 5, 2, false, 0},   {1000, 3, 1, 0, true, 42},  {60000, 2, 1, 3, false, 0},
    {5, 2, 1, 9, false, 123}, {64, 1, 0, 4, false, 0},
};

// Runs Python's DistributedSampler for each case; one line of indices per
// case. Empty when /usr/bin/python3 or its torch is missing.
std::string PythonLists(std::string* why) {
  std::string script =
      "import sys\n"
      "import torch\n"
      "from torch.utils.data import DistributedSampler\n"
      "cases = [";
  for (const Case& c : kCases) {
    absl::StrAppend(&script, "(", c.size, ",", c.world, ",", c.rank, ",", c.epoch, ",",
                    c.drop_last ? "True" : "False", ",", c.seed, "),");
  }
  script +=
      "]\n"
      "for n, w, r, e, d, s in cases:\n"
      "    smp = DistributedSampler(range(n), num_replicas=w, rank=r, shuffle=True, seed=s,"
      " drop_last=d)\n"
      "    smp.set_epoch(e)\n"
      "    print(' '.join(str(i) for i in smp))\n";
  std::string path = absl::StrCat(std::getenv("TEST_TMPDIR") ? std::getenv("TEST_TMPDIR") : "/tmp",
                                  "/sampler_reference.py");
  FILE* f = std::fopen(path.c_str(), "w");
  if (f == nullptr) {
    *why = "cannot write the reference script";
    return "";
  }
  std::fputs(script.c_str(), f);
  std::fclose(f);
  FILE* pipe = popen(("/usr/bin/python3 " + path + " 2>/dev/null").c_str(), "r");
  if (pipe == nullptr) {
    *why = "cannot run /usr/bin/python3";
    return "";
  }
  std::string out;
  char buf[4096];
  size_t n;
  while ((n = std::fread(buf, 1, sizeof(buf), pipe)) > 0) out.append(buf, n);
  int rc = pclose(pipe);
  if (rc != 0) {
    *why = "/usr/bin/python3 has no usable torch (exit status " + std::to_string(rc) + ")";
    return "";
  }
  return out;
}

std::vector<int64_t> Ours(const Case& c) {
  SamplerOptions options;
  options.dataset_size = c.size;
  options.world_size = c.world;
  options.rank = c.rank;
  options.drop_last = c.drop_last;
  options.seed = c.seed;
  DistributedSampler sampler(options, TorchRandperm);
  sampler.SetEpoch(c.epoch);
  EXPECT_EQ(sampler.NumSamples(), static_cast<int64_t>(sampler.Indices().size()));
  return sampler.Indices();
}

TEST(Sampler, EqualsPytorchDistributedSampler) {
  std::string why;
  std::string lists = PythonLists(&why);
  if (lists.empty()) GTEST_SKIP() << "no PyTorch reference: " << why;
  std::istringstream lines(lists);
  for (const Case& c : kCases) {
    std::string line;
    ASSERT_TRUE(std::getline(lines, line)) << "Python printed too few lines";
    std::istringstream numbers(line);
    std::vector<int64_t> theirs;
    int64_t v;
    while (numbers >> v) theirs.push_back(v);
    EXPECT_EQ(Ours(c), theirs) << "size " << c.size << " world " << c.world << " rank " << c.rank
                               << " epoch " << c.epoch << " drop_last " << c.drop_last;
  }
}

TEST(Sampler, RanksAreDisjointAndCoverTheSet) {
  for (bool drop_last : {false, true}) {
    std::multiset<int64_t> seen;
    for (int rank = 0; rank < 3; ++rank) {
      std::vector<int64_t> share = Ours({100, 3, rank, 2, drop_last, 0});
      EXPECT_EQ(share.size(), drop_last ? 33u : 34u);
      seen.insert(share.begin(), share.end());
    }
    std::set<int64_t> distinct(seen.begin(), seen.end());
    EXPECT_EQ(distinct.size(), drop_last ? 99u : 100u);
    EXPECT_EQ(seen.size(), drop_last ? 99u : 102u);  // two padding repeats
  }
}

TEST(Sampler, EpochsShuffleDifferentlyAndIdenticallyPerSeed) {
  SamplerOptions options;
  options.dataset_size = 50;
  DistributedSampler a(options, TorchRandperm), b(options, TorchRandperm);
  a.SetEpoch(1);
  b.SetEpoch(1);
  EXPECT_EQ(a.Indices(), b.Indices());
  b.SetEpoch(2);
  EXPECT_NE(a.Indices(), b.Indices());
}

TEST(Sampler, ReshardsFromSavedPositionWithoutLossOrRepeat) {
  // Two ranks consume 3 steps of 4 samples each (24 samples), then the job
  // restarts with three ranks.
  const int64_t n = 70;
  SamplerOptions options;
  options.dataset_size = n;
  options.world_size = 2;
  std::set<int64_t> seen;
  for (int rank = 0; rank < 2; ++rank) {
    options.rank = rank;
    DistributedSampler sampler(options, TorchRandperm);
    sampler.SetEpoch(3);
    std::vector<int64_t> share = sampler.Indices();
    for (int i = 0; i < 12; ++i) EXPECT_TRUE(seen.insert(share[i]).second);
  }
  options.world_size = 3;
  std::multiset<int64_t> after;
  for (int rank = 0; rank < 3; ++rank) {
    options.rank = rank;
    DistributedSampler sampler(options, TorchRandperm);
    sampler.SetEpoch(3);
    std::vector<int64_t> share = sampler.Indices(24);
    EXPECT_EQ(static_cast<int64_t>(share.size()), sampler.NumSamples(24));
    after.insert(share.begin(), share.end());
  }
  // 46 remain; 48 = 16 per rank, the two extra are padding from the front.
  EXPECT_EQ(after.size(), 48u);
  std::set<int64_t> distinct(after.begin(), after.end());
  std::set<int64_t> all(seen);
  int64_t fresh = 0;
  for (int64_t i : distinct) fresh += all.insert(i).second ? 1 : 0;
  EXPECT_EQ(fresh, 46);
  EXPECT_EQ(all.size(), static_cast<size_t>(n));
}

TEST(Sampler, SameWorldResumeContinuesTheSameShare) {
  SamplerOptions options;
  options.dataset_size = 103;
  options.world_size = 4;
  options.rank = 2;
  DistributedSampler sampler(options, TorchRandperm);
  sampler.SetEpoch(1);
  std::vector<int64_t> full = sampler.Indices();
  std::vector<int64_t> rest = sampler.Indices(5 * 4);  // 5 samples per rank consumed
  ASSERT_EQ(rest.size() + 5, full.size());
  EXPECT_TRUE(std::equal(rest.begin(), rest.end(), full.begin() + 5));
}

TEST(Sampler, ValidatesOptions) {
  SamplerOptions options;
  options.world_size = 2;
  options.rank = 2;
  EXPECT_FALSE(DistributedSampler::Validate(options, TorchRandperm).ok());
  options.rank = 0;
  EXPECT_TRUE(DistributedSampler::Validate(options, TorchRandperm).ok());
  EXPECT_FALSE(DistributedSampler::Validate(options, nullptr).ok());
}

}  // namespace
}  // namespace cpptorchrun::worker
