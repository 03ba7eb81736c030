// Prometheus's text exposition format (version 0.0.4), written once for
// every part that exports metrics (rendezvous_server, cpptorchrun): metric
// families with their # HELP and # TYPE lines, label values escaped, values
// spelled as Prometheus parses them, histograms as cumulative buckets with
// _sum and _count. Pure: no lock, no clock, no I/O.
//
// Cardinality is the caller's to bound: an Exposition holds what it is
// given. `BucketCounts` is the one thread-safe piece (a histogram that
// calls observe from many threads).
#ifndef CPPTORCHRUN_BASE_PROMETHEUS_H_
#define CPPTORCHRUN_BASE_PROMETHEUS_H_

#include <cstdint>
#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <utility>
#include <vector>

#include "absl/strings/string_view.h"

namespace cpptorchrun::base::prom {

enum class Type { kCounter, kGauge, kHistogram };

// Label name -> value, in the order written.
using Labels = std::vector<std::pair<std::string, std::string>>;

// A histogram's state: `bounds` ascending (the +Inf bucket is implicit),
// `counts[i]` the observations <= bounds[i] and > bounds[i-1] (not
// cumulative; counts.size() == bounds.size() + 1, the last for +Inf).
struct HistogramData {
  std::vector<double> bounds;
  std::vector<uint64_t> counts;
  double sum = 0;
  uint64_t count = 0;
};

// Whether `name` is a valid metric (or label) name: [a-zA-Z_:][a-zA-Z0-9_:]*
// (labels: no ':').
bool ValidMetricName(absl::string_view name);
bool ValidLabelName(absl::string_view name);

// A label value as the format quotes it: backslash, double quote and
// newline escaped; bytes that are not valid UTF-8 replaced by U+FFFD (the
// format requires UTF-8, and ids come from outside).
std::string EscapeLabelValue(absl::string_view value);
// A HELP text: backslash and newline escaped.
std::string EscapeHelp(absl::string_view text);
// A sample value: integers without an exponent, NaN, +Inf, -Inf, else the
// shortest round-tripping decimal.
std::string FormatValue(double value);

// One family: its name, help, type and samples in the order added.
class Family {
 public:
  Family(std::string name, std::string help, Type type)
      : name_(std::move(name)), help_(std::move(help)), type_(type) {}
  // A counter's or gauge's sample.
  Family& Add(const Labels& labels, double value);
  // A histogram's series (`name`_bucket{...,le=...}, _sum, _count).
  Family& AddHistogram(const Labels& labels, const HistogramData& data);
  const std::string& name() const { return name_; }
  void AppendTo(std::string* out) const;

 private:
  std::string name_, help_;
  Type type_;
  std::vector<std::string> lines_;
};

// Families in the order first asked for; asking again for a name returns
// the same family, so samples of one metric stay together as the format
// requires. A name that is not valid is replaced by "invalid_metric_name"
// (a programming error, made visible rather than breaking the scrape).
class Exposition {
 public:
  Family& Get(absl::string_view name, absl::string_view help, Type type);
  // The whole text, ending with a newline when not empty.
  std::string Text() const;

 private:
  std::vector<std::unique_ptr<Family>> families_;
  std::map<std::string, Family*, std::less<>> by_name_;
};

// Buckets that many threads observe into. Thread-safe.
class BucketCounts {
 public:
  explicit BucketCounts(std::vector<double> bounds);
  void Observe(double value);
  HistogramData Data() const;

 private:
  mutable std::mutex mu_;
  HistogramData data_;
};

// Seconds buckets for call latencies: 100 us to 60 s.
std::vector<double> LatencyBuckets();

}  // namespace cpptorchrun::base::prom

#endif  // CPPTORCHRUN_BASE_PROMETHEUS_H_
