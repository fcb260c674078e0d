// CadenceTracker: the controller's glue between what a running job measures and the
// pure cadence optimiser (policy/cadence.h), for checkpoint.intervalSteps: auto.
//
// It keeps moving averages of the step time, the per-step checkpoint stall and the
// time a disk persist takes, and on Evaluate() asks ChooseCadence for the interval
// given the job's nodes and its failure rate (the spec's prior blended with the
// failures seen so far, EstimateFailureRate). The blocking cost w of one disk
// checkpoint is the stall of one save plus kBackgroundCost of its persist time: the
// persist runs in the background, but it shares the node's CPU and disk with training
// (docs/benchmarks.md measures the step-time cost of a background persist).
//
// A new interval takes effect at `from_step`, the first multiple of it at least
// kLeadSeconds of steps ahead, so every agent has the message before its ranks get
// there and all ranks persist the same steps. Changes under kHysteresis are dropped.
//
// Pure: no I/O, time comes in as arguments. Thread-compatible.
#pragma once

#include <optional>
#include <string>

namespace bulwark {

class CadenceTracker {
 public:
  static constexpr double kBackgroundCost = 0.05;
  static constexpr double kLeadSeconds = 2.0;
  static constexpr double kHysteresis = 0.25;  // relative change needed to re-announce
  static constexpr double kEvalEverySeconds = 10;
  static constexpr int kMinStepReports = 10;
  static constexpr double kPriorNodeDays = 30;  // weight of the spec's prior rate

  struct Update {
    long interval_steps = 0;
    long from_step = 0;
    double failures_per_node_day = 0;
    std::string reason;
  };

  CadenceTracker(int nodes, double prior_failures_per_node_day)
      : nodes_(nodes), prior_rate_(prior_failures_per_node_day) {}

  // Rank 0's step report: seconds since its previous step, and the checkpoint stall
  // inside them. Non-finite or negative values are ignored.
  void OnStep(double step_s, double stall_s);
  // One rank's disk persist of a step took `write_s`.
  void OnPersist(double write_s);

  // The interval to announce now, or nothing (too early, too few measurements, or no
  // material change). `failures` counts the job's incidents so far; `node_days` the
  // node-time it has run; `last_step` the newest step reported.
  std::optional<Update> Evaluate(double now, int failures, double node_days, long last_step);

  long interval_steps() const { return interval_; }
  long from_step() const { return from_; }

 private:
  static void Mix(double* avg, int* n, double v);

  int nodes_;
  double prior_rate_;
  double step_s_ = 0, stall_s_ = 0, persist_s_ = 0;
  int steps_seen_ = 0, stalls_seen_ = 0, persists_seen_ = 0;
  double next_eval_ = 0;
  long interval_ = 0;
  long from_ = 0;
};

}  // namespace bulwark
