#include "metrics/exposition.h"

#include <algorithm>
#include <cmath>

#include "common/str_format.h"

namespace bulwark::metrics {

std::string EscapeLabelValue(std::string_view v) {
  std::string out;
  out.reserve(v.size());
  for (const char c : v) {
    if (c == '\\') {
      out += "\\\\";
    } else if (c == '"') {
      out += "\\\"";
    } else if (c == '\n') {
      out += "\\n";
    } else {
      out += c;
    }
  }
  return out;
}

std::string FormatValue(double v) {
  if (std::isnan(v)) return "NaN";
  if (std::isinf(v)) return v > 0 ? "+Inf" : "-Inf";
  return ShortestDecimal(v);
}

Histogram::Histogram(std::vector<double> bounds) : bounds_(std::move(bounds)) {
  std::sort(bounds_.begin(), bounds_.end());
  bounds_.erase(std::unique(bounds_.begin(), bounds_.end()), bounds_.end());
  counts_.assign(bounds_.size() + 1, 0);
}

Histogram Histogram::Exponential(double start, double factor, int count) {
  std::vector<double> b;
  double v = start;
  for (int i = 0; i < count; ++i, v *= factor) b.push_back(v);
  return Histogram(std::move(b));
}

void Histogram::Observe(double v) {
  if (!std::isfinite(v)) return;
  const size_t i =
      static_cast<size_t>(std::lower_bound(bounds_.begin(), bounds_.end(), v) - bounds_.begin());
  ++counts_[i];
  sum_ += v;
  ++count_;
}

void Exposition::Family(std::string_view name, std::string_view type, std::string_view help) {
  if (declared_.count(name)) return;
  declared_.emplace(name);
  out_ << "# HELP " << name << ' ';
  for (const char c : help) {  // HELP escapes backslash and newline only
    if (c == '\\') {
      out_ << "\\\\";
    } else if (c == '\n') {
      out_ << "\\n";
    } else {
      out_ << c;
    }
  }
  out_ << "\n# TYPE " << name << ' ' << type << '\n';
}

void Exposition::Sample(std::string_view name, const Labels& labels, double value) {
  out_ << name;
  if (!labels.empty()) {
    out_ << '{';
    for (size_t i = 0; i < labels.size(); ++i) {
      if (i) out_ << ',';
      out_ << labels[i].first << "=\"" << EscapeLabelValue(labels[i].second) << '"';
    }
    out_ << '}';
  }
  out_ << ' ' << FormatValue(value) << '\n';
}

void Exposition::Gauge(std::string_view name, std::string_view help, const Labels& labels,
                       double value) {
  Family(name, "gauge", help);
  Sample(name, labels, value);
}

void Exposition::Counter(std::string_view name, std::string_view help, const Labels& labels,
                         double value) {
  Family(name, "counter", help);
  Sample(name, labels, value);
}

void Exposition::HistogramSamples(std::string_view name, const Labels& labels, const Histogram& h) {
  const std::string base(name);
  unsigned long long cumulative = 0;
  for (size_t i = 0; i <= h.bounds().size(); ++i) {
    cumulative += h.counts()[i];
    Labels l = labels;
    l.emplace_back("le", i < h.bounds().size() ? FormatValue(h.bounds()[i]) : "+Inf");
    Sample(base + "_bucket", l, static_cast<double>(cumulative));
  }
  Sample(base + "_sum", labels, h.sum());
  Sample(base + "_count", labels, static_cast<double>(h.count()));
}

void Exposition::Append(std::string_view text) { out_ << text; }

std::string Exposition::Take() {
  std::string s = out_.str();
  out_.str({});
  declared_.clear();
  return s;
}

}  // namespace bulwark::metrics
