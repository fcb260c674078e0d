// The operator's reconcile loop (operator.h has the contract).
#include "operator/operator.h"

#include <unistd.h>

#include <algorithm>
#include <cstdlib>
#include <sstream>

#include "controller/job_metrics.h"
#include "metrics/exposition.h"
#include "operator/image_resolver.h"
#include "operator/replay_run.h"
#include "operator/status.h"
#include "policy/replay_check.h"
#include "sched/config.h"
#include "spec/job_update.h"

namespace bulwark::op {
namespace {

// Reports a failure the operator can only log (the next reconcile or relist redoes the
// work). NotFound is no failure here: the object is gone already.
void LogIfError(const Status& st, const std::string& what) {
  if (!st.ok() && st.code() != Code::kNotFound) {
    std::fprintf(stderr, "[bulwark-operator] %s: %s\n", what.c_str(), st.ToString().c_str());
  }
}
template <typename T>
void LogIfError(const Result<T>& r, const std::string& what) {
  if (!r.ok()) LogIfError(r.status(), what);
}

const Json& Field(const Json& obj, std::initializer_list<const char*> path) {
  static const Json kNull;
  const Json* cur = &obj;
  for (const char* k : path) {
    if (!cur->is_object()) return kNull;
    auto it = cur->find(k);
    if (it == cur->end()) return kNull;
    cur = &*it;
  }
  return *cur;
}

std::string StrField(const Json& obj, std::initializer_list<const char*> path) {
  const Json& v = Field(obj, path);
  return v.is_string() ? v.get<std::string>() : "";
}

std::string Label(const Json& obj, const char* key) {
  const Json& v = Field(obj, {"metadata", "labels", key});
  return v.is_string() ? v.get<std::string>() : "";
}

// Without a queue configuration: one queue "default" whose quota covers the cluster.
std::vector<sched::QueueSpec> DefaultQueues() {
  sched::QueueSpec q;
  q.name = "default";
  return {q};
}

// Controller events too frequent for Kubernetes Events (the status carries them).
bool ChattyEvent(const std::string& reason) { return reason == "CheckpointCommitted"; }

}  // namespace

// Per-TrainJob bookkeeping (reconcile thread only).
struct Operator::JobState {
  std::unique_ptr<JobRunner> runner;
  int runs = 0;             // runners started: run ids r1, r2, ...
  int restarts_before = 0;  // restarts made by earlier runners
  bool requeued = false;    // runner cancelled by a requeue or preemption
  bool deleting = false;    // runner cancelled because the TrainJob is gone
  bool finished = false;    // terminal status written
  double start_time = 0;
  double last_status_write = -1;
  double next_status_check = 0;  // runner status is looked at every kStatusCheckS
  std::string pending_reason;    // last one written
  std::string start_error;       // "Reason: message" of the last failed start ("" after a start)
  std::string invalid;           // parse errors of the current generation
  long invalid_generation = -1;
  // What the runner runs: the TrainJob as it was at `running_generation`; a later
  // generation is applied in place when only command, args, env or workdir changed.
  std::optional<trainjob::TrainJob> running;
  long running_generation = -1;
  std::string command_source;  // the last CommandFromImage Event's text
  // spec.replayOf: the replay's identity for status.replay (null: not a replay).
  Json replay;
};

class Operator::Impl {
 public:
  Impl(k8s::Client* client, OperatorOptions opts, std::atomic<bool>* leading);
  Status Run(const std::atomic<bool>* stop);
  OperatorStats Stats() const;
  std::optional<ControllerStatus> JobStatus(const std::string& key) const;
  std::vector<std::string> JobKeys() const;

 private:
  struct PodInfo {
    std::string job;      // job key
    std::string node_id;  // label bulwark.dev/node-id
    std::string run;      // label bulwark.dev/run
    std::string node;     // spec.nodeName
  };
  double Now() const { return clock_->NowWall(); }
  // Informer plumbing (informer threads).
  void IndexPod(const Json& pod, bool present);
  void IndexNode(const Json& node, bool present);
  // Reconcile thread.
  void SyncNodes();
  void ActOnFailure(const NodeFailure& f, const std::string& why);
  void Quarantine(const std::string& node, const std::string& reason);
  void Reconcile(const std::string& key);
  void ReportPodTrouble(const std::string& key, JobState& j);
  // A running TrainJob edited to generation `gen`: command, args, env and workdir are
  // applied in place (JobRunner::RequestUpdate); anything else is reported, not applied.
  void ApplyEdit(const std::string& key, JobState& j, const Json& obj, long gen);
  void CleanupPods(const std::string& key, const std::string& keep_run);
  // A job the previous leader ran whose pods still run with published agent endpoints:
  // records it where it runs and starts a runner that adopts them (no pod is replaced,
  // no rank restarted). False when there is nothing to adopt.
  bool TryAdopt(const std::string& key, JobState& j, const Json& obj, const trainjob::TrainJob& tj);
  void Cycle();
  Status StartRunner(const std::string& key, const trainjob::TrainJob& tj, bool delegated);
  // A job without spec.command: reads its image's config (with the pull secrets of
  // pod.imagePullSecrets) and applies it (trainjob::ApplyImageConfig); posts the
  // CommandFromImage Event when where the command comes from changed. A job with a
  // command is left alone. FailedPrecondition: the image has neither ENTRYPOINT nor CMD.
  // The registry is read off this thread (ImageResolver): while that read is in flight,
  // *pending is set and the status is OK with tj unchanged; the job is queued again
  // when it finishes.
  Status CommandFromImage(const std::string& key, trainjob::TrainJob* tj, bool* pending);
  // Stops the job's runner; `requeue` sends it back to Pending. Callers post the Event.
  void CancelRunner(const std::string& key, bool requeue);
  void PollRunners();
  void FinishRunner(const std::string& key, JobState& j);
  Observed ObserveRunner(const std::string& key, JobState& j) const;
  void WritePending(const std::string& key, JobState& j, const std::string& reason,
                    const std::string& message);
  // Phase Failed with `reason` and `message`, and a Warning Event saying the same.
  void WriteFailed(const std::string& key, JobState& j, const std::string& reason,
                   const std::string& message);
  void WriteStatus(const std::string& key, JobState& j, const Observed& o, bool force);
  void PostEvent(const Json& involved, const std::string& type, const std::string& reason,
                 const std::string& message);
  void PostJobEvent(const std::string& key, const std::string& type, const std::string& reason,
                    const std::string& message);
  void Shutdown();

  k8s::Client* client_;
  OperatorOptions opts_;
  std::atomic<bool>* leading_;
  Clock* clock_;
  ClusterPlacement placement_;
  k8s::WorkQueue queue_;
  std::unique_ptr<k8s::Informer> jobs_, pods_, nodes_;
  std::unique_ptr<k8s::LeaderElector> elector_;
  registry::Client registry_;  // image configs, cached across jobs and their restarts
  // Reads registry_ on its own thread; a finished read requeues the jobs that wait.
  ImageResolver images_{&registry_, [this](const std::string& key) { queue_.Add(key, Now()); }};
  std::map<std::string, JobState> state_;
  std::atomic<bool> nodes_dirty_{true};
  bool sched_dirty_ = true;
  bool any_pending_ = false;  // a job waits in the scheduler (requeue backoffs expire)
  std::string epoch_;         // this operator incarnation, part of every run id
  double next_cycle_ = 0;
  // The job's pods as (pod key "ns/name", info), a copy taken under mu_.
  std::vector<std::pair<std::string, PodInfo>> PodsOf(const std::string& job) const;

  mutable std::mutex mu_;  // guards pod_index_, node_views_, stats_, job_status_
  // Each job's latest controller status, for the dashboard (JobStatus); written by
  // ObserveRunner, dropped with stats_.ettr when the job no longer runs.
  mutable std::map<std::string, ControllerStatus> job_status_;
  std::map<std::string, std::map<std::string, PodInfo>> pod_index_;  // job -> pod key -> info
  std::map<std::string, NodeView> node_views_;  // by node name (guarded by mu_)
  OperatorStats stats_;
};

Operator::Impl::Impl(k8s::Client* client, OperatorOptions opts, std::atomic<bool>* leading)
    : client_(client),
      opts_(std::move(opts)),
      leading_(leading),
      clock_(opts_.runner.clock ? opts_.runner.clock : SystemClock::Get()),
      placement_(opts_.scheduler, opts_.queues.empty() ? DefaultQueues() : opts_.queues,
                 /*unlimited_quota=*/opts_.queues.empty()),
      registry_(opts_.registry) {
  // Pods are named <job>-<run id>-<node id>; the run id carries this incarnation so a
  // new leader never mistakes a pod of its predecessor (still terminating) for its own.
  char buf[16];
  std::snprintf(
      buf, sizeof buf, "%04x",
      static_cast<unsigned>(
          (static_cast<uint64_t>(clock_->NowWall() * 1000) ^ (getpid() * 2654435761u)) & 0xffff));
  epoch_ = buf;
}

void Operator::Impl::IndexPod(const Json& pod, bool present) {
  const std::string key = k8s::KeyOf(pod);
  const std::string job = k8s::Namespace(pod) + "/" + Label(pod, "bulwark.dev/job");
  std::lock_guard<std::mutex> l(mu_);
  if (!present) {
    auto it = pod_index_.find(job);
    if (it != pod_index_.end() && it->second.erase(key) && it->second.empty()) {
      pod_index_.erase(it);
    }
    return;
  }
  PodInfo& p = pod_index_[job][key];
  p.job = job;
  p.node_id = Label(pod, "bulwark.dev/node-id");
  p.run = Label(pod, "bulwark.dev/run");
  p.node = StrField(pod, {"spec", "nodeName"});
}

std::vector<std::pair<std::string, Operator::Impl::PodInfo>> Operator::Impl::PodsOf(
    const std::string& job) const {
  std::lock_guard<std::mutex> l(mu_);
  auto it = pod_index_.find(job);
  if (it == pod_index_.end()) return {};
  return {it->second.begin(), it->second.end()};
}

void Operator::Impl::IndexNode(const Json& node, bool present) {
  const std::string name = k8s::Name(node);
  std::lock_guard<std::mutex> l(mu_);
  if (!present) {
    nodes_dirty_.store(node_views_.erase(name) > 0 || nodes_dirty_.load());
    return;
  }
  NodeView v = ReadNode(node, opts_.gpu_resource);
  auto it = node_views_.find(name);
  if (it != node_views_.end() && SameView(it->second, v)) return;  // e.g. a heartbeat
  node_views_[name] = std::move(v);
  nodes_dirty_.store(true);
}

Status Operator::Impl::Run(const std::atomic<bool>* stop) {
  auto enqueue_job = [this](const Json& obj) { queue_.Add(k8s::KeyOf(obj), Now()); };
  k8s::InformerOptions jo;
  jo.resource = k8s::TrainJobs();
  jo.ns = opts_.watch_namespace;
  jobs_ = std::make_unique<k8s::Informer>(
      client_, jo,
      k8s::InformerHandlers{enqueue_job, [=](const Json&, const Json& n) { enqueue_job(n); },
                            enqueue_job},
      clock_);
  k8s::InformerOptions po;
  po.resource = k8s::Pods();
  po.ns = opts_.watch_namespace;
  po.label_selector = "bulwark.dev/job";
  auto on_pod = [this](const Json& pod, bool present) {
    IndexPod(pod, present);
    queue_.Add(k8s::Namespace(pod) + "/" + Label(pod, "bulwark.dev/job"), Now());
  };
  pods_ = std::make_unique<k8s::Informer>(
      client_, po,
      k8s::InformerHandlers{[=](const Json& p) { on_pod(p, true); },
                            [=](const Json&, const Json& p) { on_pod(p, true); },
                            [=](const Json& p) { on_pod(p, false); }},
      clock_);
  k8s::InformerOptions no;
  no.resource = k8s::Nodes();
  nodes_ = std::make_unique<k8s::Informer>(
      client_, no,
      k8s::InformerHandlers{[this](const Json& n) { IndexNode(n, true); },
                            [this](const Json&, const Json& n) { IndexNode(n, true); },
                            [this](const Json& n) { IndexNode(n, false); }},
      clock_);

  if (opts_.leader_election) {
    auto e = k8s::LeaderElector::Create(client_, opts_.leader, clock_);
    if (!e.ok()) return e.status();
    elector_ = std::move(*e);
    while (!stop->load()) {
      auto r = elector_->Step();
      if (r.ok() && *r) break;
      queue_.Wait(opts_.leader.retry_period_s);
    }
    if (stop->load()) return Status::Ok();
  }
  leading_->store(true);
  for (auto* inf : {nodes_.get(), pods_.get(), jobs_.get()}) inf->Start();
  for (auto* inf : {nodes_.get(), pods_.get(), jobs_.get()}) {
    while (!stop->load() && !inf->WaitForSync(1)) {
      if (elector_) {  // keep the lease while the caches fill
        IgnoreError(elector_->Step(), "the next Step retries; a lost lease is what IsLeader says");
      }
    }
  }
  double next_renew = clock_->NowMono() + (opts_.leader_election ? opts_.leader.retry_period_s : 0);
  Status exit = Status::Ok();
  while (!stop->load()) {
    if (elector_ && clock_->NowMono() >= next_renew) {
      next_renew = clock_->NowMono() + opts_.leader.retry_period_s;
      auto r = elector_->Step();
      if (!elector_->IsLeader()) {
        exit = Aborted("lost the leader lease " + opts_.leader.lease_namespace + "/" +
                       opts_.leader.lease_name +
                       (r.ok() ? std::string() : ": " + r.status().ToString()));
        break;
      }
    }
    if (nodes_dirty_.exchange(false)) SyncNodes();
    for (int n = 0; n < 256; ++n) {
      auto key = queue_.Pop(Now());
      if (!key) break;
      Reconcile(*key);
      queue_.Done(*key, Now());
      std::lock_guard<std::mutex> l(mu_);
      ++stats_.reconciles;
    }
    if ((sched_dirty_ || any_pending_) && Now() >= next_cycle_) Cycle();
    PollRunners();
    queue_.Wait(0.1);
  }
  Shutdown();
  leading_->store(false);
  return exit;
}

void Operator::Impl::Shutdown() {
  // Leadership ends (stop, upgrade, lost lease): the jobs do not. Each controller lets
  // go of its agents, which keep training until the next leader adopts them.
  for (auto& [key, j] : state_) {
    if (j.runner) j.runner->Detach();
  }
  for (auto& [key, j] : state_) {
    if (j.runner) j.runner->Join();
  }
  for (auto* inf : {jobs_.get(), pods_.get(), nodes_.get()}) {
    if (inf) inf->Stop();
  }
  if (elector_) {
    IgnoreError(elector_->Release(), "stepping down: a lease not released expires on its own");
  }
}

OperatorStats Operator::Impl::Stats() const {
  std::lock_guard<std::mutex> l(mu_);
  return stats_;
}

std::optional<ControllerStatus> Operator::Impl::JobStatus(const std::string& key) const {
  std::lock_guard<std::mutex> l(mu_);
  auto it = job_status_.find(key);
  if (it == job_status_.end()) return std::nullopt;
  return it->second;
}

std::vector<std::string> Operator::Impl::JobKeys() const {
  std::lock_guard<std::mutex> l(mu_);
  std::vector<std::string> keys;
  for (const auto& [k, s] : job_status_) keys.push_back(k);
  return keys;
}

// ---------------------------------------------------------------------------------
// Nodes.

void Operator::Impl::SyncNodes() {
  std::vector<NodeView> views;
  std::map<std::string, std::string> why;
  {
    std::lock_guard<std::mutex> l(mu_);
    views.reserve(node_views_.size());
    for (const auto& [name, v] : node_views_) {
      views.push_back(v);
      why[name] = v.reason;
    }
  }
  const bool first = !placement_.ready();
  auto failures = placement_.SyncNodes(views, Now());
  if (!failures.ok()) {
    std::fprintf(stderr, "[bulwark-operator] nodes: %s\n", failures.status().ToString().c_str());
    nodes_dirty_.store(true);  // retried on the next loop
    return;
  }
  for (const NodeFailure& f : *failures) {
    ActOnFailure(f, why.count(f.node) ? why[f.node] : "node deleted from the cluster");
  }
  sched_dirty_ = true;
  if (first) {
    for (const Json& j : jobs_->List()) queue_.Add(k8s::KeyOf(j), Now());
  }
}

void Operator::Impl::Quarantine(const std::string& node, const std::string& reason) {
  bool changed = false;
  auto r = client_->UpdateWithRetry(k8s::Nodes(), "", node, [&](Json& obj) {
    Json taints = WithQuarantineTaint(obj, reason);
    if (taints.is_null()) return Status::Ok();
    obj["spec"]["taints"] = std::move(taints);
    changed = true;
    return Status::Ok();
  });
  if (!r.ok()) {
    std::fprintf(stderr, "[bulwark-operator] quarantine %s: %s\n", node.c_str(),
                 r.status().ToString().c_str());
    return;
  }
  if (!changed) return;
  {
    std::lock_guard<std::mutex> l(mu_);
    ++stats_.quarantined;
  }
  PostEvent(*r, "Warning", "Quarantined",
            "Bulwark quarantined this node (taint " + std::string(kQuarantineTaint) +
                ":NoSchedule): " + reason +
                ". Remove the taint once the node is repaired to return it to the pool.");
}

void Operator::Impl::ActOnFailure(const NodeFailure& f, const std::string& why) {
  if (f.job.empty()) return;  // an idle node: the scheduler simply stops using it
  if (opts_.node_failure_quarantine) Quarantine(f.node, why);
  auto it = state_.find(f.job);
  JobState* j = it == state_.end() ? nullptr : &it->second;
  std::string node_ids;
  if (j && j->runner) {
    std::vector<std::string> ids;
    for (const auto& [pk, p] : PodsOf(f.job)) {
      // The runner's pods: those it created and those it adopted.
      if (p.node == f.node &&
          !j->runner->backend().NodeIdOfPod(pk.substr(pk.find('/') + 1)).empty()) {
        ids.push_back(p.node_id);
      }
    }
    for (const std::string& id : ids) {
      j->runner->backend().PushLoss(id, "node " + f.node + " failed: " + why);
      node_ids += (node_ids.empty() ? "" : ", ") + id;
    }
  }
  const char* reason = f.action == sched::FailureAction::kUseStandby       ? "StandbyPromoted"
                       : f.action == sched::FailureAction::kUseFreeNode    ? "NodeReplaced"
                       : f.action == sched::FailureAction::kPreemptForNode ? "NodeReplaced"
                       : f.action == sched::FailureAction::kRequeue        ? "Requeued"
                                                                           : "StandbyLost";
  PostJobEvent(f.job, "Warning", "NodeFailed",
               "node " + f.node + (node_ids.empty() ? "" : " (agent " + node_ids + ")") +
                   " failed: " + why + "; quarantined");
  PostJobEvent(f.job, f.action == sched::FailureAction::kRequeue ? "Warning" : "Normal", reason,
               f.reason);
  if (f.action == sched::FailureAction::kRequeue) CancelRunner(f.job, true);
  for (const std::string& v : f.preempted) {
    PostJobEvent(v, "Warning", "Preempted", "preempted for job " + f.job + ": " + f.reason);
    CancelRunner(v, true);
  }
  sched_dirty_ = true;
}

// ---------------------------------------------------------------------------------
// TrainJobs.

void Operator::Impl::CleanupPods(const std::string& key, const std::string& keep_run) {
  std::vector<std::pair<std::string, std::string>> doomed;  // (ns, name)
  for (const auto& [pk, p] : PodsOf(key)) {
    if (!keep_run.empty() && p.run == keep_run) continue;
    const size_t slash = pk.find('/');
    doomed.emplace_back(pk.substr(0, slash), pk.substr(slash + 1));
  }
  const auto drop_finalizer = [](Json& pod) {
    Json& fin = pod["metadata"]["finalizers"];
    if (!fin.is_array()) return Status::Ok();
    Json kept = Json::array();
    for (const Json& x : fin) {
      if (!(x.is_string() && x.get<std::string>() == kAgentFinalizer)) kept.push_back(x);
    }
    fin = std::move(kept);
    return Status::Ok();
  };
  for (const auto& [ns, name] : doomed) {
    k8s::DeleteOptions o;
    o.grace_period_seconds = 0;
    LogIfError(client_->Delete(k8s::Pods(), ns, name, o), "delete pod " + ns + "/" + name);
    LogIfError(client_->UpdateWithRetry(k8s::Pods(), ns, name, drop_finalizer),
               "drop the finalizer of pod " + ns + "/" + name);
  }
}

bool Operator::Impl::TryAdopt(const std::string& key, JobState& j, const Json& obj,
                              const trainjob::TrainJob& tj) {
  const std::string phase = StrField(obj, {"status", "phase"});
  if (phase != "Running" && phase != "Restarting" && phase != "Admitted") return false;
  JobNodes nodes;
  nodes.gang.assign(tj.job.nodes, "");
  int live = 0;
  for (const auto& [pk, p] : PodsOf(key)) {
    const std::optional<Json> pod = pods_->Get(pk);
    if (!pod || !StrField(*pod, {"metadata", "deletionTimestamp"}).empty()) continue;
    const std::string pod_phase = StrField(*pod, {"status", "phase"});
    if (pod_phase == "Succeeded" || pod_phase == "Failed" || p.node.empty()) continue;
    if (StrField(*pod, {"metadata", "annotations", trainjob::kAgentEndpointAnnotation}).empty()) {
      continue;
    }
    ++live;
    const std::string slot = StrField(*pod, {"metadata", "annotations", trainjob::kSlotAnnotation});
    const int s = Label(*pod, trainjob::kRoleLabel) == "worker" && !slot.empty()
                      ? std::atoi(slot.c_str())
                      : -1;
    if (s >= 0 && s < tj.job.nodes && nodes.gang[s].empty()) {
      nodes.gang[s] = p.node;
    } else {
      nodes.standby.push_back(p.node);
    }
  }
  if (live == 0) return false;
  const bool delegated = tj.scheduling.gang != trainjob::GangMode::kBulwark;
  if (!delegated) {
    if (!placement_.ready()) {  // asked again once the nodes are read
      queue_.AddRateLimited(key, Now());
      return true;
    }
    // A slot whose pod is gone runs on a node the scheduler gives the replacement.
    for (std::string& n : nodes.gang) {
      if (n.empty() && !nodes.standby.empty()) {
        n = nodes.standby.back();
        nodes.standby.pop_back();
      }
    }
    if (std::find(nodes.gang.begin(), nodes.gang.end(), "") != nodes.gang.end()) return false;
    nodes.reason = "adopted from the previous leader";
    const sched::JobRequest req = trainjob::SchedRequest(tj, trainjob::StandbyCount(tj.job));
    Status st = placement_.Adopt(req, nodes, Now());
    if (!st.ok()) {
      PostJobEvent(key, "Warning", "AdoptionFailed",
                   "cannot record the job where it runs: " + st.message() + "; restarting it");
      return false;
    }
  }
  const Json& restarts = Field(obj, {"status", "restarts"});
  if (restarts.is_number_integer()) j.restarts_before = restarts.get<int>();
  PostJobEvent(key, "Normal", "Adopting",
               std::to_string(live) +
                   " pod(s) of the previous leader still run; adopting their "
                   "agents instead of restarting the job");
  Status st = StartRunner(key, tj, delegated);
  if (!st.ok()) {
    LogIfError(placement_.Finish(key, Now()), "placement of " + key);
    PostJobEvent(key, "Warning", "StartFailed", st.ToString());
    return false;
  }
  return true;
}

void Operator::Impl::ReportPodTrouble(const std::string& key, JobState& j) {
  std::vector<std::pair<std::string, std::string>> lost;  // (node id, reason)
  std::vector<std::string> mine;
  for (const auto& [pk, p] : PodsOf(key)) {
    if (!j.runner->backend().NodeIdOfPod(pk.substr(pk.find('/') + 1)).empty()) mine.push_back(pk);
  }
  for (const std::string& pk : mine) {
    auto pod = pods_->Get(pk);
    if (!pod) continue;
    const std::string trouble = PodTrouble(*pod);
    if (!trouble.empty())
      lost.emplace_back(Label(*pod, "bulwark.dev/node-id"),
                        "pod " + k8s::Name(*pod) + ": " + trouble);
  }
  for (const auto& [id, why] : lost) j.runner->backend().PushLoss(id, why);
}

void Operator::Impl::Reconcile(const std::string& key) {
  const std::optional<Json> obj = jobs_->Get(key);
  JobState& j = state_[key];
  if (!obj || !StrField(*obj, {"metadata", "deletionTimestamp"}).empty()) {
    LogIfError(placement_.Finish(key, Now()), "placement of " + key);
    if (j.runner) {
      j.deleting = true;
      j.runner->Cancel();
    } else {
      CleanupPods(key, "");
      if (!obj) state_.erase(key);
    }
    return;
  }
  const long gen = Field(*obj, {"metadata", "generation"}).is_number_integer()
                       ? Field(*obj, {"metadata", "generation"}).get<long>()
                       : 0;
  if (j.runner) {
    if (Field(*obj, {"spec", "suspend"}).is_boolean() &&
        Field(*obj, {"spec", "suspend"}).get<bool>() && !j.requeued) {
      // Suspended while running: stop it; once stopped it waits as Suspended.
      LogIfError(placement_.Finish(key, Now()), "placement of " + key);
      PostJobEvent(key, "Normal", "Suspended", "spec.suspend set: stopping the job");
      CancelRunner(key, /*requeue=*/true);
      return;
    }
    if (j.running && gen > j.running_generation) ApplyEdit(key, j, *obj, gen);
    ReportPodTrouble(key, j);
    return;
  }
  // A finished job stays finished (delete and re-create it to run again), except one
  // that failed before it ran (invalid or unschedulable spec) and was edited since.
  const std::string phase = StrField(*obj, {"status", "phase"});
  const Json& observed = Field(*obj, {"status", "observedGeneration"});
  if (phase == "Succeeded" || phase == "Failed") {
    std::string why;
    for (const Json& c : Field(*obj, {"status", "conditions"}).is_array()
                             ? Field(*obj, {"status", "conditions"})
                             : Json::array()) {
      if (c.value("type", "") == "Failed") why = c.value("reason", "");
    }
    const bool edited = observed.is_number_integer() && observed.get<long>() != gen;
    if (!(phase == "Failed" && (why == "InvalidSpec" || why == "Unschedulable") && edited)) {
      j.finished = true;
      CleanupPods(key, "");
      return;
    }
  }
  auto tj = trainjob::TrainJobFromObject(*obj);
  if (!tj.ok()) {
    if (j.invalid_generation != gen) {
      j.invalid_generation = gen;
      WriteFailed(key, j, "InvalidSpec", tj.status().message());
    }
    return;
  }
  if (tj->replay_of) {
    Result<ReplayRun> rr = PrepareReplayRun(opts_.runner.state_dir, &*tj);
    if (!rr.ok()) {
      if (j.invalid_generation != gen) {
        j.invalid_generation = gen;
        WriteFailed(key, j, "InvalidSpec", "spec.replayOf: " + rr.status().message());
      }
      return;
    }
  }
  if (tj->suspend) {
    LogIfError(placement_.Finish(key, Now()), "placement of " + key);
    CleanupPods(key, "");
    WritePending(key, j, "Suspended", "spec.suspend is true");
    return;
  }
  bool image_pending = false;
  if (Status st = CommandFromImage(key, &*tj, &image_pending); image_pending) {
    if (j.start_error.empty()) {
      WritePending(key, j, "ReadingImageConfig",
                   "reading the command (ENTRYPOINT + CMD) of image " + tj->pod.image +
                       " from its registry");
    }
    return;
  } else if (!st.ok()) {
    if (st.code() == Code::kFailedPrecondition) {  // the image has no command: as invalid
      if (j.invalid_generation != gen) {
        j.invalid_generation = gen;
        WriteFailed(key, j, "InvalidSpec", st.message());
      }
      return;
    }
    // Unreachable registry, missing pull secret, ...: retried with the queue's backoff.
    st = ExplainForbidden(st);
    const std::string text = "ImageConfigUnavailable: " + st.message();
    if (text != j.start_error) PostJobEvent(key, "Warning", "ImageConfigUnavailable", st.message());
    j.start_error = text;
    WritePending(key, j, "ImageConfigUnavailable", st.message());
    queue_.AddRateLimited(key, Now());
    return;
  }
  if (TryAdopt(key, j, *obj, *tj)) return;
  CleanupPods(key, "");  // pods of an earlier runner or operator incarnation
  const bool delegated = tj->scheduling.gang != trainjob::GangMode::kBulwark;
  if (delegated) {
    Status st = StartRunner(key, *tj, true);
    if (!st.ok()) queue_.AddRateLimited(key, Now());
    return;
  }
  if (!placement_.ready()) {
    WritePending(key, j, "WaitingForNodes", "the operator has not read the cluster's nodes yet");
    return;
  }
  if (tj->replay_of && !tj->replay_of->nodes.empty()) {
    // A replay on named nodes: recorded there as is (capacity and GPU type checked, no
    // queue), its pods bound to them even if quarantined (a NoSchedule taint does not
    // stop a pod given its node).
    if (placement_.Phase(key) == sched::JobPhase::kFinished) {
      JobNodes nodes;
      nodes.gang = tj->replay_of->nodes;
      nodes.reason = "the nodes spec.replayOf.nodes names";
      Status st = placement_.Adopt(trainjob::SchedRequest(*tj, 0), nodes, Now());
      if (!st.ok()) {
        if (j.invalid_generation != gen) {
          j.invalid_generation = gen;
          WriteFailed(key, j, "Unschedulable", "spec.replayOf.nodes: " + st.message());
        }
        return;
      }
    }
    Status st = StartRunner(key, *tj, false);
    if (!st.ok()) {
      PostJobEvent(key, "Warning", "StartFailed", st.ToString());
      queue_.AddRateLimited(key, Now());
    }
    return;
  }
  if (placement_.Phase(key) == sched::JobPhase::kFinished) {
    const sched::JobRequest req = trainjob::SchedRequest(*tj, trainjob::StandbyCount(tj->job));
    Status st = placement_.Submit(req, Now());
    if (!st.ok()) {
      WriteFailed(key, j, "Unschedulable", st.message());
      return;
    }
    sched_dirty_ = true;
  }
  if (j.start_error.empty()) WritePending(key, j, "Pending", placement_.Reason(key));
}

void Operator::Impl::ApplyEdit(const std::string& key, JobState& j, const Json& obj, long gen) {
  j.running_generation = gen;  // each generation is judged once
  auto next = trainjob::TrainJobFromObject(obj);
  if (next.ok()) {
    bool pending = false;
    if (Status st = CommandFromImage(key, &*next, &pending); !st.ok()) next = st;
    if (pending) {  // judged when the read finishes and requeues the job
      j.running_generation = gen - 1;
      return;
    }
  }
  if (!next.ok()) {
    PostJobEvent(key, "Warning", "SpecChangeNotApplied",
                 "generation " + std::to_string(gen) +
                     " is not valid; the job goes on as it was: " + next.status().message());
    return;
  }
  std::string refused;
  if (!(next->pod == j.running->pod)) refused += "pod: the pods would have to be created again; ";
  if (!(next->scheduling == j.running->scheduling)) {
    refused += "scheduling: the job is admitted and placed already; ";
  }
  Result<JobUpdate> plan = PlanJobUpdate(j.running->job, next->job);
  if (!refused.empty() || !plan.ok()) {
    if (!plan.ok() && plan.status().code() != Code::kFailedPrecondition) {
      refused += plan.status().message();
    }
    if (refused.empty()) return;  // nothing the job runs with changed (labels, say)
    PostJobEvent(key, "Warning", "SpecChangeNotApplied",
                 "generation " + std::to_string(gen) + " changes what cannot change in place (" +
                     refused +
                     "); delete and re-create the TrainJob to apply it (it resumes "
                     "from its checkpoints)");
    return;
  }
  PostJobEvent(key, "Normal", "UpdateRequested",
               "generation " + std::to_string(gen) + " changes " + plan->Describe() +
                   ": applied in place at a step boundary");
  j.runner->RequestUpdate(next->job, 20);
  j.running = std::move(*next);
}

void Operator::Impl::Cycle() {
  sched_dirty_ = false;
  next_cycle_ = Now() + opts_.cycle_interval_s;
  const PlacementCycle c = placement_.Schedule(Now());
  {
    std::lock_guard<std::mutex> l(mu_);
    ++stats_.cycles;
  }
  for (const sched::Preemption& p : c.preempted) {
    PostJobEvent(p.victim, "Warning", "Preempted", p.reason);
    CancelRunner(p.victim, true);
  }
  for (const auto& [key, nodes] : c.admitted) {
    const std::optional<Json> obj = jobs_->Get(key);
    auto tj = obj ? trainjob::TrainJobFromObject(*obj) : Result<trainjob::TrainJob>(NotFound(key));
    if (!tj.ok()) {
      LogIfError(placement_.Finish(key, Now()), "placement of " + key);
      continue;
    }
    std::string where;
    for (const std::string& n : nodes.gang) where += (where.empty() ? "" : ", ") + n;
    JobState& j = state_[key];
    if (j.start_error.empty()) {  // not again for every retry of a failing start
      PostJobEvent(
          key, "Normal", "Admitted",
          nodes.reason + "; nodes " + where +
              (nodes.standby.empty() ? std::string()
                                     : "; standby " + std::to_string(nodes.standby.size())));
    }
    Status st = StartRunner(key, *tj, false);
    if (!st.ok()) {
      // Retried with the work queue's backoff; the status says why meanwhile, and an
      // Event is posted when the reason changes (a 403 names the fix).
      st = ExplainForbidden(st);
      const std::string reason =
          st.code() == Code::kPermissionDenied ? "PermissionDenied" : "StartFailed";
      const std::string text = reason + ": " + st.message();
      if (text != j.start_error) PostJobEvent(key, "Warning", reason, st.message());
      j.start_error = text;
      LogIfError(placement_.Finish(key, Now()), "placement of " + key);
      queue_.AddRateLimited(key, Now());
      WritePending(key, j, reason, st.message());
    } else {
      j.start_error.clear();
    }
  }
  for (const auto& [key, node] : c.restocked) {
    PostJobEvent(key, "Normal", "StandbyRestocked", "node " + node + " reserved as warm standby");
  }
  for (auto& [key, j] : state_) {
    if (!j.runner && !j.finished && placement_.Phase(key) == sched::JobPhase::kPending &&
        j.start_error.empty()) {
      WritePending(key, j, j.requeued ? "Requeued" : "Pending", placement_.Reason(key));
    }
  }
}

Status Operator::Impl::CommandFromImage(const std::string& key, trainjob::TrainJob* tj,
                                        bool* pending) {
  *pending = false;
  if (!tj->job.command.empty()) return Status::Ok();
  static const k8s::Resource kSecrets{"", "v1", "secrets", "Secret", true};
  std::vector<registry::PullSecret> secrets;
  for (const std::string& name : tj->pod.image_pull_secrets) {
    auto s = client_->Get(kSecrets, tj->ns, name);
    if (!s.ok()) {
      if (k8s::IsNotFound(s.status())) {
        return NotFound("pull secret " + tj->ns + "/" + name +
                        " (spec.pod.imagePullSecrets) "
                        "does not exist; create it (kubectl create secret docker-registry " +
                        name + " -n " + tj->ns + " ...) or set command in the spec");
      }
      return s.status().Annotate("reading pull secret " + tj->ns + "/" + name);
    }
    BW_ASSIGN_OR_RETURN(registry::PullSecret ps,
                        registry::PullSecretFromData(tj->ns + "/" + name,
                                                     StrField(*s, {"data", ".dockerconfigjson"})));
    secrets.push_back(std::move(ps));
  }
  std::optional<Result<registry::ImageConfig>> read = images_.Lookup(key, tj->pod.image, secrets);
  if (!read) {
    *pending = true;
    return Status::Ok();
  }
  BW_ASSIGN_OR_RETURN(const registry::ImageConfig cfg, std::move(*read));
  BW_ASSIGN_OR_RETURN(const std::string line,
                      trainjob::ApplyImageConfig(cfg, trainjob::Target::kKubernetes, tj));
  JobState& j = state_[key];
  if (line != j.command_source) {
    PostJobEvent(key, "Normal", "CommandFromImage", line);
    j.command_source = line;
  }
  return Status::Ok();
}

Status Operator::Impl::StartRunner(const std::string& key, const trainjob::TrainJob& spec,
                                   bool delegated) {
  trainjob::TrainJob tj = spec;
  bool pending = false;
  BW_RETURN_IF_ERROR(CommandFromImage(key, &tj, &pending));  // a cache hit after Reconcile's
  if (pending) {
    return Unavailable("the config of image " + tj.pod.image +
                       " is being read from its registry again (its cache entry expired)");
  }
  JobState& j = state_[key];
  JobRunnerOptions ro = opts_.runner;
  j.replay = Json();
  std::string replaying;  // the Replaying Event's text, posted once the runner started
  if (tj.replay_of) {
    BW_ASSIGN_OR_RETURN(ReplayRun rr, PrepareReplayRun(opts_.runner.state_dir, &tj));
    j.replay = {{"trainJob", tj.replay_of->train_job},
                {"incident", tj.replay_of->incident},
                {"resumeStep", rr.replay.resume},
                {"code", rr.code}};
    replaying = rr.what + ": re-running from " +
                (rr.replay.resume < 0 ? std::string("scratch")
                                      : "checkpoint step " + std::to_string(rr.replay.resume)) +
                " up to step " + std::to_string(FaultStep(rr.replay.fault)) + "; code " + rr.code;
    ro.replay = std::move(rr.replay);
  }
  KubernetesBackendOptions bo;
  bo.client = client_;
  bo.placement = delegated ? nullptr : &placement_;
  bo.job = tj;
  bo.job_key = key;
  bo.run_id = "r" + std::to_string(++j.runs) + "-" + epoch_;
  bo.render = opts_.render;
  // The headless Service: stable DNS names for the job's pods (owned by the TrainJob).
  auto svc =
      client_->Create(k8s::Services(), tj.ns, trainjob::RenderHeadlessService(tj, bo.render));
  if (!svc.ok() && !k8s::IsAlreadyExists(svc.status())) return svc.status().Annotate("Service");
  if (tj.scheduling.gang == trainjob::GangMode::kVolcano) {
    auto pg = client_->Create(k8s::PodGroups(), tj.ns, trainjob::RenderPodGroup(tj));
    if (!pg.ok() && !k8s::IsAlreadyExists(pg.status())) return pg.status().Annotate("PodGroup");
  }
  // A delegated gang scheduler may hold the pods for hours: wait as long for agents.
  if (delegated)
    ro.agent_connect_timeout_s = std::max(ro.agent_connect_timeout_s, ro.capacity_wait_s);
  auto runner = std::make_unique<JobRunner>(std::move(bo), ro);
  BW_RETURN_IF_ERROR(runner->Start());
  if (!replaying.empty()) PostJobEvent(key, "Normal", "Replaying", replaying);
  queue_.Forget(key);  // earlier failed starts no longer delay this key
  j.runner = std::move(runner);
  j.running = tj;
  j.running_generation = tj.generation;
  j.requeued = false;
  j.deleting = false;
  j.finished = false;
  if (j.start_time == 0) j.start_time = Now();
  Observed o = ObserveRunner(key, j);
  WriteStatus(key, j, o, true);
  return Status::Ok();
}

void Operator::Impl::CancelRunner(const std::string& key, bool requeue) {
  auto it = state_.find(key);
  if (it == state_.end() || !it->second.runner) return;
  it->second.requeued = requeue;
  it->second.pending_reason.clear();
  it->second.runner->Cancel();
}

// ---------------------------------------------------------------------------------
// Status and events.

Observed Operator::Impl::ObserveRunner(const std::string& key, JobState& j) const {
  Observed o;
  const ControllerStatus s = j.runner->Snapshot();
  {
    std::lock_guard<std::mutex> l(mu_);
    job_status_[key] = s;
  }
  o.restarts = j.restarts_before + s.restarts;
  o.current_step = s.current_step;
  o.checkpoint_step = s.last_committed_step;
  o.checkpoint_tier = s.last_committed_tier;
  o.checkpoint_time = s.last_committed_time;
  o.has_ledger = true;
  o.ledger = s.ledger;
  {
    const size_t slash = key.find('/');
    o.metrics_text =
        RenderJobMetrics(key.substr(slash + 1), s.metrics, s.settled, s.stage != "Done",
                         j.running ? j.running->job.monitoring.ettr_target : 0.9,
                         {{"namespace", key.substr(0, slash)}});
  }
  o.start_time = j.start_time;
  o.message = s.message;
  if (!j.replay.is_null() && s.stage == "Done" && s.replay.is_object()) {
    o.replay = j.replay;
    const Json& r = s.replay;
    for (const auto& [from, to] : {std::pair{"fault_step", "faultStep"},
                                   {"passed", "passed"},
                                   {"fault_came_back", "faultCameBack"},
                                   {"cause", "cause"},
                                   {"evidence", "evidence"},
                                   {"summary", "summary"},
                                   {"compared", "compared"},
                                   {"equal", "equal"}}) {
      if (r.contains(from)) o.replay[to] = r[from];
    }
    if (r.contains("first_difference") && r["first_difference"].is_object()) {
      o.replay["firstDifference"] = {{"step", r["first_difference"].value("step", -1L)},
                                     {"rank", r["first_difference"].value("rank", -1)}};
    }
  }
  if (s.incidents.is_array() && !s.incidents.empty()) {
    o.last_incident = s.incidents.back();
    o.incidents = static_cast<int>(s.incidents.size());
  }
  if (auto nodes = placement_.Nodes(key)) {
    o.nodes = nodes->gang;
    o.standby = nodes->standby;
    o.admission_reason = nodes->reason;
  } else {
    o.admission_reason = "admitted (gang scheduling delegated)";
  }
  if (s.stage == "Running" || s.stage == "Adopting") {
    o.phase = Phase::kRunning;
    o.reason = s.stage == "Running" ? "RanksRunning" : "Adopting";
  } else if (s.stage == "Done") {
    o.phase = s.phase == JobPhase::kSucceeded ? Phase::kSucceeded : Phase::kFailed;
    o.reason = s.phase == JobPhase::kSucceeded ? "Succeeded" : "Failed";
    o.completion_time = s.end_time > 0 ? s.end_time : Now();
  } else if (s.attempt <= 0 && s.stage == "Provisioning") {
    o.phase = Phase::kAdmitted;
    o.reason = "Provisioning";
    if (o.message.empty()) o.message = "starting agent pods";
  } else {
    o.phase = Phase::kRestarting;
    o.reason = s.stage;
  }
  return o;
}

void Operator::Impl::WriteFailed(const std::string& key, JobState& j, const std::string& reason,
                                 const std::string& message) {
  Observed o;
  o.phase = Phase::kFailed;
  o.reason = reason;
  o.message = message;
  WriteStatus(key, j, o, true);
  PostJobEvent(key, "Warning", reason, message);
}

void Operator::Impl::WritePending(const std::string& key, JobState& j, const std::string& reason,
                                  const std::string& message) {
  const std::string text = reason + ": " + message;
  if (j.pending_reason == text) return;
  j.pending_reason = text;
  Observed o;
  o.phase = Phase::kPending;
  o.reason = reason;
  o.message = message;
  o.restarts = j.restarts_before;
  o.start_time = j.start_time;
  WriteStatus(key, j, o, true);
}

void Operator::Impl::WriteStatus(const std::string& key, JobState& j, const Observed& o,
                                 bool force) {
  if (o.has_ledger) {
    std::lock_guard<std::mutex> l(mu_);
    stats_.ettr[key] = o.ledger.ettr();
    stats_.job_metrics[key] = o.metrics_text;
  }
  const std::optional<Json> cached = jobs_->Get(key);
  if (!cached) return;
  const long gen = Field(*cached, {"metadata", "generation"}).is_number_integer()
                       ? Field(*cached, {"metadata", "generation"}).get<long>()
                       : 0;
  const Json& old = Field(*cached, {"status"});
  const double now = Now();
  const Json next = BuildStatus(old, o, gen, now);
  if (next == old) return;
  if (!force && !StatusWriteDue(old, next, now - j.last_status_write,
                                {opts_.status_progress_interval_s, opts_.status_idle_interval_s})) {
    return;
  }
  const size_t slash = key.find('/');
  // One PUT on the cached object (its resourceVersion is the precondition); only when
  // the cache is behind (409) the read-modify-write loop reads the object first.
  Json cached_write = *cached;
  cached_write["status"] = next;
  Result<Json> r = client_->UpdateStatus(k8s::TrainJobs(), key.substr(0, slash), cached_write);
  if (!r.ok() && k8s::IsConflict(r.status())) {
    r = client_->UpdateWithRetry(
        k8s::TrainJobs(), key.substr(0, slash), key.substr(slash + 1),
        [&](Json& live) {
          live["status"] = BuildStatus(Field(live, {"status"}), o, gen, now);
          return Status::Ok();
        },
        /*status=*/true);
  }
  if (!r.ok()) {
    if (!k8s::IsNotFound(r.status())) {
      std::fprintf(stderr, "[bulwark-operator] status of %s: %s\n", key.c_str(),
                   r.status().ToString().c_str());
    }
    return;
  }
  j.last_status_write = now;
  std::lock_guard<std::mutex> l(mu_);
  ++stats_.status_writes;
}

void Operator::Impl::PostEvent(const Json& involved, const std::string& type,
                               const std::string& reason, const std::string& message) {
  Json ev = trainjob::RenderEvent(involved, type, reason, message, Now());
  std::string ns = k8s::Namespace(involved);
  if (ns.empty()) ns = "default";  // events about cluster-scoped objects
  auto r = client_->Create(k8s::Events(), ns, ev);
  if (!r.ok()) {
    std::fprintf(stderr, "[bulwark-operator] event %s: %s\n", reason.c_str(),
                 r.status().ToString().c_str());
    return;
  }
  std::lock_guard<std::mutex> l(mu_);
  ++stats_.events_written;
}

void Operator::Impl::PostJobEvent(const std::string& key, const std::string& type,
                                  const std::string& reason, const std::string& message) {
  const std::optional<Json> obj = jobs_->Get(key);
  if (obj) PostEvent(*obj, type, reason, message);
}

void Operator::Impl::PollRunners() {
  int running = 0, pending = 0;

  for (auto it = state_.begin(); it != state_.end();) {
    const std::string& key = it->first;
    JobState& j = it->second;
    if (!j.runner) {
      pending += !j.finished && placement_.Phase(key) == sched::JobPhase::kPending;
      ++it;
      continue;
    }
    ++running;
    for (const RunnerEvent& e : j.runner->TakeEvents()) {
      // A cancellation the operator ordered (requeue, deletion) has its own event.
      const bool ordered = (j.requeued || j.deleting) && e.reason == "Cancelled";
      if (!ChattyEvent(e.reason) && !ordered) {
        PostJobEvent(key, e.warning ? "Warning" : "Normal", e.reason, e.message);
      }
    }
    if (!j.runner->Done()) {
      constexpr double kStatusCheckS = 0.5;
      if (!j.deleting && !j.requeued && Now() >= j.next_status_check) {
        j.next_status_check = Now() + kStatusCheckS;
        WriteStatus(key, j, ObserveRunner(key, j), false);
      }
      ++it;
      continue;
    }
    FinishRunner(key, j);
    if (j.deleting && !jobs_->Get(key)) {
      it = state_.erase(it);
    } else {
      ++it;
    }
  }
  std::lock_guard<std::mutex> l(mu_);
  any_pending_ = pending > 0;
  stats_.running_jobs = running;
  stats_.pending_jobs = pending;
  for (auto e = stats_.ettr.begin(); e != stats_.ettr.end();) {  // running jobs only
    auto s = state_.find(e->first);
    e = s == state_.end() || !s->second.runner ? stats_.ettr.erase(e) : std::next(e);
  }
  for (auto e = stats_.job_metrics.begin(); e != stats_.job_metrics.end();) {
    auto s = state_.find(e->first);
    e = s == state_.end() || !s->second.runner ? stats_.job_metrics.erase(e) : std::next(e);
  }
  for (auto e = job_status_.begin(); e != job_status_.end();) {  // kept while the job exists
    e = state_.count(e->first) ? std::next(e) : job_status_.erase(e);
  }
}

void Operator::Impl::FinishRunner(const std::string& key, JobState& j) {
  j.runner->Join();
  const ControllerStatus s = j.runner->Snapshot();
  Observed o = ObserveRunner(key, j);
  j.restarts_before += s.restarts;
  auto result = j.runner->result();
  j.runner.reset();
  if (j.deleting) {
    CleanupPods(key, "");
    return;
  }
  if (j.requeued) {
    CleanupPods(key, "");
    j.pending_reason.clear();
    WritePending(key, j, "Requeued", placement_.Reason(key));
    sched_dirty_ = true;
    queue_.Add(key, Now());  // a suspended job is not in the scheduler: say so
    return;
  }
  LogIfError(placement_.Finish(key, Now()), "placement of " + key);
  o.restarts = j.restarts_before;
  if (!result.ok()) {
    o.phase = Phase::kFailed;
    o.reason = "ControllerError";
    o.message = result.status().ToString();
  } else if (result->phase == JobPhase::kSucceeded) {
    o.phase = Phase::kSucceeded;
    o.reason = "Succeeded";
    o.message = result->message;
  } else {
    o.phase = Phase::kFailed;
    o.reason = result->phase == JobPhase::kCancelled ? "Cancelled" : "Failed";
    o.message = result->message;
  }
  if (o.completion_time == 0) o.completion_time = Now();
  WriteStatus(key, j, o, true);
  j.finished = true;
  CleanupPods(key, "");
  sched_dirty_ = true;
}

// ---------------------------------------------------------------------------------

Operator::Operator(k8s::Client* client, OperatorOptions opts)
    : impl_(std::make_unique<Impl>(client, std::move(opts), &leading_)) {}
Operator::~Operator() = default;
Status Operator::Run(const std::atomic<bool>* stop) { return impl_->Run(stop); }
OperatorStats Operator::Stats() const { return impl_->Stats(); }
std::optional<ControllerStatus> Operator::JobStatus(const std::string& key) const {
  return impl_->JobStatus(key);
}
std::vector<std::string> Operator::JobKeys() const { return impl_->JobKeys(); }

std::string FormatMetrics(const OperatorStats& s, bool leading) {
  metrics::Exposition e;
  e.Gauge("bulwark_operator_leader", "1 while this replica holds the leader lease", {},
          leading ? 1 : 0);
  e.Counter("bulwark_operator_reconciles_total", "TrainJob reconciles", {},
            static_cast<double>(s.reconciles));
  e.Counter("bulwark_operator_scheduling_cycles_total", "scheduler cycles run", {},
            static_cast<double>(s.cycles));
  e.Counter("bulwark_operator_status_writes_total", "TrainJob status updates written", {},
            static_cast<double>(s.status_writes));
  e.Counter("bulwark_operator_events_total", "Kubernetes Events written", {},
            static_cast<double>(s.events_written));
  e.Counter("bulwark_operator_quarantined_nodes_total", "nodes quarantined", {},
            static_cast<double>(s.quarantined));
  e.Family("bulwark_operator_trainjobs", "gauge", "TrainJobs by state");
  e.Sample("bulwark_operator_trainjobs", {{"state", "running"}}, s.running_jobs);
  e.Sample("bulwark_operator_trainjobs", {{"state", "pending"}}, s.pending_jobs);
  e.Family("bulwark_trainjob_ettr_ratio", "gauge", "productive time / wall time so far");
  for (const auto& [key, v] : s.ettr) {
    const size_t slash = key.find('/');
    e.Sample("bulwark_trainjob_ettr_ratio",
             {{"namespace", key.substr(0, slash)}, {"name", key.substr(slash + 1)}}, v);
  }
  // Each job's own families; a family two jobs share is declared once (the text format
  // wants one HELP/TYPE per family, its samples together).
  std::map<std::string, std::string> families;  // name -> HELP/TYPE lines
  std::map<std::string, std::string> samples;   // name -> sample lines
  std::vector<std::string> order;
  for (const auto& [key, text] : s.job_metrics) {
    std::istringstream in(text);
    std::string family;
    for (std::string line; std::getline(in, line);) {
      if (line.rfind("# HELP ", 0) == 0 || line.rfind("# TYPE ", 0) == 0) {
        family = line.substr(7, line.find(' ', 7) - 7);
        if (!families.count(family)) order.push_back(family);
        if (families[family].find(line.substr(0, 6)) == std::string::npos) {
          families[family] += line + "\n";
        }
      } else if (!line.empty()) {
        samples[family] += line + "\n";
      }
    }
  }
  std::string out = e.Take();
  for (const std::string& f : order) out += families[f] + samples[f];
  return out;
}

Status LoadSchedulerConfig(const std::string& path, sched::SchedulerConfig* config,
                           std::vector<sched::QueueSpec>* queues) {
  BW_ASSIGN_OR_RETURN(sched::SchedulingConfig c, sched::LoadSchedulingConfig(path));
  *config = std::move(c.scheduler);
  *queues = std::move(c.queues);
  return Status::Ok();
}

}  // namespace bulwark::op
