// The event loop and its handlers: arrivals, node faults, detection + recovery
// decisions, finishes, repairs, and the batched scheduling cycle.
#include "sim/engine.h"

#include <algorithm>
#include <cmath>

#include "policy/recovery_policy.h"

namespace bulwark::sim {
namespace {

FaultKind KindOf(FaultType t) {
  switch (t) {
    case FaultType::kCrash:
      return FaultKind::kCrash;
    case FaultType::kHang:
      return FaultKind::kHang;
    case FaultType::kNan:
      return FaultKind::kNan;
    case FaultType::kHardware:
    case FaultType::kSpotReclaim:
      return FaultKind::kNodeLost;
  }
  return FaultKind::kCrash;
}

bool IsNodeLoss(FaultType t) { return t == FaultType::kHardware || t == FaultType::kSpotReclaim; }

uint64_t Mix(uint64_t x) {
  x += 0x9e3779b97f4a7c15ULL;
  x = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9ULL;
  x = (x ^ (x >> 27)) * 0x94d049bb133111ebULL;
  return x ^ (x >> 31);
}

}  // namespace

Engine::Engine(const SimConfig& c)
    : c_(c), fail_rng_(Mix(c.seed ^ 0x5eedfa11)), work_rng_(Mix(c.seed ^ 0x3017c0ad)) {}

void Engine::Push(double t, EvType type, int a, int b, uint32_t epoch) {
  q_.push(Event{t, seq_++, type, a, b, epoch});
}

void Engine::DrawNodeFailure(int node, double now) {
  if (node_rate_ <= 0) return;
  const double mean = 1.0 / node_rate_;
  const double dt = c_.failures.weibull
                        ? fail_rng_.Weibull(c_.failures.weibull_shape, weibull_scale_)
                        : fail_rng_.Exponential(mean);
  if (now + dt < c_.duration_s) Push(now + dt, EvType::kNodeFail, node, 0, nodes_[node].epoch);
}

void Engine::DrawSpotFailure(int node, double now) {
  if (spot_rate_ <= 0 || c_.nodes[node].pool != sched::Pool::kSpot) return;
  const double dt = fail_rng_.Exponential(1.0 / spot_rate_);
  if (now + dt < c_.duration_s) Push(now + dt, EvType::kSpotFail, node, 0, nodes_[node].epoch);
}

void Engine::Advance(double t) {
  if (t <= last_t_) return;
  const double dt = t - last_t_;
  alloc_gpu_s_ += alloc_gpus_ * dt;
  standby_gpu_s_ += standby_gpus_ * dt;
  for (int p = 0; p < 3; ++p) alloc_pool_gpu_s_[p] += alloc_pool_gpus_[p] * dt;
  last_t_ = t;
}

void Engine::Release(int j) {
  SimJob& job = jobs_[j];
  auto drop = [&](int n) {
    if (nodes_[n].owner != j) return;
    const double g = c_.nodes[n].gpus;
    alloc_gpus_ -= g;
    alloc_pool_gpus_[static_cast<int>(c_.nodes[n].pool)] -= g;
    if (nodes_[n].standby) standby_gpus_ -= g;
    nodes_[n].owner = -1;
    nodes_[n].standby = false;
  };
  for (int n : job.nodes) drop(n);
  for (int n : job.standby) drop(n);
  job.nodes.clear();
  job.standby.clear();
}

void Engine::Refresh(int j) {
  Release(j);
  const sched::Admission* a = sched_->Placement(jobs_[j].cfg.id);
  if (a == nullptr) return;
  SimJob& job = jobs_[j];
  job.nodes = a->nodes;
  job.standby = a->standby;
  auto take = [&](int n, bool standby) {
    nodes_[n].owner = j;
    nodes_[n].standby = standby;
    const double g = c_.nodes[n].gpus;
    alloc_gpus_ += g;
    alloc_pool_gpus_[static_cast<int>(c_.nodes[n].pool)] += g;
    if (standby) standby_gpus_ += g;
  };
  for (int n : job.nodes) take(n, false);
  for (int n : job.standby) take(n, true);
}

Status Engine::OnArrival(int j, double t) {
  SimJob& job = jobs_[j];
  sched::JobRequest req;
  req.id = job.cfg.id;
  req.queue = job.cfg.queue;
  req.priority = job.cfg.priority;
  req.nodes = job.cfg.nodes;
  req.gpu_type = job.cfg.gpu_type;
  req.tier = job.cfg.tier;
  req.required_level = job.cfg.required_level;
  req.standby = job.standby_want;
  Status st = sched_->Submit(req, t);
  if (!st.ok()) return st.Annotate("job " + job.cfg.id);
  job.state = JobState::kPending;
  dirty_ = true;
  return Status::Ok();
}

void Engine::Admit(int j, double t) {
  SimJob& job = jobs_[j];
  Refresh(j);
  for (int n : job.standby) nodes_[n].warm_at = t;  // started with the gang
  if (!job.started) {
    job.started = true;
    job.first_start = t;
  } else if (job.pending_since >= 0) {
    job.lost.requeue_wait += t - job.pending_since;
  }
  job.pending_since = -1;
  const bool has_ckpt = job.w0 > 0;
  StartAttempt(job, t, job.st->restart_s, has_ckpt ? job.st->ckpt_load_s : 0, 0, 0);
}

void Engine::Preempt(int j, double t) {
  SimJob& job = jobs_[j];
  if (job.state == JobState::kRunning) {
    job.p_fault = ClosePhase(job, t);
  } else if (job.state == JobState::kDown) {
    job.lost.detection += t - job.fault_t;
  } else {
    return;
  }
  // A preempted gang is torn down: its in-memory snapshots go with it.
  const double kept = job.work_ckpt;
  job.lost.rework += std::max(0.0, job.p_fault - kept);
  job.w0 = kept;
  const std::vector<SimJob::DeadNode> dead = std::move(job.dead);
  job.dead.clear();
  ++job.preemptions;
  ++job.epoch;
  Release(j);
  job.state = JobState::kPending;
  job.pending_since = t;
  dirty_ = true;
  for (const SimJob::DeadNode& dn : dead) {
    IgnoreError(NodeOut(dn.node, dn.t, t, dn.spot), "NodeOut cannot fail (it returns OK)");
  }
}

Status Engine::NodeOut(int node, double fault_t, double t, bool spot) {
  const sched::NodeFailureDecision d = sched_->OnNodeFailure(node, t);
  ++failed_nodes_;
  const double back = fault_t + (spot ? c_.failures.spot_return_s : c_.failures.repair_s);
  Push(std::max(back, t), EvType::kRepair, node);
  for (const std::string& v : d.preempted) {
    if (int k = IndexOf(v); k >= 0) Preempt(k, t);
  }
  return Status::Ok();
}

Status Engine::OnFault(int node, FaultType type, double t) {
  NodeState& ns = nodes_[node];
  if (ns.down) return Status::Ok();
  ++r_.faults_total[static_cast<int>(type)];
  const bool loss = IsNodeLoss(type);
  if (loss) {
    ns.down = true;
    ++ns.epoch;
  } else {
    DrawNodeFailure(node, t);  // renewal: the node's clock restarts now
  }
  const int j = ns.owner;
  if (j < 0 || ns.standby) {
    if (!loss) return Status::Ok();
    Status st = NodeOut(node, t, t, type == FaultType::kSpotReclaim);  // idle or a standby
    if (j >= 0) Refresh(j);
    dirty_ = true;
    return st;
  }
  SimJob& job = jobs_[j];
  ++r_.faults_hit_job[static_cast<int>(type)];
  ++job.faults[static_cast<int>(type)];
  if (job.state == JobState::kDown) {
    if (loss) job.dead.push_back({node, t, type == FaultType::kSpotReclaim});  // at detection
    return Status::Ok();
  }
  job.p_fault = ClosePhase(job, t);
  job.fault_t = t;
  job.fault_type = type;
  job.fault_slot =
      static_cast<int>(std::find(job.nodes.begin(), job.nodes.end(), node) - job.nodes.begin());
  job.dead.clear();
  if (loss) job.dead.push_back({node, t, type == FaultType::kSpotReclaim});
  job.state = JobState::kDown;
  ++job.epoch;
  ++job.job_faults;
  double detect = job.st->detect_s[static_cast<int>(type)];
  if (type == FaultType::kHang && job.st->hang_auto) {
    detect = RecoveryPolicy::HangTimeout(job.st->policy, {job.cfg.step_s});
  }
  Push(t + detect, EvType::kDetect, j, 0, job.epoch);
  return Status::Ok();
}

Status Engine::OnDetect(int j, double t) {
  SimJob& job = jobs_[j];
  job.lost.detection += t - job.fault_t;
  // The scheduler learns of the lost nodes and decides their replacement.
  bool hardware = false, requeued = false;
  double lead_s = 0;  // until the replacement can run: free-node lead or standby warm-up
  double requeue_after = 0;
  const size_t standby_before = job.standby.size();
  for (const SimJob::DeadNode& dn : job.dead) {
    hardware = true;
    const sched::NodeFailureDecision d = sched_->OnNodeFailure(dn.node, t);
    ++failed_nodes_;
    Push(std::max(dn.t + (dn.spot ? c_.failures.spot_return_s : c_.failures.repair_s), t),
         EvType::kRepair, dn.node);
    if (d.action == sched::FailureAction::kUseFreeNode ||
        d.action == sched::FailureAction::kPreemptForNode) {
      lead_s = std::max(lead_s, job.st->replacement_lead_s);
    } else if (d.action == sched::FailureAction::kUseStandby) {
      lead_s = std::max(lead_s, nodes_[d.replacement].warm_at - t);
    }
    if (d.action == sched::FailureAction::kRequeue) {
      requeued = true;
      requeue_after = std::max(requeue_after, d.requeue_after_s);
    }
    if (d.action != sched::FailureAction::kNone && d.action != sched::FailureAction::kRequeue) {
      ++job.replacements;
    }
    for (const std::string& v : d.preempted) {
      if (int k = IndexOf(v); k >= 0 && k != j) Preempt(k, t);
    }
  }
  job.dead.clear();
  if (hardware) dirty_ = true;
  if (sched_->Phase(job.cfg.id) == sched::JobPhase::kPending) requeued = true;

  // The recovery policy decides, from the same state the controller would have.
  const double step = job.cfg.step_s;
  Incident in;
  in.kind = KindOf(job.fault_type);
  in.subtype = job.fault_type == FaultType::kHardware      ? "hardware"
               : job.fault_type == FaultType::kSpotReclaim ? "spot_reclaim"
                                                           : "";
  in.node = job.fault_slot < job.cfg.nodes ? job.fault_slot : -1;
  in.step = static_cast<long>(std::floor(job.p_fault / step + 1e-9));
  in.fault_time = job.fault_t;
  in.detect_time = t;
  JobHistory h;
  h.restarts_used = job.restarts;
  h.high_water_step = static_cast<long>(std::floor(job.max_progress / step + 1e-9));
  if (job.work_ckpt > 0) h.committed_steps.push_back(static_cast<long>(job.work_ckpt / step));
  h.incidents = job.incidents;
  h.progress_at_incident = job.progress_at_incident;
  h.spares_available = static_cast<int>(standby_before);
  if (h.high_water_step > job.hw_at_last_incident) job.consecutive = 0;
  h.consecutive_failures = job.consecutive;
  const RecoveryPolicy policy(job.st->policy, Mix(c_.seed ^ (static_cast<uint64_t>(j) << 20)));
  const Decision d = policy.Decide(in, h, t);
  job.incidents.push_back(in);
  job.progress_at_incident.push_back(h.high_water_step);
  if (job.incidents.size() > 32) {  // the recurrence rules look at recent history only
    job.incidents.erase(job.incidents.begin());
    job.progress_at_incident.erase(job.progress_at_incident.begin());
  }
  ++job.consecutive;
  job.hw_at_last_incident = h.high_water_step;

  const double kept = Retained(job, hardware, !requeued);
  job.lost.rework += std::max(0.0, job.p_fault - kept);
  job.w0 = kept;
  if (d.action == Action::kGiveUp) {
    job.reason = d.reason;
    if (sched_->Phase(job.cfg.id) != sched::JobPhase::kFinished) {
      BW_RETURN_IF_ERROR(sched_->Finish(job.cfg.id, t));
    }
    Release(j);
    job.state = JobState::kFailed;
    job.end = t;
    ++job.epoch;
    productive_done_gpu_s_ += job.w0 * job.gpus;
    dirty_ = true;
    return Status::Ok();
  }
  ++job.restarts;
  if (requeued) {
    Release(j);
    ++job.requeues;
    job.state = JobState::kPending;
    job.pending_since = t;
    ++job.epoch;
    Push(t + requeue_after, EvType::kWake, j);
    dirty_ = true;
    return Status::Ok();
  }
  Refresh(j);
  const bool from_memory = kept > job.work_ckpt || (job.st->in_memory && kept == job.p_fault);
  StartAttempt(job, t, job.st->restart_s, from_memory ? 0 : job.st->ckpt_load_s, d.backoff_seconds,
               lead_s);
  return Status::Ok();
}

Status Engine::OnFinish(int j, double t) {
  SimJob& job = jobs_[j];
  ClosePhase(job, t);
  job.w0 = job.cfg.work_s;
  BW_RETURN_IF_ERROR(sched_->Finish(job.cfg.id, t));
  Release(j);
  job.state = JobState::kDone;
  job.end = t;
  ++job.epoch;
  productive_done_gpu_s_ += job.w0 * job.gpus;
  dirty_ = true;
  return Status::Ok();
}

Status Engine::OnRepair(int node, double t) {
  NodeState& ns = nodes_[node];
  if (!ns.down) return Status::Ok();
  BW_RETURN_IF_ERROR(sched_->SetNodeHealth(node, sched::NodeHealth::kReady));
  ns.down = false;
  --failed_nodes_;
  DrawNodeFailure(node, t);
  DrawSpotFailure(node, t);
  dirty_ = true;
  return Status::Ok();
}

Status Engine::RunSchedule(double t) {
  dirty_ = false;
  ++r_.schedule_calls;
  const sched::CycleResult cr = sched_->Schedule(t);
  // Victims that were running are torn down (Preempt ignores jobs the mirror has
  // pending: admitted and preempted within this cycle). Then the jobs the scheduler
  // holds as running after the cycle start, including victims re-admitted at once.
  for (const sched::Preemption& p : cr.preempted) {
    if (int k = IndexOf(p.victim); k >= 0) Preempt(k, t);
  }
  for (const sched::Admission& a : cr.admitted) {
    const int k = IndexOf(a.job_id);
    if (k < 0) return Internal("scheduler admitted unknown job " + a.job_id);
    if (sched_->Phase(a.job_id) != sched::JobPhase::kRunning) continue;
    if (jobs_[k].state == JobState::kRunning || jobs_[k].state == JobState::kDown) {
      Refresh(k);  // placement changed (e.g. preempted and re-admitted in one cycle)
      continue;
    }
    Admit(k, t);
  }
  // Restocked standby nodes start their agent now and are warm after the lead time.
  for (const sched::StandbyRestock& x : cr.restocked) {
    const int k = IndexOf(x.job_id);
    if (k < 0) return Internal("scheduler restocked unknown job " + x.job_id);
    Refresh(k);
    nodes_[x.node].warm_at = t + jobs_[k].st->replacement_lead_s;
    ++jobs_[k].restocks;
  }
  return Status::Ok();
}

}  // namespace bulwark::sim
