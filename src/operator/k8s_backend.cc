#include "operator/k8s_backend.h"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <utility>

#include "common/clock.h"
#include "operator/node_health.h"

namespace bulwark::op {

KubernetesBackend::KubernetesBackend(KubernetesBackendOptions opts) : opts_(std::move(opts)) {}

Status KubernetesBackend::StartNode(const NodeRequest& req) {
  std::string node;
  if (opts_.placement != nullptr) {
    const std::optional<JobNodes> jn = opts_.placement->Nodes(opts_.job_key);
    if (!jn) return Unavailable("not admitted: " + opts_.placement->Reason(opts_.job_key));
    std::set<std::string> busy;
    {
      std::lock_guard<std::mutex> l(mu_);
      for (const auto& [id, p] : pods_) {
        if (!p.released) busy.insert(p.node);
      }
    }
    if (req.slot >= 0) {
      if (req.slot >= static_cast<int>(jn->gang.size())) {
        return Internal("slot " + std::to_string(req.slot) + " beyond the admitted gang of " +
                        std::to_string(jn->gang.size()));
      }
      node = jn->gang[req.slot];
      if (busy.count(node)) {
        return Unavailable("node " + node + " for slot " + std::to_string(req.slot) +
                           " still hosts a pod of this job");
      }
    } else {
      for (const std::string& s : jn->standby) {
        if (!busy.count(s)) {
          node = s;
          break;
        }
      }
      if (node.empty()) {
        return Unavailable(
            "no reserved standby node without a pod (the scheduler restocks "
            "standby from free nodes)");
      }
    }
  }
  trainjob::RenderOptions ro = opts_.render;
  ro.controller_addr = req.controller_addr;
  ro.kueue_pod_group = trainjob::KueuePodGroupName(opts_.job.name, opts_.run_id);
  Json pod = trainjob::RenderPod(opts_.job, req.node_id, req.slot, node, ro);
  const std::string name = opts_.job.name + "-" + opts_.run_id + "-" + req.node_id;
  pod["metadata"]["name"] = name;
  pod["metadata"]["labels"]["bulwark.dev/run"] = opts_.run_id;
  auto created = opts_.client->Create(k8s::Pods(), opts_.job.ns, pod);
  if (!created.ok() && k8s::IsAlreadyExists(created.status())) {
    // Ours only if this very request created it before (a retried POST).
    auto existing = opts_.client->Get(k8s::Pods(), opts_.job.ns, name);
    const bool mine = existing.ok() &&
                      existing->value("metadata", Json::object())
                              .value("labels", Json::object())
                              .value("bulwark.dev/run", "") == opts_.run_id &&
                      !existing->value("metadata", Json::object()).contains("deletionTimestamp");
    if (mine) created = *existing;
  }
  if (!created.ok()) {
    Status s = ExplainForbidden(created.status().Annotate(
        "create pod " + name + " on " + (node.empty() ? std::string("(unbound)") : node)));
    // Refused by RBAC or admission: the controller waits (as for capacity) and asks
    // again, so the job carries on once the permission is granted.
    return s.code() == Code::kPermissionDenied ? Unavailable(s.message()) : s;
  }
  std::lock_guard<std::mutex> l(mu_);
  pods_[req.node_id] = Pod{name, node, req.slot, false};
  return Status::Ok();
}

Status ExplainForbidden(const Status& s) {
  if (s.code() != Code::kPermissionDenied) return s;
  return Status(Code::kPermissionDenied,
                s.message() +
                    " — the operator's service account is not allowed to do this; grant it "
                    "what deploy/rbac.yaml grants (docs/kubernetes.md, \"RBAC\")");
}

Status KubernetesBackend::DropFinalizer(const std::string& name) {
  auto r = opts_.client->UpdateWithRetry(k8s::Pods(), opts_.job.ns, name, [](Json& pod) {
    Json& meta = pod["metadata"];
    if (!meta.contains("finalizers") || !meta["finalizers"].is_array()) return Status::Ok();
    Json kept = Json::array();
    for (const Json& f : meta["finalizers"]) {
      if (!(f.is_string() && f.get<std::string>() == kAgentFinalizer)) kept.push_back(f);
    }
    meta["finalizers"] = std::move(kept);
    return Status::Ok();
  });
  if (!r.ok() && !k8s::IsNotFound(r.status())) return r.status();
  return Status::Ok();
}

Status KubernetesBackend::DeletePod(const std::string& name, int64_t grace_s) {
  k8s::DeleteOptions o;
  o.grace_period_seconds = grace_s;
  Status st = opts_.client->Delete(k8s::Pods(), opts_.job.ns, name, o);
  if (!st.ok() && !k8s::IsNotFound(st)) return st;
  return DropFinalizer(name);
}

Status KubernetesBackend::KillNode(const std::string& node_id) {
  std::string name;
  {
    std::lock_guard<std::mutex> l(mu_);
    auto it = pods_.find(node_id);
    if (it == pods_.end()) return NotFound("no pod for " + node_id);
    name = it->second.name;
  }
  // Abrupt (chaos: node loss): no grace. The loss comes back through Poll as for a real one.
  return DeletePod(name, 0);
}

Status KubernetesBackend::ReleaseNode(const std::string& node_id, double grace_s) {
  std::string name;
  {
    std::lock_guard<std::mutex> l(mu_);
    auto it = pods_.find(node_id);
    if (it == pods_.end()) return Status::Ok();
    it->second.released = true;
    name = it->second.name;
  }
  return DeletePod(name, static_cast<int64_t>(std::ceil(std::max(0.0, grace_s))));
}

void KubernetesBackend::PushLoss(const std::string& node_id, const std::string& reason) {
  std::lock_guard<std::mutex> l(mu_);
  auto it = pods_.find(node_id);
  if (it == pods_.end() || it->second.released) return;
  for (const NodeLoss& x : losses_) {
    if (x.node_id == node_id) return;
  }
  losses_.push_back({node_id, reason});
}

std::vector<NodeLoss> KubernetesBackend::Poll() {
  std::vector<NodeLoss> out;
  std::vector<std::string> names;
  std::vector<std::pair<std::string, int>> relabel;  // due retries
  {
    std::lock_guard<std::mutex> l(mu_);
    const double now = SystemClock::Get()->NowMono();
    for (auto it = relabel_.begin(); it != relabel_.end();) {
      if (it->second.next_try > now) {
        ++it;
        continue;
      }
      relabel.emplace_back(it->first, it->second.slot);
      it = relabel_.erase(it);
    }
    out.swap(losses_);
    for (const NodeLoss& x : out) {
      Pod& p = pods_[x.node_id];
      p.released = true;
      names.push_back(p.name);
    }
  }
  // A lost node's pod is gone for training: delete it now (grace 0, finalizer off) so it
  // does not linger Terminating on an unreachable node.
  for (const std::string& n : names) {
    Status st = DeletePod(n, 0);
    if (!st.ok()) {  // the operator's garbage collection of the job's old pods retries
      std::fprintf(stderr, "[bulwark-operator] delete lost pod %s: %s\n", n.c_str(),
                   st.ToString().c_str());
    }
  }
  for (const auto& [node_id, slot] : relabel) Relabel(node_id, slot);
  return out;
}

Status KubernetesBackend::Teardown(double grace_s) {
  std::vector<std::string> names;
  {
    std::lock_guard<std::mutex> l(mu_);
    for (auto& [id, p] : pods_) {
      p.released = true;
      names.push_back(p.name);
    }
  }
  Status first;
  for (const std::string& n : names) {
    Status st = DeletePod(n, static_cast<int64_t>(std::ceil(std::max(0.0, grace_s))));
    if (first.ok() && !st.ok()) first = st;
  }
  return first;
}

std::string KubernetesBackend::PreferredSpare(int slot, const std::vector<std::string>& ready) {
  if (ready.empty()) return "";
  if (opts_.placement == nullptr) return ready.front();
  const std::optional<JobNodes> jn = opts_.placement->Nodes(opts_.job_key);
  if (!jn || slot < 0 || slot >= static_cast<int>(jn->gang.size())) return ready.front();
  const std::string& want = jn->gang[slot];  // the scheduler's replacement for the slot
  std::lock_guard<std::mutex> l(mu_);
  for (const std::string& id : ready) {
    auto it = pods_.find(id);
    if (it != pods_.end() && it->second.node == want) return id;
  }
  return ready.front();
}

void KubernetesBackend::OnSlotAssigned(const std::string& node_id, int slot) {
  {
    std::lock_guard<std::mutex> l(mu_);
    auto it = pods_.find(node_id);
    if (it == pods_.end()) return;
    it->second.slot = slot;
  }
  Relabel(node_id, slot);
}

void KubernetesBackend::Relabel(const std::string& node_id, int slot) {
  std::string name;
  {
    std::lock_guard<std::mutex> l(mu_);
    relabel_.erase(node_id);
    auto it = pods_.find(node_id);
    if (it == pods_.end() || it->second.released || it->second.slot != slot) return;
    name = it->second.name;
  }
  Json patch = {{"metadata",
                 {{"labels", {{trainjob::kRoleLabel, "worker"}}},
                  {"annotations", {{trainjob::kSlotAnnotation, std::to_string(slot)}}}}}};
  auto r = opts_.client->Patch(k8s::Pods(), opts_.job.ns, name, patch);
  if (r.ok() || k8s::IsNotFound(r.status())) return;  // done, or the pod is gone
  constexpr double kRelabelRetryS = 10;
  std::fprintf(stderr,
               "[bulwark-operator] %s: labelling pod %s worker of slot %d: %s (retried in %.0f "
               "s; until then an operator restart would adopt it as a standby)\n",
               opts_.job_key.c_str(), name.c_str(), slot, r.status().ToString().c_str(),
               kRelabelRetryS);
  std::lock_guard<std::mutex> l(mu_);
  relabel_[node_id] = {slot, SystemClock::Get()->NowMono() + kRelabelRetryS};
}

std::vector<AdoptableNode> KubernetesBackend::AdoptableNodes() {
  k8s::ListOptions lo;
  lo.label_selector = std::string(trainjob::kJobLabel) + "=" + opts_.job.name;
  auto pods = opts_.client->List(k8s::Pods(), opts_.job.ns, lo);
  if (!pods.ok()) {
    std::fprintf(stderr, "[bulwark-operator] %s: listing pods to adopt: %s\n",
                 opts_.job_key.c_str(), pods.status().ToString().c_str());
    return {};
  }
  std::vector<AdoptableNode> out;
  std::lock_guard<std::mutex> l(mu_);
  for (const Json& pod : pods->items) {
    const Json meta = pod.value("metadata", Json::object());
    const Json labels = meta.value("labels", Json::object());
    const Json notes = meta.value("annotations", Json::object());
    const std::string phase = pod.value("status", Json::object()).value("phase", "");
    const std::string endpoint = notes.value(trainjob::kAgentEndpointAnnotation, "");
    const std::string node_id = labels.value(trainjob::kNodeIdLabel, "");
    const size_t colon = endpoint.rfind(':');
    if (meta.contains("deletionTimestamp") || phase == "Succeeded" || phase == "Failed" ||
        node_id.empty() || colon == std::string::npos) {
      continue;
    }
    AdoptableNode n;
    n.node_id = node_id;
    n.host = endpoint.substr(0, colon);
    n.adopt_port = std::atoi(endpoint.c_str() + colon + 1);
    const std::string slot = notes.value(trainjob::kSlotAnnotation, "");
    n.slot = labels.value(trainjob::kRoleLabel, "") == "worker" && !slot.empty()
                 ? std::atoi(slot.c_str())
                 : -1;
    if (n.adopt_port <= 0 || pods_.count(node_id)) continue;
    pods_[node_id] = Pod{meta.value("name", ""),
                         pod.value("spec", Json::object()).value("nodeName", ""), n.slot, false};
    out.push_back(std::move(n));
  }
  return out;
}

void KubernetesBackend::OnAgentEndpoint(const std::string& node_id, const std::string& host,
                                        int adopt_port) {
  const std::string name = PodName(node_id);
  if (name.empty()) return;
  Json patch = {
      {"metadata",
       {{"annotations",
         {{trainjob::kAgentEndpointAnnotation, host + ":" + std::to_string(adopt_port)}}}}}};
  auto r = opts_.client->Patch(k8s::Pods(), opts_.job.ns, name, patch);
  if (!r.ok() && !k8s::IsNotFound(r.status())) {
    std::fprintf(stderr, "[bulwark-operator] %s: annotating pod %s: %s\n", opts_.job_key.c_str(),
                 name.c_str(), r.status().ToString().c_str());
  }
}

std::string KubernetesBackend::PodName(const std::string& node_id) const {
  std::lock_guard<std::mutex> l(mu_);
  auto it = pods_.find(node_id);
  return it == pods_.end() ? "" : it->second.name;
}

std::string KubernetesBackend::NodeIdOfPod(const std::string& pod_name) const {
  std::lock_guard<std::mutex> l(mu_);
  for (const auto& [id, p] : pods_) {
    if (p.name == pod_name) return id;
  }
  return "";
}

Status KubernetesBackend::QuarantineNode(const std::string& node_id, const std::string& reason) {
  std::string node = ClusterNodeOf(node_id);
  if (node.empty()) {  // bound by a delegated scheduler: the pod says where
    const std::string pod = PodName(node_id);
    if (pod.empty()) return NotFound("no pod of this job is " + node_id);
    auto p = opts_.client->Get(k8s::Pods(), opts_.job.ns, pod);
    if (!p.ok()) return ExplainForbidden(p.status());
    if ((*p).contains("spec") && (*p)["spec"].is_object()) {
      node = (*p)["spec"].value("nodeName", "");
    }
    if (node.empty()) return FailedPrecondition("pod " + pod + " is not bound to a node");
  }
  auto r = opts_.client->UpdateWithRetry(k8s::Nodes(), "", node, [&](Json& obj) {
    Json taints = WithQuarantineTaint(obj, reason);
    if (!taints.is_null()) obj["spec"]["taints"] = std::move(taints);
    return Status::Ok();
  });
  if (!r.ok()) return ExplainForbidden(r.status());
  return Status::Ok();
}

std::string KubernetesBackend::ClusterNodeOf(const std::string& node_id) const {
  std::lock_guard<std::mutex> l(mu_);
  auto it = pods_.find(node_id);
  return it == pods_.end() ? "" : it->second.node;
}

}  // namespace bulwark::op
