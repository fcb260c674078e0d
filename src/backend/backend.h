// Backend: how the controller obtains and loses nodes. The controller decides; the
// backend only acts. A node is an agent process (local) or an agent pod (Kubernetes).
//
// Contract: StartNode returns once the node's agent has been launched; the agent
// itself connects back to `controller_addr` and says hello with `node_id`. StartNode
// may return UNAVAILABLE meaning "no capacity yet" (e.g. a pod that is still pending):
// the controller then calls StartNode again with the same request (same node_id) at
// most once per second until it succeeds, fails otherwise, or the controller stops
// waiting (ControllerOptions::capacity_wait_s; spares are waited for indefinitely);
// the message says what is missing and becomes part of a "waiting for capacity"
// event. Any other error means the node could not be started at all.
// KillNode is abrupt (chaos: node loss); ReleaseNode is the orderly end of a node the
// controller no longer needs (the controller has already asked its agent to shut
// down). Poll observes without blocking and returns the nodes that disappeared since
// the last call, each once, with a human-readable reason. Teardown releases every
// node (also those still waiting for capacity) and leaves no process or object
// behind; it is bounded in time.
//
// Threading: one controller drives one backend instance, from the controller's thread
// only; implementations need not be thread-safe. Several controllers in one process
// each have their own instance.
#pragma once

#include <string>
#include <vector>

#include "common/status.h"

namespace bulwark {

struct NodeRequest {
  std::string job;
  std::string node_id;          // unique per job, e.g. "node-3"
  std::string controller_addr;  // host:port the agent connects to
  std::string run_dir;          // per-job scratch directory (sockets, logs)
  int slot = -1;                // node slot the agent will serve; -1 = warm standby
};

// An agent started by an earlier controller of the job, which a new controller may
// adopt (docs/protocol.md, "Adoption").
struct AdoptableNode {
  std::string node_id;
  int slot = -1;     // the slot it served; -1 = warm standby
  std::string host;  // where its adopt port listens
  int adopt_port = 0;
  int pid = 0;  // the agent's pid on `host` (0 = unknown)
};

// A node that disappeared, as the backend observed it.
struct NodeLoss {
  std::string node_id;
  // Human-readable, names the cause: "agent exited" (local), "node gke-a-3 NotReady:
  // kubelet stopped posting node status" (Kubernetes). Becomes part of the incident.
  std::string reason;
};

class Backend {
 public:
  virtual ~Backend() = default;
  virtual const char* Name() const = 0;
  virtual Status StartNode(const NodeRequest& req) = 0;
  virtual Status KillNode(const std::string& node_id) = 0;
  virtual Status ReleaseNode(const std::string& node_id, double grace_s) = 0;
  virtual std::vector<NodeLoss> Poll() = 0;
  virtual Status Teardown(double grace_s) = 0;
  // Which warm standby takes `slot`, among `ready_spares` (connected standbys, never
  // empty, in node-id order). An answer outside the list is ignored (the first is
  // taken). Default: the first. Kubernetes: the scheduler's choice (closest standby).
  virtual std::string PreferredSpare(int slot, const std::vector<std::string>& ready_spares) {
    (void)slot;
    return ready_spares.front();
  }
  // node_id failed its diagnostics (stop-diagnose, docs/diagnosis.md): keep its machine
  // out of this and later jobs, with `reason` where people look (Kubernetes: a taint and
  // an annotation on the node; Slurm: drain with a reason). The controller releases the
  // node itself. OK names nothing; an error (no rights, no such capability) says why
  // the machine could not be quarantined, and the controller reports it.
  virtual Status QuarantineNode(const std::string& node_id, const std::string& reason) {
    (void)node_id;
    (void)reason;
    return FailedPrecondition(std::string("the ") + Name() +
                              " backend cannot quarantine a machine");
  }
  // A warm standby was promoted into `slot` (Kubernetes: relabel the pod role=worker).
  virtual void OnSlotAssigned(const std::string& node_id, int slot) {
    (void)node_id;
    (void)slot;
  }
  // Adoption. The agents of the job that an earlier controller started and that may
  // still run, as this backend can see them (Kubernetes: the job's pods and their
  // endpoint annotations; the local backend sees none: the controller's store has them).
  virtual std::vector<AdoptableNode> AdoptableNodes() { return {}; }
  // From now on `n` is this backend's to kill, release and watch, as if it had started
  // it (the controller is about to dial it).
  virtual void AdoptNode(const AdoptableNode& n) { (void)n; }
  // node_id's agent said hello and can be adopted at host:adopt_port (Kubernetes: an
  // annotation on its pod, for the next leader).
  virtual void OnAgentEndpoint(const std::string& node_id, const std::string& host,
                               int adopt_port) {
    (void)node_id;
    (void)host;
    (void)adopt_port;
  }
};

}  // namespace bulwark
