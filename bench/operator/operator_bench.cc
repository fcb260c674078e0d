// operator_bench: `bulwark operator`'s memory, CPU and API request rate with 5,000
// nodes and 500 TrainJobs on a real control plane (bench/operator/run.py drives it
// and writes docs/benchmarks.md; bench/operator/README.md describes the setup).
//
// One run of one mode, each on a control plane of its own (k8s/testing/control_plane.h):
// etcd + kube-apiserver v1.36 on loopback with an audit log (every request, level
// Metadata) and KWOK, which plays the kubelets of N fake nodes (annotation
// kwok.x-k8s.io/node: fake, 8 GPUs allocatable): it makes them Ready, rewrites each
// node's status once per --heartbeat-s (its heartbeat), and marks the pods bound to
// them Running. No kube-controller-manager: nothing here needs one (the bench creates
// the `default` ServiceAccount that pod admission asks for; nothing is deleted, so the
// garbage collector and the namespace controller would idle; the node lifecycle
// controller needs node Leases, see TaintNodesByCondition below), and its watches
// would only take CPU from the two cores the measured processes share with the
// control plane.
//
//   --mode operator    `bulwark operator` (a child process) authenticated as
//                      deploy/rbac.yaml's ServiceAccount (a TokenRequest token: every
//                      call is checked by RBAC). Once its three watches are open, the
//                      bench creates J TrainJobs of K nodes; the operator admits them,
//                      creates their pods bound to nodes (spec.nodeName) and KWOK runs
//                      them. Phase 1 (sync + admission) ends when every pod is bound and
//                      Running and every TrainJob has a status. KWOK cannot run
//                      Bulwark's agents, so every job's controller waits for agents that
//                      never connect (its agent-connect timeout is 600 s from admission:
//                      the run must end before it, which the JSON reports). Phase 2
//                      (steady) lasts --steady-s with KWOK's node heartbeats.
//   --mode watch-only  the baseline: a child process that only keeps the same three
//                      informers (TrainJobs, Bulwark's pods, Nodes) with bw_k8s, as the
//                      same ServiceAccount. The bench creates the same TrainJobs and
//                      itself creates the same pods, bound to the same kind of nodes, so
//                      the baseline watches the same objects: the floor any operator
//                      pays to watch them.
// The child's CPU (utime + stime) and memory (VmRSS, VmHWM) are read from /proc every
// 250 ms; so are kube-apiserver's, etcd's and KWOK's (context, not the operator's).
// The child's requests come from the audit log (user
// system:serviceaccount:bulwark-system:bulwark-operator), by verb and resource, per
// phase. Prints one JSON object on stdout; progress on stderr.
#include <signal.h>
#include <unistd.h>

#include <CLI/CLI.hpp>
#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <iostream>
#include <map>
#include <mutex>
#include <set>
#include <sstream>
#include <thread>

#include "common/proc.h"
#include "k8s/client.h"
#include "k8s/informer.h"
#include "k8s/testing/cluster.h"
#include "k8s/testing/control_plane.h"
#include "trainjob/render.h"
#include "trainjob/trainjob.h"
#include "trainjob/yaml_json.h"

namespace {

using bulwark::Json;
using bulwark::Status;
namespace k8s = bulwark::k8s;
namespace kt = bulwark::k8s::testing;
namespace tjob = bulwark::trainjob;

constexpr char kOperatorNs[] = "bulwark-system";
constexpr char kOperatorSa[] = "bulwark-operator";
constexpr char kOperatorUser[] = "system:serviceaccount:bulwark-system:bulwark-operator";
constexpr char kJobNs[] = "bench";
constexpr double kAgentConnectTimeoutS = 600;  // op::JobRunnerOptions' default

double Mono() {
  return std::chrono::duration<double>(std::chrono::steady_clock::now().time_since_epoch()).count();
}
double Wall() {
  return std::chrono::duration<double>(std::chrono::system_clock::now().time_since_epoch()).count();
}
void Log(const std::string& s) {
  std::fprintf(stderr, "operator_bench: %s\n", s.c_str());
  std::fflush(stderr);
}

struct ProcSample {
  double cpu_s = 0;
  double rss_mb = 0;
  double hwm_mb = 0;
  int threads = 0;
};

ProcSample Sample(pid_t pid) {
  ProcSample s;
  std::ifstream st("/proc/" + std::to_string(pid) + "/stat");
  std::string line;
  std::getline(st, line);
  const size_t close = line.rfind(')');
  if (close != std::string::npos && close + 2 < line.size()) {
    std::istringstream rest(line.substr(close + 2));
    std::string f;
    std::vector<std::string> v;
    while (rest >> f) v.push_back(f);
    // Fields after the command: state(0) ... utime(11) stime(12).
    if (v.size() > 12) {
      s.cpu_s = (std::stod(v[11]) + std::stod(v[12])) / static_cast<double>(sysconf(_SC_CLK_TCK));
    }
  }
  std::ifstream status("/proc/" + std::to_string(pid) + "/status");
  while (std::getline(status, line)) {
    auto kb = [&](const char* key) { return std::stod(line.substr(std::strlen(key))) / 1024.0; };
    if (line.rfind("VmRSS:", 0) == 0) s.rss_mb = kb("VmRSS:");
    if (line.rfind("VmHWM:", 0) == 0) s.hwm_mb = kb("VmHWM:");
    if (line.rfind("Threads:", 0) == 0) s.threads = std::stoi(line.substr(8));
  }
  return s;
}

// One watched process: samples at the phase boundaries and the peaks in between.
struct Tracked {
  pid_t pid = -1;
  ProcSample start, phase1, steady, peak;
  ProcSample Take() {
    ProcSample s = Sample(pid);
    peak.rss_mb = std::max(peak.rss_mb, s.rss_mb);
    peak.hwm_mb = std::max(peak.hwm_mb, s.hwm_mb);
    peak.threads = std::max(peak.threads, s.threads);
    return s;
  }
};

Json Node(int i, int nodes) {
  const int racks = std::max(1, nodes / 32);
  const int rack = i % racks;
  // Capacity and allocatable are set at creation (a kubelet registers its node with
  // them); KWOK's node-initialize stage keeps them and adds conditions, addresses,
  // nodeInfo and phase.
  const Json cap = {{"nvidia.com/gpu", "8"}, {"cpu", "192"}, {"memory", "2Ti"}, {"pods", "110"}};
  const Json alloc = {
      {"nvidia.com/gpu", "8"}, {"cpu", "190"}, {"memory", "1900Gi"}, {"pods", "110"}};
  return {{"apiVersion", "v1"},
          {"kind", "Node"},
          {"metadata",
           {{"name", "node-" + std::to_string(i)},
            {"annotations", {{"kwok.x-k8s.io/node", "fake"}}},
            {"labels",
             {{"bulwark.dev/gpu-type", "h100"},
              {"topology.kubernetes.io/zone", "zone-" + std::to_string(rack % 4)},
              {"bulwark.dev/block", "block-" + std::to_string(rack / 8)},
              {"bulwark.dev/rack", "rack-" + std::to_string(rack)},
              {"kubernetes.io/hostname", "node-" + std::to_string(i)},
              {"type", "kwok"}}}}},
          {"spec", Json::object()},
          {"status", {{"capacity", cap}, {"allocatable", alloc}}}};
}

Json TrainJob(int i, int nodes_per_job) {
  return {{"apiVersion", "bulwark.dev/v1alpha1"},
          {"kind", "TrainJob"},
          {"metadata", {{"name", "job-" + std::to_string(i)}, {"namespace", kJobNs}}},
          {"spec",
           {{"nodes", nodes_per_job},
            {"procsPerNode", 8},
            {"command", {"python3", "train.py"}},
            {"checkpoint", {{"dir", "/bulwark/shared/ckpt"}, {"intervalSteps", 100}}},
            {"scheduling", {{"gpuType", "h100"}}},
            {"pod", {{"image", "ghcr.io/acme/train:1.0"}, {"gpusPerNode", 8}}}}}};
}

bool NodeReady(const Json& n) {
  const Json& st = n.value("status", Json::object());
  if (!st.contains("conditions") || !st["conditions"].is_array()) return false;
  for (const Json& c : st["conditions"]) {
    if (c.value("type", "") == "Ready") return c.value("status", "") == "True";
  }
  return false;
}

// KWOK's configuration: its "fast" stages (kustomize/stage in sigs.k8s.io/kwok v0.8.0),
// with the node heartbeat every heartbeat_s (uniform in ±10 %) instead of 20-45 s.
// Node and pod IPs are on loopback (nothing dials them; they are only written into
// status). KWOK applies node and pod stages with 4 workers each by default: at 5,000
// nodes, 83 heartbeats/s of ~40 ms PATCHes on a loaded machine need more, or the
// heartbeats fall behind (and differ between the two modes). A KwokConfiguration read
// from a file gets no defaults (kwok v0.8.0 defaults only the one it makes when there
// is none), so every option with a default is spelled out: with
// nodeLeaseParallelism 0, --node-lease-duration-seconds > 0 makes kwok exit.
std::string KwokConfig(double heartbeat_s) {
  const long lo = static_cast<long>(heartbeat_s * 900);   // NOLINT(runtime/int)
  const long hi = static_cast<long>(heartbeat_s * 1100);  // NOLINT(runtime/int)
  return R"(apiVersion: config.kwok.x-k8s.io/v1alpha1
kind: KwokConfiguration
options:
  nodePlayStageParallelism: 16
  podPlayStageParallelism: 16
  nodeLeaseParallelism: 4
  podsOnNodeSyncParallelism: 1
  enablePodsOnNodeSyncListPager: true
  enablePodsOnNodeSyncStreamWatch: false
  manageAllNodes: false
  enableDebuggingHandlers: false
  enableProfilingHandler: false
  enableContentionProfiling: false
---
apiVersion: kwok.x-k8s.io/v1alpha1
kind: Stage
metadata:
  name: node-initialize
spec:
  resourceRef:
    apiGroup: v1
    kind: Node
  selector:
    matchExpressions:
    - key: '.status.conditions.[] | select( .type == "Ready" ) | .status'
      operator: 'NotIn'
      values:
      - 'True'
  next:
    statusTemplate: |
      {{ $now := Now }}
      {{ $lastTransitionTime := or .metadata.creationTimestamp $now }}
      conditions:
      {{ range NodeConditions }}
      - lastHeartbeatTime: {{ $now | Quote }}
        lastTransitionTime: {{ $lastTransitionTime | Quote }}
        message: {{ .message | Quote }}
        reason: {{ .reason | Quote }}
        status: {{ .status | Quote }}
        type: {{ .type  | Quote}}
      {{ end }}
      addresses:
      {{ with NodeIP }}
      - address: {{ . | Quote }}
        type: InternalIP
      {{ end }}
      {{ with NodeName }}
      - address: {{ . | Quote }}
        type: Hostname
      {{ end }}
      allocatable:
      {{ with .status.allocatable }}
      {{ YAML . 1 }}
      {{ else }}
        cpu: 1k
        memory: 1Ti
        pods: 1M
      {{ end }}
      capacity:
      {{ with .status.capacity }}
      {{ YAML . 1 }}
      {{ else }}
        cpu: 1k
        memory: 1Ti
        pods: 1M
      {{ end }}
      {{ $nodeInfo := .status.nodeInfo }}
      {{ $kwokVersion := printf "kwok-%s" Version }}
      nodeInfo:
        architecture: {{ or $nodeInfo.architecture "amd64" }}
        bootID: {{ or $nodeInfo.bootID `""` }}
        containerRuntimeVersion: {{ or $nodeInfo.containerRuntimeVersion $kwokVersion }}
        kernelVersion: {{ or $nodeInfo.kernelVersion $kwokVersion }}
        kubeProxyVersion: {{ or $nodeInfo.kubeProxyVersion $kwokVersion }}
        kubeletVersion: {{ or $nodeInfo.kubeletVersion $kwokVersion }}
        machineID: {{ or $nodeInfo.machineID `""` }}
        operatingSystem: {{ or $nodeInfo.operatingSystem "linux" }}
        osImage: {{ or $nodeInfo.osImage `""` }}
        systemUUID: {{ or $nodeInfo.systemUUID `""` }}
      phase: Running
---
apiVersion: kwok.x-k8s.io/v1alpha1
kind: Stage
metadata:
  name: node-heartbeat
spec:
  resourceRef:
    apiGroup: v1
    kind: Node
  selector:
    matchExpressions:
    - key: '.status.phase'
      operator: 'In'
      values:
      - 'Running'
    - key: '.status.conditions.[] | select( .type == "Ready" ) | .status'
      operator: 'In'
      values:
      - 'True'
  delay:
    durationMilliseconds: )" +
         std::to_string(lo) + R"(
    jitterDurationMilliseconds: )" +
         std::to_string(hi) + R"(
  next:
    statusTemplate: |
      {{ $now := Now }}
      {{ $lastTransitionTime := or .metadata.creationTimestamp $now }}
      conditions:
      {{ range NodeConditions }}
      - lastHeartbeatTime: {{ $now | Quote }}
        lastTransitionTime: {{ $lastTransitionTime | Quote }}
        message: {{ .message | Quote }}
        reason: {{ .reason | Quote }}
        status: {{ .status | Quote }}
        type: {{ .type | Quote }}
      {{ end }}
  immediateNextStage: true
---
apiVersion: kwok.x-k8s.io/v1alpha1
kind: Stage
metadata:
  name: pod-ready
spec:
  resourceRef:
    apiGroup: v1
    kind: Pod
  selector:
    matchExpressions:
    - key: '.metadata.deletionTimestamp'
      operator: 'DoesNotExist'
    - key: '.status.phase'
      operator: 'In'
      values:
      - 'Pending'
    - key: '.status.conditions.[] | select( .type == "Ready" ) | .status'
      operator: 'NotIn'
      values:
      - 'True'
  next:
    statusTemplate: |
      {{ $now := Now }}
      conditions:
      - lastTransitionTime: {{ $now | Quote }}
        status: "True"
        type: Initialized
      - lastTransitionTime: {{ $now | Quote }}
        status: "True"
        type: Ready
      - lastTransitionTime: {{ $now | Quote }}
        status: "True"
        type: ContainersReady
      containerStatuses:
      {{ range .spec.containers }}
      - image: {{ .image | Quote }}
        name: {{ .name | Quote }}
        ready: true
        restartCount: 0
        state:
          running:
            startedAt: {{ $now | Quote }}
      {{ end }}
      {{ $hostIPs := NodeIPsWith .spec.nodeName }}
      {{ with $hostIPs }}
      hostIP: {{ index . 0 | Quote }}
      hostIPs:
      {{ range . }}
      - ip: {{ . | Quote }}
      {{ end }}
      {{ end }}
      {{ $podIPs := PodIPsWith .spec.nodeName ( or .spec.hostNetwork false ) ( or .metadata.uid "" ) ( or .metadata.name "" ) ( or .metadata.namespace "" ) }}
      {{ with $podIPs }}
      podIP: {{ index . 0 | Quote }}
      podIPs:
      {{ range . }}
      - ip: {{ . | Quote }}
      {{ end }}
      {{ end }}
      phase: Running
      startTime: {{ $now | Quote }}
---
apiVersion: kwok.x-k8s.io/v1alpha1
kind: Stage
metadata:
  name: pod-delete
spec:
  resourceRef:
    apiGroup: v1
    kind: Pod
  selector:
    matchExpressions:
    - key: '.metadata.deletionTimestamp'
      operator: 'Exists'
  next:
    delete: true
)";
}

// API Priority and Fairness as kube-apiserver's /metrics count it. The child's
// ServiceAccount falls in flow schema "service-accounts" (priority level
// "workload-low"); KWOK and the bench are system:masters (exempt), so that level's
// figures are the child's.
struct Apf {
  double wait_s = 0;      // apiserver_flowcontrol_request_wait_duration_seconds_sum
  double waited = 0;      // ..._count
  double rejected = 0;    // apiserver_flowcontrol_rejected_requests_total (every level)
  double dispatched = 0;  // apiserver_flowcontrol_dispatched_requests_total
};

Apf ReadApf(const kt::ControlPlane& cp) {
  Apf a;
  auto m = kt::Kubectl(cp, cp.admin_kubeconfig(), {"get", "--raw", "/metrics"}, 60);
  if (!m.ok()) return a;
  std::istringstream in(*m);
  for (std::string line; std::getline(in, line);) {
    const size_t sp = line.rfind(' ');
    if (line.empty() || line[0] == '#' || sp == std::string::npos) continue;
    const double v = std::atof(line.c_str() + sp + 1);
    const bool level = line.find("priority_level=\"workload-low\"") != std::string::npos;
    if (line.rfind("apiserver_flowcontrol_rejected_requests_total{", 0) == 0) a.rejected += v;
    if (!level) continue;
    if (line.rfind("apiserver_flowcontrol_request_wait_duration_seconds_sum{", 0) == 0) {
      a.wait_s += v;
    }
    if (line.rfind("apiserver_flowcontrol_request_wait_duration_seconds_count{", 0) == 0) {
      a.waited += v;
    }
    if (line.rfind("apiserver_flowcontrol_dispatched_requests_total{", 0) == 0) a.dispatched += v;
  }
  return a;
}

Json ApfDelta(const Apf& a, const Apf& b) {
  return {{"workload_low_dispatched", b.dispatched - a.dispatched},
          {"workload_low_queue_wait_s", b.wait_s - a.wait_s},
          {"workload_low_mean_wait_ms",
           1e3 * (b.wait_s - a.wait_s) / std::max(1.0, b.waited - a.waited)},
          {"rejected", b.rejected - a.rejected}};
}

// One API request as the audit log tells it (counted once: a watch when its response
// starts, anything else when it completes).
struct Request {
  double t = 0;          // requestReceivedTimestamp, Unix seconds
  double latency_s = 0;  // stageTimestamp - requestReceivedTimestamp
  int code = 0;
  bool child = false;      // the ServiceAccount the child runs as
  bool kwok = false;       // user agent kwok/...
  bool heartbeat = false;  // a node status write by KWOK
  std::string key;         // "create pods", "update trainjobs/status", "get /version"
};

// Reads the audit log (ControlPlane::audit_log_path) incrementally: ControlPlane's
// AuditEvents() re-reads the whole file, which grows by ~1 KiB per request here.
class AuditTail {
 public:
  explicit AuditTail(std::string path) : path_(std::move(path)) {}

  void Poll(std::vector<Request>* out) {
    std::ifstream in(path_, std::ios::binary);
    if (!in) return;
    in.seekg(0, std::ios::end);
    const std::streamoff size = in.tellg();
    if (size <= offset_) return;
    in.seekg(offset_);
    std::string chunk(static_cast<size_t>(size - offset_), '\0');
    in.read(chunk.data(), static_cast<std::streamsize>(chunk.size()));
    offset_ = size;
    partial_ += chunk;
    size_t start = 0;
    for (size_t nl; (nl = partial_.find('\n', start)) != std::string::npos; start = nl + 1) {
      Handle(partial_.substr(start, nl - start), out);
    }
    partial_.erase(0, start);
  }

 private:
  void Handle(const std::string& line, std::vector<Request>* out) {
    const Json e = Json::parse(line, nullptr, false);
    if (!e.is_object()) return;
    const std::string stage = e.value("stage", ""), verb = e.value("verb", "");
    const std::string id = e.value("auditID", "");
    if (verb == "watch") {
      if (stage == "ResponseStarted") {
        watches_.insert(id);
      } else if (stage != "ResponseComplete" || watches_.count(id)) {
        return;  // a watch that streamed was counted when it started
      }
    } else if (stage != "ResponseComplete" && stage != "Panic") {
      return;
    }
    Request r;
    auto t0 = k8s::ParseRfc3339(e.value("requestReceivedTimestamp", ""));
    auto t1 = k8s::ParseRfc3339(e.value("stageTimestamp", ""));
    if (!t0.ok()) return;
    r.t = *t0;
    r.latency_s = t1.ok() ? *t1 - *t0 : 0;
    if (e.contains("responseStatus") && e["responseStatus"].is_object()) {
      r.code = e["responseStatus"].value("code", 0);
    }
    const Json& user = e.value("user", Json::object());
    r.child = user.value("username", "") == kOperatorUser;
    r.kwok = e.value("userAgent", "").rfind("kwok", 0) == 0;
    std::string what;
    if (e.contains("objectRef") && e["objectRef"].is_object()) {
      const Json& o = e["objectRef"];
      what = o.value("resource", "");
      if (o.contains("subresource")) what += "/" + o.value("subresource", "");
    } else {
      what = e.value("requestURI", "");
      what = what.substr(0, what.find('?'));
    }
    r.key = verb + " " + what;
    r.heartbeat = r.kwok && what == "nodes/status" && (verb == "patch" || verb == "update");
    out->push_back(std::move(r));
  }

  std::string path_;
  std::streamoff offset_ = 0;
  std::string partial_;
  std::set<std::string> watches_;
};

double Percentile(std::vector<double> v, double p) {
  if (v.empty()) return -1;
  std::sort(v.begin(), v.end());
  const size_t i = std::min(v.size() - 1, static_cast<size_t>(p * static_cast<double>(v.size())));
  return v[i];
}

// The child's requests in [from, to): count, rate, codes and a breakdown by verb and
// resource (count, rate, mean and max latency as the API server saw it).
Json ChildRequests(const std::vector<Request>& reqs, double from, double to) {
  struct Agg {
    int n = 0;
    double lat = 0, max_lat = 0;
  };
  std::map<std::string, Agg> by;
  std::map<std::string, int> codes;
  int n = 0;
  for (const Request& r : reqs) {
    if (!r.child || r.t < from || r.t >= to) continue;
    ++n;
    Agg& a = by[r.key];
    ++a.n;
    a.lat += r.latency_s;
    a.max_lat = std::max(a.max_lat, r.latency_s);
    ++codes[std::to_string(r.code)];
  }
  const double span = std::max(1e-9, to - from);
  Json keys = Json::object();
  for (const auto& [k, a] : by) {
    keys[k] = {{"n", a.n},
               {"per_s", a.n / span},
               {"mean_ms", 1e3 * a.lat / std::max(1, a.n)},
               {"max_ms", 1e3 * a.max_lat}};
  }
  return {{"requests", n}, {"per_s", n / span}, {"window_s", span}, {"codes", codes}, {"by", keys}};
}

// Every request in [from, to): the API server's whole load, and KWOK's part of it.
Json AllRequests(const std::vector<Request>& reqs, double from, double to) {
  int n = 0, kwok = 0, heartbeats = 0, child = 0, throttled = 0;
  for (const Request& r : reqs) {
    if (r.t < from || r.t >= to) continue;
    ++n;
    kwok += r.kwok;
    child += r.child;
    heartbeats += r.heartbeat;
    throttled += r.code == 429;
  }
  const double span = std::max(1e-9, to - from);
  return {{"requests", n},
          {"per_s", n / span},
          {"kwok", kwok},
          {"child", child},
          {"node_heartbeats", heartbeats},
          {"throttled_429", throttled}};
}

// Per 5 s from `from` to `to`: the child's requests by key, KWOK's node heartbeats,
// and the pods that became bound and Running (mono times shifted by mono_to_wall).
Json Timeline(const std::vector<Request>& reqs, const std::vector<std::pair<double, double>>& pods,
              double from, double to, double mono_to_wall) {
  const double kBucket = 5;
  const size_t n = static_cast<size_t>(std::max(0.0, (to - from) / kBucket)) + 1;
  std::vector<std::map<std::string, int>> child(n);
  std::vector<int> beats(n), bound(n), running(n);
  auto at = [&](double t) { return std::min(n - 1, static_cast<size_t>((t - from) / kBucket)); };
  for (const Request& r : reqs) {
    if (r.t < from || r.t >= to) continue;
    if (r.child) ++child[at(r.t)][r.key];
    beats[at(r.t)] += r.heartbeat;
  }
  for (const auto& [b, run] : pods) {
    if (b > 0 && b + mono_to_wall >= from) ++bound[at(b + mono_to_wall)];
    if (run > 0 && run + mono_to_wall >= from) ++running[at(run + mono_to_wall)];
  }
  Json out = Json::array();
  for (size_t i = 0; i < n; ++i) {
    out.push_back({{"t", static_cast<double>(i) * kBucket},
                   {"child", child[i]},
                   {"heartbeats", beats[i]},
                   {"bound", bound[i]},
                   {"running", running[i]}});
  }
  return out;
}

// Bound and Running times of the pods the bench sees (its own pod informer).
struct PodTimes {
  std::string job;
  double bound = 0, running = 0;  // Mono(); 0 = not yet
};
class PodWatch {
 public:
  void Observe(const Json& pod) {
    const std::string key = k8s::KeyOf(pod);
    const Json& meta = pod.value("metadata", Json::object());
    const std::string job = meta.value("labels", Json::object()).value("bulwark.dev/job", "");
    const bool bound = !pod.value("spec", Json::object()).value("nodeName", "").empty();
    const bool running = pod.value("status", Json::object()).value("phase", "") == "Running";
    std::lock_guard<std::mutex> l(mu_);
    PodTimes& p = pods_[key];
    p.job = job;
    const double now = Mono();
    if (bound && p.bound == 0) {
      p.bound = now;
      ++bound_;
    }
    if (running && p.running == 0) {
      p.running = now;
      ++running_;
    }
  }
  void Deleted() {
    std::lock_guard<std::mutex> l(mu_);
    ++deleted_;
  }
  int bound() const {
    std::lock_guard<std::mutex> l(mu_);
    return bound_;
  }
  int running() const {
    std::lock_guard<std::mutex> l(mu_);
    return running_;
  }
  int deleted() const {
    std::lock_guard<std::mutex> l(mu_);
    return deleted_;
  }
  std::map<std::string, PodTimes> Snapshot() const {
    std::lock_guard<std::mutex> l(mu_);
    return pods_;
  }

 private:
  mutable std::mutex mu_;
  std::map<std::string, PodTimes> pods_;
  int bound_ = 0, running_ = 0, deleted_ = 0;
};

// The baseline child: three informers, then idle until SIGTERM.
std::atomic<bool> g_stop{false};
int WatchOnly(const std::string& kubeconfig) {
  signal(SIGTERM, [](int) { g_stop.store(true); });
  auto cfg = k8s::LoadKubeConfig(kubeconfig);
  if (!cfg.ok()) return 2;
  auto client = k8s::Client::Create(*cfg);
  if (!client.ok()) return 2;
  std::vector<std::unique_ptr<k8s::Informer>> infs;
  for (int r = 0; r < 3; ++r) {
    k8s::InformerOptions o;
    o.resource = r == 0 ? k8s::TrainJobs() : r == 1 ? k8s::Pods() : k8s::Nodes();
    if (r == 1) o.label_selector = "bulwark.dev/job";
    infs.push_back(std::make_unique<k8s::Informer>(client->get(), o, k8s::InformerHandlers{}));
    infs.back()->Start();
  }
  for (auto& i : infs) i->WaitForSync(300);
  std::printf("synced\n");
  std::fflush(stdout);
  while (!g_stop.load()) bulwark::PollReadable({}, 0.1);
  for (auto& i : infs) i->Stop();
  return 0;
}

struct Flags {
  std::string mode = "operator", bulwark_bin, k8s_bin, rbac;
  int nodes = 5000, jobs = 500, per_job = 8;
  double steady_s = 60, heartbeat_s = 60, phase1_timeout_s = 900;
  int node_lease_s = 0;
};

// A spawned child that is always reaped: SIGTERM, then the group is killed.
struct ChildGuard {
  bulwark::Child c;
  std::string exit;
  std::string Stop(double grace_s) {
    if (c.pid <= 0 || !exit.empty()) return exit;
    kill(c.pid, SIGTERM);
    auto e = bulwark::WaitExit(c.pid, grace_s);
    exit = e ? e->Describe() : bulwark::TerminateGroup(c.pid, c.pgid, 1).Describe() + " (killed)";
    return exit;
  }
  ~ChildGuard() { Stop(5); }
};

int Bench(const Flags& f, const char* self) {
  const bool op_mode = f.mode == "operator";
  const int admitted = std::min(f.jobs, f.nodes / std::max(1, f.per_job));
  const int expected_pods = admitted * f.per_job;
  Json r = {{"mode", f.mode},
            {"nodes", f.nodes},
            {"jobs", f.jobs},
            {"nodes_per_job", f.per_job},
            {"expected_pods", expected_pods},
            {"heartbeat_s", f.heartbeat_s},
            {"node_lease_s", f.node_lease_s},
            {"synced", false}};
  auto fail = [&](const std::string& why) {
    Log("FAILED: " + why);
    r["error"] = why;
    std::cout << r.dump(2) << "\n";
    return 1;
  };

  // The control plane.
  const double t_cp = Mono();
  kt::ControlPlaneOptions cpo;
  cpo.bin_dir = f.k8s_bin;
  cpo.controller_manager = false;
  cpo.audit = true;
  cpo.start_timeout_s = 180;
  // TaintNodesByCondition gives every new Node the node.kubernetes.io/not-ready
  // NoSchedule taint, which the node lifecycle controller (kube-controller-manager)
  // removes once the node is Ready. That controller judges health by node Leases
  // renewed every 10 s (500 writes/s at 5,000 nodes) and would mark nodes whose only
  // heartbeat is a status report every 60 s NotReady, so it does not run here, and
  // neither does the admission plugin whose taint only it would remove.
  cpo.apiserver_flags = {"--disable-admission-plugins=TaintNodesByCondition"};
  auto started = kt::ControlPlane::Start(cpo);
  if (!started.ok()) return fail("control plane: " + started.status().ToString());
  std::unique_ptr<kt::ControlPlane> cp = std::move(*started);
  r["control_plane_start_s"] = Mono() - t_cp;
  Log("control plane up at " + cp->url() + " in " + std::to_string(Mono() - t_cp) + " s");
  auto admin_client = k8s::Client::Create(cp->AdminConfig());
  if (!admin_client.ok()) return fail(admin_client.status().ToString());
  k8s::Client* admin = admin_client->get();

  // The CRD, deploy/rbac.yaml (its namespace first), the jobs' namespace (privileged:
  // the training pods use hostNetwork) with the ServiceAccount pod admission needs.
  if (Status s = kt::InstallCrd(admin, tjob::TrainJobCrd(), 60); !s.ok()) {
    return fail("TrainJob CRD: " + s.ToString());
  }
  std::ifstream rbac_in(f.rbac);
  std::stringstream rbac_text;
  rbac_text << rbac_in.rdbuf();
  auto rbac = tjob::ParseYamlDocuments(rbac_text.str(), f.rbac);
  if (!rbac.ok() || rbac->empty()) {
    return fail("cannot read " + f.rbac + ": " + (rbac.ok() ? "empty" : rbac.status().ToString()));
  }
  std::vector<Json> setup = {
      {{"apiVersion", "v1"}, {"kind", "Namespace"}, {"metadata", {{"name", kOperatorNs}}}},
      {{"apiVersion", "v1"},
       {"kind", "Namespace"},
       {"metadata",
        {{"name", kJobNs}, {"labels", {{"pod-security.kubernetes.io/enforce", "privileged"}}}}}},
      {{"apiVersion", "v1"},
       {"kind", "ServiceAccount"},
       {"metadata", {{"name", "default"}, {"namespace", kJobNs}}}}};
  setup.insert(setup.end(), rbac->begin(), rbac->end());
  if (Status s = kt::ApplyObjects(admin, setup); !s.ok()) return fail("setup: " + s.ToString());

  // KWOK.
  const std::string kwok_config = cp->work_dir() + "/kwok.yaml";
  {
    std::ofstream out(kwok_config);
    out << KwokConfig(f.heartbeat_s);
    if (!out) return fail("cannot write " + kwok_config);
  }
  std::vector<std::string> kwok_args = {
      "--kubeconfig=" + cp->admin_kubeconfig(),
      "--config=" + kwok_config,
      "--manage-all-nodes=false",
      "--manage-nodes-with-annotation-selector=kwok.x-k8s.io/node=fake",
      "--node-ip=127.0.0.1",
      "--cidr=127.16.0.0/16",
      "--node-lease-duration-seconds=" + std::to_string(f.node_lease_s)};
  r["kwok_args"] = kwok_args;
  auto kwok = cp->StartExtra("kwok", kwok_args);
  if (!kwok.ok()) return fail("kwok: " + kwok.status().ToString());

  // The nodes, created by 4 threads; then KWOK makes them Ready.
  const double t_load = Mono();
  {
    std::atomic<int> next{0};
    std::string err;
    std::mutex err_mu;
    std::vector<std::thread> ts;
    for (int t = 0; t < 4; ++t) {
      ts.emplace_back([&] {
        for (int i; (i = next.fetch_add(1)) < f.nodes;) {
          auto n = admin->Create(k8s::Nodes(), "", Node(i, f.nodes));
          if (!n.ok()) {
            std::lock_guard<std::mutex> l(err_mu);
            err = n.status().ToString();
            next.store(f.nodes);
          }
        }
      });
    }
    for (auto& t : ts) t.join();
    if (!err.empty()) return fail("create node: " + err);
  }
  r["load_s"] = Mono() - t_load;
  Log(std::to_string(f.nodes) + " nodes created in " + std::to_string(Mono() - t_load) + " s");
  int ready = 0;
  while (Mono() - t_load < 900) {
    if (std::string dead = cp->Check(); !dead.empty()) {
      return fail(dead + "\n" + cp->LogTail("kwok"));
    }
    auto l = admin->List(k8s::Nodes(), "");
    ready = 0;
    bool gpus = true;
    if (l.ok()) {
      for (const Json& n : l->items) {
        ready += NodeReady(n);
        gpus = gpus && n.value("status", Json::object())
                           .value("allocatable", Json::object())
                           .contains("nvidia.com/gpu");
      }
      if (!gpus) return fail("a node lost its allocatable GPUs: " + l->items[0].dump());
    }
    if (ready == f.nodes) break;
    bulwark::PollReadable({}, 2);
  }
  r["nodes_ready_s"] = Mono() - t_load;
  if (ready != f.nodes) {
    return fail("KWOK made " + std::to_string(ready) + " of " + std::to_string(f.nodes) +
                " nodes Ready\n" + cp->LogTail("kwok"));
  }
  Log("KWOK: every node Ready after " + std::to_string(Mono() - t_load) + " s");

  // The bench's own view of the pods: when each is bound and Running.
  PodWatch pods;
  k8s::InformerOptions pio;
  pio.resource = k8s::Pods();
  pio.ns = kJobNs;
  pio.label_selector = "bulwark.dev/job";
  k8s::Informer pod_inf(admin, pio,
                        k8s::InformerHandlers{[&](const Json& p) { pods.Observe(p); },
                                              [&](const Json&, const Json& p) { pods.Observe(p); },
                                              [&](const Json&) { pods.Deleted(); }});
  pod_inf.Start();
  if (!pod_inf.WaitForSync(60)) return fail("the bench's pod informer did not sync");

  // The child, as deploy/rbac.yaml's ServiceAccount.
  const std::string dir = cp->work_dir() + "/bench";
  std::filesystem::create_directories(dir);
  const std::string kubeconfig = dir + "/kubeconfig";
  auto sa = cp->ServiceAccountConfig(kOperatorNs, kOperatorSa, 4 * 3600);
  if (!sa.ok()) return fail(sa.status().ToString());
  if (Status s = kt::ControlPlane::WriteKubeconfig(kubeconfig, *sa); !s.ok()) {
    return fail(s.ToString());
  }
  bulwark::SpawnOptions so;
  if (op_mode) {
    so.argv = {f.bulwark_bin, "operator",       "--kubeconfig", kubeconfig,  "--no-leader-election",
               "--state-dir", dir + "/state",   "--bind",       "127.0.0.1", "--advertise",
               "127.0.0.1",   "--metrics-addr", "127.0.0.1:0"};
  } else {
    so.argv = {self, "--watch-only-child", kubeconfig};
  }
  so.env = bulwark::CurrentEnv();
  std::vector<Request> reqs;
  AuditTail audit(cp->audit_log_path());
  audit.Poll(&reqs);
  std::map<std::string, Tracked> cpt;  // the control plane's processes
  for (const kt::ComponentInfo& c : cp->Components()) {
    cpt[c.name].pid = c.pid;
    cpt[c.name].start = cpt[c.name].Take();
  }
  const Apf apf0 = ReadApf(*cp);
  const double t0 = Mono(), w0 = Wall();
  auto spawned = bulwark::Spawn(so);
  if (!spawned.ok()) return fail(spawned.status().ToString());
  ChildGuard child{std::move(*spawned), ""};
  Tracked ch;
  ch.pid = child.c.pid;
  std::string out;
  bool eof = false;
  auto drain = [&](double wait_s) {
    bulwark::PollReadable({child.c.output.get()}, wait_s);
    if (!eof) out += bulwark::ReadAvailable(child.c.output.get(), &eof);
    if (out.size() > 1 << 20) out.erase(0, out.size() - (1 << 19));
    ch.Take();
    for (auto& [name, p] : cpt) p.Take();
  };

  // Phase 1: the child syncs (three watches open), the bench creates the TrainJobs
  // (and, for the baseline, their pods), until every pod is bound and Running.
  std::vector<double> job_created(static_cast<size_t>(f.jobs), 0);
  std::atomic<bool> created{false};
  std::string create_error;
  std::thread creator;
  double sync_s = -1, created_s = -1, first_create = 0, jobs_created_at = 0;
  bool done = false;
  int statused = 0, failed_jobs = 0;
  double next_status_check = 0, next_progress = t0 + 10;
  while (Mono() - t0 < f.phase1_timeout_s) {
    drain(0.25);
    audit.Poll(&reqs);
    if (Mono() >= next_progress) {
      next_progress = Mono() + 10;
      Log("phase 1, " + std::to_string(static_cast<int>(Mono() - t0)) +
          " s: " + std::to_string(pods.bound()) + " pods bound, " + std::to_string(pods.running()) +
          " Running of " + std::to_string(expected_pods) + ", " + std::to_string(statused) +
          " TrainJobs with a status");
    }
    if (eof || bulwark::ProcState(child.c.pid) == 'Z') break;
    if (std::string dead = cp->Check(); !dead.empty()) {
      if (creator.joinable()) creator.join();  // bounded: every request has a deadline
      return fail(dead);
    }
    if (sync_s < 0) {
      int watches = 0;
      for (const Request& q : reqs) watches += q.child && q.key.rfind("watch ", 0) == 0;
      if (watches < 3) continue;
      sync_s = Mono() - t0;
      Log("child watching after " + std::to_string(sync_s) + " s; creating " +
          std::to_string(f.jobs) + " TrainJobs");
      first_create = Mono();
      creator = std::thread([&] {
        std::vector<Json> objs;
        for (int i = 0; i < f.jobs && create_error.empty(); ++i) {
          auto c = admin->Create(k8s::TrainJobs(), kJobNs, TrainJob(i, f.per_job));
          job_created[static_cast<size_t>(i)] = Mono();
          if (!c.ok()) create_error = "create TrainJob: " + c.status().ToString();
          if (c.ok()) objs.push_back(*c);
        }
        jobs_created_at = Mono();
        // The baseline: the same pods as the operator would create, bound the same way,
        // by 8 threads (the operator creates them from one thread per job).
        std::atomic<int> next{0};
        std::mutex err_mu;
        std::vector<std::thread> ts;
        for (int w = 0; !op_mode && create_error.empty() && w < 8; ++w) {
          ts.emplace_back([&] {
            for (int i; (i = next.fetch_add(1)) < admitted;) {
              std::string err;
              auto t = tjob::TrainJobFromObject(objs[static_cast<size_t>(i)]);
              if (!t.ok()) err = t.status().ToString();
              tjob::RenderOptions ro;
              ro.controller_addr = "127.0.0.1:1";
              for (int k = 0; t.ok() && err.empty() && k < f.per_job; ++k) {
                const std::string id = "node-" + std::to_string(k);
                Json pod =
                    tjob::RenderPod(*t, id, k, "node-" + std::to_string(i * f.per_job + k), ro);
                pod["metadata"]["name"] = t->name + "-r1-bench-" + id;
                pod["metadata"]["labels"]["bulwark.dev/run"] = "r1-bench";
                auto c = admin->Create(k8s::Pods(), kJobNs, pod);
                if (!c.ok()) err = "create pod: " + c.status().ToString();
              }
              if (!err.empty()) {
                std::lock_guard<std::mutex> l(err_mu);
                create_error = err;
                next.store(admitted);
              }
            }
          });
        }
        for (auto& t : ts) t.join();
        created.store(true);
      });
      continue;
    }
    if (!created.load()) continue;
    if (created_s < 0) {
      creator.join();
      if (!create_error.empty()) return fail(create_error);
      created_s = jobs_created_at - first_create;
      Log("TrainJobs created in " + std::to_string(created_s) + " s");
    }
    if (pods.running() < expected_pods) continue;
    if (!op_mode) {
      done = true;
      break;
    }
    // Every TrainJob has a status (the operator has seen each of them).
    if (Mono() < next_status_check) continue;
    next_status_check = Mono() + 1;
    auto l = admin->List(k8s::TrainJobs(), kJobNs);
    if (!l.ok()) continue;
    statused = 0;
    for (const Json& j : l->items) {
      statused += j.contains("status") && j["status"].contains("phase");
    }
    if (statused == f.jobs) {
      done = true;
      break;
    }
  }
  if (creator.joinable()) creator.join();
  const double phase1_s = Mono() - t0, w1 = Wall();
  const ProcSample p1 = ch.Take();
  ch.phase1 = p1;
  for (auto& [name, p] : cpt) p.phase1 = p.Take();
  const Apf apf1 = ReadApf(*cp);
  r["sync_s"] = sync_s;
  r["create_jobs_s"] = created_s;
  r["phase1_s"] = phase1_s;
  r["pods_bound"] = pods.bound();
  r["pods_running"] = pods.running();
  r["trainjobs_with_status"] = statused;
  if (!done) {
    r["tail"] = out.size() > 4000 ? out.substr(out.size() - 4000) : out;
    if (auto l = admin->List(k8s::TrainJobs(), kJobNs); l.ok() && !l->items.empty()) {
      r["first_trainjob_status"] = l->items[0].value("status", Json::object());
    }
    if (auto n = admin->Get(k8s::Nodes(), "", "node-0"); n.ok()) r["node_0"] = *n;
    child.Stop(30);
    return fail("phase 1 did not finish in " + std::to_string(f.phase1_timeout_s) + " s: " +
                std::to_string(pods.bound()) + " pods bound, " + std::to_string(pods.running()) +
                " Running of " + std::to_string(expected_pods) + ", " + std::to_string(statused) +
                " TrainJobs with a status; child " + (eof ? "exited" : "running"));
  }
  Log("phase 1 done after " + std::to_string(phase1_s) + " s; steady for " +
      std::to_string(f.steady_s) + " s");

  // Creation to bound / Running: over all pods from the first TrainJob's creation, and
  // per job from its own creation to its last pod.
  {
    std::map<std::string, std::pair<double, double>> last;  // job -> (bound, running)
    double all_bound = 0, all_running = 0;
    for (const auto& [key, p] : pods.Snapshot()) {
      auto& l = last[p.job];
      l.first = std::max(l.first, p.bound);
      l.second = std::max(l.second, p.running);
      all_bound = std::max(all_bound, p.bound);
      all_running = std::max(all_running, p.running);
    }
    std::vector<double> jb, jr;
    for (int i = 0; i < f.jobs; ++i) {
      auto it = last.find("job-" + std::to_string(i));
      if (it == last.end()) continue;
      jb.push_back(it->second.first - job_created[static_cast<size_t>(i)]);
      jr.push_back(it->second.second - job_created[static_cast<size_t>(i)]);
    }
    r["all_bound_s"] = all_bound - first_create;
    r["all_running_s"] = all_running - first_create;
    r["job_bound_s"] = {
        {"p50", Percentile(jb, 0.5)}, {"p95", Percentile(jb, 0.95)}, {"max", Percentile(jb, 1)}};
    r["job_running_s"] = {
        {"p50", Percentile(jr, 0.5)}, {"p95", Percentile(jr, 0.95)}, {"max", Percentile(jr, 1)}};
  }

  // Phase 2: steady state with KWOK's node heartbeats.
  const double t1 = Mono();
  double next_audit = t1 + 1;
  while (Mono() - t1 < f.steady_s && !eof) {
    drain(std::min(0.25, std::max(0.0, f.steady_s - (Mono() - t1))));
    if (Mono() >= next_audit) {
      audit.Poll(&reqs);
      next_audit = Mono() + 1;
    }
  }
  const double w2 = Wall();
  const ProcSample p2 = ch.Take();
  for (auto& [name, p] : cpt) p.steady = p.Take();
  const Apf apf2 = ReadApf(*cp);
  const double steady_wall = Mono() - t1;
  const double first_creation_to_end_s = Mono() - first_create;
  // Let requests received before w2 reach the log (blocking audit: written before the
  // response), then read it.
  bulwark::PollReadable({}, 0.5);
  audit.Poll(&reqs);
  const std::string dead = cp->Check();
  auto jobs_now = admin->List(k8s::TrainJobs(), kJobNs);
  std::map<std::string, int> phases;
  if (jobs_now.ok()) {
    for (const Json& j : jobs_now->items) {
      const std::string ph = j.value("status", Json::object()).value("phase", "none");
      ++phases[ph];
      failed_jobs += ph == "Failed";
    }
  }
  // What the operator wrote: its Events by reason, and one TrainJob's status.
  std::map<std::string, int> event_reasons;
  Json event_samples = Json::object();
  if (auto ev = admin->List(k8s::Events(), kJobNs); ev.ok()) {
    for (const Json& e : ev->items) {
      const std::string reason = e.value("reason", "");
      if (++event_reasons[reason] == 1) event_samples[reason] = e.value("message", "");
    }
  }
  r["events_by_reason"] = event_reasons;
  r["event_samples"] = event_samples;
  if (jobs_now.ok() && !jobs_now->items.empty()) {
    r["trainjob_0_status"] = jobs_now->items[0].value("status", Json::object());
  }
  const int deleted = pods.deleted();
  r["exit"] = child.Stop(120);
  pod_inf.Stop();
  r["tail"] = out.size() > 2000 ? out.substr(out.size() - 2000) : out;

  r["synced"] = !eof;
  r["sync_cpu_s"] = p1.cpu_s;
  r["sync_rss_mb"] = p1.rss_mb;
  r["steady_s"] = steady_wall;
  r["steady_cpu_s"] = p2.cpu_s - p1.cpu_s;
  r["steady_cpu_per_s"] = (p2.cpu_s - p1.cpu_s) / std::max(1e-9, steady_wall);
  r["steady_rss_mb"] = p2.rss_mb;
  r["peak_rss_mb"] = std::max(ch.peak.hwm_mb, ch.peak.rss_mb);
  r["threads"] = ch.peak.threads;
  r["trainjob_phases"] = phases;
  r["trainjobs_failed"] = failed_jobs;
  r["pods_deleted"] = deleted;
  r["agent_connect_timeout_s"] = kAgentConnectTimeoutS;
  r["first_creation_to_end_s"] = first_creation_to_end_s;
  r["requests"] = {{"phase1", ChildRequests(reqs, w0, w1)},
                   {"steady", ChildRequests(reqs, w1, w2)}};
  r["apiserver"] = {{"phase1", AllRequests(reqs, w0, w1)}, {"steady", AllRequests(reqs, w1, w2)}};
  r["apf"] = {{"phase1", ApfDelta(apf0, apf1)}, {"steady", ApfDelta(apf1, apf2)}};
  {
    std::vector<std::pair<double, double>> times;
    for (const auto& [key, p] : pods.Snapshot()) times.emplace_back(p.bound, p.running);
    r["timeline"] = Timeline(reqs, times, w0, w2, w0 - t0);
  }
  Json cpj = Json::object();
  for (auto& [name, p] : cpt) {
    cpj[name] = {{"phase1_cpu_s", p.phase1.cpu_s - p.start.cpu_s},
                 {"steady_cpu_per_s", (p.steady.cpu_s - p.phase1.cpu_s) / steady_wall},
                 {"steady_rss_mb", p.steady.rss_mb},
                 {"peak_rss_mb", std::max(p.peak.hwm_mb, p.peak.rss_mb)}};
  }
  r["control_plane"] = cpj;
  if (!dead.empty()) return fail("during the steady phase: " + dead);
  if (eof) return fail("the child exited during the run: " + r["exit"].get<std::string>());
  if (op_mode && failed_jobs > 0) {
    return fail(std::to_string(failed_jobs) + " TrainJobs failed during the run");
  }
  if (deleted > 0) return fail(std::to_string(deleted) + " pods were deleted during the run");
  if (op_mode && first_creation_to_end_s >= kAgentConnectTimeoutS) {
    return fail("the run outlasted the operator's agent-connect timeout (" +
                std::to_string(first_creation_to_end_s) + " s): shorten --steady-s");
  }
  std::cout << r.dump(2) << "\n";
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  CLI::App app{"operator_bench"};
  Flags f;
  f.rbac = std::string(BULWARK_SOURCE_DIR) + "/deploy/rbac.yaml";
  std::string watch_child;
  app.add_option("--mode", f.mode)->check(CLI::IsMember({"operator", "watch-only"}));
  app.add_option("--bulwark", f.bulwark_bin, "path of the bulwark binary (operator mode)");
  app.add_option("--k8s-bin", f.k8s_bin,
                 "control-plane binaries with kwok (scripts/k8s-control-plane.sh --kwok)");
  app.add_option("--rbac", f.rbac, "the operator's RBAC (deploy/rbac.yaml)");
  app.add_option("--watch-only-child", watch_child, "internal: run the baseline child");
  app.add_option("--nodes", f.nodes);
  app.add_option("--jobs", f.jobs);
  app.add_option("--nodes-per-job", f.per_job);
  app.add_option("--steady-s", f.steady_s);
  app.add_option("--heartbeat-s", f.heartbeat_s, "KWOK's node status heartbeat period");
  app.add_option("--node-lease-s", f.node_lease_s,
                 "KWOK node Lease duration (renewed every quarter of it); 0 = no Leases");
  app.add_option("--phase1-timeout-s", f.phase1_timeout_s);
  CLI11_PARSE(app, argc, argv);
  if (!watch_child.empty()) return WatchOnly(watch_child);
  if (f.mode == "operator" && f.bulwark_bin.empty()) {
    std::cerr << "operator_bench: --bulwark is required in operator mode\n";
    return 2;
  }
  return Bench(f, argv[0]);
}
