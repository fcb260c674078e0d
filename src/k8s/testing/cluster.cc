#include "k8s/testing/cluster.h"

#include <gtest/gtest.h>

#include <atomic>
#include <chrono>
#include <thread>

#include "common/clock.h"
#include "common/net.h"
#include "common/run.h"

namespace bulwark::k8s::testing {

namespace {

std::string ObjStr(const Json& j, const char* a, const char* b = nullptr) {
  if (!j.is_object() || !j.contains(a)) return "";
  const Json& x = j[a];
  if (b == nullptr) return x.is_string() ? x.get<std::string>() : "";
  return x.is_object() && x.contains(b) && x[b].is_string() ? x[b].get<std::string>() : "";
}

}  // namespace

ControlPlane* SharedControlPlane(const ControlPlaneOptions& opts) {
  static std::unique_ptr<ControlPlane> cp;
  static std::string error;
  if (cp) return cp.get();
  if (!error.empty()) {
    ADD_FAILURE() << error;
    return nullptr;
  }
  const double t0 = SystemClock::Get()->NowMono();
  auto started = ControlPlane::Start(opts);
  if (!started.ok()) {
    error = "the test control plane did not start: " + started.status().ToString();
    ADD_FAILURE() << error;
    return nullptr;
  }
  cp = std::move(started).value();
  std::printf("[control plane] etcd + kube-apiserver%s up in %.1f s at %s\n",
              opts.controller_manager ? " + kube-controller-manager" : "",
              SystemClock::Get()->NowMono() - t0, cp->url().c_str());
  return cp.get();
}

Resource ResourceFor(const Json& obj) {
  const std::string api = ObjStr(obj, "apiVersion");
  const std::string kind = ObjStr(obj, "kind");
  const size_t slash = api.find('/');
  const std::string group = slash == std::string::npos ? "" : api.substr(0, slash);
  const std::string version = slash == std::string::npos ? api : api.substr(slash + 1);
  static const std::map<std::string, std::pair<std::string, bool>> kinds = {
      {"Pod", {"pods", true}},
      {"Node", {"nodes", false}},
      {"Namespace", {"namespaces", false}},
      {"ConfigMap", {"configmaps", true}},
      {"Secret", {"secrets", true}},
      {"Service", {"services", true}},
      {"ServiceAccount", {"serviceaccounts", true}},
      {"Event", {"events", true}},
      {"Lease", {"leases", true}},
      {"Deployment", {"deployments", true}},
      {"PriorityClass", {"priorityclasses", false}},
      {"PersistentVolumeClaim", {"persistentvolumeclaims", true}},
      {"Role", {"roles", true}},
      {"RoleBinding", {"rolebindings", true}},
      {"ClusterRole", {"clusterroles", false}},
      {"ClusterRoleBinding", {"clusterrolebindings", false}},
      {"CustomResourceDefinition", {"customresourcedefinitions", false}},
      {"ValidatingWebhookConfiguration", {"validatingwebhookconfigurations", false}},
      {"MutatingWebhookConfiguration", {"mutatingwebhookconfigurations", false}},
      {"TrainJob", {"trainjobs", true}},
      {"PodGroup", {"podgroups", true}},
      {"ResourceFlavor", {"resourceflavors", false}},  // Kueue (kueue.h)
      {"ClusterQueue", {"clusterqueues", false}},
      {"LocalQueue", {"localqueues", true}},
      {"Workload", {"workloads", true}},
  };
  auto it = kinds.find(kind);
  std::string plural;
  bool namespaced = true;
  if (it != kinds.end()) {
    plural = it->second.first;
    namespaced = it->second.second;
  } else {
    for (char c : kind) plural += static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
    plural += "s";
  }
  return {group, version, plural, kind, namespaced};
}

Result<Json> Objects::Create(const Json& obj) {
  const Resource r = ResourceFor(obj);
  return c_->Create(r, r.namespaced ? ObjStr(obj, "metadata", "namespace") : "", obj);
}

Result<Json> Objects::Update(const Json& obj) {
  const Resource r = ResourceFor(obj);
  return c_->Update(r, r.namespaced ? ObjStr(obj, "metadata", "namespace") : "", obj);
}

Result<Json> Objects::UpdateStatus(const Json& obj) {
  const Resource r = ResourceFor(obj);
  return c_->UpdateStatus(r, r.namespaced ? ObjStr(obj, "metadata", "namespace") : "", obj);
}

Result<Json> Objects::Get(const Resource& r, const std::string& ns, const std::string& name) {
  return c_->Get(r, ns, name);
}

std::vector<Json> Objects::List(const Resource& r, const std::string& ns) {
  auto l = c_->List(r, ns);
  if (!l.ok()) {
    ADD_FAILURE() << "list " << r.plural << ": " << l.status().ToString();
    return {};
  }
  return std::move(l->items);
}

Status Objects::Delete(const Resource& r, const std::string& ns, const std::string& name) {
  return c_->Delete(r, ns, name);
}

std::string Objects::CurrentResourceVersion() {
  ListOptions o;
  o.limit = 1;
  auto l = c_->List({"", "v1", "namespaces", "Namespace", false}, "", o);
  return l.ok() ? l->resource_version : "";
}

Result<std::string> UniqueNamespace(Client* admin, const std::string& prefix,
                                    const std::map<std::string, std::string>& labels) {
  static std::atomic<int> n{0};
  const std::string name = prefix + "-" + std::to_string(++n);
  Json l = Json::object();
  for (const auto& [k, v] : labels) l[k] = v;
  Json ns = {
      {"apiVersion", "v1"}, {"kind", "Namespace"}, {"metadata", {{"name", name}, {"labels", l}}}};
  auto created = admin->Create({"", "v1", "namespaces", "Namespace", false}, "", ns);
  if (!created.ok() && !IsAlreadyExists(created.status())) return created.status();
  // The service-account controller (when it runs) gives every namespace its default
  // ServiceAccount shortly after; pods cannot be admitted before it exists.
  const Resource sas{"", "v1", "serviceaccounts", "ServiceAccount", true};
  PollUntil([&] { return admin->Get(sas, name, "default").ok(); }, 10);
  return name;
}

Json CrdJson(const std::string& group, const std::string& plural, const std::string& kind,
             const std::string& version, const Json& schema, const Json& version_extra,
             const std::string& scope) {
  Json v = {{"name", version},
            {"served", true},
            {"storage", true},
            {"schema", {{"openAPIV3Schema", schema}}}};
  for (const auto& [k, x] : version_extra.items()) v[k] = x;
  std::string singular;
  for (char c : kind) singular += static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
  return {{"apiVersion", "apiextensions.k8s.io/v1"},
          {"kind", "CustomResourceDefinition"},
          {"metadata", {{"name", plural + "." + group}}},
          {"spec",
           {{"group", group},
            {"scope", scope},
            {"names", {{"plural", plural}, {"kind", kind}, {"singular", singular}}},
            {"versions", {v}}}}};
}

Json OpenSpecStatusSchema() {
  Json open = {{"type", "object"}, {"x-kubernetes-preserve-unknown-fields", true}};
  return {{"type", "object"}, {"properties", {{"spec", open}, {"status", open}}}};
}

Status InstallCrd(Client* admin, const Json& crd, double timeout_s) {
  BW_RETURN_IF_ERROR(ApplyObjects(admin, {crd}));
  const std::string name = ObjStr(crd, "metadata", "name");
  std::string last;
  const bool ok = PollUntil(
      [&] {
        auto got = admin->Get(CustomResourceDefinitions(), "", name);
        if (!got.ok()) {
          last = got.status().ToString();
          return false;
        }
        const Json& st = (*got)["status"];
        if (!st.is_object() || !st.contains("conditions")) return false;
        for (const Json& c : st["conditions"]) {
          if (ObjStr(c, "type") == "Established" && ObjStr(c, "status") == "True") return true;
        }
        last = st.dump();
        return false;
      },
      timeout_s);
  if (!ok) return DeadlineExceeded("CRD " + name + " not Established: " + last);
  // Discovery and the new resource's handlers follow Established by a moment: wait
  // until a LIST of the resource answers.
  const Json& v = crd["spec"]["versions"][0];
  const Resource r{ObjStr(crd["spec"], "group"), ObjStr(v, "name"),
                   ObjStr(crd["spec"]["names"], "plural"), ObjStr(crd["spec"]["names"], "kind"),
                   ObjStr(crd["spec"], "scope") != "Cluster"};
  if (!PollUntil([&] { return admin->List(r, "").ok(); }, timeout_s)) {
    return DeadlineExceeded("CRD " + name + ": its resource is not served");
  }
  return Status::Ok();
}

Status ApplyObjects(Client* admin, const std::vector<Json>& objects) {
  for (const Json& obj : objects) {
    const Resource r = ResourceFor(obj);
    const std::string ns = r.namespaced ? ObjStr(obj, "metadata", "namespace") : "";
    auto created = admin->Create(r, ns, obj);
    if (created.ok()) continue;
    if (!IsAlreadyExists(created.status())) {
      return created.status().Annotate("apply " + ObjStr(obj, "kind") + " " +
                                       ObjStr(obj, "metadata", "name"));
    }
    auto updated = admin->UpdateWithRetry(r, ns, ObjStr(obj, "metadata", "name"), [&](Json& live) {
      Json next = obj;
      next["metadata"]["resourceVersion"] = live["metadata"]["resourceVersion"];
      live = next;
      return Status::Ok();
    });
    if (!updated.ok()) {
      return updated.status().Annotate("apply " + ObjStr(obj, "kind") + " " +
                                       ObjStr(obj, "metadata", "name"));
    }
  }
  return Status::Ok();
}

bool PollUntil(const std::function<bool()>& cond, double timeout_s) {
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::duration<double>(timeout_s);
  while (!cond()) {
    if (std::chrono::steady_clock::now() >= deadline) return cond();
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
  }
  return true;
}

Result<std::string> Kubectl(const ControlPlane& cp, const std::string& kubeconfig,
                            const std::vector<std::string>& args, double timeout_s) {
  SpawnOptions so;
  so.argv = {cp.bin_dir() + "/kubectl", "--kubeconfig=" + kubeconfig};
  so.argv.insert(so.argv.end(), args.begin(), args.end());
  so.env = CurrentEnv();
  so.env["KUBECTL_COMMAND_HEADERS"] = "false";
  BW_ASSIGN_OR_RETURN(RunOutcome run, RunToEnd(so, timeout_s));
  if (run.timed_out) {
    return DeadlineExceeded("kubectl did not finish within " + std::to_string(timeout_s) +
                            " s: " + run.output);
  }
  if (!run.exit.ok()) return Internal("kubectl " + run.exit.Describe() + ": " + run.output);
  return run.output;
}

}  // namespace bulwark::k8s::testing
