// The scheduling cycle: fair-share queue order, quota, placement, preemption.
#include <algorithm>
#include <cassert>
#include <iterator>
#include <tuple>

#include "sched/scheduler_impl.h"

namespace bulwark::sched {
namespace {

const TopologyLevel kNarrowToWide[] = {TopologyLevel::kRack, TopologyLevel::kBlock,
                                       TopologyLevel::kZone};

std::string PoolList(const std::vector<Pool>& pools) {
  std::string s;
  for (Pool p : pools) {
    if (!s.empty()) s += ",";
    s += PoolName(p);
  }
  return s;
}

}  // namespace

const std::vector<Pool>& Scheduler::Impl::Pools(Tier t) const {
  return t == Tier::kProduction ? config.production_pools : config.research_pools;
}

bool Scheduler::Impl::QuotaFits(const JobState& j, int64_t demand) const {
  const QueueState& q = queues[j.queue];
  const int t = j.type;
  const int64_t u = q.used[t];
  if (u + demand > q.nominal[t] + q.borrow_limit[t]) return false;
  if (q.cohort < 0) return true;
  const CohortState& c = cohorts[q.cohort];
  const int64_t g = q.guaranteed[t];
  const int64_t inc = std::max<int64_t>(0, u + demand - g) - std::max<int64_t>(0, u - g);
  return inc <= c.lend_cap[t] - c.lend_used[t];
}

std::string Scheduler::Impl::QuotaReason(const JobState& j, int64_t demand) const {
  const QueueState& q = queues[j.queue];
  const int t = j.type;
  const char* type = type_names[t].c_str();
  const char* qn = q.spec.name.c_str();
  const int64_t u = q.used[t], n = q.nominal[t], over = u + demand - n;
  if (q.cohort < 0) {
    return Fmt(
        "waiting: queue %s over quota for %s by %lld GPUs (nominal %lld, used %lld, "
        "job needs %lld; no cohort to borrow from)",
        qn, type, static_cast<long long>(over), static_cast<long long>(n),
        static_cast<long long>(u), static_cast<long long>(demand));
  }
  const CohortState& c = cohorts[q.cohort];
  const int64_t g = q.guaranteed[t];
  const int64_t own_unused = std::max<int64_t>(0, (n - g) - std::max<int64_t>(0, u - g));
  const int64_t pool_free = c.lend_cap[t] - c.lend_used[t];
  const int64_t lend = std::max<int64_t>(0, pool_free - own_unused);
  const char* cn = cohort_names[q.cohort].c_str();
  if (over > 0) {
    const int64_t room = q.borrow_limit[t] - std::max<int64_t>(0, u - n);
    if (over > room) {
      return Fmt(
          "waiting: queue %s over quota for %s by %lld GPUs; borrowing limit allows "
          "%lld more (cohort %s has %lld to lend)",
          qn, type, static_cast<long long>(over), static_cast<long long>(room), cn,
          static_cast<long long>(lend));
    }
    return Fmt("waiting: queue %s over quota for %s by %lld GPUs; cohort %s has %lld to lend", qn,
               type, static_cast<long long>(over), cn, static_cast<long long>(lend));
  }
  return Fmt(
      "waiting: queue %s is within its nominal %s quota but cohort %s has lent it out "
      "(%lld lendable GPUs free in the cohort, job needs %lld)",
      qn, type, cn, static_cast<long long>(pool_free), static_cast<long long>(demand));
}

std::string Scheduler::Impl::CapacityReason(const JobState& j) const {
  const JobRequest& r = j.req;
  const std::vector<Pool>& pools = Pools(r.tier);
  const char* type = type_names[j.type].c_str();
  const std::string standby = r.standby > 0 ? Fmt(" (+%d standby)", r.standby) : std::string();
  int best = 0;
  std::string where = "none";
  if (r.required_level == TopologyLevel::kAny) {
    for (Pool p : pools) {
      const int s = index.Slice(j.type, p);
      if (s >= 0 && index.SliceFree(s) > best) {
        best = index.SliceFree(s);
        where = std::string("pool ") + PoolName(p);
      }
    }
    return Fmt("waiting: no pool with %d free %s nodes%s in pools %s (largest free: %d in %s)",
               r.nodes, type, standby.c_str(), PoolList(pools).c_str(), best, where.c_str());
  }
  std::string levels;
  for (TopologyLevel l : kNarrowToWide) {
    if (l > r.required_level) break;
    if (!levels.empty()) levels += "/";
    levels += TopologyLevelName(l);
  }
  for (Pool p : pools) {
    const int s = index.Slice(j.type, p);
    if (s < 0) continue;
    const int d = index.Largest(s, r.required_level);
    if (d >= 0 && index.Dom(d).free > best) {
      best = index.Dom(d).free;
      where = index.Dom(d).name;
    }
  }
  return Fmt("waiting: no %s with %d free %s nodes%s in pools %s (largest free: %d in %s)",
             levels.c_str(), r.nodes, type, standby.c_str(), PoolList(pools).c_str(), best,
             where.c_str());
}

bool Scheduler::Impl::FindPlacement(const JobState& j, Plan* plan) const {
  const JobRequest& r = j.req;
  const int need = r.nodes + r.standby;
  const std::vector<Pool>& pools = Pools(r.tier);
  for (size_t pi = 0; pi < pools.size(); ++pi) {
    if (std::find(pools.begin(), pools.begin() + pi, pools[pi]) != pools.begin() + pi) continue;
    const int s = index.Slice(j.type, pools[pi]);
    if (s < 0 || index.SliceFree(s) < need) continue;
    plan->slice = s;
    plan->pool = pools[pi];
    for (TopologyLevel l : kNarrowToWide) {
      if (l > r.required_level) break;
      int d = index.BestFit(s, l, need);
      if (d < 0 && r.standby > 0) d = index.BestFit(s, l, r.nodes);
      if (d >= 0) {
        plan->domain = d;
        return true;
      }
    }
    if (r.required_level == TopologyLevel::kAny) {
      plan->domain = index.Root(s);
      return true;
    }
  }
  return false;
}

bool Scheduler::Impl::Fits(const JobState& j) const {
  Plan plan;
  const int64_t demand = static_cast<int64_t>(j.req.nodes + j.req.standby) * gpus_per_node[j.type];
  return QuotaFits(j, demand) && FindPlacement(j, &plan);
}

void Scheduler::Impl::FillPlacementInfo(Admission* a) const {
  a->level = TopologyLevel::kAny;
  a->domain.clear();
  if (a->nodes.empty()) return;
  for (TopologyLevel l : kNarrowToWide) {
    const int d = index.DomainOf(a->nodes[0], l);
    bool same = true;
    for (int n : a->nodes) same = same && index.DomainOf(n, l) == d;
    if (same) {
      a->level = l;
      a->domain = index.Dom(d).name;
      return;
    }
  }
}

void Scheduler::Impl::Admit(int j, const Plan& plan, double now, const std::string& extra,
                            Admission* out) {
  (void)now;
  JobState& job = jobs[j];
  QueueState& q = queues[job.queue];
  const int t = job.type;
  const internal::Domain& dom = index.Dom(plan.domain);
  const int dom_free = dom.free;
  Admission& a = job.adm;
  a = Admission();
  a.job_id = job.req.id;
  a.pool = plan.pool;
  index.Take(plan.domain, job.req.nodes, &a.nodes);
  index.TakeOutward(plan.domain, job.req.standby, &a.standby);
  for (int n : a.nodes) nodes[n].owner = j;
  for (int n : a.standby) {
    nodes[n].owner = j;
    nodes[n].standby = true;
  }
  job.charge = static_cast<int64_t>(job.req.nodes + job.req.standby) * gpus_per_node[t];
  a.borrowed = q.used[t] + job.charge > q.nominal[t];
  RemovePending(j);
  SetUsage(job.queue, t, job.charge);
  Touch(job.queue);
  job.phase = JobPhase::kRunning;
  job.admit_seq = next_admit++;
  job.backoff_until = -1;
  q.running.insert({job.req.priority, -job.admit_seq, j});
  ++running_count;
  UpdateShare(job.queue);
  FillPlacementInfo(&a);
  std::string where = dom.level == TopologyLevel::kAny
                          ? std::string("across domains")
                          : std::string(TopologyLevelName(dom.level)) + " " + dom.name;
  a.reason = Fmt("admitted: %s in pool %s (best fit: %d free for %d", where.c_str(),
                 PoolName(plan.pool), dom_free, job.req.nodes);
  if (job.req.standby > 0) a.reason += Fmt(" + %d standby", job.req.standby);
  a.reason += ")";
  if (a.borrowed) {
    a.reason += Fmt("; borrowing %lld %s GPUs from cohort %s",
                    static_cast<long long>(q.used[t] - q.nominal[t]), type_names[t].c_str(),
                    cohort_names[q.cohort].c_str());
  }
  a.reason += extra;
  job.reason = a.reason;
  if (out != nullptr) *out = a;
}

void Scheduler::Impl::IndexRelease(int v) {
  JobState& job = jobs[v];
  for (const auto* list : {&job.adm.nodes, &job.adm.standby}) {
    for (int n : *list) {
      if (nodes[n].health == NodeHealth::kReady) index.AddFree(n);
    }
  }
  SetUsage(job.queue, job.type, -job.charge);
}

void Scheduler::Impl::IndexReacquire(int v) {
  JobState& job = jobs[v];
  for (const auto* list : {&job.adm.nodes, &job.adm.standby}) {
    for (int n : *list) {
      if (nodes[n].health == NodeHealth::kReady) index.RemoveFree(n);
    }
  }
  SetUsage(job.queue, job.type, job.charge);
}

void Scheduler::Impl::FinishRelease(int v) {
  JobState& job = jobs[v];
  QueueState& q = queues[job.queue];
  for (const auto* list : {&job.adm.nodes, &job.adm.standby}) {
    for (int n : *list) FreeNode(n);
  }
  q.running.erase({job.req.priority, -job.admit_seq, v});
  short_standby.erase({-job.req.priority, job.admit_seq, v});
  --running_count;
  Touch(job.queue);
  ++cap_version[job.type];
  job.charge = 0;
  job.adm = Admission();
}

void Scheduler::Impl::ReleaseJob(int j) {
  IndexRelease(j);
  FinishRelease(j);
  UpdateShare(jobs[j].queue);
}

void Scheduler::Impl::Evict(int v, int by, double now, Preemption* out) {
  JobState& victim = jobs[v];
  const JobState& pre = jobs[by];
  out->victim = victim.req.id;
  out->preemptor = pre.req.id;
  if (victim.queue == pre.queue) {
    out->reason = Fmt("preempted by job %s (priority %d > %d)", pre.req.id.c_str(),
                      pre.req.priority, victim.req.priority);
  } else {
    out->reason =
        Fmt("reclaim by queue %s (job %s, within its nominal %s quota) from queue %s "
            "borrowing in cohort %s",
            pre.req.queue.c_str(), pre.req.id.c_str(), type_names[pre.type].c_str(),
            victim.req.queue.c_str(), cohort_names[queues[pre.queue].cohort].c_str());
  }
  FinishRelease(v);
  AddPending(v);
  victim.preempted_cycle = cycle;
  victim.reason = "waiting: " + out->reason + Fmt(" at t=%.1f", now);
  UpdateShare(victim.queue);
}

bool Scheduler::Impl::FindVictims(int j, std::vector<int>* victims) {
  const JobState& job = jobs[j];
  const QueueState& q = queues[job.queue];
  const int t = job.type;
  const int64_t demand = static_cast<int64_t>(job.req.nodes + job.req.standby) * gpus_per_node[t];
  std::vector<int> cands;
  auto collect = [&](const QueueState& from, bool lower_only) {
    int taken = 0;
    for (const auto& [prio, neg_seq, vj] : from.running) {
      if (lower_only && prio >= job.req.priority) break;
      if (jobs[vj].type != t) continue;
      cands.push_back(vj);
      if (++taken >= kMaxVictimCandidates) break;
    }
  };
  collect(q, true);
  if (q.cohort >= 0 && q.used[t] + demand <= q.nominal[t]) {
    for (int m : cohorts[q.cohort].members) {
      if (m != job.queue && queues[m].used[t] > queues[m].nominal[t]) collect(queues[m], false);
    }
  }
  if (cands.empty()) return false;
  std::sort(cands.begin(), cands.end(), [&](int a, int b) {
    if (jobs[a].req.priority != jobs[b].req.priority) {
      return jobs[a].req.priority < jobs[b].req.priority;
    }
    return jobs[a].admit_seq > jobs[b].admit_seq;
  });
  if (cands.size() > static_cast<size_t>(kMaxVictimCandidates)) cands.resize(kMaxVictimCandidates);

  // Necessary conditions, checked without touching the index.
  int64_t free_allowed = 0, victim_nodes = 0, own_charge = 0;
  const std::vector<Pool>& pools = Pools(job.req.tier);
  for (size_t pi = 0; pi < pools.size(); ++pi) {
    if (std::find(pools.begin(), pools.begin() + pi, pools[pi]) != pools.begin() + pi) continue;
    const int s = index.Slice(t, pools[pi]);
    if (s >= 0) free_allowed += index.SliceFree(s);
  }
  for (int v : cands) {
    victim_nodes += static_cast<int64_t>(jobs[v].adm.nodes.size() + jobs[v].adm.standby.size());
    if (jobs[v].queue == job.queue) own_charge += jobs[v].charge;
  }
  if (free_allowed + victim_nodes < job.req.nodes + job.req.standby) return false;
  if (q.used[t] - own_charge + demand > q.nominal[t] + q.borrow_limit[t]) return false;

  std::vector<int> chosen;
  bool fit = false;
  for (int v : cands) {
    IndexRelease(v);
    chosen.push_back(v);
    if (Fits(job)) {
      fit = true;
      break;
    }
  }
  if (!fit) {
    for (auto it = chosen.rbegin(); it != chosen.rend(); ++it) IndexReacquire(*it);
    return false;
  }
  // Drop victims that are not needed, trying the most recently chosen first (the last
  // one is needed: without it the earlier ones did not suffice).
  for (int i = static_cast<int>(chosen.size()) - 2; i >= 0; --i) {
    IndexReacquire(chosen[i]);
    if (Fits(job)) {
      chosen.erase(chosen.begin() + i);
    } else {
      IndexRelease(chosen[i]);
    }
  }
  *victims = std::move(chosen);
  return true;
}

CycleResult Scheduler::Impl::Schedule(double now, int max_admissions) {
  ++cycle;
  last_now = std::max(last_now, now);
  CycleResult r;
  std::set<std::pair<double, int>> cand = drf;
  cycle_candidates = &cand;
  int admitted = 0;
  while (admitted < max_admissions && !cand.empty()) {
    const auto [share, qi] = *cand.begin();
    const int h = Head(qi, now);
    if (h < 0) {
      cand.erase(cand.begin());
      continue;
    }
    QueueState& q = queues[qi];
    JobState& job = jobs[h];
    const uint64_t co = q.cohort >= 0 ? cohorts[q.cohort].version : 0;
    if (q.failed_job == h && q.failed_cap == cap_version[job.type] && q.failed_q == q.version &&
        q.failed_co == co) {
      cand.erase(cand.begin());  // nothing it depends on changed since it last failed
      continue;
    }
    ++r.considered;
    const int64_t demand =
        static_cast<int64_t>(job.req.nodes + job.req.standby) * gpus_per_node[job.type];
    const bool quota_ok = QuotaFits(job, demand);
    Plan plan;
    if (quota_ok && FindPlacement(job, &plan)) {
      r.admitted.emplace_back();
      Admit(h, plan, now, "", &r.admitted.back());
      ++admitted;
      continue;
    }
    std::vector<int> victims;
    if (config.preemption && FindVictims(h, &victims)) {
      for (int v : victims) {
        r.preempted.emplace_back();
        Evict(v, h, now, &r.preempted.back());
      }
      const bool ok = FindPlacement(job, &plan);
      assert(ok);
      (void)ok;
      r.admitted.emplace_back();
      Admit(h, plan, now, Fmt("; after preempting %zu job(s)", victims.size()), &r.admitted.back());
      ++admitted;
      continue;
    }
    job.reason = quota_ok ? CapacityReason(job) : QuotaReason(job, demand);
    q.failed_job = h;
    q.failed_cap = cap_version[job.type];
    q.failed_q = q.version;
    q.failed_co = co;
    cand.erase({q.share, qi});
  }
  cycle_candidates = nullptr;
  if (config.restock_standby) Restock(&r);
  return r;
}

void Scheduler::Impl::Restock(CycleResult* r) {
  for (auto it = short_standby.begin(); it != short_standby.end();) {
    const int j = std::get<2>(*it);
    JobState& job = jobs[j];
    Admission& a = job.adm;
    const int gpn = gpus_per_node[job.type];
    const int slice = index.Slice(job.type, a.pool);
    const int anchor = index.DomainOf(a.nodes[0], a.level);
    const std::string gang = a.level == TopologyLevel::kAny
                                 ? std::string("across domains")
                                 : std::string("in ") + TopologyLevelName(a.level) + " " + a.domain;
    while (static_cast<int>(a.standby.size()) < job.req.standby && index.SliceFree(slice) > 0 &&
           QuotaFits(job, gpn)) {
      std::vector<int> got;
      index.TakeOutward(anchor, 1, &got);
      const int n = got[0];
      nodes[n].owner = j;
      nodes[n].standby = true;
      a.standby.push_back(n);
      job.charge += gpn;
      SetUsage(job.queue, job.type, gpn);
      UpdateShare(job.queue);
      r->restocked.push_back(
          {job.req.id, n,
           Fmt("standby restocked: node %s for job %s (%zu of %d standby; gang %s)",
               specs[n].name.c_str(), job.req.id.c_str(), a.standby.size(), job.req.standby,
               gang.c_str())});
    }
    it = static_cast<int>(a.standby.size()) < job.req.standby ? std::next(it)
                                                              : short_standby.erase(it);
  }
}

}  // namespace bulwark::sched
