#include "policy/metric_faults.h"

#include <algorithm>
#include <cmath>
#include <cstdio>

#include "common/str_format.h"

namespace bulwark {

double Median(std::vector<double> v) {
  if (v.empty()) return 0;
  const size_t mid = v.size() / 2;
  std::nth_element(v.begin(), v.begin() + static_cast<long>(mid), v.end());
  double m = v[mid];
  if (v.size() % 2 == 0) {
    m = (m + *std::max_element(v.begin(), v.begin() + static_cast<long>(mid))) / 2;
  }
  return m;
}

std::optional<MetricVerdict> MetricFaultDetector::OnLoss(long step, double loss) {
  if (!std::isfinite(loss)) return std::nullopt;
  if (losses_.size() >= c_.spike_warmup) {
    const double ref = Median(std::vector<double>(losses_.begin(), losses_.end()));
    if (ref > 0 && loss >= c_.loss_spike_factor * ref) {
      MetricVerdict v;
      v.kind = "loss_spike";
      v.rank = 0;
      v.step = step;
      v.value = loss;
      v.reference = ref;
      char buf[256];
      std::snprintf(buf, sizeof buf,
                    "loss %.4g at step %ld is %.1f x the median %.4g of the last %zu losses "
                    "(threshold %.3g x)",
                    loss, step, loss / ref, ref, losses_.size(), c_.loss_spike_factor);
      v.evidence = buf;
      return v;  // not added to the reference
    }
  }
  losses_.push_back(loss);
  if (losses_.size() > c_.spike_window) losses_.pop_front();
  return std::nullopt;
}

std::vector<MetricVerdict> MetricFaultDetector::Evaluate(
    double t, const std::map<int, double>& straggler_score,
    const std::map<int, double>& data_wait_share, double tokens_per_s) {
  std::vector<MetricVerdict> out;
  if (last_eval_ >= 0 && t - last_eval_ < c_.period_s) return out;
  last_eval_ = t;
  auto judge = [&](const std::string& kind, int rank, bool bad, double value, double threshold,
                   const std::string& evidence) {
    const auto key = std::make_pair(kind, rank);
    if (!bad) {
      streak_.erase(key);
      return;
    }
    if (++streak_[key] < c_.sustain) return;
    auto it = reported_at_.find(key);
    if (it != reported_at_.end() && t - it->second < c_.quiet_s) return;
    reported_at_[key] = t;
    streak_.erase(key);
    out.push_back({kind, rank, -1, value, threshold, evidence});
  };
  for (const auto& [rank, score] : straggler_score) {
    judge("straggler", rank, score < c_.straggler_threshold, score, c_.straggler_threshold,
          "rank " + std::to_string(rank) +
              Fmt(" works %.2f x as fast as the fastest rank (median busy time per step over "
                  "its recent steps), below the threshold %.2f",
                  score, c_.straggler_threshold) +
              ", for " + std::to_string(c_.sustain) + " evaluations in a row");
  }
  for (const auto& [rank, share] : data_wait_share) {
    judge("data_starvation", rank, share > c_.data_wait_threshold, share, c_.data_wait_threshold,
          "rank " + std::to_string(rank) +
              Fmt(" waited for data %.0f%% of its step time (threshold %.0f%%)", 100 * share,
                  100 * c_.data_wait_threshold) +
              ", for " + std::to_string(c_.sustain) + " evaluations in a row");
  }
  if (tokens_per_s > 0) {
    bool collapsed = false;
    double ref = 0;
    if (throughput_.size() >= c_.collapse_window) {
      ref = Median(std::vector<double>(throughput_.begin(), throughput_.end()));
      collapsed = tokens_per_s < c_.collapse_factor * ref;
    }
    char buf[256];
    std::snprintf(buf, sizeof buf,
                  "the job trains %.4g tokens/s, %.0f%% of its recent median %.4g, with no fault "
                  "to explain it",
                  tokens_per_s, ref > 0 ? 100 * tokens_per_s / ref : 0.0, ref);
    judge("throughput_collapse", -1, collapsed, tokens_per_s, ref,
          std::string(buf) + ", for " + std::to_string(c_.sustain) + " evaluations in a row");
    if (!collapsed) {  // the reference follows normal throughput, not the collapse
      throughput_.push_back(tokens_per_s);
      if (throughput_.size() > c_.collapse_window) throughput_.pop_front();
    }
  }
  return out;
}

void MetricFaultDetector::OnRestart() {
  streak_.clear();
  last_eval_ = -1;
  throughput_.clear();  // a restart's warm-up is not a collapse
}

}  // namespace bulwark
