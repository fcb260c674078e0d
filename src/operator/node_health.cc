#include "operator/node_health.h"

#include <cctype>
#include <cstdlib>

#include "operator/gpu_type.h"

namespace bulwark::op {
namespace {

// node-problem-detector (and similar) conditions that mean the node cannot train.
constexpr const char* kProblemConditions[] = {"KernelDeadlock",     "ReadonlyFilesystem",
                                              "NetworkUnavailable", "GPUUnhealthy",
                                              "GpuUnhealthy",       "XidCriticalError"};
// Taints that mean the node is going away or its GPUs are bad.
constexpr const char* kFailedTaints[] = {
    "node.kubernetes.io/not-ready",
    "node.kubernetes.io/unreachable",
    "node.kubernetes.io/out-of-service",
    "nvidia.com/gpu.unhealthy",
    "nvidia.com/gpu-unhealthy",
    "amd.com/gpu.unhealthy",
    "cloud.google.com/impending-node-termination",
    "aws-node-termination-handler/spot-itn",
    "aws-node-termination-handler/scheduled-maintenance",
    "kubernetes.azure.com/scheduled-event",
};
constexpr const char* kDrainTaints[] = {"ToBeDeletedByClusterAutoscaler", "karpenter.sh/disrupted"};

std::string Str(const Json& obj, const char* key) {
  if (!obj.is_object()) return "";
  auto it = obj.find(key);
  return it != obj.end() && it->is_string() ? it->get<std::string>() : "";
}

const Json& Sub(const Json& obj, const char* key) {
  static const Json kNull;
  if (!obj.is_object()) return kNull;
  auto it = obj.find(key);
  return it == obj.end() ? kNull : *it;
}

std::string FirstLabel(const Json& labels, std::initializer_list<const char*> keys) {
  for (const char* k : keys) {
    std::string v = Str(labels, k);
    if (!v.empty()) return v;
  }
  return "";
}

bool LabelIs(const Json& labels, const char* key, const char* value) {
  std::string v = Str(labels, key);
  for (char& c : v) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
  return v == value;
}

}  // namespace

long WholeQuantity(const Json& q) {
  if (q.is_number_integer()) return q.get<long>() >= 0 ? q.get<long>() : -1;
  if (!q.is_string()) return -1;
  const std::string s = q.get<std::string>();
  if (s.empty() || s.size() > 18) return -1;
  size_t i = 0;
  long v = 0;
  while (i < s.size() && std::isdigit(static_cast<unsigned char>(s[i])))
    v = v * 10 + (s[i++] - '0');
  if (i == 0) return -1;
  const std::string suffix = s.substr(i);
  if (suffix.empty()) return v;
  if (suffix == "m") return v % 1000 == 0 ? v / 1000 : -1;
  if (suffix == "k") return v * 1000;
  return -1;
}

NodeView ReadNode(const Json& node, const std::string& gpu_resource) {
  NodeView v;
  const Json& meta = Sub(node, "metadata");
  const Json& labels = Sub(meta, "labels");
  const Json& spec = Sub(node, "spec");
  const Json& status = Sub(node, "status");
  sched::NodeSpec& n = v.spec;
  n.name = Str(meta, "name");
  const long gpus = WholeQuantity(Sub(Sub(status, "allocatable"), gpu_resource.c_str()));
  if (gpus > 0) {
    n.gpus = static_cast<int>(gpus);
    GpuTypeGuess g = GpuTypeFromLabels(labels);
    n.gpu_type = g.type.empty() ? "gpu" : g.type;
    v.gpu_note = g.type.empty() ? "no label names the node's GPU model (bulwark.dev/gpu-type, "
                                  "nvidia.com/gpu.product, a cloud accelerator or instance-type "
                                  "label): its GPU type is \"gpu\" (docs/kubernetes.md, "
                                  "\"GPU types\")"
                                : g.note;
  } else {
    n.gpus = 1;
    n.gpu_type = "cpu";
  }
  const std::string pool = Str(labels, "bulwark.dev/pool");
  if (pool == "spot" || pool == "reserved" || pool == "on-demand") {
    n.pool = *sched::ParsePool(pool);
  } else if (LabelIs(labels, "cloud.google.com/gke-spot", "true") ||
             LabelIs(labels, "cloud.google.com/gke-preemptible", "true") ||
             LabelIs(labels, "eks.amazonaws.com/capacitytype", "spot") ||
             LabelIs(labels, "eks.amazonaws.com/capacityType", "spot") ||
             LabelIs(labels, "karpenter.sh/capacity-type", "spot") ||
             LabelIs(labels, "kubernetes.azure.com/scalesetpriority", "spot")) {
    n.pool = sched::Pool::kSpot;
  }
  n.zone = FirstLabel(labels, {"topology.kubernetes.io/zone"});
  n.block = FirstLabel(labels, {"bulwark.dev/block", "cloud.google.com/gce-topology-block",
                                "topology.k8s.aws/network-node-layer-2"});
  n.rack = FirstLabel(labels, {"bulwark.dev/rack", "cloud.google.com/gce-topology-subblock",
                               "topology.k8s.aws/network-node-layer-3"});
  for (std::string* s : {&n.zone, &n.block, &n.rack}) {
    if (s->empty()) *s = "-";
  }
  const std::string price = Str(Sub(meta, "annotations"), "bulwark.dev/price-per-gpu-hour");
  if (!price.empty()) {
    char* end = nullptr;
    const double p = std::strtod(price.c_str(), &end);
    if (end != price.c_str() && *end == '\0' && p >= 0) n.price_per_gpu_hour = p;
  }

  // Health: the first failure found wins the reason; cordon/drain are weaker verdicts.
  std::string failed, drain;
  bool ready_seen = false;
  for (const Json& c :
       Sub(status, "conditions").is_array() ? Sub(status, "conditions") : Json::array()) {
    const std::string type = Str(c, "type"), st = Str(c, "status");
    const std::string why =
        Str(c, "reason") + (Str(c, "message").empty() ? std::string() : ": " + Str(c, "message"));
    if (type == "Ready") {
      ready_seen = true;
      if (st != "True" && failed.empty()) failed = "NotReady (" + st + ") " + why;
      continue;
    }
    for (const char* p : kProblemConditions) {
      if (type == p && st == "True" && failed.empty()) failed = type + " " + why;
    }
  }
  if (!ready_seen && failed.empty()) failed = "NotReady: no Ready condition reported";
  for (const Json& t : Sub(spec, "taints").is_array() ? Sub(spec, "taints") : Json::array()) {
    const std::string key = Str(t, "key");
    if (key == kQuarantineTaint) {
      v.quarantined = true;
      continue;
    }
    for (const char* k : kFailedTaints) {
      if (key == k && failed.empty()) failed = "taint " + key + ":" + Str(t, "effect");
    }
    for (const char* k : kDrainTaints) {
      if (key == k && drain.empty()) drain = "taint " + key;
    }
  }
  if (!failed.empty()) {
    while (!failed.empty() && failed.back() == ' ') failed.pop_back();
    v.failed = true;
    v.reason = failed;
    n.health = sched::NodeHealth::kQuarantined;
  } else if (v.quarantined) {
    v.reason = "quarantined by Bulwark (remove the " + std::string(kQuarantineTaint) +
               " taint to return it)";
    n.health = sched::NodeHealth::kQuarantined;
  } else if (!drain.empty()) {
    v.reason = "draining: " + drain;
    n.health = sched::NodeHealth::kDraining;
  } else if (Sub(spec, "unschedulable").is_boolean() && Sub(spec, "unschedulable").get<bool>()) {
    v.reason = "cordoned (spec.unschedulable)";
    n.health = sched::NodeHealth::kCordoned;
  }
  return v;
}

bool SameView(const NodeView& a, const NodeView& b) {
  const sched::NodeSpec &x = a.spec, &y = b.spec;
  return x.name == y.name && x.gpu_type == y.gpu_type && x.gpus == y.gpus && x.pool == y.pool &&
         x.zone == y.zone && x.block == y.block && x.rack == y.rack && x.health == y.health &&
         x.price_per_gpu_hour == y.price_per_gpu_hour && a.failed == b.failed &&
         a.reason == b.reason && a.quarantined == b.quarantined;
}

std::string PodTrouble(const Json& pod) {
  const Json& status = Sub(pod, "status");
  for (const Json& c :
       Sub(status, "conditions").is_array() ? Sub(status, "conditions") : Json::array()) {
    if (Str(c, "type") == "DisruptionTarget" && Str(c, "status") == "True") {
      return "pod disruption: " + Str(c, "reason") +
             (Str(c, "message").empty() ? "" : ": " + Str(c, "message"));
    }
  }
  if (Str(status, "phase") == "Failed") {
    std::string why = "pod failed";
    if (!Str(status, "reason").empty()) why += ": " + Str(status, "reason");
    for (const Json& cs : Sub(status, "containerStatuses").is_array()
                              ? Sub(status, "containerStatuses")
                              : Json::array()) {
      const Json& term = Sub(Sub(cs, "state"), "terminated");
      if (term.is_object()) {
        why += " (container " + Str(cs, "name") + ": " + Str(term, "reason") + ", exit code " +
               (Sub(term, "exitCode").is_number() ? Sub(term, "exitCode").dump() : "?") + ")";
        break;
      }
    }
    return why;
  }
  if (Str(status, "phase") == "Succeeded") return "pod exited (agent ended)";
  if (!Str(Sub(pod, "metadata"), "deletionTimestamp").empty()) return "pod is being deleted";
  return "";
}

Json WithQuarantineTaint(const Json& node, const std::string& reason) {
  Json taints = Sub(Sub(node, "spec"), "taints");
  if (!taints.is_array()) taints = Json::array();
  for (const Json& t : taints) {
    if (Str(t, "key") == kQuarantineTaint) return Json();
  }
  taints.push_back(trainjob::RenderQuarantineTaint(reason));
  return taints;
}

}  // namespace bulwark::op
