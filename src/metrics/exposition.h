// Prometheus text exposition (format 0.0.4) and the metric value types Bulwark's
// endpoints export: the controller of `bulwark run`, each agent and the operator
// (docs/monitoring.md names every metric).
//
// Exposition builds one scrape's text: a family's `# HELP`/`# TYPE` lines are written
// once, before its first sample; label values are escaped; NaN and infinities are
// written as Prometheus spells them. Histogram is a fixed-bucket histogram
// (cumulative `_bucket{le=…}`, `_sum`, `_count`).
//
// Thread-safety: none of these types is thread-safe; their owner serialises access.
#pragma once

#include <set>
#include <sstream>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

namespace bulwark::metrics {

using Labels = std::vector<std::pair<std::string, std::string>>;

// A label value escaped for the text format (backslash, double quote, newline).
std::string EscapeLabelValue(std::string_view v);
// A sample value: shortest round-trip decimal, or NaN / +Inf / -Inf.
std::string FormatValue(double v);

class Histogram {
 public:
  // `bounds`: ascending upper bounds (le); +Inf is implied.
  explicit Histogram(std::vector<double> bounds);
  // Exponential bounds start, start·factor, … (count of them).
  static Histogram Exponential(double start, double factor, int count);
  // Non-finite observations are ignored (the caller counts them as bad input).
  void Observe(double v);
  const std::vector<double>& bounds() const { return bounds_; }
  // Per-bucket (non-cumulative) counts; the last is the +Inf bucket.
  const std::vector<unsigned long long>& counts() const { return counts_; }
  double sum() const { return sum_; }
  unsigned long long count() const { return count_; }

 private:
  std::vector<double> bounds_;
  std::vector<unsigned long long> counts_;
  double sum_ = 0;
  unsigned long long count_ = 0;
};

class Exposition {
 public:
  // Declares a family (type: counter, gauge, histogram, untyped); a name declared
  // twice is written once.
  void Family(std::string_view name, std::string_view type, std::string_view help);
  // One sample line. `name` may carry a suffix of its family (_bucket, _sum, _count).
  void Sample(std::string_view name, const Labels& labels, double value);
  // Family + one sample.
  void Gauge(std::string_view name, std::string_view help, const Labels& labels, double value);
  void Counter(std::string_view name, std::string_view help, const Labels& labels, double value);
  // The histogram's _bucket/_sum/_count samples (declare its family first).
  void HistogramSamples(std::string_view name, const Labels& labels, const Histogram& h);
  // Raw text appended as is (another component's complete families).
  void Append(std::string_view text);
  std::string Take();

 private:
  std::ostringstream out_;
  std::set<std::string, std::less<>> declared_;
};

}  // namespace bulwark::metrics
