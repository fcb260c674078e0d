// JobRunner: one admission of one TrainJob — a Controller with a KubernetesBackend
// running in its own thread until the job succeeds, fails, or the operator cancels it
// (deleted, requeued, or leadership lost).
//
// The controller is the same class `bulwark run` uses; on Kubernetes it is configured to
// bind on all interfaces and advertise the operator pod's address, to leave checkpoint
// files to the agents (remote_checkpoint_fs) and to rendezvous on the slot-0 agent's
// host. Its events are queued for the operator (TakeEvents), its status is read with
// Snapshot().
//
// Threading: Start/Cancel/Join/Snapshot/TakeEvents/Done from the operator's threads; the
// controller runs on the runner's thread. Join() is bounded by the controller's own
// bounded teardown.
#pragma once

#include <atomic>
#include <deque>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <thread>

#include "controller/controller.h"
#include "operator/k8s_backend.h"
#include "store/store.h"

namespace bulwark::op {

struct RunnerEvent {
  std::string reason;
  std::string message;
  bool warning = false;
  double time = 0;
};

struct JobRunnerOptions {
  std::string state_dir;  // <state_dir>/<ns>/<name>/: the job's store and run dir
  std::string bind_host = "0.0.0.0";
  std::string advertise_host;  // the operator pod's IP (agents dial it)
  double capacity_wait_s = 6 * 3600;
  double agent_connect_timeout_s = 600;  // image pull + start on a real cluster
  Clock* clock = nullptr;                // not owned; nullptr = SystemClock
  // A TrainJob with spec.replayOf: what its controller checks (replay_run.h).
  std::optional<ControllerOptions::Replay> replay;
};

class JobRunner {
 public:
  JobRunner(KubernetesBackendOptions backend, JobRunnerOptions opts);
  ~JobRunner();  // Cancel + Join

  Status Start();  // opens the store, starts the thread
  void Cancel();   // asks the controller to stop (bounded teardown follows)
  // Asks the controller to let go of the job without stopping it (leader handover):
  // its agents keep the ranks running for the next leader to adopt; pods stay.
  void Detach();
  void Join();
  // Applies an edited TrainJob's command, args, env and workdir to the running job in
  // place (Controller::RequestUpdate; the outcome comes back as events).
  void RequestUpdate(JobSpec next, int verify_steps);
  bool Done() const { return done_.load(); }
  // The controller's result once Done(); Internal error if it could not run.
  Result<RunResult> result() const;

  ControllerStatus Snapshot() const;
  std::deque<RunnerEvent> TakeEvents();
  KubernetesBackend& backend() { return *backend_; }
  const std::string& run_id() const { return backend_opts_.run_id; }

 private:
  void Run();

  KubernetesBackendOptions backend_opts_;
  JobRunnerOptions opts_;
  std::unique_ptr<KubernetesBackend> backend_;
  std::unique_ptr<Store> store_;
  std::unique_ptr<Controller> controller_;
  std::thread thread_;
  std::atomic<bool> done_{false};
  mutable std::mutex mu_;
  std::deque<RunnerEvent> events_;
  std::optional<Result<RunResult>> result_;
};

}  // namespace bulwark::op
