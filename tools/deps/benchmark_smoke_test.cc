// Smoke test: Google Benchmark registers and runs a benchmark in-process.
#include <benchmark/benchmark.h>

#include "gtest/gtest.h"

namespace {
int g_runs = 0;
void BM_Count(benchmark::State& state) {
  for (auto _ : state) benchmark::DoNotOptimize(++g_runs);
}
}  // namespace

TEST(BenchmarkSmoke, RunsRegisteredBenchmark) {
  benchmark::RegisterBenchmark("BM_Count", BM_Count)->Iterations(10);
  int argc = 1;
  char arg0[] = "benchmark_smoke_test";
  char* argv[] = {arg0, nullptr};
  benchmark::Initialize(&argc, argv);
  size_t ran = benchmark::RunSpecifiedBenchmarks();
  EXPECT_EQ(ran, 1u);
  EXPECT_EQ(g_runs, 10);
}
