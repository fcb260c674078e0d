#include "controller/job_metrics.h"

#include <algorithm>
#include <cmath>

#include "metrics/mfu.h"
#include "policy/metric_faults.h"
#include "policy/regroup.h"

namespace bulwark {
namespace {

bool Has(double v) { return std::isfinite(v); }

}  // namespace

metrics::Histogram JobMetricsSnapshot::StepHistogram() {
  // 1 ms .. ~65 s
  return metrics::Histogram::Exponential(0.001, 2, 17);
}

std::map<int, double> StragglerScores(const std::map<int, std::vector<double>>& busy,
                                      size_t min_steps) {
  std::map<int, double> med;
  for (const auto& [rank, v] : busy) {
    if (v.size() >= min_steps && min_steps > 0) med[rank] = Median(v);
  }
  double fastest = 0;
  for (const auto& [rank, m] : med) {
    if (m > 0 && (fastest == 0 || m < fastest)) fastest = m;
  }
  std::map<int, double> out;
  if (fastest <= 0) return out;
  for (const auto& [rank, m] : med) {
    // Within kStragglerNoiseS of the fastest counts as as fast (sub-millisecond busy times of a
    // waiting trainer are all noise).
    if (m > 0) out[rank] = m - fastest < kStragglerNoiseS ? 1.0 : fastest / m;
  }
  return out;
}

std::string MetricsIncidentKind(const Incident& inc) {
  if (inc.kind == FaultKind::kCrash && inc.subtype == kCollectiveErrorSubtype) {
    return "collective_error";
  }
  if (inc.kind == FaultKind::kFatalLog && inc.subtype == "xid") return "gpu_xid";
  if (inc.kind == FaultKind::kFatalLog && inc.subtype == "ecc_dbe") return "gpu_ecc";
  if (inc.kind == FaultKind::kNan && inc.subtype == "loss_spike") return "loss_spike";
  return FaultKindName(inc.kind);
}

JobMetrics::JobMetrics(const JobSpec& spec, double t_start)
    : mon_(spec.monitoring), last_tick_(t_start) {
  s_.devices = spec.world_size();
  s_.peak_flops = PeakFlops();
}

double JobMetrics::PeakFlops() const {
  if (mon_.peak_flops > 0) return mon_.peak_flops;
  double lowest = 0;  // the slowest device of the job bounds the synchronous job
  for (const std::string& n : gpu_names_) {
    const double p = metrics::PeakFlops(n, mon_.dtype);
    if (p > 0 && (lowest == 0 || p < lowest)) lowest = p;
  }
  return lowest;
}

void JobMetrics::OnStep(const StepSample& in) {
  RankState& r = ranks_[in.rank];
  const bool is_new = in.step > r.high_water;
  if (is_new) {
    r.high_water = in.step;
    if (Has(in.tokens) && in.tokens > 0) s_.tokens_total += in.tokens;
    if (Has(in.samples)) s_.samples_total += in.samples;
  }
  r.recent.push_back(in);
  if (r.recent.size() > kWindow) r.recent.pop_front();
  auto& rs = rank_steps_[in.rank];
  rs.emplace_back(in.step, in.step_time);
  if (rs.size() > kRankStepsMax) rs.pop_front();
  if (in.inferred) s_.inferred_steps = true;
  if (in.rank != 0) return;
  s_.step = in.step;
  if (Has(in.loss)) {
    s_.loss = in.loss;
  } else {
    ++s_.nonfinite_losses;
  }
  if (Has(in.lr)) s_.lr = in.lr;
  if (Has(in.grad_norm)) s_.grad_norm = in.grad_norm;
  s_.step_hist.Observe(in.step_time);
  for (const auto& [name, v] : {std::pair<const char*, double>{"data_wait", in.data_wait},
                                {"compute", in.compute},
                                {"optimizer", in.optimizer},
                                {"checkpoint", in.ckpt_stall}}) {
    if (Has(v) && v >= 0) s_.phase_seconds[name] += v;
  }
}

void JobMetrics::OnModel(double flops_per_token) {
  if (Has(flops_per_token) && flops_per_token > 0) s_.flops_per_token = flops_per_token;
}

void JobMetrics::OnGpuNames(const std::vector<std::string>& names) {
  for (const std::string& n : names) {
    if (std::find(gpu_names_.begin(), gpu_names_.end(), n) == gpu_names_.end() &&
        gpu_names_.size() < 64) {
      gpu_names_.push_back(n);
    }
  }
  s_.peak_flops = PeakFlops();
}

void JobMetrics::OnIncident(const std::string& kind) { ++s_.incidents[kind]; }
void JobMetrics::OnRestart() { ++s_.restarts; }

void JobMetrics::OnCheckpointShard(const std::string& tier, double bytes, double write_s) {
  if (Has(bytes) && bytes > 0) s_.ckpt_bytes[tier] += bytes;
  if (Has(write_s) && write_s > 0) s_.ckpt_seconds[tier] += write_s;
}

void JobMetrics::OnCommit(long step, double t) {
  if (step > s_.ckpt_last_step) {
    s_.ckpt_last_step = step;
    s_.ckpt_last_time = t;
  }
}

void JobMetrics::SetCadence(long interval_steps) { interval_steps_ = interval_steps; }

void JobMetrics::SetNodes(int slot_nodes, int standby_nodes) {
  s_.slot_nodes = slot_nodes;
  s_.standby_nodes = standby_nodes;
}

void JobMetrics::Tick(double t, const LedgerReport& settled) {
  if (!(t > last_tick_)) return;
  const double dt = t - last_tick_;
  last_tick_ = t;
  // Devices held: every node's ranks, standbys included (they are paid for too).
  const int nodes = s_.slot_nodes + s_.standby_nodes;
  const int per_node = s_.slot_nodes > 0 ? s_.devices / std::max(1, s_.slot_nodes) : 0;
  s_.cost_total += mon_.price_per_gpu_hour * nodes * per_node * dt / 3600;
  productive_s_ = settled.seconds.count(TimeCategory::kProductive)
                      ? settled.seconds.at(TimeCategory::kProductive)
                      : 0;
  const double gpu_hours = productive_s_ * s_.devices / 3600;
  s_.cost_per_productive_gpu_hour = gpu_hours > 0 ? s_.cost_total / gpu_hours : 0;
  s_.cost_per_million_tokens = s_.tokens_total > 0 ? s_.cost_total / (s_.tokens_total / 1e6) : 0;

  // Throughput: Σ over ranks of tokens ÷ step time over each rank's recent steps.
  double tps = 0;
  double worst_wait = 0;
  std::map<int, std::vector<double>> busy;
  double step_time_sum = 0;
  size_t step_time_n = 0;
  for (const auto& [rank, r] : ranks_) {
    double tok = 0, time = 0, wait = 0;
    for (const StepSample& x : r.recent) {
      if (Has(x.step_time) && x.step_time > 0) {
        time += x.step_time;
        if (Has(x.tokens)) tok += x.tokens;
        if (Has(x.data_wait)) wait += x.data_wait;
      }
      if (Has(x.busy) && x.busy >= 0) busy[rank].push_back(x.busy);
    }
    if (time > 0) {
      tps += tok / time;
      s_.rank_data_wait[rank] = std::min(1.0, wait / time);
      if (wait / time > worst_wait) {
        worst_wait = wait / time;
      }
      if (rank == 0) {
        step_time_sum += time;
        step_time_n += r.recent.size();
      }
    }
  }
  s_.tokens_per_s = tps;
  s_.data_wait_ratio = std::min(1.0, worst_wait);
  s_.mfu = metrics::Mfu(s_.flops_per_token, tps, s_.devices, s_.peak_flops);
  s_.straggler_score = StragglerScores(busy, kWindow / 2);
  s_.rank_busy_median.clear();
  for (const auto& [rank, v] : busy) s_.rank_busy_median[rank] = Median(v);
  s_.ckpt_interval_s = interval_steps_ > 0 && step_time_n > 0
                           ? interval_steps_ * step_time_sum / static_cast<double>(step_time_n)
                           : 0;
  s_.rank_steps.clear();
  for (const auto& [rank, d] : rank_steps_) s_.rank_steps[rank].assign(d.begin(), d.end());

  if (last_series_t_ < 0 || t - last_series_t_ >= 1) {
    last_series_t_ = t;
    SeriesPoint p;
    p.t = t;
    p.step = s_.step;
    p.loss = s_.loss;
    p.tokens_per_s = s_.tokens_per_s;
    p.mfu = s_.mfu;
    p.ettr = settled.ettr();
    for (const auto& [c, v] : settled.seconds) {
      const size_t i = static_cast<size_t>(c);
      if (i < p.seconds.size()) p.seconds[i] = v;
    }
    s_.series.push_back(p);
    if (s_.series.size() > kSeriesMax) {  // keep the whole run at half the resolution
      std::vector<SeriesPoint> half;
      for (size_t i = 0; i < s_.series.size(); i += 2) half.push_back(s_.series[i]);
      s_.series = std::move(half);
    }
  }
}

JobMetricsSnapshot JobMetrics::Snapshot() const { return s_; }

std::string RenderJobMetrics(const std::string& job, const JobMetricsSnapshot& m,
                             const LedgerReport& settled, bool running, double ettr_target,
                             const metrics::Labels& extra) {
  metrics::Exposition e;
  metrics::Labels j = {{"job", job}};
  j.insert(j.end(), extra.begin(), extra.end());
  auto with = [&](const char* k, const std::string& v) {
    metrics::Labels l = j;
    l.emplace_back(k, v);
    return l;
  };
  e.Gauge("bulwark_job_running", "1 while the job runs", j, running ? 1 : 0);
  double productive = 0;
  e.Family("bulwark_lost_seconds_total", "counter",
           "wall-clock time lost, by cause (docs/ettr.md)");
  for (const auto& [c, v] : settled.seconds) {
    if (c == TimeCategory::kProductive) {
      productive = v;
    } else {
      e.Sample("bulwark_lost_seconds_total", with("cause", TimeCategoryName(c)), v);
    }
  }
  e.Counter("bulwark_productive_seconds_total", "productive training time", j, productive);
  e.Counter("bulwark_wall_seconds_total", "wall-clock time accounted (productive + lost)", j,
            settled.wall_s);
  e.Gauge("bulwark_ettr_ratio", "productive time / wall-clock time so far", j, settled.ettr());
  e.Gauge("bulwark_ettr_target_ratio", "the spec's monitoring.ettrTarget", j, ettr_target);
  e.Gauge("bulwark_step", "global rank 0's latest step", j, static_cast<double>(m.step));
  e.Counter("bulwark_steps_total", "distinct steps completed", j,
            static_cast<double>(settled.steps_completed));
  e.Counter("bulwark_steps_reworked_total", "steps computed again after a fault", j,
            static_cast<double>(settled.steps_reworked));
  e.Family("bulwark_step_duration_seconds", "histogram", "global rank 0's step time");
  e.HistogramSamples("bulwark_step_duration_seconds", j, m.step_hist);
  e.Family("bulwark_step_phase_seconds_total", "counter", "rank 0's time by step phase");
  for (const char* p : {"data_wait", "compute", "optimizer", "checkpoint"}) {
    auto it = m.phase_seconds.find(p);
    e.Sample("bulwark_step_phase_seconds_total", with("phase", p),
             it == m.phase_seconds.end() ? 0 : it->second);
  }
  e.Gauge("bulwark_data_wait_ratio", "largest share of step time a rank waited for data", j,
          m.data_wait_ratio);
  if (std::isfinite(m.loss)) e.Gauge("bulwark_loss", "global rank 0's latest loss", j, m.loss);
  e.Counter("bulwark_loss_nonfinite_total", "non-finite losses reported", j,
            static_cast<double>(m.nonfinite_losses));
  if (std::isfinite(m.lr)) e.Gauge("bulwark_learning_rate", "rank 0's learning rate", j, m.lr);
  if (std::isfinite(m.grad_norm)) {
    e.Gauge("bulwark_grad_norm", "rank 0's gradient norm", j, m.grad_norm);
  }
  e.Counter("bulwark_tokens_total", "tokens of new steps, every rank", j, m.tokens_total);
  e.Counter("bulwark_samples_total", "samples of new steps, every rank", j, m.samples_total);
  e.Gauge("bulwark_tokens_per_second", "training throughput", j, m.tokens_per_s);
  e.Gauge("bulwark_model_flops_per_token", "declared training FLOPs per token", j,
          m.flops_per_token);
  e.Gauge("bulwark_peak_flops_per_device", "peak FLOPS of one device", j, m.peak_flops);
  e.Gauge("bulwark_mfu_ratio", "model FLOPs utilisation", j, m.mfu);
  e.Gauge("bulwark_devices", "devices training (world size)", j, m.devices);
  e.Family("bulwark_nodes", "gauge", "nodes held, by role");
  e.Sample("bulwark_nodes", with("role", "slot"), m.slot_nodes);
  e.Sample("bulwark_nodes", with("role", "standby"), m.standby_nodes);
  e.Counter("bulwark_cost_dollars_total", "cost of the devices held", j, m.cost_total);
  e.Gauge("bulwark_cost_per_productive_gpu_hour_dollars", "cost per productive device-hour", j,
          m.cost_per_productive_gpu_hour);
  e.Gauge("bulwark_cost_per_million_tokens_dollars", "cost per million tokens trained", j,
          m.cost_per_million_tokens);
  e.Family("bulwark_incidents_total", "counter", "faults handled, by kind");
  std::map<std::string, long> incidents = m.incidents;  // every kind, from 0
  for (const char* k : kIncidentKinds) incidents.emplace(k, 0);
  for (const auto& [kind, n] : incidents) {
    e.Sample("bulwark_incidents_total", with("kind", kind), static_cast<double>(n));
  }
  e.Counter("bulwark_restarts_total", "recoveries", j, static_cast<double>(m.restarts));
  std::map<std::string, double> bytes = m.ckpt_bytes, seconds = m.ckpt_seconds;
  for (const char* tier : {"disk", "shared", "object"}) {  // every tier, from 0
    bytes.emplace(tier, 0);
    seconds.emplace(tier, 0);
  }
  e.Family("bulwark_checkpoint_bytes_total", "counter", "shard bytes made durable, by tier");
  for (const auto& [tier, v] : bytes) {
    e.Sample("bulwark_checkpoint_bytes_total", with("tier", tier), v);
  }
  e.Family("bulwark_checkpoint_write_seconds_total", "counter",
           "time spent writing shards, by tier");
  for (const auto& [tier, v] : seconds) {
    e.Sample("bulwark_checkpoint_write_seconds_total", with("tier", tier), v);
  }
  if (m.ckpt_last_step >= 0) {
    e.Gauge("bulwark_checkpoint_last_step", "newest committed step", j,
            static_cast<double>(m.ckpt_last_step));
    e.Gauge("bulwark_checkpoint_last_commit_timestamp_seconds", "Unix time of that commit", j,
            m.ckpt_last_time);
  }
  if (m.ckpt_interval_s > 0) {
    e.Gauge("bulwark_checkpoint_interval_seconds", "expected time between disk commits", j,
            m.ckpt_interval_s);
  }
  // The three slowest ranks only (bounded labels).
  std::vector<std::pair<double, int>> slow;
  for (const auto& [rank, score] : m.straggler_score) slow.emplace_back(score, rank);
  std::sort(slow.begin(), slow.end());
  if (!slow.empty()) {
    e.Family("bulwark_straggler_score", "gauge",
             "the three slowest ranks: fastest rank's median busy time / this rank's");
  }
  for (size_t i = 0; i < slow.size() && i < 3; ++i) {
    e.Sample("bulwark_straggler_score", with("rank", std::to_string(slow[i].second)),
             slow[i].first);
  }
  return e.Take();
}

}  // namespace bulwark
