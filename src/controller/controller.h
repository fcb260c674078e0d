// Controller: runs one job to a terminal phase through a Backend, a Store and the
// pure decision code (RecoveryPolicy, EttrLedger).
//
// Level-triggered: each loop iteration compares what the job needs (every node slot
// held by a live, connected agent; the current attempt's ranks running; the number
// of warm spares) with what it observes (agent connections, heartbeats, backend
// reports) and acts to close the gap. Events (incidents, step and checkpoint reports)
// only update observed state and, for faults, ask the policy for a decision.
//
// Threading: Run() owns the calling thread; nothing else may touch the Controller
// while it runs except RequestCancel(), which is async-signal-safe.
#pragma once

#include <memory>
#include <set>
#include <string>
#include <vector>

#include "backend/backend.h"
#include "common/clock.h"
#include "common/net.h"
#include "ledger/ettr_ledger.h"
#include "policy/recovery_policy.h"
#include "spec/job_spec.h"
#include "store/store.h"

namespace bulwark {

struct ControllerOptions {
  std::string run_dir;  // per-job scratch: sockets, logs, controller.addr
  std::string bind_host = "127.0.0.1";
  double agent_connect_timeout_s = 60;
  uint64_t seed = 1;
  bool echo_events = true;  // print "[bulwark] ..." lines to stderr
};

struct RunResult {
  JobPhase phase = JobPhase::kPending;
  std::string message;  // success summary or the failure diagnosis
  LedgerReport ledger;
  Json report;  // the full JSON report (ledger, incidents, chaos, checkpoints)
};

class Controller {
 public:
  Controller(JobSpec spec, ControllerOptions opts, Backend* backend, Store* store, Clock* clock);
  ~Controller();

  // Runs the job until Succeeded, Failed or Cancelled. Every wait inside is bounded.
  Result<RunResult> Run();

  // Asks a running controller (in any thread or a signal handler) to cancel the job.
  static void RequestCancel();

 private:
  struct Node;
  struct ChaosState;
  class Impl;
  std::unique_ptr<Impl> impl_;
};

// Sends a chaos request to the controller listening at addr ("host:port"); returns
// the controller's reply message. Used by `bulwark chaos`.
Result<std::string> SendChaosRequest(const std::string& addr, const std::string& action, int rank,
                                     int node, double timeout_s);

// Renders the ETTR report as the table printed at the end of `bulwark run`.
std::string FormatReport(const Json& report);

}  // namespace bulwark
