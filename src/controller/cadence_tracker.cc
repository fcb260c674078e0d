#include "controller/cadence_tracker.h"

#include <algorithm>
#include <cmath>

#include "policy/cadence.h"

namespace bulwark {

void CadenceTracker::Mix(double* avg, int* n, double v) {
  if (!std::isfinite(v) || v < 0) return;
  // The mean of the first 20 samples, then an exponential average over ~20.
  const double a = *n < 20 ? 1.0 / (*n + 1) : 0.05;
  *avg += a * (v - *avg);
  ++*n;
}

void CadenceTracker::OnStep(double step_s, double stall_s) {
  Mix(&step_s_, &steps_seen_, step_s);
  Mix(&stall_s_, &stalls_seen_, stall_s);
}

void CadenceTracker::OnPersist(double write_s) { Mix(&persist_s_, &persists_seen_, write_s); }

std::optional<CadenceTracker::Update> CadenceTracker::Evaluate(double now, int failures,
                                                               double node_days, long last_step) {
  if (now < next_eval_ || steps_seen_ < kMinStepReports || step_s_ <= 0) return std::nullopt;
  next_eval_ = now + kEvalEverySeconds;
  CadenceInput in;
  in.nodes = nodes_;
  in.failures_per_node_day = EstimateFailureRate(prior_rate_, kPriorNodeDays, failures, node_days);
  in.blocking_cost_s = stall_s_ + kBackgroundCost * persist_s_;
  in.persist_s = persist_s_;
  in.step_s = step_s_;
  CadenceDecision d = ChooseCadence(in);
  if (d.interval_steps <= 0) return std::nullopt;
  if (interval_ > 0 &&
      std::fabs(static_cast<double>(d.interval_steps - interval_)) <= kHysteresis * interval_) {
    return std::nullopt;
  }
  const long lead = std::max(5L, std::lround(kLeadSeconds / step_s_));
  const long k = d.interval_steps;
  const long from = ((std::max(last_step, 0L) + lead + k - 1) / k) * k;
  interval_ = k;
  from_ = from;
  Update u;
  u.interval_steps = k;
  u.from_step = from;
  u.failures_per_node_day = in.failures_per_node_day;
  u.reason = d.reason + "; from step " + std::to_string(from);
  return u;
}

}  // namespace bulwark
