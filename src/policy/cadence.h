// Checkpoint cadence optimiser: how often to write a checkpoint, from what a
// checkpoint costs and how often the job's nodes fail. Pure (no I/O, no clock of its
// own): the controller and the simulator call the same functions.
//
// First-order optimum (Young 1974; Daly 2006; Meta, arXiv 2410.21680):
//   a job of N nodes each failing at r_f per node-day fails at lambda = N * r_f / 86400
//   per second; a checkpoint blocks training for w seconds; the interval that
//   minimises the expected time lost to checkpoints plus rework is
//     dt* = sqrt(2 * w / lambda)          (Meta's form; Young's sqrt(2 * w * MTBF))
//   and Daly's refinement subtracts w when w << MTBF: dt* = sqrt(2 * w * M) - w.
// The interval is then clamped: never shorter than the time a checkpoint takes to
// persist in the background (a new one cannot start before the last is durable),
// never shorter than one step, and never longer than max_interval_s.
//
// The failure rate is estimated from observation with a prior (Gamma-Poisson):
//   r_hat = (prior_rate * prior_node_days + failures) / (prior_node_days + node_days)
// so a young job uses the literature rate and an old one its own history.
#pragma once

#include <string>

namespace bulwark {

struct CadenceInput {
  int nodes = 1;                       // N
  double failures_per_node_day = 0;    // r_f (use EstimateFailureRate)
  double blocking_cost_s = 0;          // w: time training is stalled per checkpoint
  double persist_s = 0;                // time to make one checkpoint durable (background)
  double step_s = 0;                   // one training step (0 = unknown)
  double max_interval_s = 6 * 3600.0;  // ceiling (also used when the rate is 0)
};

struct CadenceDecision {
  double interval_s = 0;    // seconds between checkpoints
  long interval_steps = 0;  // interval_s / step_s rounded, >= 1 (0 when step_s is unknown)
  std::string bound;        // "optimum", "persist", "step" or "max": what set the value
  std::string reason;       // e.g. "every 412 s (17 steps): sqrt(2*w/(N*r_f)) with w=0.5 s, ..."
};

// Meta's dt* = sqrt(2 w / (N r_f)) in seconds (r_f per node-day); +inf when the
// failure rate or node count is <= 0; 0 when w <= 0.
double MetaOptimalInterval(double blocking_cost_s, int nodes, double failures_per_node_day);
// Daly's first-order interval sqrt(2 w M) - w for mean time between failures M
// (seconds); w when w >= M/2 (the expansion no longer holds); +inf for M = +inf.
double DalyOptimalInterval(double blocking_cost_s, double mtbf_s);

// The clamped interval the controller and the simulator use (see the file comment).
// Non-finite or negative inputs are treated as 0.
CadenceDecision ChooseCadence(const CadenceInput& in);

// Gamma-Poisson estimate of the per-node-day failure rate (see the file comment).
// prior_node_days <= 0 with no observation returns prior_rate.
double EstimateFailureRate(double prior_rate, double prior_node_days, int failures,
                           double node_days);

}  // namespace bulwark
