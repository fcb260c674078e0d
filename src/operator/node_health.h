// Reading Kubernetes Node and Pod objects into the scheduler's cluster model and into
// health verdicts. Pure functions of the objects: no I/O, no clock (times come in).
//
// Node -> sched::NodeSpec (docs/kubernetes.md, "Nodes"):
//   name        metadata.name
//   gpu_type    GpuTypeFromLabels (operator/gpu_type.h: bulwark.dev/gpu-type, else
//               nvidia.com/gpu.product, else the clouds' accelerator and instance-type
//               labels), else "gpu"; "cpu" when the node has none of the GPU resource
//               (one job per node)
//   gpus        status.allocatable[<gpu resource>] (an integer quantity), else 1 for "cpu"
//   pool        label bulwark.dev/pool (on-demand | spot | reserved), else spot when a
//               cloud's spot label says so (GKE spot/preemptible, EKS capacityType SPOT,
//               Karpenter capacity-type spot, AKS scalesetpriority spot), else on-demand
//   zone        label topology.kubernetes.io/zone
//   block       bulwark.dev/block, cloud.google.com/gce-topology-block,
//               topology.k8s.aws/network-node-layer-2
//   rack        bulwark.dev/rack, cloud.google.com/gce-topology-subblock,
//               topology.k8s.aws/network-node-layer-3   (missing labels: "-")
//   price       annotation bulwark.dev/price-per-gpu-hour
//
// Health: a node is *failed* (its training pods are lost) when its Ready condition is
// not True, it carries a NoExecute taint of the node lifecycle controller
// (node.kubernetes.io/not-ready, unreachable, out-of-service), a GPU-health taint, a
// spot/preemption termination taint, or a problem condition (node-problem-detector
// conditions listed in kProblemConditions) is True. It is *cordoned* when
// spec.unschedulable, *draining* when the cluster autoscaler marked it for deletion,
// *quarantined* when it carries Bulwark's quarantine taint. A failed node hosting
// training pods is quarantined by the operator (taint + Event).
#pragma once

#include <string>
#include <vector>

#include "common/json_util.h"
#include "sched/scheduler.h"
#include "trainjob/render.h"

namespace bulwark::op {

using trainjob::kQuarantineTaint;

struct NodeView {
  sched::NodeSpec spec;      // health filled from the verdict below
  bool failed = false;       // pods on it are lost
  std::string reason;        // why failed / cordoned / draining ("" when ready)
  bool quarantined = false;  // carries kQuarantineTaint
  std::string gpu_note;      // why gpu_type is not a known model ("" when it is)
};

// gpu_resource: the extended resource counted as GPUs ("nvidia.com/gpu").
NodeView ReadNode(const Json& node, const std::string& gpu_resource);
// Whether two views differ in anything the scheduler or the failure handling reads
// (a node's status heartbeat alone changes nothing here).
bool SameView(const NodeView& a, const NodeView& b);

// Why a training pod is lost, or "" if it is not: phase Failed (with the container's
// termination reason and exit code), a DisruptionTarget condition (eviction,
// preemption, taint manager), or a deletionTimestamp set by someone else.
std::string PodTrouble(const Json& pod);

// Parses a Kubernetes quantity that must be a whole number ("8", "8000m" -> 8); -1 when
// it is not (fractions, garbage).
long WholeQuantity(const Json& q);

// The node's taint list with Bulwark's quarantine taint (trainjob::RenderQuarantineTaint)
// added, or a null Json when the node already carries it.
Json WithQuarantineTaint(const Json& node, const std::string& reason);

}  // namespace bulwark::op
