#include "operator/testing/node_emulator.h"

#include <signal.h>

#include <chrono>
#include <filesystem>
#include <fstream>
#include <set>

#include "common/clock.h"
#include "common/run.h"

namespace bulwark::op::testing {
namespace {

std::string Str(const Json& j, const char* key) {
  if (!j.is_object()) return "";
  auto it = j.find(key);
  return it != j.end() && it->is_string() ? it->get<std::string>() : "";
}

std::string Key(const Json& pod) {
  return Str(pod["metadata"], "namespace") + "/" + Str(pod["metadata"], "name");
}

std::string Now3339() { return FormatRfc3339(SystemClock::Get()->NowWall()); }

// $(VAR) expansion as the kubelet does for command and args ($$ escapes a '$').
std::string Expand(const std::string& s, const std::map<std::string, std::string>& env) {
  std::string out;
  for (size_t i = 0; i < s.size(); ++i) {
    if (s[i] == '$' && i + 1 < s.size() && s[i + 1] == '$') {
      out += '$';
      ++i;
    } else if (s[i] == '$' && i + 1 < s.size() && s[i + 1] == '(') {
      const size_t end = s.find(')', i);
      auto it = end == std::string::npos ? env.end() : env.find(s.substr(i + 2, end - i - 2));
      if (it == env.end()) {
        out += s[i];
        continue;
      }
      out += it->second;
      i = end;
    } else {
      out += s[i];
    }
  }
  return out;
}

}  // namespace

Result<std::unique_ptr<NodeEmulator>> NodeEmulator::Start(NodeEmulatorOptions opts) {
  if (opts.client == nullptr) return InvalidArgument("NodeEmulator: client is null");
  std::unique_ptr<NodeEmulator> k(new NodeEmulator(std::move(opts)));
  k8s::Client* api = k->opts_.client;
  for (const EmulatedNode& n : k->opts_.nodes) {
    Json labels = Json::object();
    for (const auto& [a, b] : n.labels) labels[a] = b;
    labels["kubernetes.io/hostname"] = n.name;
    Json node = {{"apiVersion", "v1"},
                 {"kind", "Node"},
                 {"metadata", {{"name", n.name}, {"labels", labels}}},
                 {"spec", Json::object()}};
    BW_ASSIGN_OR_RETURN(Json created, api->Create(k8s::Nodes(), "", node));
    const std::string gpus = std::to_string(n.gpus);
    created["status"] = {
        {"capacity", {{"nvidia.com/gpu", gpus}, {"cpu", "8"}, {"memory", "32Gi"}, {"pods", "110"}}},
        {"allocatable",
         {{"nvidia.com/gpu", gpus}, {"cpu", "8"}, {"memory", "32Gi"}, {"pods", "110"}}},
        {"addresses",
         {{{"type", "InternalIP"}, {"address", "127.0.0.1"}},
          {{"type", "Hostname"}, {"address", n.name}}}},
        {"conditions",
         {{{"type", "Ready"},
           {"status", "True"},
           {"reason", "KubeletReady"},
           {"message", "kubelet is posting ready status"},
           {"lastHeartbeatTime", Now3339()},
           {"lastTransitionTime", Now3339()}}}}};
    BW_RETURN_IF_ERROR(api->UpdateStatus(k8s::Nodes(), "", created).status());
    BW_RETURN_IF_ERROR(k->SyncLifecycleTaints(n.name, true));
    k->ready_[n.name] = true;
  }
  k8s::InformerOptions io;
  io.resource = k8s::Pods();
  io.watch_timeout_seconds = 60;
  io.backoff_initial_s = 0.1;
  io.backoff_max_s = 1;
  k->pods_ = std::make_unique<k8s::Informer>(api, io, k8s::InformerHandlers{});
  k->pods_->Start();
  if (!k->pods_->WaitForSync(30)) return DeadlineExceeded("NodeEmulator: pod informer not synced");
  k->thread_ = std::thread([p = k.get()] { p->Loop(); });
  return k;
}

NodeEmulator::~NodeEmulator() {
  stop_.store(true);
  if (thread_.joinable()) thread_.join();
  if (pods_) pods_->Stop();
  std::lock_guard<std::mutex> l(mu_);
  for (auto& [key, p] : procs_) {
    TerminateGroup(p.child.pid, p.child.pgid, 0.5);
    Drain(p);
  }
  procs_.clear();
}

Status NodeEmulator::SetNodeReady(const std::string& node, bool ready) {
  Json cond = {{"type", "Ready"},
               {"status", ready ? "True" : "Unknown"},
               {"reason", ready ? "KubeletReady" : "NodeStatusUnknown"},
               {"message",
                ready ? "kubelet is posting ready status" : "Kubelet stopped posting node status."},
               {"lastHeartbeatTime", Now3339()},
               {"lastTransitionTime", Now3339()}};
  {
    std::lock_guard<std::mutex> l(mu_);
    ready_[node] = ready;
    if (!ready) {  // the machine died: its containers with it
      for (auto it = procs_.begin(); it != procs_.end();) {
        if (it->second.node != node) {
          ++it;
          continue;
        }
        (void)SignalGroup(it->second.child.pgid, SIGKILL);
        (void)WaitExit(it->second.child.pid, 5);
        Drain(it->second);
        ended_[it->first] = "killed with node " + node;
        it = procs_.erase(it);
      }
    }
  }
  BW_RETURN_IF_ERROR(opts_.client
                         ->Patch(k8s::Nodes(), "", node,
                                 {{"status", {{"conditions", Json::array({cond})}}}},
                                 k8s::PatchType::kMerge, "status")
                         .status());
  return SyncLifecycleTaints(node, ready);
}

Status NodeEmulator::SyncLifecycleTaints(const std::string& node, bool ready) {
  // What kube-controller-manager's node lifecycle controller does (it does not run in
  // the test control plane): a Ready node loses the not-ready taint that the
  // TaintNodesByCondition admission plugin put on it at registration; an unreachable
  // one gets the unreachable NoSchedule and NoExecute taints.
  auto r = opts_.client->UpdateWithRetry(k8s::Nodes(), "", node, [&](Json& n) {
    Json kept = Json::array();
    const Json taints = n["spec"].value("taints", Json::array());
    for (const Json& t : taints) {
      const std::string key = Str(t, "key");
      if (key != "node.kubernetes.io/not-ready" && key != "node.kubernetes.io/unreachable") {
        kept.push_back(t);
      }
    }
    if (!ready) {
      for (const char* effect : {"NoSchedule", "NoExecute"}) {
        kept.push_back({{"key", "node.kubernetes.io/unreachable"},
                        {"effect", effect},
                        {"timeAdded", Now3339()}});
      }
    }
    if (kept == taints) return Status::Ok();
    n["spec"]["taints"] = kept;
    return Status::Ok();
  });
  return r.status();
}

int NodeEmulator::RunningPods() const {
  std::lock_guard<std::mutex> l(mu_);
  return static_cast<int>(procs_.size());
}

std::string NodeEmulator::PodLog(const std::string& pod) const {
  std::string path;
  {
    std::lock_guard<std::mutex> l(mu_);
    for (const auto& [key, p] : procs_) {
      if (key.substr(key.find('/') + 1) == pod) path = p.log_path;
    }
  }
  if (path.empty()) path = opts_.root + "/logs/" + pod + ".log";
  std::ifstream f(path);
  return std::string((std::istreambuf_iterator<char>(f)), std::istreambuf_iterator<char>());
}

std::vector<std::string> NodeEmulator::Summary() const {
  std::lock_guard<std::mutex> l(mu_);
  std::vector<std::string> out;
  for (const auto& [key, p] : procs_) out.push_back(key + " on " + p.node + ": running");
  for (const auto& [key, how] : ended_) out.push_back(key + ": " + how);
  return out;
}

void NodeEmulator::Drain(Proc& p) {
  if (!p.child.output.valid()) return;
  bool eof = false;
  const std::string chunk = ReadAvailable(p.child.output.get(), &eof);
  if (!chunk.empty()) std::ofstream(p.log_path, std::ios::app) << chunk;
}

void NodeEmulator::SetPhase(const Json& pod, const std::string& phase, int exit_code,
                            const std::string& why) {
  const std::string image = Str(pod["spec"]["containers"][0], "image");
  Json cs = {{"name", Str(pod["spec"]["containers"][0], "name")},
             {"image", image},
             {"imageID", "fake://" + image},
             {"ready", phase == "Running"},
             {"restartCount", 0}};
  if (phase == "Running") {
    cs["state"] = {{"running", {{"startedAt", Now3339()}}}};
  } else {
    cs["state"] = {{"terminated",
                    {{"exitCode", exit_code},
                     {"reason", exit_code == 0 ? "Completed" : "Error"},
                     {"message", why},
                     {"finishedAt", Now3339()}}}};
  }
  const std::string ready = phase == "Running" ? "True" : "False";
  Json conds = Json::array();
  for (const char* type : {"PodScheduled", "Initialized", "ContainersReady", "Ready"}) {
    const bool always = std::string(type) == "PodScheduled" || std::string(type) == "Initialized";
    conds.push_back(
        {{"type", type}, {"status", always ? "True" : ready}, {"lastTransitionTime", Now3339()}});
  }
  Json status = {{"phase", phase},
                 {"hostIP", "127.0.0.1"},
                 {"hostIPs", {{{"ip", "127.0.0.1"}}}},
                 {"podIP", "127.0.0.1"},
                 {"podIPs", {{{"ip", "127.0.0.1"}}}},
                 {"conditions", conds},
                 {"containerStatuses", {cs}}};
  if (!(pod.contains("status") && pod["status"].contains("startTime"))) {
    status["startTime"] = Now3339();
  }
  const std::string ns = Str(pod["metadata"], "namespace");
  const std::string name = Str(pod["metadata"], "name");
  auto r = opts_.client->Patch(
      k8s::Pods(), ns, name,
      {{"metadata", {{"uid", Str(pod["metadata"], "uid")}}}, {"status", status}},
      k8s::PatchType::kMerge, "status");
  if (!r.ok() && !k8s::IsNotFound(r.status())) {
    std::fprintf(stderr, "[node-emulator] status of %s: %s\n", Key(pod).c_str(),
                 r.status().ToString().c_str());
  }
}

void NodeEmulator::FinishDeletion(const Json& pod) {
  // The kubelet's last word on a pod it stopped: delete it for good (grace 0), for
  // this incarnation only.
  k8s::DeleteOptions d;
  d.grace_period_seconds = 0;
  d.precondition_uid = Str(pod["metadata"], "uid");
  Status s = opts_.client->Delete(k8s::Pods(), Str(pod["metadata"], "namespace"),
                                  Str(pod["metadata"], "name"), d);
  if (!s.ok() && !k8s::IsNotFound(s) && s.code() != Code::kAborted) {
    std::fprintf(stderr, "[node-emulator] delete %s: %s\n", Key(pod).c_str(), s.ToString().c_str());
  }
}

Status NodeEmulator::StartPod(const Json& pod) {
  const Json& spec = pod["spec"];
  const Json& c = spec["containers"][0];
  const std::string node = Str(spec, "nodeName");
  const std::string name = Str(pod["metadata"], "name");
  const std::string ns = Str(pod["metadata"], "namespace");
  // Volumes: name -> host directory.
  std::map<std::string, std::string> vol;
  if (spec.contains("volumes")) {
    for (const Json& v : spec["volumes"]) {
      const std::string vn = Str(v, "name");
      std::string dir;
      if (v.contains("hostPath")) {
        dir = opts_.root + "/nodes/" + node + Str(v["hostPath"], "path");
      } else if (v.contains("persistentVolumeClaim")) {
        dir = opts_.root + "/pvc/" + ns + "/" + Str(v["persistentVolumeClaim"], "claimName");
      } else if (v.contains("configMap")) {
        dir = opts_.root + "/configmaps/" + ns + "/" + Str(v["configMap"], "name");
      } else {
        // By the pod's uid, short: Unix socket paths under an emptyDir (the agent's
        // run dir) must stay within 107 bytes.
        dir = opts_.root + "/p/" + Str(pod["metadata"], "uid").substr(0, 8) + "/" + vn;
      }
      std::filesystem::create_directories(dir);
      vol[vn] = dir;
    }
  }
  // A container's command line as the kubelet would run it: $(VAR) from its env, the
  // image's paths (`binaries`) and its volume mount paths mapped to this machine's.
  // Returns the SpawnOptions to run it with: that command line, this process's
  // environment with the container's and extra_env over it.
  auto spawn_of = [&](const Json& ctr) -> Result<SpawnOptions> {
    std::map<std::string, std::string> container_env;
    std::vector<std::string> args;
    std::vector<std::pair<std::string, std::string>> mounts;  // mountPath -> host dir
    if (ctr.contains("volumeMounts")) {
      for (const Json& m : ctr["volumeMounts"]) {
        auto it = vol.find(Str(m, "name"));
        if (it != vol.end()) mounts.emplace_back(Str(m, "mountPath"), it->second);
      }
    }
    if (ctr.contains("env")) {
      for (const Json& e : ctr["env"]) {
        std::string value = Str(e, "value");
        const std::string field = e.contains("valueFrom") && e["valueFrom"].contains("fieldRef")
                                      ? Str(e["valueFrom"]["fieldRef"], "fieldPath")
                                      : "";
        if (field == "metadata.name") value = name;
        if (field == "metadata.namespace") value = ns;
        if (field == "spec.nodeName") value = node;
        if (field == "status.podIP" || field == "status.hostIP") value = "127.0.0.1";
        container_env[Str(e, "name")] = value;
      }
    }
    for (const char* part : {"command", "args"}) {
      if (!ctr.contains(part)) continue;
      for (const Json& a : ctr[part]) args.push_back(Expand(a.get<std::string>(), container_env));
    }
    if (args.empty()) {
      return InvalidArgument("pod " + name + ": container " + Str(ctr, "name") +
                             ": no command (images are not run)");
    }
    if (auto img = opts_.image_binaries.find(Str(ctr, "image"));
        img != opts_.image_binaries.end() && img->second.count(args[0])) {
      args[0] = img->second.at(args[0]);
    } else if (auto it = opts_.binaries.find(args[0]); it != opts_.binaries.end()) {
      args[0] = it->second;
    }
    for (std::string& a : args) {
      for (const auto& [path, host] : mounts) {
        if (a == path || a.rfind(path + "/", 0) == 0) {
          a = host + a.substr(path.size());
          break;
        }
      }
    }
    SpawnOptions so;
    so.argv = std::move(args);
    so.env = CurrentEnv();
    for (const auto& [k, v] : container_env) so.env[k] = v;
    for (const auto& [k, v] : opts_.extra_env) so.env[k] = v;
    return so;
  };
  const std::string log_path = opts_.root + "/logs/" + name + ".log";
  std::filesystem::create_directories(opts_.root + "/logs");
  // Init containers run first, one at a time, each to a zero exit (else the pod fails,
  // as with restartPolicy Never), within 120 s each.
  if (spec.contains("initContainers")) {
    for (const Json& ic : spec["initContainers"]) {
      BW_ASSIGN_OR_RETURN(SpawnOptions io, spawn_of(ic));
      BW_ASSIGN_OR_RETURN(RunOutcome run, RunToEnd(io, 120));
      std::ofstream(log_path, std::ios::app)
          << "[node-emulator] init container " << Str(ic, "name") << " on " << node << ": "
          << run.exit.Describe() << (run.timed_out ? " (killed after 120 s)" : "") << "\n"
          << run.output;
      if (run.timed_out || !run.exit.ok()) {
        return FailedPrecondition("init container " + Str(ic, "name") + " " + run.exit.Describe() +
                                  ": " + run.output);
      }
    }
  }
  BW_ASSIGN_OR_RETURN(SpawnOptions so, spawn_of(c));
  const std::vector<std::string>& argv = so.argv;
  so.capture_output = true;
  so.new_process_group = true;
  so.die_with_parent = true;
  BW_ASSIGN_OR_RETURN(Child child, Spawn(so));
  Proc p;
  p.child = std::move(child);
  p.node = node;
  p.ns = ns;
  p.log_path = log_path;
  std::ofstream(p.log_path, std::ios::app) << "[node-emulator] started on " << node << ":";
  for (const std::string& a : argv) std::ofstream(p.log_path, std::ios::app) << " " << a;
  std::ofstream(p.log_path, std::ios::app) << "\n";
  if (spec.contains("terminationGracePeriodSeconds") &&
      spec["terminationGracePeriodSeconds"].is_number()) {
    p.grace_s = std::min(5.0, spec["terminationGracePeriodSeconds"].get<double>());
  }
  p.uid = Str(pod["metadata"], "uid");
  procs_[Key(pod)] = std::move(p);
  return Status::Ok();
}

void NodeEmulator::SyncPod(const Json& pod) {
  const std::string key = Key(pod);
  const std::string node = Str(pod["spec"], "nodeName");
  const std::string phase = pod.contains("status") ? Str(pod["status"], "phase") : "";
  const bool deleting = !Str(pod["metadata"], "deletionTimestamp").empty();
  auto it = procs_.find(key);
  if (it == procs_.end()) {
    if (deleting || node.empty() || !ready_.count(node) || !ready_[node] || ended_.count(key) ||
        phase == "Succeeded" || phase == "Failed") {
      return;
    }
    // The kubelet's admission: a pod bound to a node its nodeSelector does not match is
    // rejected (phase Failed, reason NodeAffinity), whoever bound it.
    if (pod["spec"].contains("nodeSelector") && pod["spec"]["nodeSelector"].is_object()) {
      const EmulatedNode* en = nullptr;
      for (const EmulatedNode& n : opts_.nodes) {
        if (n.name == node) en = &n;
      }
      for (const auto& [k, v] : pod["spec"]["nodeSelector"].items()) {
        auto l = en ? en->labels.find(k) : std::map<std::string, std::string>::const_iterator();
        if (en && l != en->labels.end() && v.is_string() && l->second == v.get<std::string>()) {
          continue;
        }
        const std::string why =
            "NodeAffinity: Pod was rejected: Predicate NodeAffinity failed: node(s) didn't "
            "match Pod's node affinity/selector (" +
            k + ")";
        ended_[key] = why;
        SetPhase(pod, "Failed", 1, why);
        return;
      }
    }
    Status st = StartPod(pod);
    if (!st.ok()) {
      ended_[key] = "failed to start: " + st.ToString();
      SetPhase(pod, "Failed", 127, st.ToString());
      return;
    }
    SetPhase(pod, "Running", 0, "");
    return;
  }
  Proc& p = it->second;
  if (deleting && !p.terminating) {
    p.terminating = true;
    p.term_at = SystemClock::Get()->NowMono();
    (void)SignalGroup(p.child.pgid, SIGTERM);
  }
  if (p.terminating && SystemClock::Get()->NowMono() - p.term_at > p.grace_s)
    (void)SignalGroup(p.child.pgid, SIGKILL);
}

void NodeEmulator::Loop() {
  constexpr const char* kContainerLost =
      "ContainerStatusUnknown: the container could not be located when the pod was terminated";
  std::set<std::string> deleted;        // uids whose final DELETE was sent
  std::set<std::string> lost_reported;  // uids reported Failed after their node came back
  while (!stop_.load()) {
    std::vector<Json> pods = pods_->List();
    std::map<std::string, const Json*> by_key;
    for (const Json& pod : pods) by_key[Key(pod)] = &pod;
    std::vector<std::pair<Json, std::string>> finished;  // (pod, how)
    std::vector<Json> to_delete;
    {
      std::lock_guard<std::mutex> l(mu_);
      for (const Json& pod : pods) SyncPod(pod);
      for (auto it = procs_.begin(); it != procs_.end();) {
        Drain(it->second);
        auto e = Reap(it->second.child.pid);
        auto obj = by_key.find(it->first);
        const bool gone =
            obj == by_key.end() || Str((*obj->second)["metadata"], "uid") != it->second.uid;
        if (!e && gone) {  // the object was deleted: the container goes too
          (void)SignalGroup(it->second.child.pgid, SIGKILL);
          e = WaitExit(it->second.child.pid, 5);
        }
        if (!e) {
          ++it;
          continue;
        }
        (void)SignalGroup(it->second.child.pgid, SIGKILL);  // stragglers of the group
        Drain(it->second);
        ended_[it->first] = e->Describe();
        // Its terminal phase, also for a pod stopped because it is being deleted: the
        // kubelet reports it before the final delete (pod finalizers, e.g. Kueue's,
        // read it).
        if (!gone) finished.emplace_back(*obj->second, e->Describe());
        it = procs_.erase(it);
      }
      // Pods of a live node that are being deleted and run nothing here: the kubelet
      // completes their deletion — after reporting the terminal phase of one whose
      // container died with the node while it was down (Failed, as the kubelet reports
      // a container it cannot find).
      for (const Json& pod : pods) {
        const std::string node = Str(pod["spec"], "nodeName");
        const std::string uid = Str(pod["metadata"], "uid");
        if (Str(pod["metadata"], "deletionTimestamp").empty() || node.empty() ||
            !ready_.count(node) || !ready_[node] || procs_.count(Key(pod)) || deleted.count(uid)) {
          continue;
        }
        const std::string phase = pod.contains("status") ? Str(pod["status"], "phase") : "";
        auto how = ended_.find(Key(pod));
        if (phase != "Succeeded" && phase != "Failed" && how != ended_.end() &&
            how->second.rfind("killed with node", 0) == 0 && !lost_reported.count(uid)) {
          lost_reported.insert(uid);
          finished.emplace_back(pod, kContainerLost);
        }
        if (pod["metadata"].value("deletionGracePeriodSeconds", 0) == 0) continue;
        deleted.insert(uid);
        to_delete.push_back(pod);
      }
    }
    for (const auto& [pod, how] : finished) {
      const bool ok = how == "exit 0";
      SetPhase(pod, ok ? "Succeeded" : "Failed", ok ? 0 : how == kContainerLost ? 137 : 1, how);
    }
    for (const Json& pod : to_delete) FinishDeletion(pod);
    for (int i = 0; i < 4 && !stop_.load(); ++i) {
      std::this_thread::sleep_for(std::chrono::milliseconds(5));
    }
  }
}

}  // namespace bulwark::op::testing
