#include "operator/placement.h"

#include <algorithm>
#include <map>

namespace bulwark::op {
namespace {

// A quota map's "*" entry stands for every GPU type of the cluster it does not name.
void ExpandWildcard(const std::vector<sched::NodeSpec>& nodes, std::map<std::string, int>* m) {
  auto star = m->find(std::string(kAnyGpuType));
  if (star == m->end()) return;
  const int v = star->second;
  m->erase(star);
  for (const sched::NodeSpec& n : nodes) m->emplace(n.gpu_type, v);
}

}  // namespace

ClusterPlacement::ClusterPlacement(sched::SchedulerConfig config,
                                   std::vector<sched::QueueSpec> queues, bool unlimited_quota)
    : config_(std::move(config)), queues_(std::move(queues)), unlimited_quota_(unlimited_quota) {}

bool ClusterPlacement::ready() const {
  std::lock_guard<std::mutex> l(mu_);
  return sched_ != nullptr;
}

JobNodes ClusterPlacement::NamesLocked(const sched::Admission& a) const {
  JobNodes out;
  for (int n : a.nodes) out.gang.push_back(sched_->Node(n).name);
  for (int n : a.standby) out.standby.push_back(sched_->Node(n).name);
  out.reason = a.reason;
  return out;
}

NodeFailure ClusterPlacement::FailLocked(int index, double now) {
  NodeFailure f;
  f.node = sched_->Node(index).name;
  const sched::NodeFailureDecision d = sched_->OnNodeFailure(index, now);
  failed_.insert(f.node);
  f.action = d.action;
  f.job = d.job_id;
  f.reason = d.reason;
  f.preempted = d.preempted;
  if (d.replacement >= 0) {
    f.replacement = sched_->Node(d.replacement).name;
    if (const sched::Admission* a = sched_->Placement(d.job_id)) {
      auto it = std::find(a->nodes.begin(), a->nodes.end(), d.replacement);
      if (it != a->nodes.end()) f.slot = static_cast<int>(it - a->nodes.begin());
    }
  }
  return f;
}

Status ClusterPlacement::RebuildLocked(std::vector<sched::NodeSpec> specs, double now) {
  // Running jobs keep their nodes (by name); nodes gone from the cluster were failed
  // (and replaced or requeued) before this point, so every name resolves.
  std::vector<std::pair<std::string, JobNodes>> running;
  if (sched_) {
    for (const std::string& id : order_) {
      if (const sched::Admission* a = sched_->Placement(id)) {
        running.emplace_back(id, NamesLocked(*a));
      }
    }
  }
  std::vector<sched::QueueSpec> queues = queues_;
  for (sched::QueueSpec& q : queues) {
    if (unlimited_quota_) q.nominal_gpus["*"] = 1 << 30;
    ExpandWildcard(specs, &q.nominal_gpus);
    ExpandWildcard(specs, &q.borrowing_limit);
    ExpandWildcard(specs, &q.lending_limit);
  }
  BW_ASSIGN_OR_RETURN(auto fresh, sched::Scheduler::Create(config_, std::move(specs), queues));
  auto resolve = [&](const std::vector<std::string>& names) {
    std::vector<int> out;
    for (const std::string& n : names) {
      const int i = fresh->NodeIndex(n);
      if (i >= 0) out.push_back(i);
    }
    return out;
  };
  for (const std::string& id : order_) {
    const sched::JobRequest& req = requests_.at(id);
    auto it =
        std::find_if(running.begin(), running.end(), [&](const auto& r) { return r.first == id; });
    Status st = it != running.end()
                    ? fresh->Adopt(req, resolve(it->second.gang), resolve(it->second.standby), now)
                    : fresh->Submit(req, now);
    if (!st.ok()) return st.Annotate("rebuilding the scheduler for a changed node set");
  }
  sched_ = std::move(fresh);
  return Status::Ok();
}

Result<std::vector<NodeFailure>> ClusterPlacement::SyncNodes(const std::vector<NodeView>& nodes,
                                                             double now) {
  std::lock_guard<std::mutex> l(mu_);
  std::vector<NodeFailure> out;
  std::set<std::string> names;
  for (const NodeView& v : nodes) names.insert(v.spec.name);
  bool same_set = sched_ != nullptr && sched_->NodeCount() == static_cast<int>(nodes.size());
  if (sched_) {
    // Nodes that vanished: fail them first, while the old scheduler still knows them.
    for (int i = 0; i < sched_->NodeCount(); ++i) {
      const std::string& name = sched_->Node(i).name;
      if (names.count(name)) continue;
      same_set = false;
      if (!failed_.count(name)) out.push_back(FailLocked(i, now));
    }
    for (const NodeView& v : nodes) same_set = same_set && sched_->NodeIndex(v.spec.name) >= 0;
  }
  if (!same_set) {
    std::vector<sched::NodeSpec> specs;
    for (const NodeView& v : nodes) specs.push_back(v.spec);
    BW_RETURN_IF_ERROR(RebuildLocked(std::move(specs), now));
  }
  for (const NodeView& v : nodes) {
    const int i = sched_->NodeIndex(v.spec.name);
    if (v.failed) {
      if (!failed_.count(v.spec.name)) out.push_back(FailLocked(i, now));
      continue;
    }
    if (failed_.count(v.spec.name) && v.quarantined) continue;  // until the taint goes
    failed_.erase(v.spec.name);
    if (sched_->Node(i).health != v.spec.health) {
      BW_RETURN_IF_ERROR(sched_->SetNodeHealth(i, v.spec.health));
    }
  }
  return out;
}

std::vector<std::string> ClusterPlacement::QueueNames() const {
  std::vector<std::string> out;
  for (const sched::QueueSpec& q : queues_) out.push_back(q.name);
  return out;
}

std::map<std::string, int> ClusterPlacement::NodesByGpuType() const {
  std::lock_guard<std::mutex> l(mu_);
  std::map<std::string, int> out;
  for (int i = 0; sched_ && i < sched_->NodeCount(); ++i) ++out[sched_->Node(i).gpu_type];
  return out;
}

Status ClusterPlacement::Submit(const sched::JobRequest& req, double now) {
  const std::vector<std::string> names = QueueNames();
  if (std::find(names.begin(), names.end(), req.queue) == names.end()) {
    std::string known;
    for (const std::string& n : names) known += (known.empty() ? "" : ", ") + n;
    return InvalidArgument("scheduling.queue: no queue \"" + req.queue +
                           "\" is configured; the operator's queues are: " + known +
                           " (set scheduling.queue to one of them, or add the queue to the "
                           "operator's --queues file, the bulwark-queues ConfigMap; "
                           "docs/kubernetes.md, \"Queues\")");
  }
  const std::map<std::string, int> types = NodesByGpuType();
  std::lock_guard<std::mutex> l(mu_);
  if (!sched_) return FailedPrecondition("the scheduler has not seen the cluster's nodes yet");
  if (Status st = sched_->Submit(req, now); !st.ok()) {
    if (types.count(req.gpu_type) && types.at(req.gpu_type) >= req.nodes) return st;
    std::string have;
    for (const auto& [t, n] : types) {
      have += (have.empty() ? "" : ", ") + t + " " + std::to_string(n);
    }
    return Status(st.code(), st.message() + "; the cluster's nodes by GPU type: " +
                                 (have.empty() ? "none" : have) +
                                 " (docs/kubernetes.md, \"GPU types\")");
  }
  requests_[req.id] = req;
  order_.push_back(req.id);
  return Status::Ok();
}

Status ClusterPlacement::Adopt(const sched::JobRequest& req, const JobNodes& nodes, double now) {
  std::lock_guard<std::mutex> l(mu_);
  if (!sched_) return FailedPrecondition("the scheduler has not seen the cluster's nodes yet");
  std::vector<int> gang, standby;
  for (const auto* names : {&nodes.gang, &nodes.standby}) {
    for (const std::string& n : *names) {
      const int index = sched_->NodeIndex(n);
      if (index < 0) {
        return NotFound("node " + n + " is not among the cluster's " +
                        std::to_string(sched_->NodeCount()) +
                        " schedulable nodes (kubectl get nodes lists them)");
      }
      (names == &nodes.gang ? gang : standby).push_back(index);
    }
  }
  BW_RETURN_IF_ERROR(sched_->Adopt(req, gang, standby, now));
  requests_[req.id] = req;
  order_.push_back(req.id);
  return Status::Ok();
}

Status ClusterPlacement::Finish(const std::string& job, double now) {
  std::lock_guard<std::mutex> l(mu_);
  if (!requests_.erase(job)) return Status::Ok();
  order_.erase(std::find(order_.begin(), order_.end(), job));
  if (!sched_ || sched_->Phase(job) == sched::JobPhase::kFinished) return Status::Ok();
  return sched_->Finish(job, now);
}

PlacementCycle ClusterPlacement::Schedule(double now) {
  std::lock_guard<std::mutex> l(mu_);
  PlacementCycle out;
  if (!sched_) return out;
  const sched::CycleResult r = sched_->Schedule(now);
  for (const sched::Admission& a : r.admitted) {
    if (sched_->Phase(a.job_id) != sched::JobPhase::kRunning) continue;  // preempted again
    out.admitted.emplace_back(a.job_id, NamesLocked(*sched_->Placement(a.job_id)));
  }
  out.preempted = r.preempted;
  for (const sched::StandbyRestock& x : r.restocked) {
    out.restocked.emplace_back(x.job_id, sched_->Node(x.node).name);
  }
  return out;
}

NodeFailure ClusterPlacement::FailNode(const std::string& node, double now) {
  std::lock_guard<std::mutex> l(mu_);
  const int i = sched_ ? sched_->NodeIndex(node) : -1;
  if (i < 0 || failed_.count(node)) {
    NodeFailure f;
    f.node = node;
    f.reason = i < 0 ? "unknown node" : "already failed";
    return f;
  }
  return FailLocked(i, now);
}

sched::JobPhase ClusterPlacement::Phase(const std::string& job) const {
  std::lock_guard<std::mutex> l(mu_);
  return sched_ ? sched_->Phase(job) : sched::JobPhase::kFinished;
}

std::string ClusterPlacement::Reason(const std::string& job) const {
  std::lock_guard<std::mutex> l(mu_);
  return sched_ ? sched_->Reason(job) : "waiting: the cluster's nodes are not known yet";
}

std::optional<JobNodes> ClusterPlacement::Nodes(const std::string& job) const {
  std::lock_guard<std::mutex> l(mu_);
  const sched::Admission* a = sched_ ? sched_->Placement(job) : nullptr;
  if (!a) return std::nullopt;
  return NamesLocked(*a);
}

int ClusterPlacement::NodeCount() const {
  std::lock_guard<std::mutex> l(mu_);
  return sched_ ? sched_->NodeCount() : 0;
}

}  // namespace bulwark::op
