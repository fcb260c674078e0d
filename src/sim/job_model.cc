// The job model: closed-form progress of a computing job, the accounting of every
// second of its wall time, and the per-attempt choices (checkpoint interval).
#include <algorithm>
#include <cmath>

#include "policy/cadence.h"
#include "sim/engine.h"

namespace bulwark::sim {
namespace {

// Progress and time split of the compute phase [t0, t] (t >= t0).
struct Phase {
  long k = 0;          // checkpoints completed
  double compute = 0;  // compute wall seconds (incl. snapshot stalls)
  double ckpt = 0;     // wall seconds inside blocking checkpoint writes
};

Phase Split(const SimJob& j, double t) {
  Phase p;
  const double e = std::max(0.0, t - j.t0);
  const double w = j.st->ckpt_write_s;
  const double dt = j.interval;
  const double cycle = dt + w;
  p.k = static_cast<long>(std::floor(e / cycle));
  double r = e - static_cast<double>(p.k) * cycle;
  if (r < 0) r = 0;
  p.compute = static_cast<double>(p.k) * dt + std::min(r, dt);
  p.ckpt = static_cast<double>(p.k) * w + std::max(0.0, r - dt);
  // Never past the end of the work (the finish event is exact up to rounding).
  const double cap = (j.cfg.work_s - j.w0) / j.rho;
  if (p.compute > cap) p.compute = cap;
  return p;
}

}  // namespace

double Engine::ProgressAt(const SimJob& j, double t) const {
  if (j.state != JobState::kRunning || t <= j.t0) {
    return j.state == JobState::kDown ? j.p_fault : j.w0;
  }
  return std::min(j.cfg.work_s, j.w0 + j.rho * Split(j, t).compute);
}

double Engine::ClosePhase(SimJob& j, double t) {
  // Recovery segments up to t (a fault may cut them short).
  for (const Segment& s : j.plan) {
    const double end = std::min(s.b, t);
    if (end > s.a) j.lost.*(s.bucket) += end - s.a;
  }
  j.plan.clear();
  if (t <= j.t0) return j.w0;
  const Phase p = Split(j, t);
  const double progress = std::min(j.cfg.work_s, j.w0 + j.rho * p.compute);
  // Snapshot stalls: compute wall that did not advance progress.
  j.lost.ckpt_stall += p.ckpt + (p.compute - (progress - j.w0));
  if (p.k >= 1) {
    j.work_ckpt = std::max(j.work_ckpt, j.w0 + j.rho * static_cast<double>(p.k) * j.interval);
  }
  j.work_total += progress - j.w0;
  j.max_progress = std::max(j.max_progress, progress);
  j.node_seconds += (t - j.t0) * j.cfg.nodes;
  j.t0 = t;
  j.w0 = progress;
  return progress;
}

double Engine::FinishTime(const SimJob& j) const {
  const double remaining = std::max(0.0, j.cfg.work_s - j.w0);
  const double compute = remaining / j.rho;
  long n = 0;  // checkpoints strictly before the end
  if (compute > 0) {
    n = static_cast<long>(std::ceil(compute / j.interval - 1e-12)) - 1;
    n = std::max(0L, n);
  }
  return j.t0 + compute + static_cast<double>(n) * j.st->ckpt_write_s;
}

double Engine::Retained(const SimJob& j, bool hardware, bool memory_survives) const {
  // Persisted checkpoint, or (in-memory snapshots that survived) the last whole step.
  if (!j.st->in_memory || !memory_survives) return j.work_ckpt;
  if (hardware && !j.st->peer_replication) return j.work_ckpt;
  // Steps complete on the absolute grid k * step (progress is in full-speed seconds).
  const double step = j.cfg.step_s;
  const double memory = std::floor(j.p_fault / step + 1e-9) * step;
  return std::max(j.work_ckpt, std::min(memory, j.p_fault));
}

double Engine::ChooseInterval(const SimJob& j) const {
  const Strategy& s = *j.st;
  if (!s.interval_auto) return s.interval_s;
  double prior = 0;
  for (int t = 0; t < kFaultTypes; ++t) {
    if (t != static_cast<int>(FaultType::kSpotReclaim)) prior += c_.failures.per_node_day[t];
  }
  CadenceInput in;
  in.nodes = j.cfg.nodes;
  in.failures_per_node_day =
      EstimateFailureRate(prior, s.prior_node_days, j.job_faults, j.node_seconds / 86400.0);
  in.blocking_cost_s = s.ckpt_write_s;
  in.persist_s = s.persist_s;
  in.step_s = j.cfg.step_s;
  const double dt = ChooseCadence(in).interval_s;
  return std::isfinite(dt) && dt > 0 ? dt : in.max_interval_s;
}

void Engine::StartAttempt(SimJob& j, double t, double restart_s, double load_s, double backoff_s,
                          double lead_s) {
  j.plan.clear();
  double at = t;
  auto seg = [&](double len, double LostTime::*bucket) {
    if (len <= 0) return;
    j.plan.push_back({at, at + len, bucket});
    at += len;
  };
  seg(backoff_s, &LostTime::backoff);
  seg(lead_s, &LostTime::replacement);
  seg(restart_s + load_s, &LostTime::restart);
  j.t0 = at;
  j.interval = ChooseInterval(j);
  const Strategy& s = *j.st;
  j.rho = s.in_memory && s.snapshot_stall_s > 0 ? j.cfg.step_s / (j.cfg.step_s + s.snapshot_stall_s)
                                                : 1.0;
  j.state = JobState::kRunning;
  ++j.epoch;
  Push(FinishTime(j), EvType::kFinish, static_cast<int>(&j - jobs_.data()), 0, j.epoch);
}

}  // namespace bulwark::sim
