#include "base/prometheus.h"

#include <cmath>
#include <limits>
#include <thread>
#include <vector>

#include "gtest/gtest.h"

namespace cpptorchrun::base::prom {
namespace {

TEST(PrometheusTest, FamilyHasHelpTypeAndSamples) {
  Exposition e;
  e.Get("jobs_total", "Jobs seen.", Type::kCounter).Add({{"run", "a"}}, 3).Add({}, 4);
  EXPECT_EQ(e.Text(),
            "# HELP jobs_total Jobs seen.\n# TYPE jobs_total counter\n"
            "jobs_total{run=\"a\"} 3\njobs_total 4\n");
}

TEST(PrometheusTest, SamplesOfOneNameStayTogether) {
  Exposition e;
  e.Get("a", "A.", Type::kGauge).Add({}, 1);
  e.Get("b", "B.", Type::kGauge).Add({}, 2);
  e.Get("a", "ignored", Type::kGauge).Add({{"x", "y"}}, 3);
  EXPECT_EQ(e.Text(),
            "# HELP a A.\n# TYPE a gauge\na 1\na{x=\"y\"} 3\n"
            "# HELP b B.\n# TYPE b gauge\nb 2\n");
}

TEST(PrometheusTest, LabelValuesAreEscaped) {
  EXPECT_EQ(EscapeLabelValue("a\\b\"c\nd"), "a\\\\b\\\"c\\nd");
  EXPECT_EQ(EscapeLabelValue("<script>alert(1)</script>"), "<script>alert(1)</script>");
  EXPECT_EQ(EscapeLabelValue("caf\xC3\xA9"), "caf\xC3\xA9");
  // Invalid UTF-8 (a lone continuation byte, a truncated sequence, an overlong form).
  EXPECT_EQ(EscapeLabelValue("x\x80y"), "x\xEF\xBF\xBDy");
  EXPECT_EQ(EscapeLabelValue("x\xE2\x82"), "x\xEF\xBF\xBD\xEF\xBF\xBD");
  EXPECT_EQ(EscapeLabelValue("\xC0\xAF"), "\xEF\xBF\xBD\xEF\xBF\xBD");
  Exposition e;
  e.Get("m", "H", Type::kGauge).Add({{"run", "r\"}\nx 1"}}, 1);
  EXPECT_EQ(e.Text(), "# HELP m H\n# TYPE m gauge\nm{run=\"r\\\"}\\nx 1\"} 1\n");
}

TEST(PrometheusTest, HelpIsEscaped) {
  EXPECT_EQ(EscapeHelp("a\\b\nc\"d"), "a\\\\b\\nc\"d");
}

TEST(PrometheusTest, NamesAreChecked) {
  EXPECT_TRUE(ValidMetricName("rpc_total"));
  EXPECT_TRUE(ValidMetricName("ns:rpc_total"));
  EXPECT_FALSE(ValidMetricName("9x"));
  EXPECT_FALSE(ValidMetricName("a-b"));
  EXPECT_FALSE(ValidMetricName(""));
  EXPECT_FALSE(ValidLabelName("a:b"));
  Exposition e;
  e.Get("bad name", "H", Type::kGauge).Add({{"bad-label", "v"}}, 1);
  EXPECT_EQ(e.Text(),
            "# HELP invalid_metric_name H\n# TYPE invalid_metric_name gauge\n"
            "invalid_metric_name{invalid_label_name=\"v\"} 1\n");
}

TEST(PrometheusTest, ValuesAsPrometheusReadsThem) {
  EXPECT_EQ(FormatValue(0), "0");
  EXPECT_EQ(FormatValue(-12), "-12");
  EXPECT_EQ(FormatValue(1e20), "1e+20");
  EXPECT_EQ(FormatValue(0.25), "0.25");
  EXPECT_EQ(FormatValue(0.1), "0.1");
  EXPECT_EQ(FormatValue(std::nan("")), "NaN");
  EXPECT_EQ(FormatValue(std::numeric_limits<double>::infinity()), "+Inf");
  EXPECT_EQ(FormatValue(-std::numeric_limits<double>::infinity()), "-Inf");
  EXPECT_EQ(std::strtod(FormatValue(1.0 / 3).c_str(), nullptr), 1.0 / 3);
}

TEST(PrometheusTest, HistogramBucketsAreCumulative) {
  BucketCounts buckets({1, 0.5});
  buckets.Observe(0.1);
  buckets.Observe(0.5);
  buckets.Observe(0.7);
  buckets.Observe(9);
  Exposition e;
  e.Get("lat_seconds", "L.", Type::kHistogram).AddHistogram({{"method", "Join"}}, buckets.Data());
  EXPECT_EQ(e.Text(),
            "# HELP lat_seconds L.\n# TYPE lat_seconds histogram\n"
            "lat_seconds_bucket{method=\"Join\",le=\"0.5\"} 2\n"
            "lat_seconds_bucket{method=\"Join\",le=\"1\"} 3\n"
            "lat_seconds_bucket{method=\"Join\",le=\"+Inf\"} 4\n"
            "lat_seconds_sum{method=\"Join\"} 10.3\n"
            "lat_seconds_count{method=\"Join\"} 4\n");
}

TEST(PrometheusTest, BucketCountsFromManyThreads) {
  BucketCounts buckets(LatencyBuckets());
  std::vector<std::thread> threads;
  for (int t = 0; t < 4; ++t) {
    threads.emplace_back([&] {
      for (int i = 0; i < 1000; ++i) buckets.Observe(0.001);
    });
  }
  for (auto& t : threads) t.join();
  EXPECT_EQ(buckets.Data().count, 4000u);
}

}  // namespace
}  // namespace cpptorchrun::base::prom
