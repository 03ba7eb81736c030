// Prometheus's text exposition format (see prometheus.h).
#include "base/prometheus.h"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstdlib>

#include "absl/strings/str_cat.h"
#include "base/utf8.h"

namespace cpptorchrun::base::prom {
namespace {

bool NameChar(char c, bool first, bool colon) {
  if ((c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || c == '_') return true;
  if (colon && c == ':') return true;
  return !first && c >= '0' && c <= '9';
}

bool ValidName(absl::string_view name, bool colon) {
  if (name.empty()) return false;
  for (size_t i = 0; i < name.size(); ++i) {
    if (!NameChar(name[i], i == 0, colon)) return false;
  }
  return true;
}

std::string LabelText(const Labels& labels, const std::pair<std::string, std::string>* extra) {
  if (labels.empty() && extra == nullptr) return "";
  std::string out = "{";
  bool first = true;
  auto one = [&](const std::pair<std::string, std::string>& label) {
    if (!first) out += ",";
    first = false;
    absl::StrAppend(&out, ValidLabelName(label.first) ? label.first : "invalid_label_name", "=\"",
                    EscapeLabelValue(label.second), "\"");
  };
  for (const auto& label : labels) one(label);
  if (extra != nullptr) one(*extra);
  out += "}";
  return out;
}

const char* TypeName(Type type) {
  switch (type) {
    case Type::kCounter: return "counter";
    case Type::kGauge: return "gauge";
    case Type::kHistogram: return "histogram";
  }
  return "untyped";
}

}  // namespace

bool ValidMetricName(absl::string_view name) { return ValidName(name, true); }
bool ValidLabelName(absl::string_view name) { return ValidName(name, false); }

std::string EscapeLabelValue(absl::string_view value) {
  std::string out;
  out.reserve(value.size());
  for (size_t i = 0; i < value.size();) {
    const char c = value[i];
    if (c == '\\') { out += "\\\\"; ++i; continue; }
    if (c == '"') { out += "\\\""; ++i; continue; }
    if (c == '\n') { out += "\\n"; ++i; continue; }
    const size_t n = Utf8SequenceLength(value, i);
    if (n == 0) {
      out += "\xEF\xBF\xBD";
      ++i;
    } else {
      out.append(value.data() + i, n);
      i += n;
    }
  }
  return out;
}

std::string EscapeHelp(absl::string_view text) {
  std::string out;
  for (char c : text) {
    if (c == '\\') out += "\\\\";
    else if (c == '\n') out += "\\n";
    else out += c;
  }
  return out;
}

std::string FormatValue(double value) {
  if (std::isnan(value)) return "NaN";
  if (std::isinf(value)) return value > 0 ? "+Inf" : "-Inf";
  if (value == std::floor(value) && std::fabs(value) < 1e15) {
    return absl::StrCat(static_cast<int64_t>(value));
  }
  char buffer[32];
  std::snprintf(buffer, sizeof buffer, "%.17g", value);
  // The shortest of %.15g..%.17g that reads back the same.
  for (int precision = 15; precision < 17; ++precision) {
    char shorter[32];
    std::snprintf(shorter, sizeof shorter, "%.*g", precision, value);
    if (std::strtod(shorter, nullptr) == value) return shorter;
  }
  return buffer;
}

Family& Family::Add(const Labels& labels, double value) {
  lines_.push_back(absl::StrCat(name_, LabelText(labels, nullptr), " ", FormatValue(value)));
  return *this;
}

Family& Family::AddHistogram(const Labels& labels, const HistogramData& data) {
  uint64_t cumulative = 0;
  for (size_t i = 0; i <= data.bounds.size(); ++i) {
    cumulative += i < data.counts.size() ? data.counts[i] : 0;
    const std::pair<std::string, std::string> le(
        "le", i < data.bounds.size() ? FormatValue(data.bounds[i]) : "+Inf");
    lines_.push_back(absl::StrCat(name_, "_bucket", LabelText(labels, &le), " ", cumulative));
  }
  lines_.push_back(absl::StrCat(name_, "_sum", LabelText(labels, nullptr), " ", FormatValue(data.sum)));
  lines_.push_back(absl::StrCat(name_, "_count", LabelText(labels, nullptr), " ", data.count));
  return *this;
}

void Family::AppendTo(std::string* out) const {
  absl::StrAppend(out, "# HELP ", name_, " ", EscapeHelp(help_), "\n# TYPE ", name_, " ",
                  TypeName(type_), "\n");
  for (const std::string& line : lines_) absl::StrAppend(out, line, "\n");
}

Family& Exposition::Get(absl::string_view name, absl::string_view help, Type type) {
  const std::string valid = ValidMetricName(name) ? std::string(name) : "invalid_metric_name";
  auto it = by_name_.find(valid);
  if (it != by_name_.end()) return *it->second;
  families_.push_back(std::make_unique<Family>(valid, std::string(help), type));
  by_name_.emplace(valid, families_.back().get());
  return *families_.back();
}

std::string Exposition::Text() const {
  std::string out;
  for (const auto& family : families_) family->AppendTo(&out);
  return out;
}

BucketCounts::BucketCounts(std::vector<double> bounds) {
  std::sort(bounds.begin(), bounds.end());
  data_.counts.assign(bounds.size() + 1, 0);
  data_.bounds = std::move(bounds);
}

void BucketCounts::Observe(double value) {
  const size_t i = std::lower_bound(data_.bounds.begin(), data_.bounds.end(), value) - data_.bounds.begin();
  std::lock_guard<std::mutex> lock(mu_);
  ++data_.counts[i];
  data_.sum += value;
  ++data_.count;
}

HistogramData BucketCounts::Data() const {
  std::lock_guard<std::mutex> lock(mu_);
  return data_;
}

std::vector<double> LatencyBuckets() {
  return {0.0001, 0.00025, 0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05,
          0.1,    0.25,    0.5,    1,     2.5,    5,     10,    30,    60};
}

}  // namespace cpptorchrun::base::prom
