// Faults found from the metrics (docs/monitoring.md, "Faults found from the metrics"):
// stragglers, data-loader starvation and loss spikes. Pure and clock-free: the caller
// passes the time and the measurements; the controller feeds it and acts on verdicts.
// Thread-compatible.
#pragma once

#include <deque>
#include <map>
#include <optional>
#include <string>
#include <vector>

namespace bulwark {

// The median of `v` (the mean of the middle two for an even count; 0 when empty).
double Median(std::vector<double> v);

struct MetricFaultConfig {
  double straggler_threshold = 0.75;  // a rank slower than this × the fastest's speed
  double data_wait_threshold = 0.3;   // data wait above this share of step time
  double loss_spike_factor = 10;      // loss ≥ factor × the running reference
  int sustain = 3;                    // consecutive evaluations a condition must hold
  double period_s = 5;                // evaluations closer together are skipped
  size_t spike_window = 32;           // the reference: median of this many recent losses
  size_t spike_warmup = 10;           // losses seen before spikes are judged
  double quiet_s = 300;               // the same rank's same verdict is not repeated sooner
  double collapse_factor = 0.5;       // throughput below this × its reference
  size_t collapse_window = 12;        // the reference: median of this many evaluations
};

struct MetricVerdict {
  std::string kind;  // "straggler", "data_starvation", "loss_spike", "throughput_collapse"
  int rank = -1;
  long step = -1;        // loss_spike: the step whose loss spiked
  double value = 0;      // the score, the share of step time, or the loss
  double reference = 0;  // the threshold, or the running reference loss
  std::string evidence;  // one sentence with the numbers
};

class MetricFaultDetector {
 public:
  explicit MetricFaultDetector(MetricFaultConfig c) : c_(c) {}

  // Global rank 0's finite loss of `step`. A spike (loss ≥ factor × the median of the
  // last spike_window losses, after spike_warmup) is returned once and not added to the
  // reference. Non-finite losses are ignored (NaN detection is the agent's).
  std::optional<MetricVerdict> OnLoss(long step, double loss);

  // Every rank's straggler score (fastest median busy time ÷ its own) and data-wait
  // share over its recent steps. A rank below straggler_threshold, or above
  // data_wait_threshold, for `sustain` consecutive evaluations (at least period_s
  // apart) is a verdict; the same rank's same kind is then quiet for quiet_s.
  // `tokens_per_s`: the job's throughput now (≤ 0 = unknown: not judged). Below
  // collapse_factor × the median of the last collapse_window evaluations' (after that
  // many) for `sustain` evaluations is a throughput collapse (rank -1).
  std::vector<MetricVerdict> Evaluate(double t, const std::map<int, double>& straggler_score,
                                      const std::map<int, double>& data_wait_share,
                                      double tokens_per_s = 0);

  // A new attempt: the counts start over (restarted ranks have no history), the loss
  // reference is kept (the model is the same).
  void OnRestart();

 private:
  MetricFaultConfig c_;
  std::deque<double> losses_;
  std::deque<double> throughput_;
  double last_eval_ = -1;
  std::map<std::pair<std::string, int>, int> streak_;
  std::map<std::pair<std::string, int>, double> reported_at_;
};

}  // namespace bulwark
