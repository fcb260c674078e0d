// The Bulwark operator: runs TrainJobs on a Kubernetes cluster (docs/kubernetes.md).
//
// Level-triggered. Three informers (TrainJobs, Bulwark's pods, Nodes) keep caches
// current; their events put TrainJob keys on a rate-limited work queue. One reconcile
// thread, while this replica holds the leader Lease:
//   * syncs the scheduler's cluster model with the Node cache; a node that failed
//     (NotReady, GPU-health or termination taints, problem conditions) while holding
//     a job's pod is quarantined (NoSchedule taint + Event) and the scheduler decides
//     its replacement (standby, free node, preemption, requeue);
//   * reconciles each queued TrainJob: parses it (an invalid spec fails with the
//     errors in status), submits it to the scheduler (or, with gang: volcano/kueue,
//     starts it at once with unbound pods), tears it down when deleted or suspended,
//     and reports lost pods to the job's controller;
//   * runs one scheduling cycle when something changed: admissions start a JobRunner
//     (the same Controller as `bulwark run`, with a KubernetesBackend), preemptions and
//     requeues cancel it (the job goes back to Pending and resumes from its newest
//     checkpoint when admitted again);
//   * writes every TrainJob's status (phase, conditions, progress, checkpoint, ETTR) and
//     turns every controller event into a Kubernetes Event on the TrainJob.
// Status writes use the status subresource with the read resourceVersion as the
// precondition; a 409 re-reads and re-applies.
//
// Threading: Run() owns the calling thread until `stop` is set or leadership is lost;
// informer threads only enqueue and index. Stats() is thread-safe.
#pragma once

#include <atomic>
#include <map>
#include <memory>
#include <optional>
#include <set>
#include <string>
#include <vector>

#include "controller/controller.h"
#include "k8s/client.h"
#include "k8s/informer.h"
#include "k8s/leader.h"
#include "k8s/workqueue.h"
#include "operator/job_runner.h"
#include "operator/placement.h"
#include "registry/registry.h"

namespace bulwark::op {

struct OperatorOptions {
  std::string watch_namespace;  // "" = every namespace
  std::string gpu_resource = "nvidia.com/gpu";
  sched::SchedulerConfig scheduler;
  std::vector<sched::QueueSpec> queues;  // empty: one queue "default", unlimited
  bool leader_election = true;
  k8s::LeaderElectionConfig leader;
  trainjob::RenderOptions render;         // agent path, heartbeat
  JobRunnerOptions runner;                // state dir, bind/advertise address, clock
  double status_progress_interval_s = 5;  // currentStep/ETTR-only status writes
  // An ETTR-only change (no new step: the job waits, or is stopped) is written at most
  // this often (500 jobs waiting for their pods must not rewrite status 100 times/s).
  double status_idle_interval_s = 60;
  double cycle_interval_s = 1;          // scheduling cycle at least this often when dirty
  bool node_failure_quarantine = true;  // taint failed nodes that held a job's pod
  // How the config of a TrainJob's image is read when its spec sets no command
  // (docs/trainjob.md, "Commands from the image"): platform, insecure registries,
  // timeouts, the tag cache's TTL.
  registry::ClientOptions registry;
};

struct OperatorStats {
  uint64_t reconciles = 0;
  uint64_t cycles = 0;
  uint64_t status_writes = 0;
  uint64_t events_written = 0;
  uint64_t quarantined = 0;
  int running_jobs = 0;
  int pending_jobs = 0;
  std::map<std::string, double> ettr;  // running jobs' ETTR so far, by "namespace/name"
  // Each job's series (docs/monitoring.md, controller metrics; labels job, namespace).
  std::map<std::string, std::string> job_metrics;
};

class Operator {
 public:
  // client is not owned and must outlive the operator.
  Operator(k8s::Client* client, OperatorOptions opts);
  ~Operator();
  Operator(const Operator&) = delete;
  Operator& operator=(const Operator&) = delete;

  // Runs until `stop` becomes true (OK) or leadership is lost (kAborted). Every job's
  // controller is cancelled and joined before it returns.
  Status Run(const std::atomic<bool>* stop);
  OperatorStats Stats() const;
  bool leading() const { return leading_.load(); }
  // A running (or finished, not yet deleted) TrainJob's latest controller status, by
  // "namespace/name", for the dashboard; the keys known. Thread-safe.
  std::optional<ControllerStatus> JobStatus(const std::string& key) const;
  std::vector<std::string> JobKeys() const;

 private:
  struct JobState;
  class Impl;
  std::unique_ptr<Impl> impl_;
  std::atomic<bool> leading_{false};
};

// Prometheus text exposition (0.0.4) of the stats: bulwark_operator_* counters and
// gauges, bulwark_trainjob_ettr_ratio{namespace,name}.
std::string FormatMetrics(const OperatorStats& s, bool leading);

// Queue and scheduler settings for the operator from a YAML file with the `scheduler`
// and `queues` sections of a `bulwark sim` config (docs/simulator.md). Errors name the
// line and field.
Status LoadSchedulerConfig(const std::string& path, sched::SchedulerConfig* config,
                           std::vector<sched::QueueSpec>* queues);

}  // namespace bulwark::op
