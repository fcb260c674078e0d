// Scheduler: construction and validation, job bookkeeping, queries, StandbyNodes.
// The cycle (quota, placement, preemption) is in schedule.cc, node failures in
// failure.cc.
#include "sched/scheduler.h"

#include <algorithm>
#include <cmath>
#include <cstdarg>
#include <cstdio>
#include <set>

#include "common/str_format.h"
#include "sched/scheduler_impl.h"

namespace bulwark::sched {

const char* PoolName(Pool p) {
  switch (p) {
    case Pool::kOnDemand:
      return "on-demand";
    case Pool::kSpot:
      return "spot";
    case Pool::kReserved:
      return "reserved";
  }
  return "?";
}

Result<Pool> ParsePool(const std::string& s) {
  for (Pool p : {Pool::kOnDemand, Pool::kSpot, Pool::kReserved}) {
    if (s == PoolName(p)) return p;
  }
  return InvalidArgument("pool: unknown \"" + s + "\" (want on-demand, spot or reserved)");
}

const char* NodeHealthName(NodeHealth h) {
  switch (h) {
    case NodeHealth::kReady:
      return "ready";
    case NodeHealth::kCordoned:
      return "cordoned";
    case NodeHealth::kQuarantined:
      return "quarantined";
    case NodeHealth::kDraining:
      return "draining";
  }
  return "?";
}

const char* TopologyLevelName(TopologyLevel l) {
  switch (l) {
    case TopologyLevel::kRack:
      return "rack";
    case TopologyLevel::kBlock:
      return "block";
    case TopologyLevel::kZone:
      return "zone";
    case TopologyLevel::kAny:
      return "any";
  }
  return "?";
}

const char* TierName(Tier t) { return t == Tier::kProduction ? "production" : "research"; }

const char* FailureActionName(FailureAction a) {
  switch (a) {
    case FailureAction::kNone:
      return "none";
    case FailureAction::kUseStandby:
      return "use_standby";
    case FailureAction::kUseFreeNode:
      return "use_free_node";
    case FailureAction::kPreemptForNode:
      return "preempt_for_node";
    case FailureAction::kRequeue:
      return "requeue";
  }
  return "?";
}

int StandbyNodes(int nodes, double failures_per_node_day, double lead_time_s, double quantile) {
  if (nodes <= 0 || !(failures_per_node_day > 0) || !(lead_time_s > 0) || !(quantile > 0)) {
    return 0;
  }
  if (quantile >= 1) return nodes;
  const double p = -std::expm1(-failures_per_node_day * lead_time_s / 86400.0);
  if (!(p < 1)) return nodes;
  if (!(p > 0)) return 0;
  // log P(X = k) by recurrence; the CDF accumulated with log-sum-exp so that
  // (1-p)^n underflowing (n = 100,000) costs no precision.
  const double log_q = std::log1p(-p);
  const double log_odds = std::log(p) - log_q;
  const double target = std::log(quantile);
  double lp = nodes * log_q;  // log P(X = 0)
  double lcdf = lp;
  for (int k = 0; k < nodes; ++k) {
    if (lcdf >= target) return k;
    lp += std::log(static_cast<double>(nodes - k) / (k + 1)) + log_odds;
    const double hi = std::max(lcdf, lp), lo = std::min(lcdf, lp);
    lcdf = hi + std::log1p(std::exp(lo - hi));
  }
  return nodes;
}

// ---------------------------------------------------------------------------------
// Impl helpers.

int Scheduler::Impl::TypeOf(const std::string& name) const {
  auto it = type_id.find(name);
  return it == type_id.end() ? -1 : it->second;
}

void Scheduler::Impl::SetUsage(int qi, int type, int64_t delta) {
  QueueState& q = queues[qi];
  const int64_t before = q.used[type];
  q.used[type] += delta;
  if (q.cohort >= 0) {
    const int64_t g = q.guaranteed[type];
    cohorts[q.cohort].lend_used[type] +=
        std::max<int64_t>(0, q.used[type] - g) - std::max<int64_t>(0, before - g);
  }
}

void Scheduler::Impl::UpdateShare(int qi) {
  QueueState& q = queues[qi];
  double share = 0;
  for (size_t t = 0; t < q.used.size(); ++t) {
    if (total_gpus[t] > 0) {
      share = std::max(share, static_cast<double>(q.used[t]) / static_cast<double>(total_gpus[t]));
    }
  }
  share /= q.spec.weight;
  const std::pair<double, int> old_key{q.share, qi};
  const bool had = drf.erase(old_key) > 0;
  (void)had;
  const bool in_cycle = cycle_candidates != nullptr && cycle_candidates->erase(old_key) > 0;
  q.share = share;
  if (!q.pending.empty()) drf.insert({share, qi});
  if (in_cycle) cycle_candidates->insert({share, qi});
}

void Scheduler::Impl::Touch(int qi) {
  ++queues[qi].version;
  if (queues[qi].cohort >= 0) ++cohorts[queues[qi].cohort].version;
}

void Scheduler::Impl::AddPending(int j) {
  JobState& job = jobs[j];
  QueueState& q = queues[job.queue];
  job.phase = JobPhase::kPending;
  q.pending.insert({{-job.req.priority, job.seq}, j});
  ++q.version;
  ++pending_count;
  if (q.pending.size() == 1) drf.insert({q.share, job.queue});
}

void Scheduler::Impl::RemovePending(int j) {
  JobState& job = jobs[j];
  QueueState& q = queues[job.queue];
  q.pending.erase({{-job.req.priority, job.seq}, j});
  ++q.version;
  --pending_count;
  if (q.pending.empty()) {
    drf.erase({q.share, job.queue});
    if (cycle_candidates != nullptr) cycle_candidates->erase({q.share, job.queue});
  }
}

int Scheduler::Impl::Head(int qi, double now) const {
  for (const auto& [key, j] : queues[qi].pending) {
    const JobState& job = jobs[j];
    if (job.backoff_until > now || job.preempted_cycle == cycle) continue;
    return j;
  }
  return -1;
}

void Scheduler::Impl::MarkShortStandby(int j) {
  const JobState& job = jobs[j];
  if (job.phase == JobPhase::kRunning &&
      static_cast<int>(job.adm.standby.size()) < job.req.standby) {
    short_standby.insert({-job.req.priority, job.admit_seq, j});
  }
}

void Scheduler::Impl::FreeNode(int node) {
  NodeState& n = nodes[node];
  n.owner = -1;
  n.standby = false;
  ++cap_version[n.type];
}

// ---------------------------------------------------------------------------------
// Public API.

Scheduler::Scheduler() : impl_(std::make_unique<Impl>()) {}
Scheduler::~Scheduler() = default;

namespace {

Status ValidateNodes(const std::vector<NodeSpec>& nodes) {
  std::set<std::string> names;
  std::map<std::string, std::pair<int, std::string>> gpus_of_type;
  for (size_t i = 0; i < nodes.size(); ++i) {
    const NodeSpec& n = nodes[i];
    const std::string who = Fmt("node[%zu] \"%s\"", i, n.name.c_str());
    if (n.name.empty()) return InvalidArgument(who + ": name: empty");
    if (!names.insert(n.name).second) return InvalidArgument(who + ": name: duplicate");
    if (n.gpu_type.empty()) return InvalidArgument(who + ": gpu_type: empty");
    if (n.gpus <= 0) return InvalidArgument(who + Fmt(": gpus: must be > 0 (got %d)", n.gpus));
    if (n.zone.empty()) return InvalidArgument(who + ": zone: empty topology label");
    if (n.block.empty()) return InvalidArgument(who + ": block: empty topology label");
    if (n.rack.empty()) return InvalidArgument(who + ": rack: empty topology label");
    if (!(n.price_per_gpu_hour >= 0)) {
      return InvalidArgument(who + ": price_per_gpu_hour: must be >= 0");
    }
    auto [it, fresh] = gpus_of_type.emplace(n.gpu_type, std::make_pair(n.gpus, n.name));
    if (!fresh && it->second.first != n.gpus) {
      return InvalidArgument(
          who + Fmt(": gpus: %d differs from %d of node \"%s\" (one GPU count per gpu_type)",
                    n.gpus, it->second.first, it->second.second.c_str()));
    }
  }
  return Status::Ok();
}

Status ValidateQueues(const std::vector<QueueSpec>& queues) {
  std::set<std::string> names;
  for (size_t i = 0; i < queues.size(); ++i) {
    const QueueSpec& q = queues[i];
    const std::string who = Fmt("queue[%zu] \"%s\"", i, q.name.c_str());
    if (q.name.empty()) return InvalidArgument(who + ": name: empty");
    if (!names.insert(q.name).second) return InvalidArgument(who + ": name: duplicate");
    if (!(q.weight > 0) || !std::isfinite(q.weight)) {
      return InvalidArgument(who + Fmt(": weight: must be > 0 (got %g)", q.weight));
    }
    for (const auto* m : {&q.nominal_gpus, &q.borrowing_limit, &q.lending_limit}) {
      const char* field = m == &q.nominal_gpus      ? "nominal_gpus"
                          : m == &q.borrowing_limit ? "borrowing_limit"
                                                    : "lending_limit";
      for (const auto& [type, v] : *m) {
        if (type.empty()) return InvalidArgument(who + ": " + field + ": empty gpu type");
        if (v < 0) {
          return InvalidArgument(who +
                                 Fmt(": %s[%s]: must be >= 0 (got %d)", field, type.c_str(), v));
        }
      }
    }
    if (q.cohort.empty() && (!q.borrowing_limit.empty() || !q.lending_limit.empty())) {
      // Harmless but almost certainly a mistake; accept (limits are simply unused).
    }
  }
  return Status::Ok();
}

}  // namespace

Result<std::unique_ptr<Scheduler>> Scheduler::Create(SchedulerConfig config,
                                                     std::vector<NodeSpec> nodes,
                                                     std::vector<QueueSpec> queues) {
  if (config.production_pools.empty()) {
    return InvalidArgument("config.production_pools: empty");
  }
  if (config.research_pools.empty()) return InvalidArgument("config.research_pools: empty");
  if (!(config.requeue_backoff_base_s >= 0)) {
    return InvalidArgument("config.requeue_backoff_base_s: must be >= 0");
  }
  if (!(config.requeue_backoff_cap_s >= config.requeue_backoff_base_s)) {
    return InvalidArgument("config.requeue_backoff_cap_s: must be >= requeue_backoff_base_s");
  }
  BW_RETURN_IF_ERROR(ValidateNodes(nodes));
  BW_RETURN_IF_ERROR(ValidateQueues(queues));

  std::unique_ptr<Scheduler> s(new Scheduler());
  Impl& m = *s->impl_;
  m.config = std::move(config);
  std::vector<int> type_of(nodes.size());
  for (size_t i = 0; i < nodes.size(); ++i) {
    auto [it, fresh] = m.type_id.emplace(nodes[i].gpu_type, static_cast<int>(m.type_names.size()));
    if (fresh) {
      m.type_names.push_back(nodes[i].gpu_type);
      m.gpus_per_node.push_back(nodes[i].gpus);
      m.nodes_of_type.push_back(0);
      m.total_gpus.push_back(0);
    }
    type_of[i] = it->second;
    ++m.nodes_of_type[it->second];
    m.total_gpus[it->second] += nodes[i].gpus;
  }
  const int types = static_cast<int>(m.type_names.size());
  m.cap_version.assign(types, 0);
  m.index.Build(nodes, type_of, types);
  m.nodes.resize(nodes.size());
  for (size_t i = 0; i < nodes.size(); ++i) {
    m.nodes[i].type = type_of[i];
    m.nodes[i].gpus = nodes[i].gpus;
    m.nodes[i].health = nodes[i].health;
    if (nodes[i].health == NodeHealth::kReady) m.index.AddFree(static_cast<int>(i));
  }
  m.specs = std::move(nodes);
  for (size_t i = 0; i < m.specs.size(); ++i) m.node_index[m.specs[i].name] = static_cast<int>(i);

  std::map<std::string, int> cohort_ids;
  m.queues.resize(queues.size());
  for (size_t i = 0; i < queues.size(); ++i) {
    Impl::QueueState& q = m.queues[i];
    q.spec = std::move(queues[i]);
    m.queue_id[q.spec.name] = static_cast<int>(i);
    q.nominal.assign(types, 0);
    q.borrow_limit.assign(types, Impl::kUnlimited);
    q.guaranteed.assign(types, 0);
    q.used.assign(types, 0);
    for (int t = 0; t < types; ++t) {
      const std::string& tn = m.type_names[t];
      auto nit = q.spec.nominal_gpus.find(tn);
      q.nominal[t] = nit == q.spec.nominal_gpus.end() ? 0 : nit->second;
      auto bit = q.spec.borrowing_limit.find(tn);
      if (bit != q.spec.borrowing_limit.end()) q.borrow_limit[t] = bit->second;
      auto lit = q.spec.lending_limit.find(tn);
      const int64_t lend = lit == q.spec.lending_limit.end()
                               ? q.nominal[t]
                               : std::min<int64_t>(q.nominal[t], lit->second);
      q.guaranteed[t] = q.nominal[t] - lend;
    }
    if (!q.spec.cohort.empty()) {
      auto [it, fresh] = cohort_ids.emplace(q.spec.cohort, static_cast<int>(m.cohorts.size()));
      if (fresh) {
        m.cohorts.emplace_back();
        m.cohorts.back().lend_cap.assign(types, 0);
        m.cohorts.back().lend_used.assign(types, 0);
        m.cohort_names.push_back(q.spec.cohort);
      }
      q.cohort = it->second;
      Impl::CohortState& c = m.cohorts[q.cohort];
      c.members.push_back(static_cast<int>(i));
      for (int t = 0; t < types; ++t) c.lend_cap[t] += q.nominal[t] - q.guaranteed[t];
    } else {
      q.borrow_limit.assign(types, 0);  // no cohort: nothing to borrow
    }
  }
  return s;
}

Status Scheduler::Submit(const JobRequest& job, double now) {
  Impl& m = *impl_;
  m.last_now = std::max(m.last_now, now);
  if (job.id.empty()) return InvalidArgument("job id: empty");
  const std::string who = "job \"" + job.id + "\"";
  auto existing = m.job_id.find(job.id);
  if (existing != m.job_id.end() && m.jobs[existing->second].phase != JobPhase::kFinished) {
    return InvalidArgument(who + ": id: duplicate of a live job");
  }
  auto qit = m.queue_id.find(job.queue);
  if (qit == m.queue_id.end())
    return InvalidArgument(who + ": queue: unknown \"" + job.queue + "\"");
  if (job.nodes < 1) return InvalidArgument(who + Fmt(": nodes: must be >= 1 (got %d)", job.nodes));
  if (job.standby < 0) {
    return InvalidArgument(who + Fmt(": standby: must be >= 0 (got %d)", job.standby));
  }
  const int type = m.TypeOf(job.gpu_type);
  const int have = type < 0 ? 0 : m.nodes_of_type[type];
  if (job.nodes > have) {
    return InvalidArgument(who + Fmt(": nodes: gang of %d exceeds the %d %s nodes in the cluster",
                                     job.nodes, have, job.gpu_type.c_str()));
  }
  Impl::JobState js;
  js.req = job;
  js.queue = qit->second;
  js.type = type;
  js.seq = m.next_seq++;
  js.reason = "waiting: not yet considered by a scheduling cycle";
  const int j = static_cast<int>(m.jobs.size());
  m.jobs.push_back(std::move(js));
  m.job_id[job.id] = j;
  m.AddPending(j);
  return Status::Ok();
}

Status Scheduler::Finish(const std::string& job_id, double now) {
  Impl& m = *impl_;
  m.last_now = std::max(m.last_now, now);
  auto it = m.job_id.find(job_id);
  if (it == m.job_id.end()) return NotFound("job \"" + job_id + "\": unknown");
  const int j = it->second;
  Impl::JobState& job = m.jobs[j];
  if (job.phase == JobPhase::kFinished) {
    return FailedPrecondition("job \"" + job_id + "\": already finished");
  }
  if (job.phase == JobPhase::kPending) {
    m.RemovePending(j);
  } else {
    m.ReleaseJob(j);
  }
  job.phase = JobPhase::kFinished;
  job.reason.clear();
  return Status::Ok();
}

Status Scheduler::Adopt(const JobRequest& job, const std::vector<int>& nodes,
                        const std::vector<int>& standby, double now) {
  Impl& m = *impl_;
  const std::string who = "job \"" + job.id + "\"";
  const int type = m.TypeOf(job.gpu_type);
  if (static_cast<int>(nodes.size()) != job.nodes) {
    return InvalidArgument(who +
                           Fmt(": nodes: %zu given for a gang of %d", nodes.size(), job.nodes));
  }
  std::set<int> seen;
  for (const auto* list : {&nodes, &standby}) {
    for (int n : *list) {
      if (n < 0 || n >= static_cast<int>(m.nodes.size())) {
        return InvalidArgument(who + Fmt(": node index %d out of range", n));
      }
      const std::string& name = m.specs[n].name;
      if (!seen.insert(n).second) {
        return InvalidArgument(who + ": node " + name + " listed twice");
      }
      if (m.nodes[n].type != type) {
        return InvalidArgument(who + ": node " + name + " has " + m.specs[n].gpu_type +
                               " GPUs, the job wants " + job.gpu_type);
      }
      if (m.nodes[n].owner >= 0) {
        return FailedPrecondition(who + ": node " + name + " is held by job " +
                                  m.jobs[m.nodes[n].owner].req.id);
      }
      if (m.specs[n].pool != m.specs[nodes[0]].pool) {
        return InvalidArgument(who + ": node " + name + " is in pool " + PoolName(m.specs[n].pool) +
                               ", the gang in " + PoolName(m.specs[nodes[0]].pool));
      }
    }
  }
  BW_RETURN_IF_ERROR(Submit(job, now));
  const int j = m.job_id.at(job.id);
  Impl::JobState& js = m.jobs[j];
  Impl::QueueState& q = m.queues[js.queue];
  m.RemovePending(j);
  Admission& a = js.adm;
  a = Admission();
  a.job_id = job.id;
  a.pool = m.specs[nodes[0]].pool;
  a.nodes = nodes;
  a.standby = standby;
  for (const auto* list : {&nodes, &standby}) {
    for (int n : *list) {
      if (m.index.IsFree(n)) m.index.RemoveFree(n);
      m.nodes[n].owner = j;
      m.nodes[n].standby = list == &standby;
    }
  }
  const int gpn = m.gpus_per_node[type];
  js.charge = static_cast<int64_t>(nodes.size() + standby.size()) * gpn;
  m.SetUsage(js.queue, type, js.charge);
  m.Touch(js.queue);
  js.phase = JobPhase::kRunning;
  js.admit_seq = m.next_admit++;
  q.running.insert({job.priority, -js.admit_seq, j});
  ++m.running_count;
  m.UpdateShare(js.queue);
  a.borrowed = q.used[type] > q.nominal[type];
  m.FillPlacementInfo(&a);
  a.reason =
      Fmt("adopted: already running on %zu node(s) + %zu standby", nodes.size(), standby.size());
  js.reason = a.reason;
  m.MarkShortStandby(j);
  return Status::Ok();
}

CycleResult Scheduler::Schedule(double now, int max_admissions) {
  return impl_->Schedule(now, max_admissions);
}

NodeFailureDecision Scheduler::OnNodeFailure(int node, double now) {
  return impl_->OnNodeFailure(node, now);
}

Status Scheduler::SetNodeHealth(int node, NodeHealth health) {
  Impl& m = *impl_;
  if (node < 0 || node >= static_cast<int>(m.nodes.size())) {
    return InvalidArgument(Fmt("node: index %d out of range [0, %zu)", node, m.nodes.size()));
  }
  Impl::NodeState& n = m.nodes[node];
  n.health = health;
  m.specs[node].health = health;
  if (n.owner < 0) {
    const bool want = health == NodeHealth::kReady;
    if (want && !m.index.IsFree(node)) m.index.AddFree(node);
    if (!want && m.index.IsFree(node)) m.index.RemoveFree(node);
  }
  ++m.cap_version[n.type];
  return Status::Ok();
}

JobPhase Scheduler::Phase(const std::string& job_id) const {
  auto it = impl_->job_id.find(job_id);
  return it == impl_->job_id.end() ? JobPhase::kFinished : impl_->jobs[it->second].phase;
}

std::string Scheduler::Reason(const std::string& job_id) const {
  const Impl& m = *impl_;
  auto it = m.job_id.find(job_id);
  if (it == m.job_id.end()) return "";
  const Impl::JobState& job = m.jobs[it->second];
  if (job.phase == JobPhase::kRunning) return job.adm.reason;
  if (job.phase != JobPhase::kPending) return job.reason;
  if (job.backoff_until > m.last_now) {
    return Fmt("waiting: requeue backoff until t=%.1f", job.backoff_until);
  }
  // Strict FIFO: a job behind the queue's head waits for the head.
  for (const auto& [key, j] : m.queues[job.queue].pending) {
    if (j == it->second) break;
    const Impl::JobState& h = m.jobs[j];
    if (h.backoff_until > m.last_now) continue;
    return Fmt("waiting: behind job %s (priority %d) in queue %s (strict FIFO)", h.req.id.c_str(),
               h.req.priority, job.req.queue.c_str());
  }
  return job.reason;
}

const Admission* Scheduler::Placement(const std::string& job_id) const {
  auto it = impl_->job_id.find(job_id);
  if (it == impl_->job_id.end()) return nullptr;
  const Impl::JobState& job = impl_->jobs[it->second];
  return job.phase == JobPhase::kRunning ? &job.adm : nullptr;
}

QueueUsage Scheduler::Usage(const std::string& queue) const {
  const Impl& m = *impl_;
  QueueUsage u;
  auto it = m.queue_id.find(queue);
  if (it == m.queue_id.end()) return u;
  const Impl::QueueState& q = m.queues[it->second];
  for (size_t t = 0; t < q.used.size(); ++t) {
    if (q.used[t] > 0) u.used_gpus[m.type_names[t]] = static_cast<int>(q.used[t]);
    if (q.used[t] > q.nominal[t]) {
      u.borrowed_gpus[m.type_names[t]] = static_cast<int>(q.used[t] - q.nominal[t]);
    }
  }
  u.pending = static_cast<int>(q.pending.size());
  u.running = static_cast<int>(q.running.size());
  u.dominant_share = q.share;
  return u;
}

int Scheduler::FreeNodes(const std::string& gpu_type) const {
  const Impl& m = *impl_;
  const int t = m.TypeOf(gpu_type);
  if (t < 0) return 0;
  int free = 0;
  for (Pool p : {Pool::kOnDemand, Pool::kSpot, Pool::kReserved}) {
    const int s = m.index.Slice(t, p);
    if (s >= 0) free += m.index.SliceFree(s);
  }
  return free;
}

int Scheduler::PendingJobs() const { return impl_->pending_count; }
int Scheduler::RunningJobs() const { return impl_->running_count; }
int Scheduler::NodeCount() const { return static_cast<int>(impl_->nodes.size()); }
const NodeSpec& Scheduler::Node(int index) const { return impl_->specs[index]; }
int Scheduler::NodeIndex(const std::string& name) const {
  auto it = impl_->node_index.find(name);
  return it == impl_->node_index.end() ? -1 : it->second;
}

}  // namespace bulwark::sched
