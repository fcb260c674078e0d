// RunSimulation: set-up (scheduler, jobs, failure processes), the event loop, the
// time series and the final accounting.
#include <algorithm>
#include <cmath>
#include <cstdio>

#include "sim/engine.h"

namespace bulwark::sim {

int Engine::IndexOf(const std::string& id) const {
  auto it = index_.find(id);
  return it == index_.end() ? -1 : it->second;
}

void Engine::Sample(double t) {
  sim::Sample s;
  s.t_s = t;
  double productive = productive_done_gpu_s_;
  for (const SimJob& j : jobs_) {
    if (j.state == JobState::kRunning || j.state == JobState::kDown) {
      ++s.running;
      productive += ProgressAt(j, t) * j.gpus;
    } else if (j.state == JobState::kPending) {
      ++s.pending;
    }
  }
  s.busy_gpus = static_cast<int>(alloc_gpus_ - standby_gpus_);
  s.standby_gpus = static_cast<int>(standby_gpus_);
  s.failed_nodes = failed_nodes_;
  s.productive_gpu_h = productive / 3600.0;
  s.allocated_gpu_h = alloc_gpu_s_ / 3600.0;
  r_.samples.push_back(s);
}

Result<SimResult> Engine::Run() {
  // Scheduler over the cluster; same class as the controller's.
  sched::SchedulerConfig sc = c_.scheduler;
  sc.seed = c_.seed;
  auto s = sched::Scheduler::Create(sc, c_.nodes, c_.queues);
  if (!s.ok()) return s.status().Annotate(c_.source + ": scheduler rejected the config");
  sched_ = std::move(*s);
  nodes_.assign(c_.nodes.size(), NodeState{});

  // Jobs: the trace, then the generator's draws.
  std::vector<Job> all = c_.jobs;
  if (c_.generator) {
    const Generator& g = *c_.generator;
    std::vector<double> size_w, queue_w, prio_w;
    for (const auto& [n, w] : g.sizes) size_w.push_back(w);
    for (const auto& [q, w] : g.queues) queue_w.push_back(w);
    for (const auto& [p, w] : g.priorities) prio_w.push_back(w);
    double t = g.start_s;
    for (int i = 0; i < g.count; ++i) {
      t += work_rng_.Exponential(3600.0 / g.arrivals_per_hour);
      if (t >= c_.duration_s) break;
      Job j;
      char id[32];
      std::snprintf(id, sizeof(id), "gen-%05d", i);
      j.id = id;
      j.submit_s = t;
      j.nodes = g.sizes[work_rng_.Pick(size_w)].first;
      j.queue = g.queues[work_rng_.Pick(queue_w)].first;
      j.priority = g.priorities[work_rng_.Pick(prio_w)].first;
      j.tier = work_rng_.Uniform() < g.production_share ? sched::Tier::kProduction
                                                        : sched::Tier::kResearch;
      const double h = std::exp(std::log(g.work_median_h) + g.work_sigma * work_rng_.Normal());
      j.work_s = std::min(h, g.work_max_h) * 3600.0;
      j.gpu_type = g.gpu_type;
      j.step_s = g.step_s;
      j.strategy = g.strategy;
      all.push_back(std::move(j));
    }
  }
  double hw_rate = c_.failures.per_node_day[static_cast<int>(FaultType::kHardware)] +
                   c_.failures.per_node_day[static_cast<int>(FaultType::kSpotReclaim)];
  jobs_.resize(all.size());
  for (size_t i = 0; i < all.size(); ++i) {
    SimJob& j = jobs_[i];
    j.cfg = all[i];
    j.st = &c_.strategies[j.cfg.strategy];
    int per_node = 0;
    for (const sched::NodeSpec& n : c_.nodes) {
      if (n.gpu_type == j.cfg.gpu_type) {
        per_node = n.gpus;
        break;
      }
    }
    j.gpus = per_node * j.cfg.nodes;
    j.standby_want = j.st->standby_auto
                         ? sched::StandbyNodes(j.cfg.nodes, hw_rate, j.st->replacement_lead_s,
                                               j.st->standby_quantile)
                         : j.st->standby;
    if (!index_.emplace(j.cfg.id, static_cast<int>(i)).second) {
      return InvalidArgument(c_.source + ": duplicate job id " + j.cfg.id);
    }
    Push(j.cfg.submit_s, EvType::kArrival, static_cast<int>(i));
  }

  // Failure processes: per-node renewal for crash/hang/NaN/hardware, Poisson for spot.
  double total = 0;
  for (int t = 0; t < kFaultTypes; ++t) {
    if (t != static_cast<int>(FaultType::kSpotReclaim)) total += c_.failures.per_node_day[t];
  }
  for (int t = 0; t < kFaultTypes; ++t) {
    share_[t] = total > 0 && t != static_cast<int>(FaultType::kSpotReclaim)
                    ? c_.failures.per_node_day[t] / total
                    : 0;
  }
  node_rate_ = total / 86400.0;
  spot_rate_ = c_.failures.per_node_day[static_cast<int>(FaultType::kSpotReclaim)] / 86400.0;
  if (node_rate_ > 0) {
    weibull_scale_ = WeibullScaleForMean(c_.failures.weibull_shape, 1.0 / node_rate_);
  }
  for (size_t n = 0; n < nodes_.size(); ++n) {
    DrawNodeFailure(static_cast<int>(n), 0);
    DrawSpotFailure(static_cast<int>(n), 0);
  }
  for (const InjectedFault& f : c_.faults) {
    Push(f.at_s, EvType::kInjected, f.node, static_cast<int>(f.type));
  }
  Push(c_.duration_s, EvType::kEnd, 0);
  std::vector<double> type_w(share_.begin(), share_.end());

  // The loop: every event of one timestamp, then at most one scheduling cycle.
  next_sample_ = 0;
  while (!q_.empty()) {
    const double t = q_.top().t;
    if (c_.sample_s > 0) {
      while (next_sample_ <= t && next_sample_ <= c_.duration_s) {
        Advance(next_sample_);
        Sample(next_sample_);
        next_sample_ += c_.sample_s;
      }
    }
    Advance(t);
    bool end = false;
    while (!q_.empty() && q_.top().t == t) {
      const Event e = q_.top();
      q_.pop();
      ++r_.events;
      Status st;
      switch (e.type) {
        case EvType::kArrival:
          st = OnArrival(e.a, t);
          break;
        case EvType::kNodeFail:
          if (e.epoch == nodes_[e.a].epoch) {
            st = OnFault(e.a, static_cast<FaultType>(fail_rng_.Pick(type_w)), t);
          }
          break;
        case EvType::kSpotFail:
          if (e.epoch == nodes_[e.a].epoch) st = OnFault(e.a, FaultType::kSpotReclaim, t);
          break;
        case EvType::kInjected:
          st = OnFault(e.a, static_cast<FaultType>(e.b), t);
          break;
        case EvType::kRepair:
          st = OnRepair(e.a, t);
          break;
        case EvType::kDetect:
          if (e.epoch == jobs_[e.a].epoch && jobs_[e.a].state == JobState::kDown) {
            st = OnDetect(e.a, t);
          }
          break;
        case EvType::kFinish:
          if (e.epoch == jobs_[e.a].epoch && jobs_[e.a].state == JobState::kRunning) {
            st = OnFinish(e.a, t);
          }
          break;
        case EvType::kWake:
          dirty_ = true;
          break;
        case EvType::kEnd:
          end = true;
          break;
      }
      if (!st.ok()) return st;
    }
    if (end) break;
    if (dirty_) BW_RETURN_IF_ERROR(RunSchedule(t));
  }
  Advance(c_.duration_s);
  BW_RETURN_IF_ERROR(Finalize(c_.duration_s));
  return std::move(r_);
}

Status Engine::Finalize(double t_end) {
  SimResult& r = r_;
  r.source = c_.source;
  r.seed = c_.seed;
  r.duration_s = t_end;
  r.nodes = static_cast<int>(c_.nodes.size());
  for (const sched::NodeSpec& n : c_.nodes) {
    r.gpus += n.gpus;
    PoolCost& pc = r.cost[static_cast<int>(n.pool)];
    pc.gpus += n.gpus;
    pc.provisioned_gpu_h += n.gpus * t_end / 3600.0;
    pc.provisioned_cost += n.gpus * t_end / 3600.0 * n.price_per_gpu_hour;
  }
  // Allocated cost per pool at the pool's mean price (prices are per node; the
  // integral is per pool).
  for (int p = 0; p < 3; ++p) {
    PoolCost& pc = r.cost[p];
    pc.allocated_gpu_h = alloc_pool_gpu_s_[p] / 3600.0;
    const double price = pc.provisioned_gpu_h > 0 ? pc.provisioned_cost / pc.provisioned_gpu_h : 0;
    pc.allocated_cost = pc.allocated_gpu_h * price;
  }
  std::vector<double> waits;
  for (SimJob& j : jobs_) {
    if (j.state == JobState::kNotArrived) continue;
    if (j.state == JobState::kRunning) {
      ClosePhase(j, t_end);
    } else if (j.state == JobState::kDown) {
      j.lost.detection += t_end - j.fault_t;
      const double kept = Retained(j, !j.dead.empty(), true);
      j.lost.rework += std::max(0.0, j.p_fault - kept);
      j.w0 = kept;
    } else if (j.state == JobState::kPending && j.pending_since >= 0) {
      j.lost.requeue_wait += t_end - j.pending_since;
    }
    JobResult o;
    o.id = j.cfg.id;
    o.queue = j.cfg.queue;
    o.strategy = j.st->name;
    o.nodes = j.cfg.nodes;
    o.gpus = j.gpus;
    o.standby = j.standby_want;
    o.state = j.state == JobState::kDone      ? "finished"
              : j.state == JobState::kFailed  ? "failed"
              : j.state == JobState::kPending ? "pending"
                                              : "running";
    o.submit_s = j.cfg.submit_s;
    o.first_start_s = j.first_start;
    o.end_s = j.end >= 0 ? j.end : t_end;
    o.queue_wait_s = (j.started ? j.first_start : t_end) - j.cfg.submit_s;
    o.wall_s = j.started ? o.end_s - j.first_start : 0;
    o.productive_s = j.started ? j.w0 : 0;
    o.ettr = o.wall_s > 0 ? o.productive_s / o.wall_s : 0;
    o.interval_s = j.interval;
    o.lost = j.lost;
    o.faults = j.faults;
    o.restarts = j.restarts;
    o.requeues = j.requeues;
    o.preemptions = j.preemptions;
    o.replacements = j.replacements;
    o.restocks = j.restocks;
    o.reason = j.reason;
    if (j.started) waits.push_back(o.queue_wait_s);
    r.productive_gpu_h += o.productive_s * o.gpus / 3600.0;
    auto add = [&](double LostTime::*m) { r.lost_gpu_h.*m += j.lost.*m * o.gpus / 3600.0; };
    for (auto m :
         {&LostTime::detection, &LostTime::backoff, &LostTime::replacement, &LostTime::restart,
          &LostTime::rework, &LostTime::ckpt_stall, &LostTime::requeue_wait}) {
      add(m);
    }
    r.step_equivalent += static_cast<int64_t>(j.work_total / j.cfg.step_s);
    r.jobs_finished += j.state == JobState::kDone;
    r.jobs_failed += j.state == JobState::kFailed;
    r.jobs_pending += j.state == JobState::kPending;
    r.jobs_running += j.state == JobState::kRunning || j.state == JobState::kDown;
    r.jobs.push_back(std::move(o));
  }
  r.total_gpu_h = r.gpus * t_end / 3600.0;
  r.allocated_gpu_h = alloc_gpu_s_ / 3600.0;
  r.standby_gpu_h = standby_gpu_s_ / 3600.0;
  r.cluster_ettr = r.allocated_gpu_h > 0 ? r.productive_gpu_h / r.allocated_gpu_h : 0;
  r.goodput = r.total_gpu_h > 0 ? r.productive_gpu_h / r.total_gpu_h : 0;
  r.utilization = r.total_gpu_h > 0 ? r.allocated_gpu_h / r.total_gpu_h : 0;
  if (!waits.empty()) {
    std::sort(waits.begin(), waits.end());
    double sum = 0;
    for (double w : waits) sum += w;
    r.queue_wait_mean_s = sum / static_cast<double>(waits.size());
    auto pct = [&](double q) {  // nearest rank
      size_t k = static_cast<size_t>(std::ceil(q * static_cast<double>(waits.size())));
      return waits[std::clamp<size_t>(k, 1, waits.size()) - 1];
    };
    r.queue_wait_p50_s = pct(0.50);
    r.queue_wait_p99_s = pct(0.99);
  }
  return Status::Ok();
}

Result<SimResult> RunSimulation(const SimConfig& config) {
  if (config.strategies.empty()) return InvalidArgument("sim: no strategy");
  Engine e(config);
  return e.Run();
}

}  // namespace bulwark::sim
