#include "naive_scheduler.h"

#include <algorithm>
#include <cmath>
#include <limits>
#include <map>
#include <set>
#include <utility>

namespace bulwark::sched {
namespace {

constexpr long kInf = std::numeric_limits<long>::max() / 4;
constexpr size_t kMaxCandidates = 256;  // same bound as bw_sched (kMaxVictimCandidates)

long Get(const std::map<std::string, int>& m, const std::string& k, long dflt) {
  auto it = m.find(k);
  return it == m.end() ? dflt : it->second;
}

uint64_t Mix(uint64_t x) {
  x += 0x9e3779b97f4a7c15ULL;
  x = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9ULL;
  x = (x ^ (x >> 27)) * 0x94d049bb133111ebULL;
  return x ^ (x >> 31);
}

double Jittered(const SchedulerConfig& c, const std::string& id, int k) {
  uint64_t h = 0xcbf29ce484222325ULL;
  for (unsigned char ch : id) h = (h ^ ch) * 0x100000001b3ULL;
  const double raw = std::min(c.requeue_backoff_cap_s,
                              c.requeue_backoff_base_s * std::ldexp(1.0, std::min(k - 1, 60)));
  const double u =
      static_cast<double>(Mix(c.seed ^ h ^ (static_cast<uint64_t>(k) << 32)) >> 11) * 0x1.0p-53;
  return raw * (0.75 + 0.25 * u);
}

}  // namespace

NaiveScheduler::NaiveScheduler(SchedulerConfig config, std::vector<NodeSpec> nodes,
                               std::vector<QueueSpec> queues)
    : config_(std::move(config)), nodes_(std::move(nodes)), queues_(std::move(queues)) {
  owner_.assign(nodes_.size(), -1);
  standby_.assign(nodes_.size(), 0);
}

int NaiveScheduler::Gpn(const std::string& type) const {
  for (const NodeSpec& n : nodes_) {
    if (n.gpu_type == type) return n.gpus;
  }
  return 0;
}

long NaiveScheduler::Used(int q, const std::string& type) const {
  long used = 0;
  for (size_t i = 0; i < jobs_.size(); ++i) {
    const Job& j = jobs_[i];
    if (j.phase != JobPhase::kRunning || released_[i] || j.req.queue != queues_[q].name ||
        j.req.gpu_type != type) {
      continue;
    }
    used += static_cast<long>(j.adm.nodes.size() + j.adm.standby.size()) * Gpn(type);
  }
  return used;
}

bool NaiveScheduler::QuotaFits(const Job& j, int nodes) const {
  const std::string& t = j.req.gpu_type;
  int qi = 0;
  while (queues_[qi].name != j.req.queue) ++qi;
  const QueueSpec& q = queues_[qi];
  const long demand = static_cast<long>(nodes >= 0 ? nodes : j.req.nodes + j.req.standby) * Gpn(t);
  const long u = Used(qi, t), n = Get(q.nominal_gpus, t, 0);
  const long b = q.cohort.empty() ? 0 : Get(q.borrowing_limit, t, kInf);
  if (u + demand > n + b) return false;
  if (q.cohort.empty()) return true;
  long cap = 0, used = 0, g_self = 0;
  for (size_t p = 0; p < queues_.size(); ++p) {
    if (queues_[p].cohort != q.cohort) continue;
    const long np = Get(queues_[p].nominal_gpus, t, 0);
    const long lend = std::min(np, Get(queues_[p].lending_limit, t, np));
    const long g = np - lend;
    cap += lend;
    used += std::max(0L, Used(static_cast<int>(p), t) - g);
    if (static_cast<int>(p) == qi) g_self = g;
  }
  const long inc = std::max(0L, u + demand - g_self) - std::max(0L, u - g_self);
  return inc <= cap - used;
}

bool NaiveScheduler::IsFree(int n) const {
  const int o = owner_[n];
  return nodes_[n].health == NodeHealth::kReady &&
         (o < 0 || (static_cast<size_t>(o) < released_.size() && released_[o]));
}

std::string NaiveScheduler::NameAt(int n, int level) const {
  const NodeSpec& s = nodes_[n];
  switch (level) {
    case 0:
      return s.zone + "/" + s.block + "/" + s.rack;
    case 1:
      return s.zone + "/" + s.block;
    case 2:
      return s.zone;
    default:
      return "";
  }
}

int NaiveScheduler::Order(int level, const std::string& name) const {
  for (size_t i = 0; i < nodes_.size(); ++i) {
    if (NameAt(static_cast<int>(i), level) == name) return static_cast<int>(i);
  }
  return -1;
}

bool NaiveScheduler::InDom(int n, const std::string& type, Pool pool, const Dom& d) const {
  return nodes_[n].gpu_type == type && nodes_[n].pool == pool &&
         (d.level == 3 || NameAt(n, d.level) == d.name);
}

std::vector<int> NaiveScheduler::FreeIn(const std::string& type, Pool pool, const Dom& d) const {
  std::vector<int> out;
  for (size_t i = 0; i < nodes_.size(); ++i) {
    if (InDom(static_cast<int>(i), type, pool, d) && IsFree(static_cast<int>(i))) {
      out.push_back(static_cast<int>(i));
    }
  }
  return out;
}

int NaiveScheduler::DomFree(const std::string& type, Pool pool, const Dom& d) const {
  return static_cast<int>(FreeIn(type, pool, d).size());
}

bool NaiveScheduler::FindPlacement(const Job& j, Pool* pool_out, Dom* dom_out) const {
  const JobRequest& r = j.req;
  const int need = r.nodes + r.standby;
  std::set<Pool> seen;
  for (Pool pool :
       r.tier == Tier::kProduction ? config_.production_pools : config_.research_pools) {
    if (!seen.insert(pool).second) continue;
    if (DomFree(r.gpu_type, pool, Dom{}) < need) continue;
    for (int level = 0; level <= 2 && level <= static_cast<int>(r.required_level); ++level) {
      for (int attempt = 0; attempt < (r.standby > 0 ? 2 : 1); ++attempt) {
        const int want = attempt == 0 ? need : r.nodes;
        // Best fit: fewest free >= want, then first appearance.
        std::set<std::string> names;
        for (size_t i = 0; i < nodes_.size(); ++i) {
          if (nodes_[i].gpu_type == r.gpu_type && nodes_[i].pool == pool) {
            names.insert(NameAt(static_cast<int>(i), level));
          }
        }
        bool found = false;
        int best_free = 0, best_order = 0;
        std::string best;
        for (const std::string& nm : names) {
          const int f = DomFree(r.gpu_type, pool, Dom{level, nm});
          const int o = Order(level, nm);
          if (f >= want && (!found || f < best_free || (f == best_free && o < best_order))) {
            found = true;
            best_free = f;
            best_order = o;
            best = nm;
          }
        }
        if (found) {
          *pool_out = pool;
          *dom_out = Dom{level, best};
          return true;
        }
      }
    }
    if (r.required_level == TopologyLevel::kAny) {
      *pool_out = pool;
      *dom_out = Dom{};
      return true;
    }
  }
  return false;
}

void NaiveScheduler::Take(const std::string& type, Pool pool, const Dom& d, int k,
                          std::vector<int>* out) {
  if (k <= 0) return;
  if (d.level == 0) {
    std::vector<int> free = FreeIn(type, pool, d);
    for (int i = 0; i < k; ++i) {
      owner_[free[i]] = static_cast<int>(jobs_.size());  // taken; Admit sets the owner
      out->push_back(free[i]);
    }
    return;
  }
  std::set<std::string> names;
  for (size_t i = 0; i < nodes_.size(); ++i) {
    if (InDom(static_cast<int>(i), type, pool, d))
      names.insert(NameAt(static_cast<int>(i), d.level - 1));
  }
  std::vector<std::tuple<int, int, std::string>> kids;  // (-free, order, name)
  for (const std::string& nm : names) {
    const int f = DomFree(type, pool, Dom{d.level - 1, nm});
    if (f > 0) kids.emplace_back(-f, Order(d.level - 1, nm), nm);
  }
  std::sort(kids.begin(), kids.end());
  for (const auto& [negfree, order, nm] : kids) {
    if (k <= 0) break;
    const int n = std::min(k, -negfree);
    Take(type, pool, Dom{d.level - 1, nm}, n, out);
    k -= n;
  }
}

void NaiveScheduler::TakeOutward(const std::string& type, Pool pool, Dom d, int k,
                                 std::vector<int>* out) {
  while (k > 0) {
    const int n = std::min(k, DomFree(type, pool, d));
    Take(type, pool, d, n, out);
    k -= n;
    if (d.level == 3) break;
    // Parent domain: cut the last path component.
    ++d.level;
    d.name = d.level == 3 ? "" : d.name.substr(0, d.name.rfind('/'));
  }
}

void NaiveScheduler::Admit(Job& j, Pool pool, const Dom& d) {
  const int idx = static_cast<int>(&j - jobs_.data());
  Admission a;
  a.job_id = j.req.id;
  a.pool = pool;
  Take(j.req.gpu_type, pool, d, j.req.nodes, &a.nodes);
  TakeOutward(j.req.gpu_type, pool, d, j.req.standby, &a.standby);
  for (int n : a.nodes) owner_[n] = idx;
  for (int n : a.standby) {
    owner_[n] = idx;
    standby_[n] = 1;
  }
  SetLevel(&a);
  a.reason = "admitted";
  j.adm = a;
  j.phase = JobPhase::kRunning;
  j.admit_seq = next_admit_++;
  j.backoff_until = -1;
}

void NaiveScheduler::SetLevel(Admission* a) const {
  a->level = TopologyLevel::kAny;
  a->domain.clear();
  for (int level = 0; level <= 2 && !a->nodes.empty(); ++level) {
    bool same = true;
    for (int n : a->nodes) same = same && NameAt(n, level) == NameAt(a->nodes[0], level);
    if (same) {
      a->level = static_cast<TopologyLevel>(level);
      a->domain = NameAt(a->nodes[0], level);
      break;
    }
  }
}

void NaiveScheduler::Release(Job& j) {
  for (const auto* list : {&j.adm.nodes, &j.adm.standby}) {
    for (int n : *list) {
      owner_[n] = -1;
      standby_[n] = 0;
    }
  }
  j.adm = Admission();
}

int NaiveScheduler::Head(int q, double now) const {
  int best = -1;
  for (size_t i = 0; i < jobs_.size(); ++i) {
    const Job& j = jobs_[i];
    if (j.phase != JobPhase::kPending || j.req.queue != queues_[q].name || j.backoff_until > now ||
        j.preempted_cycle == cycle_) {
      continue;
    }
    if (best < 0 || std::make_pair(-j.req.priority, j.seq) <
                        std::make_pair(-jobs_[best].req.priority, jobs_[best].seq)) {
      best = static_cast<int>(i);
    }
  }
  return best;
}

bool NaiveScheduler::FindVictims(Job& j, std::vector<Job*>* victims) {
  const std::string& t = j.req.gpu_type;
  int qi = 0;
  while (queues_[qi].name != j.req.queue) ++qi;
  auto order = [](const Job* a, const Job* b) {
    if (a->req.priority != b->req.priority) return a->req.priority < b->req.priority;
    return a->admit_seq > b->admit_seq;
  };
  auto running_of = [&](int q, bool lower_only) {
    std::vector<Job*> out;
    for (Job& v : jobs_) {
      if (v.phase == JobPhase::kRunning && v.req.queue == queues_[q].name && v.req.gpu_type == t &&
          (!lower_only || v.req.priority < j.req.priority)) {
        out.push_back(&v);
      }
    }
    std::sort(out.begin(), out.end(), order);
    if (out.size() > kMaxCandidates) out.resize(kMaxCandidates);
    return out;
  };
  std::vector<Job*> cands = running_of(qi, true);
  const long demand = static_cast<long>(j.req.nodes + j.req.standby) * Gpn(t);
  const QueueSpec& q = queues_[qi];
  if (!q.cohort.empty() && Used(qi, t) + demand <= Get(q.nominal_gpus, t, 0)) {
    for (size_t p = 0; p < queues_.size(); ++p) {
      if (static_cast<int>(p) == qi || queues_[p].cohort != q.cohort) continue;
      if (Used(static_cast<int>(p), t) <= Get(queues_[p].nominal_gpus, t, 0)) continue;
      for (Job* v : running_of(static_cast<int>(p), false)) cands.push_back(v);
    }
  }
  std::sort(cands.begin(), cands.end(), order);
  if (cands.size() > kMaxCandidates) cands.resize(kMaxCandidates);
  auto fits = [&] {
    Pool pool;
    Dom d;
    return QuotaFits(j) && FindPlacement(j, &pool, &d);
  };
  auto idx = [&](Job* v) { return static_cast<size_t>(v - jobs_.data()); };
  std::vector<Job*> chosen;
  bool fit = false;
  for (Job* v : cands) {
    released_[idx(v)] = 1;
    chosen.push_back(v);
    if (fits()) {
      fit = true;
      break;
    }
  }
  if (!fit) {
    for (Job* v : chosen) released_[idx(v)] = 0;
    return false;
  }
  for (int i = static_cast<int>(chosen.size()) - 2; i >= 0; --i) {
    released_[idx(chosen[i])] = 0;
    if (fits()) {
      chosen.erase(chosen.begin() + i);
    } else {
      released_[idx(chosen[i])] = 1;
    }
  }
  for (Job* v : chosen) released_[idx(v)] = 0;
  *victims = chosen;
  return true;
}

CycleResult NaiveScheduler::Schedule(double now, int max_admissions) {
  ++cycle_;
  CycleResult r;
  released_.assign(jobs_.size(), 0);
  std::vector<char> failed(queues_.size(), 0);
  std::map<std::string, long> total;
  for (const NodeSpec& n : nodes_) total[n.gpu_type] += n.gpus;
  int admitted = 0;
  while (admitted < max_admissions) {
    if (stop_ && stop_()) {
      stopped_ = true;
      break;
    }
    // Every queue's weighted dominant share, from scratch; the smallest goes first.
    std::vector<std::pair<double, int>> order;
    for (size_t q = 0; q < queues_.size(); ++q) {
      if (failed[q] || Head(static_cast<int>(q), now) < 0) continue;
      double share = 0;
      for (const auto& [type, gpus] : total) {
        share = std::max(share, static_cast<double>(Used(static_cast<int>(q), type)) /
                                    static_cast<double>(gpus));
      }
      order.push_back({share / queues_[q].weight, static_cast<int>(q)});
    }
    if (order.empty()) break;
    std::sort(order.begin(), order.end());
    const int qi = order[0].second;
    Job& j = jobs_[Head(qi, now)];
    ++r.considered;
    Pool pool;
    Dom d;
    if (QuotaFits(j) && FindPlacement(j, &pool, &d)) {
      Admit(j, pool, d);
      r.admitted.push_back(j.adm);
      ++admitted;
      continue;
    }
    std::vector<Job*> victims;
    if (config_.preemption && FindVictims(j, &victims)) {
      for (Job* v : victims) {
        Preemption p;
        p.victim = v->req.id;
        p.preemptor = j.req.id;
        p.reason = "preempted";
        r.preempted.push_back(p);
        Release(*v);
        v->phase = JobPhase::kPending;
        v->preempted_cycle = cycle_;
      }
      FindPlacement(j, &pool, &d);
      Admit(j, pool, d);
      r.admitted.push_back(j.adm);
      ++admitted;
      continue;
    }
    failed[qi] = 1;
  }
  if (config_.restock_standby) Restock(&r);
  return r;
}

void NaiveScheduler::Restock(CycleResult* r) {
  released_.assign(jobs_.size(), 0);
  std::vector<int> order;
  for (size_t i = 0; i < jobs_.size(); ++i) {
    const Job& j = jobs_[i];
    if (j.phase == JobPhase::kRunning && static_cast<int>(j.adm.standby.size()) < j.req.standby) {
      order.push_back(static_cast<int>(i));
    }
  }
  std::sort(order.begin(), order.end(), [&](int a, int b) {
    if (jobs_[a].req.priority != jobs_[b].req.priority) {
      return jobs_[a].req.priority > jobs_[b].req.priority;
    }
    return jobs_[a].admit_seq < jobs_[b].admit_seq;
  });
  for (int ji : order) {
    Job& j = jobs_[ji];
    Admission& a = j.adm;
    const Dom gang{static_cast<int>(a.level), a.domain};
    while (static_cast<int>(a.standby.size()) < j.req.standby &&
           DomFree(j.req.gpu_type, a.pool, Dom{3, ""}) > 0 && QuotaFits(j, 1)) {
      std::vector<int> got;
      TakeOutward(j.req.gpu_type, a.pool, gang, 1, &got);
      owner_[got[0]] = ji;
      standby_[got[0]] = 1;
      a.standby.push_back(got[0]);
      r->restocked.push_back({j.req.id, got[0], "restocked"});
    }
  }
}

int NaiveScheduler::ClosestFree(int node, TopologyLevel limit) const {
  const NodeSpec& s = nodes_[node];
  for (int level = 0; level <= static_cast<int>(limit); ++level) {
    std::vector<int> f = FreeIn(s.gpu_type, s.pool, Dom{level, NameAt(node, level)});
    if (!f.empty()) return f[0];
  }
  return -1;
}

NodeFailureDecision NaiveScheduler::OnNodeFailure(int node, double now) {
  NodeFailureDecision d;
  d.failed_node = node;
  if (node < 0 || node >= static_cast<int>(nodes_.size())) return d;
  released_.assign(jobs_.size(), 0);
  nodes_[node].health = NodeHealth::kQuarantined;
  const int ji = owner_[node];
  if (ji < 0) return d;
  Job& j = jobs_[ji];
  d.job_id = j.req.id;
  Admission& a = j.adm;
  owner_[node] = -1;
  if (standby_[node]) {
    standby_[node] = 0;
    a.standby.erase(std::find(a.standby.begin(), a.standby.end(), node));
    return d;
  }
  const size_t pos = std::find(a.nodes.begin(), a.nodes.end(), node) - a.nodes.begin();
  if (!a.standby.empty()) {
    auto closeness = [&](int s) {
      for (int level = 0; level <= 2; ++level) {
        if (NameAt(s, level) == NameAt(node, level)) return level;
      }
      return 3;
    };
    int best = a.standby[0];
    for (int s : a.standby) {
      if (std::make_pair(closeness(s), s) < std::make_pair(closeness(best), best)) best = s;
    }
    a.standby.erase(std::find(a.standby.begin(), a.standby.end(), best));
    standby_[best] = 0;
    a.nodes[pos] = best;
    SetLevel(&a);
    d.action = FailureAction::kUseStandby;
    d.replacement = best;
    return d;
  }
  const TopologyLevel limit = j.req.required_level;
  int r = ClosestFree(node, limit);
  if (r >= 0) {
    owner_[r] = ji;
    a.nodes[pos] = r;
    SetLevel(&a);
    d.action = FailureAction::kUseFreeNode;
    d.replacement = r;
    return d;
  }
  if (config_.preemption) {
    std::vector<Job*> lower;
    for (Job& v : jobs_) {
      if (v.phase == JobPhase::kRunning && v.req.queue == j.req.queue &&
          v.req.priority < j.req.priority) {
        lower.push_back(&v);
      }
    }
    std::sort(lower.begin(), lower.end(), [](const Job* x, const Job* y) {
      if (x->req.priority != y->req.priority) return x->req.priority < y->req.priority;
      return x->admit_seq > y->admit_seq;
    });
    const Dom allowed{static_cast<int>(limit), NameAt(node, static_cast<int>(limit))};
    for (size_t i = 0; i < lower.size() && i < kMaxCandidates; ++i) {
      Job* v = lower[i];
      if (v->req.gpu_type != j.req.gpu_type) continue;
      bool reach = false;
      for (const auto* list : {&v->adm.nodes, &v->adm.standby}) {
        for (int vn : *list) {
          reach = reach || (nodes_[vn].health == NodeHealth::kReady &&
                            InDom(vn, j.req.gpu_type, nodes_[node].pool, allowed));
        }
      }
      if (!reach) continue;
      Release(*v);
      v->phase = JobPhase::kPending;
      r = ClosestFree(node, limit);
      owner_[r] = ji;
      a.nodes[pos] = r;
      SetLevel(&a);
      SetLevel(&a);
      d.action = FailureAction::kPreemptForNode;
      d.replacement = r;
      d.preempted.push_back(v->req.id);
      return d;
    }
  }
  a.nodes.erase(a.nodes.begin() + static_cast<long>(pos));
  ++j.requeues;
  d.requeue_after_s = Jittered(config_, j.req.id, j.requeues);
  Release(j);
  j.phase = JobPhase::kPending;
  j.backoff_until = now + d.requeue_after_s;
  d.action = FailureAction::kRequeue;
  return d;
}

Status NaiveScheduler::SetNodeHealth(int node, NodeHealth health) {
  if (node < 0 || node >= static_cast<int>(nodes_.size())) return InvalidArgument("node");
  nodes_[node].health = health;
  return Status::Ok();
}

Status NaiveScheduler::Submit(const JobRequest& job, double /*now*/) {
  auto it = ids_.find(job.id);
  if (job.id.empty() || (it != ids_.end() && jobs_[it->second].phase != JobPhase::kFinished)) {
    return InvalidArgument("id");
  }
  bool queue_ok = false;
  for (const QueueSpec& q : queues_) queue_ok = queue_ok || q.name == job.queue;
  int have = 0;
  for (const NodeSpec& n : nodes_) have += n.gpu_type == job.gpu_type;
  if (!queue_ok || job.nodes < 1 || job.standby < 0 || job.nodes > have) {
    return InvalidArgument("job");
  }
  Job j;
  j.req = job;
  j.seq = next_seq_++;
  ids_[job.id] = static_cast<int>(jobs_.size());
  jobs_.push_back(std::move(j));
  released_.push_back(0);
  return Status::Ok();
}

Status NaiveScheduler::Finish(const std::string& job_id, double /*now*/) {
  auto it = ids_.find(job_id);
  if (it == ids_.end()) return NotFound(job_id);
  Job& j = jobs_[it->second];
  if (j.phase == JobPhase::kFinished) return FailedPrecondition(job_id);
  if (j.phase == JobPhase::kRunning) Release(j);
  j.phase = JobPhase::kFinished;
  return Status::Ok();
}

JobPhase NaiveScheduler::Phase(const std::string& job_id) const {
  auto it = ids_.find(job_id);
  return it == ids_.end() ? JobPhase::kFinished : jobs_[it->second].phase;
}

const Admission* NaiveScheduler::Placement(const std::string& job_id) const {
  auto it = ids_.find(job_id);
  if (it == ids_.end() || jobs_[it->second].phase != JobPhase::kRunning) return nullptr;
  return &jobs_[it->second].adm;
}

int NaiveScheduler::PendingJobs() const {
  int n = 0;
  for (const Job& j : jobs_) n += j.phase == JobPhase::kPending;
  return n;
}

int NaiveScheduler::RunningJobs() const {
  int n = 0;
  for (const Job& j : jobs_) n += j.phase == JobPhase::kRunning;
  return n;
}

}  // namespace bulwark::sched
