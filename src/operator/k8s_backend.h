// KubernetesBackend: the controller's Backend for one TrainJob on a cluster — a node
// is an agent pod on a cluster node (docs/kubernetes.md, "The operator").
//
// Where a pod goes: with Bulwark's scheduler (scheduling.gang: bulwark), slot s's pod
// is bound (spec.nodeName) to the admission's gang node s and a standby pod to a
// standby node not yet hosting one of the job's pods; with gang: volcano or kueue the
// pod is created unbound and the delegated scheduler binds it. When the placement
// has no node for a request (the job was requeued, a standby not restocked yet)
// StartNode answers kUnavailable and the controller asks again later.
//
// Adoption: every agent's adopt endpoint is written on its pod
// (trainjob::kAgentEndpointAnnotation), so a new leader's runner for the job finds the
// pods of its predecessor (AdoptableNodes) and its controller adopts their agents
// instead of starting new pods.
//
// Lost nodes reach the controller through Poll(): the operator pushes them (node
// failure, pod failure or eviction) with a reason; pods this backend deleted itself are
// not reported. Pods carry Bulwark's finalizer; ReleaseNode/KillNode/Teardown remove it
// after deleting, so no pod is left behind and none disappears unobserved.
//
// Threading: the controller's thread calls the Backend methods; PushLoss may be called
// from any thread (the operator's). Client and ClusterPlacement are thread-safe.
#pragma once

#include <map>
#include <mutex>
#include <set>
#include <string>
#include <vector>

#include "backend/backend.h"
#include "k8s/client.h"
#include "operator/placement.h"
#include "trainjob/render.h"
#include "trainjob/trainjob.h"

namespace bulwark::op {

using trainjob::kAgentFinalizer;

// A refused API call (kPermissionDenied) rewritten for the TrainJob's status and Events:
// the API server's answer plus the fix — the operator's service account lacks what
// deploy/rbac.yaml grants. Other statuses are returned unchanged.
Status ExplainForbidden(const Status& s);

struct KubernetesBackendOptions {
  k8s::Client* client = nullptr;          // not owned
  ClusterPlacement* placement = nullptr;  // not owned; null when a gang scheduler is delegated
  trainjob::TrainJob job;                 // name, namespace, uid, spec
  std::string job_key;                    // "namespace/name": the scheduler's job id
  std::string run_id;                     // distinguishes this runner's pods ("r3")
  trainjob::RenderOptions render;         // controller address filled per request
};

class KubernetesBackend : public Backend {
 public:
  explicit KubernetesBackend(KubernetesBackendOptions opts);
  const char* Name() const override { return "kubernetes"; }
  Status StartNode(const NodeRequest& req) override;
  Status KillNode(const std::string& node_id) override;
  Status ReleaseNode(const std::string& node_id, double grace_s) override;
  std::vector<NodeLoss> Poll() override;
  Status Teardown(double grace_s) override;
  std::string PreferredSpare(int slot, const std::vector<std::string>& ready_spares) override;
  void OnSlotAssigned(const std::string& node_id, int slot) override;
  // The cluster node hosting node_id's pod gets Bulwark's quarantine taint
  // (bulwark.dev/quarantined:NoSchedule, the reason as its value; read-modify-write of
  // spec.taints with the resourceVersion as precondition), as for a failed node: no
  // scheduler places a pod there until an administrator removes it.
  Status QuarantineNode(const std::string& node_id, const std::string& reason) override;
  // Adoption: the job's live pods whose agents published an endpoint (any runner's);
  // each becomes this backend's pod. OnAgentEndpoint writes that annotation.
  std::vector<AdoptableNode> AdoptableNodes() override;
  void OnAgentEndpoint(const std::string& node_id, const std::string& host,
                       int adopt_port) override;

  // A node (agent) of this job was lost: reported by the next Poll unless this backend
  // already deleted that pod. Thread-safe.
  void PushLoss(const std::string& node_id, const std::string& reason);
  // The pod name for node_id (empty if none), and node_id by pod name. Thread-safe.
  std::string PodName(const std::string& node_id) const;
  std::string NodeIdOfPod(const std::string& pod_name) const;
  // Cluster node hosting node_id's pod ("" if unbound or unknown). Thread-safe.
  std::string ClusterNodeOf(const std::string& node_id) const;

 private:
  struct Pod {
    std::string name;
    std::string node;  // cluster node ("" until bound by a delegated scheduler)
    int slot = -1;
    bool released = false;  // deleted by us: its loss is not news
  };
  Status DeletePod(const std::string& name, int64_t grace_s);
  Status DropFinalizer(const std::string& name);
  // Labels node_id's pod a worker of `slot` (what adoption reads after an operator
  // restart). A failed patch is logged and kept in relabel_ for Poll to retry.
  void Relabel(const std::string& node_id, int slot);

  KubernetesBackendOptions opts_;
  mutable std::mutex mu_;
  std::map<std::string, Pod> pods_;  // by node id
  std::vector<NodeLoss> losses_;
  struct PendingRelabel {
    int slot = -1;
    double next_try = 0;  // SystemClock mono time; retried no sooner (an API outage
                          // must not stall every controller turn in Patch's retries)
  };
  std::map<std::string, PendingRelabel> relabel_;  // by node id
};

}  // namespace bulwark::op
