// RenderPod, RenderHeadlessService, RenderPodGroup, RenderEvent,
// RenderQuarantineTaint and RenderJobObjects (render.h). The CRD is in crd.cc.
#include "trainjob/render.h"

#include <cctype>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <ctime>

#include "common/clock.h"
#include "common/install_paths.h"

namespace bulwark::trainjob {
namespace {

// Kubernetes' memory-backed emptyDir default when pod.shmSize is unset: none (the
// pod's memory limit bounds it).
Json Metadata(const TrainJob& t, const std::string& name, const RenderOptions& o) {
  Json labels = {{kJobLabel, t.name}, {"app.kubernetes.io/managed-by", "bulwark"}};
  for (const auto& [k, v] : o.labels) labels[k] = v;
  Json m = {{"name", name},
            {"namespace", t.ns},
            {"labels", labels},
            {"ownerReferences", Json::array({{{"apiVersion", kApiVersion},
                                              {"kind", kKind},
                                              {"name", t.name},
                                              {"uid", t.uid},
                                              {"controller", true},
                                              {"blockOwnerDeletion", true}}})}};
  if (!o.annotations.empty()) m["annotations"] = o.annotations;
  return m;
}

Json FieldEnv(const char* name, const char* path) {
  return {{"name", name},
          {"valueFrom", {{"fieldRef", {{"apiVersion", "v1"}, {"fieldPath", path}}}}}};
}

std::string FormatSeconds(double s) {
  char buf[32];
  std::snprintf(buf, sizeof(buf), "%g", s);
  return buf;
}

uint64_t Fnv1a(const std::string& s, uint64_t h = 1469598103934665603ull) {
  for (unsigned char c : s) {
    h ^= c;
    h *= 1099511628211ull;
  }
  return h;
}

// The volumes of a node's pod and the agent container's mounts for them.
void AddVolumes(const PodOptions& p, Json* volumes, Json* mounts) {
  auto add = [&](const char* name, Json source, const char* path, bool read_only) {
    source["name"] = name;
    volumes->push_back(std::move(source));
    Json m = {{"name", name}, {"mountPath", path}};
    if (read_only) m["readOnly"] = true;
    mounts->push_back(std::move(m));
  };
  add("bulwark-run", {{"emptyDir", Json::object()}}, kRunDir, false);
  Json shm = {{"medium", "Memory"}};
  if (!p.shm_size.empty()) shm["sizeLimit"] = p.shm_size;
  add("dshm", {{"emptyDir", shm}}, "/dev/shm", false);
  if (p.data_volume.is_object() && !p.data_volume.empty()) {
    add("data", p.data_volume, kDataDir, true);
  }
  if (!p.local_checkpoint_path.empty()) {
    add("ckpt-local",
        {{"hostPath", {{"path", p.local_checkpoint_path}, {"type", "DirectoryOrCreate"}}}},
        kLocalCkptDir, false);
  }
  if (!p.shared_checkpoint_claim.empty()) {
    add("ckpt-shared", {{"persistentVolumeClaim", {{"claimName", p.shared_checkpoint_claim}}}},
        kSharedCkptDir, false);
  }
  if (!p.config_map.empty()) {
    add("config", {{"configMap", {{"name", p.config_map}}}}, kConfigDir, true);
  }
}

Json Resources(const PodOptions& p) {
  Json r = Json::object();
  if (p.gpus_per_node > 0) r[p.gpu_resource] = std::to_string(p.gpus_per_node);
  if (!p.cpu.empty()) r["cpu"] = p.cpu;
  if (!p.memory.empty()) r["memory"] = p.memory;
  if (r.empty()) return Json::object();
  return {{"limits", r}, {"requests", r}};
}

}  // namespace

std::string DefaultAgentImage() {
  return std::string("ghcr.io/bulwark-dev/bulwark:") + BULWARK_VERSION;
}

Json RenderPod(const TrainJob& t, const std::string& node_id, int slot,
               const std::string& node_name, const RenderOptions& o) {
  const bool standby = slot < 0;
  Json meta = Metadata(t, t.name + "-" + node_id, o);
  meta["labels"][kNodeIdLabel] = node_id;
  meta["labels"][kRoleLabel] = standby ? "standby" : "worker";
  if (!standby) meta["annotations"][kSlotAnnotation] = std::to_string(slot);
  meta["finalizers"] = Json::array({kAgentFinalizer});

  const double hb = o.heartbeat_interval_s > 0 ? o.heartbeat_interval_s
                                               : t.job.fault_policy.heartbeat_interval_seconds;
  const bool inject = t.pod.inject_agent && !o.agent_image.empty();
  Json command = Json::array();
  if (inject) {
    for (const std::string& part : AgentBundleCommand(kAgentBundleDir)) command.push_back(part);
  } else {
    command.push_back(o.agent_path);
  }
  command.insert(command.end(),
                 {"--controller", o.controller_addr, "--node", node_id, "--run-dir", kRunDir,
                  "--peer-host", "$(POD_IP)", "--heartbeat-interval", FormatSeconds(hb)});
  // A bundle finds its own SDK (it is laid out as an installed prefix).
  if (!o.python_dir.empty() && !inject) {
    command.insert(command.end(), {"--python-dir", o.python_dir});
  }
  if (!o.lib_path.empty() && !inject) command.insert(command.end(), {"--lib", o.lib_path});

  Json volumes = Json::array(), mounts = Json::array();
  AddVolumes(t.pod, &volumes, &mounts);
  Json init_containers = Json::array();
  if (inject) {
    volumes.push_back({{"name", "bulwark-agent"}, {"emptyDir", Json::object()}});
    Json bundle_mount = {{"name", "bulwark-agent"}, {"mountPath", kAgentBundleDir}};
    mounts.push_back(bundle_mount);
    init_containers.push_back({{"name", kInstallAgentContainer},
                               {"image", o.agent_image},
                               {"imagePullPolicy", "IfNotPresent"},
                               {"command", {o.agent_path, "install", kAgentBundleDir}},
                               {"volumeMounts", Json::array({bundle_mount})}});
  }
  Json container = {{"name", kAgentContainer},
                    {"image", t.pod.image},
                    {"imagePullPolicy", t.pod.image_pull_policy},
                    {"command", command},
                    {"env",
                     {FieldEnv("POD_NAME", "metadata.name"),
                      FieldEnv("POD_NAMESPACE", "metadata.namespace"),
                      FieldEnv("POD_IP", "status.podIP"),
                      FieldEnv("NODE_NAME", "spec.nodeName"),
                      {{"name", "BULWARK_NODE_ID"}, {"value", node_id}}}},
                    {"volumeMounts", mounts},
                    {"securityContext", {{"capabilities", {{"add", {"SYS_PTRACE"}}}}}}};
  if (Json r = Resources(t.pod); !r.empty()) container["resources"] = r;

  // With gang: bulwark the operator binds each pod (spec.nodeName) to a node whose labels
  // it read as gpuType (operator/gpu_type.h: bulwark.dev/gpu-type, nvidia.com/gpu.product,
  // cloud labels); a selector on bulwark.dev/gpu-type would make the kubelet refuse the
  // pod (NodeAffinity) on a node labelled only by the GPU operator or the cloud. Volcano
  // and kube-scheduler (Kueue) place by the selector: there the label is required.
  Json node_selector = Json::object();
  if (t.scheduling.gang != GangMode::kBulwark) {
    node_selector[kGpuTypeNodeLabel] = t.scheduling.gpu_type;
  }
  for (const auto& [k, v] : t.pod.node_selector) node_selector[k] = v;
  Json spec = {
      {"hostNetwork", true},
      {"dnsPolicy", "ClusterFirstWithHostNet"},
      {"restartPolicy", "Never"},
      {"hostname", node_id},
      {"subdomain", t.name},
      {"terminationGracePeriodSeconds",
       static_cast<int64_t>(std::ceil(t.job.fault_policy.stop_grace_seconds)) + o.grace_margin_s},
      {"containers", Json::array({container})},
      {"volumes", volumes}};
  if (!init_containers.empty()) spec["initContainers"] = init_containers;
  if (!node_selector.empty()) spec["nodeSelector"] = node_selector;
  if (!node_name.empty()) spec["nodeName"] = node_name;
  if (t.pod.tolerations.is_array() && !t.pod.tolerations.empty()) {
    spec["tolerations"] = t.pod.tolerations;
  }
  if (!t.pod.service_account_name.empty()) {
    spec["serviceAccountName"] = t.pod.service_account_name;
  }
  if (!t.pod.priority_class_name.empty()) spec["priorityClassName"] = t.pod.priority_class_name;
  for (const std::string& s : t.pod.image_pull_secrets) {
    spec["imagePullSecrets"].push_back({{"name", s}});
  }

  switch (t.scheduling.gang) {
    case GangMode::kBulwark:
      break;
    case GangMode::kVolcano:
      spec["schedulerName"] = "volcano";
      meta["annotations"]["scheduling.k8s.io/group-name"] = t.name;
      break;
    case GangMode::kKueue:
      meta["labels"]["kueue.x-k8s.io/queue-name"] = t.scheduling.kueue_queue;
      // A standby is admitted on its own: Kueue's pod group must be exactly the workers.
      if (!standby) {
        meta["labels"]["kueue.x-k8s.io/pod-group-name"] =
            o.kueue_pod_group.empty() ? t.name : o.kueue_pod_group;
        meta["annotations"]["kueue.x-k8s.io/pod-group-total-count"] = std::to_string(t.job.nodes);
        // A lost worker is replaced by a standby, never by a new pod of the group: Kueue
        // must not wait for one (it would hold the group's quota and pods for good), the
        // group ends once each of its pods has.
        meta["annotations"]["kueue.x-k8s.io/retriable-in-group"] = "false";
      }
      break;
  }
  return {{"apiVersion", "v1"}, {"kind", "Pod"}, {"metadata", meta}, {"spec", spec}};
}

std::string KueuePodGroupName(const std::string& job, const std::string& run_id) {
  constexpr size_t kMax = 63;
  std::string name = job + "-" + run_id;
  if (name.size() <= kMax) return name;
  char hash[9];
  std::snprintf(hash, sizeof(hash), "%08llx",
                static_cast<unsigned long long>(Fnv1a(job) & 0xffffffffull));
  const std::string tail = std::string("-") + hash + "-" + run_id;
  std::string head = job.substr(0, kMax > tail.size() ? kMax - tail.size() : 0);
  while (!head.empty() && !std::isalnum(static_cast<unsigned char>(head.back()))) head.pop_back();
  return (head + tail).substr(0, kMax);
}

Json RenderHeadlessService(const TrainJob& t, const RenderOptions& o) {
  return {{"apiVersion", "v1"},
          {"kind", "Service"},
          {"metadata", Metadata(t, t.name, o)},
          {"spec",
           {{"clusterIP", "None"},
            {"publishNotReadyAddresses", true},
            {"selector", {{kJobLabel, t.name}}}}}};
}

Json RenderPodGroup(const TrainJob& t, const RenderOptions& o) {
  Json spec = {{"minMember", t.job.nodes}, {"queue", t.scheduling.queue}};
  if (!t.pod.priority_class_name.empty()) spec["priorityClassName"] = t.pod.priority_class_name;
  if (t.pod.gpus_per_node > 0) {
    spec["minResources"] = {
        {t.pod.gpu_resource, std::to_string(t.pod.gpus_per_node * t.job.nodes)}};
  }
  return {{"apiVersion", "scheduling.volcano.sh/v1beta1"},
          {"kind", "PodGroup"},
          {"metadata", Metadata(t, t.name, o)},
          {"spec", spec}};
}

Json RenderEvent(const Json& obj, const std::string& type, const std::string& reason,
                 const std::string& message, double now, const std::string& component) {
  auto field = [](const Json& j, const char* k) {
    return j.is_object() && j.contains(k) && j[k].is_string() ? j[k].get<std::string>() : "";
  };
  const Json meta = obj.is_object() && obj.contains("metadata") ? obj["metadata"] : Json();
  Json involved = {{"apiVersion", field(obj, "apiVersion")},
                   {"kind", field(obj, "kind")},
                   {"name", field(meta, "name")}};
  const std::string ns = field(meta, "namespace");
  if (!ns.empty()) involved["namespace"] = ns;
  if (!field(meta, "uid").empty()) involved["uid"] = field(meta, "uid");
  if (!field(meta, "resourceVersion").empty()) {
    involved["resourceVersion"] = field(meta, "resourceVersion");
  }
  const uint64_t ns_now = static_cast<uint64_t>(std::max(0.0, now) * 1e9);
  char suffix[24];
  std::snprintf(suffix, sizeof(suffix), "%016llx",
                static_cast<unsigned long long>(Fnv1a(reason + "\n" + message, ns_now)));
  const std::string ts = FormatRfc3339(now);
  return {
      {"apiVersion", "v1"},
      {"kind", "Event"},
      {"metadata",
       {{"name", field(meta, "name") + "." + suffix}, {"namespace", ns.empty() ? "default" : ns}}},
      {"involvedObject", involved},
      {"type", type},
      {"reason", reason},
      {"message", message.substr(0, 1024)},
      {"source", {{"component", component}}},
      {"reportingComponent", component},
      {"firstTimestamp", ts},
      {"lastTimestamp", ts},
      {"count", 1}};
}

Json RenderQuarantineTaint(const std::string& reason) {
  // A taint value is a label value: <= 63 of [A-Za-z0-9_.-], alphanumeric at both ends.
  std::string v;
  for (char c : reason) {
    const bool ok = (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') ||
                    c == '_' || c == '.' || c == '-';
    v += ok ? c : '-';
  }
  if (v.size() > 63) v.resize(63);
  auto alnum = [](char c) { return std::isalnum(static_cast<unsigned char>(c)) != 0; };
  while (!v.empty() && !alnum(v.back())) v.pop_back();
  size_t start = 0;
  while (start < v.size() && !alnum(v[start])) ++start;
  return {{"key", kQuarantineTaint}, {"value", v.substr(start)}, {"effect", "NoSchedule"}};
}

std::vector<Json> RenderJobObjects(const TrainJob& t, const std::vector<std::string>& node_names,
                                   const RenderOptions& o) {
  std::vector<Json> out = {RenderHeadlessService(t, o)};
  if (t.scheduling.gang == GangMode::kVolcano) out.push_back(RenderPodGroup(t, o));
  const int workers = t.job.nodes;
  const int pods = std::max(workers + StandbyCount(t.job), static_cast<int>(node_names.size()));
  const bool bind = t.scheduling.gang == GangMode::kBulwark;
  for (int i = 0; i < pods; ++i) {
    const std::string name =
        bind && static_cast<size_t>(i) < node_names.size() ? node_names[i] : "";
    out.push_back(RenderPod(t, "node-" + std::to_string(i), i < workers ? i : -1, name, o));
  }
  return out;
}

}  // namespace bulwark::trainjob
