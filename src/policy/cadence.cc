#include "policy/cadence.h"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <limits>

namespace bulwark {
namespace {

constexpr double kSecondsPerDay = 86400.0;

double Clean(double v) { return std::isfinite(v) && v > 0 ? v : 0; }

std::string Seconds(double s) {
  char buf[32];
  if (s >= 100)
    std::snprintf(buf, sizeof buf, "%.0f s", s);
  else
    std::snprintf(buf, sizeof buf, "%.3g s", s);
  return buf;
}

}  // namespace

double MetaOptimalInterval(double blocking_cost_s, int nodes, double failures_per_node_day) {
  const double w = Clean(blocking_cost_s);
  const double rate = Clean(failures_per_node_day);
  if (nodes <= 0 || rate <= 0) return std::numeric_limits<double>::infinity();
  if (w <= 0) return 0;
  return std::sqrt(2.0 * w / (nodes * rate / kSecondsPerDay));
}

double DalyOptimalInterval(double blocking_cost_s, double mtbf_s) {
  const double w = Clean(blocking_cost_s);
  if (std::isinf(mtbf_s) && mtbf_s > 0) return std::numeric_limits<double>::infinity();
  const double m = Clean(mtbf_s);
  if (w >= m / 2) return w;
  return std::sqrt(2.0 * w * m) - w;
}

CadenceDecision ChooseCadence(const CadenceInput& in) {
  const double w = Clean(in.blocking_cost_s);
  const double persist = Clean(in.persist_s);
  const double step = Clean(in.step_s);
  const double rate = Clean(in.failures_per_node_day);
  double max_s = Clean(in.max_interval_s);
  if (max_s <= 0) max_s = 6 * 3600.0;

  CadenceDecision d;
  const double opt = MetaOptimalInterval(w, in.nodes, rate);
  d.interval_s = opt;
  d.bound = "optimum";
  if (d.interval_s > max_s) {
    d.interval_s = max_s;
    d.bound = "max";
  }
  if (d.interval_s < persist) {
    d.interval_s = persist;
    d.bound = "persist";
  }
  if (d.interval_s < step) {
    d.interval_s = step;
    d.bound = "step";
  }
  if (step > 0) {
    d.interval_steps = std::max(1L, std::lround(d.interval_s / step));
    d.interval_s = d.interval_steps * step;
  }

  char buf[96];
  std::snprintf(buf, sizeof buf, "w=%s, N=%d, r_f=%.3g/node-day", Seconds(w).c_str(), in.nodes,
                rate);
  std::string why = "every " + Seconds(d.interval_s);
  if (d.interval_steps > 0) why += " (" + std::to_string(d.interval_steps) + " steps)";
  why += ": ";
  if (d.bound == "optimum") {
    why += "sqrt(2*w/(N*r_f)) with " + std::string(buf);
  } else if (d.bound == "max") {
    why += "the ceiling " + Seconds(max_s) + "; the optimum " +
           (std::isinf(opt) ? std::string("is unbounded (no failures expected)")
                            : Seconds(opt) + " is longer") +
           " (" + buf + ")";
  } else if (d.bound == "persist") {
    why += "a checkpoint takes " + Seconds(persist) + " to persist, longer than the optimum " +
           Seconds(opt) + " (" + buf + ")";
  } else {
    why += "one step (" + Seconds(step) + ") is longer than the optimum " + Seconds(opt) + " (" +
           buf + ")";
  }
  d.reason = why;
  return d;
}

double EstimateFailureRate(double prior_rate, double prior_node_days, int failures,
                           double node_days) {
  const double pr = Clean(prior_rate);
  const double pd = Clean(prior_node_days);
  const double nd = Clean(node_days);
  const double f = failures > 0 ? failures : 0;
  if (pd + nd <= 0) return pr;
  return (pr * pd + f) / (pd + nd);
}

}  // namespace bulwark
