// JobMetrics: the live training metrics of one job (docs/monitoring.md), fed by the
// controller from its agents' reports, and the Prometheus text of the controller's
// /metrics. Pure and clock-free: every event carries its wall time.
//
// Thread-compatible: the controller's thread feeds it; Snapshot() copies what other
// threads (the HTTP port, the status line, the dashboard) read.
#pragma once

#include <array>
#include <deque>
#include <map>
#include <string>
#include <vector>

#include "ledger/ettr_ledger.h"
#include "metrics/exposition.h"
#include "spec/job_spec.h"

namespace bulwark {

// One forwarded step report (docs/protocol.md §1); NaN = not reported.
struct StepSample {
  int rank = -1;
  long step = -1;
  double t = 0;  // wall time the step ended
  double loss = 0;
  double tokens = 0;
  double step_time = 0;
  double ckpt_stall = 0;
  double samples = kNone, lr = kNone, grad_norm = kNone;
  double data_wait = kNone, compute = kNone, optimizer = kNone;
  double busy = kNone;  // the rank's own work in the step (CPU or device time)
  bool inferred = false;
  static constexpr double kNone = __builtin_nan("");
};

// A point of the job's time series (one per second at most; the dashboard's charts).
struct SeriesPoint {
  double t = 0;
  long step = -1;
  double loss = __builtin_nan("");
  double tokens_per_s = 0;
  double mfu = 0;
  double ettr = 0;
  // The settled ledger by category, indexed by TimeCategory (the dashboard's timeline;
  // an array, not a map: a long job keeps kSeriesMax of these, the operator one per job).
  std::array<double, kTimeCategoryCount> seconds{};
};

// What a job's metrics are at one moment.
struct JobMetricsSnapshot {
  long step = -1;
  double loss = __builtin_nan("");
  double lr = __builtin_nan(""), grad_norm = __builtin_nan("");
  long nonfinite_losses = 0;
  double tokens_total = 0, samples_total = 0;
  double tokens_per_s = 0;
  double flops_per_token = 0;
  double peak_flops = 0;    // per device: the spec's, else the table's for the GPU names
  std::string peak_source;  // "monitoring.peakFlops", "table: NVIDIA H100 …", "" = unknown
  double mfu = 0;
  int devices = 0;  // world size
  int slot_nodes = 0, standby_nodes = 0;
  double cost_total = 0, cost_per_productive_gpu_hour = 0, cost_per_million_tokens = 0;
  std::map<std::string, long> incidents;  // by kind
  long restarts = 0;
  std::map<std::string, double> ckpt_bytes, ckpt_seconds;  // by tier
  long ckpt_last_step = -1;
  double ckpt_last_time = 0;
  double ckpt_interval_s = 0;  // expected seconds between disk commits (0 = unknown)
  std::map<std::string, double> phase_seconds;  // rank 0: data_wait, compute, optimizer, checkpoint
  double data_wait_ratio = 0;                   // the largest rank's, last 20 steps
  std::map<int, double> rank_data_wait;         // each rank's data-wait share, last 20 steps
  metrics::Histogram step_hist = StepHistogram();
  bool inferred_steps = false;  // steps come from instrumentation of an unmodified script
  // Per rank: median busy time of its last 20 steps and the straggler score (fastest
  // median ÷ its own; 1 = as fast). Ranks without busy times are absent.
  std::map<int, double> rank_busy_median;
  std::map<int, double> straggler_score;
  std::vector<SeriesPoint> series;
  // Per rank, its last steps' (step, step_time) for the dashboard's heatmap.
  std::map<int, std::vector<std::pair<long, double>>> rank_steps;

  static metrics::Histogram StepHistogram();
};

class JobMetrics {
 public:
  JobMetrics(const JobSpec& spec, double t_start);

  // A step report of any rank of the job's current attempt. Tokens and samples count
  // only for a step past that rank's high water (rework is not new training); the job's
  // step, loss, lr and phase totals are global rank 0's.
  void OnStep(const StepSample& s);
  void OnModel(double flops_per_token);
  // GPU names of a node's devices (NVML), for the peak-FLOPS table.
  void OnGpuNames(const std::vector<std::string>& names);
  void OnIncident(const std::string& kind);
  void OnRestart();
  void OnCheckpointShard(const std::string& tier, double bytes, double write_s);
  void OnCommit(long step, double t);
  void SetCadence(long interval_steps);
  void SetNodes(int slot_nodes, int standby_nodes);
  // Accrues cost and samples the time series up to `t`; call at least once a second.
  void Tick(double t, const LedgerReport& settled);

  JobMetricsSnapshot Snapshot() const;

 private:
  struct RankState {
    long high_water = -1;
    std::deque<StepSample> recent;  // last kWindow steps
  };
  static constexpr size_t kWindow = 20;
  static constexpr size_t kSeriesMax = 1000;
  static constexpr size_t kRankStepsMax = 120;

  double PeakFlops() const;

  MonitoringSpec mon_;
  JobMetricsSnapshot s_;
  std::map<int, RankState> ranks_;
  std::map<int, std::deque<std::pair<long, double>>> rank_steps_;
  std::vector<std::string> gpu_names_;
  double last_tick_ = 0;
  double last_series_t_ = -1;
  double productive_s_ = 0;
  long interval_steps_ = 0;
};

// The kinds bulwark_incidents_total always has (0 until the first).
inline constexpr const char* kIncidentKinds[] = {"crash",      "hang",
                                                 "nan",        "fatal_log",
                                                 "node_lost",  "collective_error",
                                                 "straggler",  "data_starvation",
                                                 "loss_spike", "gpu_xid",
                                                 "gpu_ecc",    "throughput_collapse"};

// The kind an incident is counted under (a collective error, an XID or ECC error have
// their own).
std::string MetricsIncidentKind(const Incident& inc);

// The controller's /metrics text: `snap` and the ledger's settled totals, every series
// labelled job=`job`.
// `extra` labels (the operator's namespace) follow `job` on every series.
std::string RenderJobMetrics(const std::string& job, const JobMetricsSnapshot& snap,
                             const LedgerReport& settled, bool running, double ettr_target,
                             const metrics::Labels& extra = {});

// Straggler scores (pure): each rank's median busy time against the fastest's,
// fastest ÷ its own, for ranks with at least `min_steps` samples; a rank within
// kStragglerNoiseS of the fastest scores 1.
inline constexpr double kStragglerNoiseS = 0.002;
std::map<int, double> StragglerScores(const std::map<int, std::vector<double>>& busy,
                                      size_t min_steps);

}  // namespace bulwark
