// ClusterPlacement: the operator's single sched::Scheduler over the cluster's nodes,
// addressed by node names and job keys ("namespace/name"), kept in step with the Node
// objects the operator watches.
//
// The scheduler's node set is fixed at creation, so a change in the set of nodes
// (a node added or deleted) rebuilds it: a new Scheduler over the new nodes, every
// running job re-recorded where it runs (Scheduler::Adopt) and every pending job
// re-submitted in its original order. Health changes of known nodes are applied in
// place. A node that fails (NodeView::failed) or disappears while a job holds it goes
// through Scheduler::OnNodeFailure exactly once; the decisions are returned to the
// caller, which acts on them (promote a standby, create a pod on a free node, tear the
// job down for a requeue).
//
// Pure decision plumbing: no I/O; time comes in. Thread-safe: one mutex guards all.
#pragma once

#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <set>
#include <string>
#include <vector>

#include "operator/node_health.h"
#include "sched/scheduler.h"

namespace bulwark::op {

// A running job's nodes by name: gang[slot] and its warm standby.
struct JobNodes {
  std::vector<std::string> gang;
  std::vector<std::string> standby;
  std::string reason;  // the admission's reason
};

// A node-failure decision with names instead of indices.
struct NodeFailure {
  sched::FailureAction action = sched::FailureAction::kNone;
  std::string node;         // the failed node
  std::string job;          // job that held it ("" if none)
  int slot = -1;            // its gang position (-1: idle or a standby)
  std::string replacement;  // node name for kUseStandby / kUseFreeNode / kPreemptForNode
  std::vector<std::string> preempted;
  std::string reason;
};

struct PlacementCycle {
  std::vector<std::pair<std::string, JobNodes>> admitted;      // (job, nodes)
  std::vector<sched::Preemption> preempted;                    // victims are pending again
  std::vector<std::pair<std::string, std::string>> restocked;  // (job, standby node)
};

// In a queue's nominalGpus, borrowingLimitGpus or lendingLimitGpus: every GPU type of
// the cluster the map does not name ({"*": 64} is 64 GPUs of each type).
inline constexpr char kAnyGpuType[] = "*";

class ClusterPlacement {
 public:
  // unlimited_quota: every queue's nominal quota covers every GPU type of the cluster
  // (the operator's default single queue). A "*" key in a queue's maps (kAnyGpuType)
  // is expanded to the cluster's GPU types whenever the node set changes.
  ClusterPlacement(sched::SchedulerConfig config, std::vector<sched::QueueSpec> queues,
                   bool unlimited_quota = false);

  // Brings the node set and health up to date. Returns the failure decisions for nodes
  // that failed or vanished since the last call (each failure once). The first call
  // creates the scheduler; errors (an invalid node set) leave the previous one.
  Result<std::vector<NodeFailure>> SyncNodes(const std::vector<NodeView>& nodes, double now);
  bool ready() const;  // SyncNodes has succeeded once

  // InvalidArgument naming the configured queues when req.queue is not one of them, and
  // the cluster's GPU types when no type has room for the gang.
  Status Submit(const sched::JobRequest& req, double now);
  // Records a job already running on named nodes (an operator restart).
  Status Adopt(const sched::JobRequest& req, const JobNodes& nodes, double now);
  Status Finish(const std::string& job, double now);  // OK when unknown
  PlacementCycle Schedule(double now);
  // A node failed for one job's point of view (e.g. its pod was evicted with the node
  // going away) before SyncNodes noticed: same as a failure seen by SyncNodes.
  NodeFailure FailNode(const std::string& node, double now);

  sched::JobPhase Phase(const std::string& job) const;
  std::string Reason(const std::string& job) const;
  std::optional<JobNodes> Nodes(const std::string& job) const;
  int NodeCount() const;
  std::vector<std::string> QueueNames() const;        // as configured
  std::map<std::string, int> NodesByGpuType() const;  // GPU type -> nodes

 private:
  NodeFailure FailLocked(int index, double now);  // requires mu_
  JobNodes NamesLocked(const sched::Admission& a) const;
  Status RebuildLocked(std::vector<sched::NodeSpec> specs, double now);

  mutable std::mutex mu_;
  sched::SchedulerConfig config_;
  std::vector<sched::QueueSpec> queues_;
  bool unlimited_quota_ = false;
  std::unique_ptr<sched::Scheduler> sched_;
  std::map<std::string, sched::JobRequest> requests_;  // live jobs
  std::vector<std::string> order_;                     // submission order of live jobs
  std::set<std::string> failed_;                       // nodes already reported failed
};

}  // namespace bulwark::op
