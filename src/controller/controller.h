// Controller: runs one job to a terminal phase through a Backend, a Store and the
// pure decision code (RecoveryPolicy, EttrLedger).
//
// Level-triggered: each loop iteration compares what the job needs (every node slot
// held by a live, connected agent; the current attempt's ranks running; the number
// of warm spares) with what it observes (agent connections, heartbeats, backend
// reports) and acts to close the gap. Events (incidents, step and checkpoint reports)
// only update observed state and, for faults, ask the policy for a decision.
//
// The same controller runs inside `bulwark run` (local backend, one job per process)
// and inside the Kubernetes operator (one Controller per TrainJob, each on its own
// thread of the operator process, agents in pods on other machines). The options
// below select what differs: where agents dial (advertise_host), whether the
// controller may touch the checkpoint directories (remote_checkpoint_fs), and where
// the ranks rendezvous (rendezvous_on_agent).
//
// Threading: Start() and Run() are called from one thread, which Run() owns until it
// returns. From any thread: Cancel(), Detach(), Status(), Address(). From a signal
// handler: RequestCancel(). Several Controllers may run in one process at once, each
// with its own Backend, Store handle and run_dir.
#pragma once

#include <functional>
#include <memory>
#include <optional>
#include <set>
#include <string>
#include <vector>

#include "backend/backend.h"
#include "ckpt/env.h"
#include "common/clock.h"
#include "common/net.h"
#include "controller/job_metrics.h"
#include "ledger/ettr_ledger.h"
#include "policy/recovery_policy.h"
#include "policy/replay_check.h"
#include "spec/job_spec.h"
#include "store/store.h"

namespace bulwark {

struct ControllerOptions {
  std::string run_dir;                  // per-job scratch: logs, controller.addr
  std::string bind_host = "127.0.0.1";  // the agent listener binds here (e.g. 0.0.0.0)
  // The address agents dial (and the backend is told): advertise_host:port. "" =
  // bind_host. Also the ranks' MASTER_ADDR unless rendezvous_on_agent.
  std::string advertise_host;
  double agent_connect_timeout_s = 60;
  // How long a node slot may wait for capacity (StartNode answering UNAVAILABLE)
  // before the job fails; < 0 = agent_connect_timeout_s. Spares wait indefinitely.
  double capacity_wait_s = -1;
  // true: the controller never touches checkpoint.dir or checkpoint.sharedDir; it
  // orders commits, retention, listings and object-tier restores from an agent
  // (controller/ckpt_catalog.h, docs/protocol.md "Checkpoint catalog"), and sends an
  // empty log_dir (the agent's <run-dir>/logs). false: it does them itself (local).
  bool remote_checkpoint_fs = false;
  // true: MASTER_ADDR is the slot-0 agent's peer_host and MASTER_PORT a free port
  // that agent reported (hello / stopped `free_port`). false: the controller's host
  // and a port free there (right when every rank runs on this machine).
  bool rendezvous_on_agent = false;
  // Called on the controller's thread for every event the controller records
  // (reason as in the store, e.g. "NodeLost"; warning = IsWarningEvent(reason)).
  // Must not call back into this Controller except Status()/Address()/Cancel().
  std::function<void(const std::string& reason, const std::string& message, bool warning)> on_event;
  // File access of the local checkpoint catalog (not owned; nullptr = Env::Default()).
  // Unused when remote_checkpoint_fs (tests inject an Env that fails every call).
  ckpt::Env* ckpt_env = nullptr;
  // The job's run id (TORCHELASTIC_RUN_ID, and what an agent checks before a controller
  // may adopt it). "" = the store's, else "<job>-<start time>". The operator passes one
  // that every leader derives alike.
  std::string run_id;
  // Adoption (docs/protocol.md): a controller that finds agents of an earlier one (in
  // its store, or as the backend's AdoptableNodes) dials them and waits this long for
  // their answers; the attempt they run carries on without restarting any rank.
  double adopt_timeout_s = 15;
  uint64_t seed = 1;
  bool echo_events = true;  // print "[bulwark] ..." lines to stderr
  // Prometheus file_sd_configs target list, kept up to date (written atomically): the
  // controller's own /metrics (`metrics_self`, HOST:PORT) and every connected agent's.
  // "" = none.
  std::string metrics_sd_file;
  std::string metrics_self;
  // TensorBoard event files of the job's metrics go here ("" = none).
  std::string tensorboard_dir;
  // The ranks' container image (Kubernetes): the code version in replay bundles
  // (`code.image`), where the working directory is inside the image. "" = none.
  std::string image;
  // The run's last step for progress and ETA (monitoring.totalSteps, or what `bulwark
  // run` read from the trainer's arguments; 0 = unknown), in the report.
  long total_steps = 0;
  // `bulwark replay` (docs/diagnosis.md): the run re-runs the steps before `fault` from
  // checkpoint step `resume` (with the skip range in effect then), compares every loss
  // bit for bit with `expected`, and ends once the fault's step completed or the fault
  // came back; the report's `replay` holds the outcome step by step.
  struct Replay {
    Incident fault;
    LossTable expected;
    DigestTable expected_digests;  // the RNG and data digests recorded with the losses
    long resume = -1;
    long skip_from = -1, skip_to = -1;
    std::set<int> moved_ranks;  // ranks placed on other nodes than at the fault
  };
  std::optional<Replay> replay;
};

// Which event reasons are warnings (Kubernetes Event type Warning): the reason names
// something that went wrong — it ends in "Failed" or "Lost" (NodeLost, SpareLost,
// CheckpointCommitFailed, NodeStartFailed, Failed, ...) — or is a step of handling a
// fault (FaultDetected, Decision, Diagnosing, HangLocalised, StacksCaptured,
// MemoryTierNotUsed, RendezvousFallback, ControllerStalled). Everything else (Created, NodeReady,
// AttemptStarted, WaitingForCapacity, Succeeded, Cancelled, ...) is normal.
bool IsWarningEvent(const std::string& reason);

// A snapshot of a running controller (Controller::Status()).
struct ControllerStatus {
  // Provisioning, Running, Diagnosing, Stopping, Backoff, Done ("" before Start).
  std::string stage;
  JobPhase phase = JobPhase::kPending;
  int attempt = -1;  // current attempt, 0-based; -1 before the first launch
  int restarts = 0;
  long current_step = -1;  // global rank 0's latest step in the current attempt
  long last_committed_step = -1;
  // The most durable tier holding last_committed_step (disk < shared < object).
  std::string last_committed_tier;
  double last_committed_time = 0;        // wall clock of that commit; 0 = none yet
  double start_time = 0;                 // wall clock
  double end_time = 0;                   // wall clock; 0 while running
  std::vector<std::string> slot_nodes;   // node id per slot ("" = none yet)
  std::vector<std::string> spare_nodes;  // warm standbys (connected or not)
  LedgerReport ledger;                   // the ETTR ledger at the snapshot's time
  LedgerReport settled;                  // EttrLedger::Settled(): monotonic, for counters
  JobMetricsSnapshot metrics;            // loss, throughput, MFU, cost, checkpoints
  Json incidents = Json::array();        // the report's incident records so far
  Json observations = Json::array();     // faults found from metrics that restarted nothing
  std::vector<long> committed_steps;     // committed on the disk tier, ascending
  std::string message;                   // the last decision or diagnosis
  Json replay;  // a replay run's outcome so far (ControllerOptions::replay); null otherwise
};

struct RunResult {
  JobPhase phase = JobPhase::kPending;
  std::string message;  // success summary or the failure diagnosis
  LedgerReport ledger;
  Json report;  // the full JSON report (ledger, incidents, chaos, checkpoints)
};

class ControllerImpl;

class Controller {
 public:
  // backend, store and clock are not owned and must outlive the Controller.
  Controller(JobSpec spec, ControllerOptions opts, Backend* backend, Store* store, Clock* clock);
  ~Controller();

  // Binds the agent listener, records the job in the store and asks the backend for
  // the nodes; afterwards Address() is valid. Optional: Run() calls it if needed. An
  // error is final (call Run() only after an OK Start).
  // (Spelled bulwark::Status: the member Status() hides the type inside the class.)
  bulwark::Status Start();
  // Runs the job until Succeeded, Failed or Cancelled. Every wait inside is bounded.
  Result<RunResult> Run();
  // Run in steps, for tests on a FakeClock (the clock's WaitReadable paces it): one
  // turn of Run's loop; false once the job is done (then Run() returns the result at
  // once). Call Start() first.
  bool RunOnce();

  // Asks this controller to cancel its job; any thread; returns at once.
  void Cancel();
  // Asks this controller to let go of its job without stopping it: Run() closes every
  // agent connection, leaves the nodes to the backend as they are and returns
  // kAborted. The agents keep their ranks running for their orphan timeout, for a new
  // controller to adopt (an operator handing over leadership). Any thread.
  void Detach();
  // Asks the controller to apply `next`'s command, args, env and workdir to the running
  // job (docs/job-spec.md, "Updating a running job"): validated and applied on the
  // controller's thread; the outcome is in Events (UpdateRequested, UpdateRefused,
  // UpdateApplied, UpdateSucceeded, UpdateFailed). The new code is kept once it made
  // `verify_steps` new steps, rolled back if it fails before. Any thread.
  void RequestUpdate(JobSpec next, int verify_steps);
  // A snapshot, updated by the loop at least once per iteration; any thread.
  ControllerStatus Status() const;
  // "host:port" agents dial (advertise_host or bind_host); "" until Start() succeeded.
  // Any thread.
  std::string Address() const;

  // Asks every controller in the process to cancel its job (async-signal-safe).
  static void RequestCancel();

 private:
  std::unique_ptr<ControllerImpl> impl_;
};

// Sends a chaos request to the controller listening at addr ("host:port"); returns
// the controller's reply message. Used by `bulwark chaos`.
Result<std::string> SendChaosRequest(const std::string& addr, const std::string& action, int rank,
                                     int node, double timeout_s);
// Asks the controller at addr to cancel its job (as SIGINT to `bulwark run` does: the
// ranks are stopped, the job ends Cancelled); returns its reply. `bulwark cancel`.
Result<std::string> SendCancelRequest(const std::string& addr, double timeout_s);
// Sends a code update (the spec's YAML text, parsed by the controller with relative
// paths against `base_dir`) to the controller at addr; returns its reply message
// (FailedPrecondition / InvalidArgument with the reason when it refused). `bulwark update`.
Result<std::string> SendUpdateRequest(const std::string& addr, const std::string& spec_yaml,
                                      const std::string& base_dir, int verify_steps,
                                      double timeout_s);

// Asks the controller at addr for its live report (BuildReport: the ledger so far,
// metrics, incidents). `bulwark top`.
Result<Json> SendStatusRequest(const std::string& addr, double timeout_s);

// Renders the ETTR report as the table printed at the end of `bulwark run`.
std::string FormatReport(const Json& report);
// The lines (each starting with `indent`) that say of report incident `x` (number
// `number` of job `job`, from 1) what was tested and found (stop-diagnose), what a replay
// showed its cause to be, and how to replay it; "" when there is nothing to say.
std::string FormatIncidentDiagnosis(const Json& x, const std::string& job, int number,
                                    const std::string& indent);

}  // namespace bulwark
