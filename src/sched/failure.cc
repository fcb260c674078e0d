// Node failure handling: standby -> closest free node -> preempt for a node -> requeue.
#include <algorithm>
#include <cmath>

#include "sched/scheduler_impl.h"

namespace bulwark::sched {
namespace {

uint64_t SplitMix64(uint64_t x) {
  x += 0x9e3779b97f4a7c15ULL;
  x = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9ULL;
  x = (x ^ (x >> 27)) * 0x94d049bb133111ebULL;
  return x ^ (x >> 31);
}

uint64_t Fnv1a(const std::string& s) {
  uint64_t h = 0xcbf29ce484222325ULL;
  for (unsigned char c : s) {
    h ^= c;
    h *= 0x100000001b3ULL;
  }
  return h;
}

}  // namespace

double RequeueBackoff(const SchedulerConfig& c, const std::string& job_id, int requeues) {
  const int k = std::max(1, requeues);
  const double raw = std::min(c.requeue_backoff_cap_s,
                              c.requeue_backoff_base_s * std::ldexp(1.0, std::min(k - 1, 60)));
  const uint64_t h = SplitMix64(c.seed ^ Fnv1a(job_id) ^ (static_cast<uint64_t>(k) << 32));
  const double u = static_cast<double>(h >> 11) * 0x1.0p-53;
  return raw * (0.75 + 0.25 * u);
}

double Scheduler::Impl::Backoff(const JobState& j) const {
  return RequeueBackoff(config, j.req.id, j.requeues);
}

int Scheduler::Impl::ClosestFree(int node, TopologyLevel limit) const {
  for (TopologyLevel l :
       {TopologyLevel::kRack, TopologyLevel::kBlock, TopologyLevel::kZone, TopologyLevel::kAny}) {
    if (l > limit) break;
    const int r = index.LowestFree(index.DomainOf(node, l));
    if (r >= 0) return r;
  }
  return -1;
}

NodeFailureDecision Scheduler::Impl::OnNodeFailure(int node, double now) {
  NodeFailureDecision d;
  d.failed_node = node;
  last_now = std::max(last_now, now);
  if (node < 0 || node >= static_cast<int>(nodes.size())) {
    d.reason = Fmt("node index %d out of range", node);
    return d;
  }
  NodeState& n = nodes[node];
  const std::string& name = specs[node].name;
  ++cap_version[n.type];
  if (index.IsFree(node)) index.RemoveFree(node);
  n.health = NodeHealth::kQuarantined;
  specs[node].health = NodeHealth::kQuarantined;
  if (n.owner < 0) {
    d.reason = "node " + name + " failed while idle; quarantined";
    return d;
  }
  const int j = n.owner;
  JobState& job = jobs[j];
  Admission& a = job.adm;
  const int gpn = gpus_per_node[job.type];
  d.job_id = job.req.id;
  Touch(job.queue);
  n.owner = -1;
  if (n.standby) {
    n.standby = false;
    a.standby.erase(std::find(a.standby.begin(), a.standby.end(), node));
    job.charge -= gpn;
    SetUsage(job.queue, job.type, -gpn);
    UpdateShare(job.queue);
    d.reason = Fmt("node %s failed: job %s lost a standby node (%zu left); quarantined",
                   name.c_str(), job.req.id.c_str(), a.standby.size());
    MarkShortStandby(j);
    return d;
  }
  const size_t pos = std::find(a.nodes.begin(), a.nodes.end(), node) - a.nodes.begin();

  // 1. A reserved standby, the closest first (rack, block, zone; then lowest index).
  if (!a.standby.empty()) {
    auto closeness = [&](int s) {
      for (TopologyLevel l : {TopologyLevel::kRack, TopologyLevel::kBlock, TopologyLevel::kZone}) {
        if (index.DomainOf(s, l) == index.DomainOf(node, l)) return static_cast<int>(l);
      }
      return 3;
    };
    int best = -1;
    for (int s : a.standby) {
      if (best < 0 || std::make_pair(closeness(s), s) < std::make_pair(closeness(best), best)) {
        best = s;
      }
    }
    a.standby.erase(std::find(a.standby.begin(), a.standby.end(), best));
    nodes[best].standby = false;
    a.nodes[pos] = best;
    job.charge -= gpn;
    SetUsage(job.queue, job.type, -gpn);
    UpdateShare(job.queue);
    FillPlacementInfo(&a);
    d.action = FailureAction::kUseStandby;
    d.replacement = best;
    MarkShortStandby(j);
    d.reason = Fmt("node %s failed: job %s continues on its standby node %s", name.c_str(),
                   job.req.id.c_str(), specs[best].name.c_str());
    return d;
  }

  // 2. A free node of the same type and pool, as close as found within the job's
  //    required domain.
  const TopologyLevel limit = job.req.required_level;
  auto take = [&](int r) {
    index.RemoveFree(r);
    nodes[r].owner = j;
    a.nodes[pos] = r;
    FillPlacementInfo(&a);
    d.replacement = r;
  };
  int r = ClosestFree(node, limit);
  if (r >= 0) {
    take(r);
    d.action = FailureAction::kUseFreeNode;
    d.reason = Fmt("node %s failed: job %s continues on free node %s", name.c_str(),
                   job.req.id.c_str(), specs[r].name.c_str());
    return d;
  }

  // 3. Preempt a lower-priority job of the same queue holding a ready node in reach.
  if (config.preemption) {
    const int allowed = index.DomainOf(node, limit);
    int examined = 0;
    for (const auto& [prio, neg_seq, v] : queues[job.queue].running) {
      if (prio >= job.req.priority || ++examined > kMaxVictimCandidates) break;
      if (v == j || jobs[v].type != job.type) continue;
      bool reach = false;
      for (const auto* list : {&jobs[v].adm.nodes, &jobs[v].adm.standby}) {
        for (int vn : *list) {
          reach = reach ||
                  (nodes[vn].health == NodeHealth::kReady && index.DomainOf(vn, limit) == allowed);
        }
      }
      if (!reach) continue;
      const int victim = v;  // Evict invalidates the iterator
      Preemption p;
      IndexRelease(victim);
      Evict(victim, j, now, &p);
      r = ClosestFree(node, limit);
      take(r);
      d.action = FailureAction::kPreemptForNode;
      d.preempted.push_back(p.victim);
      d.reason =
          Fmt("node %s failed: job %s continues on node %s freed by preempting job %s "
              "(priority %d > %d)",
              name.c_str(), job.req.id.c_str(), specs[r].name.c_str(), p.victim.c_str(),
              job.req.priority, jobs[victim].req.priority);
      return d;
    }
  }

  // 4. Requeue with exponential backoff.
  a.nodes.erase(a.nodes.begin() + static_cast<long>(pos));
  ++job.requeues;
  d.requeue_after_s = Backoff(job);
  IndexRelease(j);
  FinishRelease(j);
  AddPending(j);
  job.backoff_until = now + d.requeue_after_s;
  UpdateShare(job.queue);
  d.action = FailureAction::kRequeue;
  d.reason =
      Fmt("node %s failed: no standby, free node or lower-priority job in reach; job %s "
          "requeued (failure %d) until t=%.1f",
          name.c_str(), job.req.id.c_str(), job.requeues, job.backoff_until);
  job.reason = "waiting: requeue backoff until t=" + Fmt("%.1f", job.backoff_until);
  return d;
}

}  // namespace bulwark::sched
