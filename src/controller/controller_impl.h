// Controller internals, shared by the controller_*.cc files. Not a public header.
//
// The pieces: controller.cc (setup, the loop, reconcile, status), controller_agents.cc
// (agent and client messages, liveness, chaos), controller_adopt.cc (adopting the
// agents of an earlier controller), controller_faults.cc (incidents,
// diagnosis, decisions), controller_nodes.cc (slots, spares, capacity waits, memory
// inventories), controller_launch.cc (resume choice, launch, checkpoint commits through
// the CheckpointCatalog), report.cc (the JSON report and its table).
//
// Threading: everything here runs on the controller's thread, except the members
// marked "any thread" (cancel_, the status snapshot and the address under status_mu_).
#pragma once

#include <atomic>
#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <set>
#include <string>
#include <vector>

#include "ckpt/object_tier.h"
#include "controller/cadence_tracker.h"
#include "controller/ckpt_catalog.h"
#include "controller/controller.h"
#include "controller/job_metrics.h"
#include "controller/tensorboard_sink.h"
#include "diag/diag.h"
#include "policy/memory_resume.h"
#include "policy/metric_faults.h"
#include "policy/regroup.h"
#include "policy/replay_check.h"

namespace bulwark {

// One agent the controller knows of.
struct ControllerNode {
  std::string id;
  std::unique_ptr<JsonLineConn> conn;  // null until hello
  double started_at = 0;               // when the backend accepted StartNode
  double last_heartbeat = 0;
  int slot = -1;  // node slot it serves, -1 = spare, -2 = gone (kept for the report)
  bool lost = false;
  bool retire = false;  // release once the current attempt is stopped
  int stopped_attempt = -1;
  // StartNode answered UNAVAILABLE (no capacity yet): retried at most once a second.
  bool awaiting_capacity = false;
  double capacity_since = 0;
  double next_start_try = 0;
  std::string capacity_message;  // the backend's last answer, for events
  // Memory tier: rank -> steps sealed in this node's staging rings, as reported
  // in `stopped` (valid until the next attempt starts), and of those the steps another
  // rank may restore from: rank -> step -> digest (ckpt::PortableDigest).
  std::map<int, std::vector<long>> mem;
  std::map<int, std::map<long, uint64_t>> portable;
  // Peer replication: where this agent's PeerServer listens (from hello), and the
  // replicas of other nodes' ranks it holds (rank -> sealed steps; from heartbeats
  // and `stopped`).
  std::string peer_host;
  int peer_port = 0;
  std::map<int, std::vector<long>> replicas;
  // A port free on the agent's host (hello / stopped): the rendezvous port when this
  // node serves slot 0 and rendezvous_on_agent is set. 0 = unknown.
  int free_port = 0;
  // Adoption: where the agent accepts an adopting controller (hello), its pid; while
  // this controller adopts it, the dialled connection until it says hello, and what
  // the agent reported running then.
  int adopt_port = 0;
  int metrics_port = 0;  // its /metrics (hello; 0 = none)
  int pid = 0;
  bool adopting = false;
  std::unique_ptr<JsonLineConn> adopt_conn;
  std::string adopt_failure;  // why it could not be adopted ("" = not yet known)
  int adopted_attempt = -1;
  int adopted_ranks = 0;
  std::string adopted_state;   // running, stopping, idle
  std::vector<Json> deferred;  // its reports while adopting, handled once it settles
  // In-process recovery: the port of the long-lived store its agent serves (slot 0's;
  // from `store` and heartbeats; 0 = none), and whether it was sent `prepare`.
  int store_port = 0;
  bool prepared = false;
  // Its warm ranks: how many are ready, made for which code version (`warm`).
  std::string warm_version;
  int warm_ready = 0;
  // Stop-diagnose (controller_diagnosis.cc): to be tested once its ranks are stopped
  // (diagnose_pending), being tested (diagnosing) for incidents_[diagnose_incident],
  // answer `diagnosis` with diagnose_id by diagnose_deadline; quarantined = failed.
  bool diagnose_pending = false;
  bool diagnosing = false;
  int diagnose_incident = -1;
  int diagnose_id = 0;
  double diagnose_started = 0;
  double diagnose_deadline = 0;
  bool quarantined = false;
  // The link check (controller_link.cc): its agent runs it ("diag_checks" in its
  // hello); its diagnosis should include it (diagnose_link); it is tested in place
  // while its ranks run (a straggler's node) for observations_[diagnose_observation];
  // the id of the `diagnose` it got as a reference peer (0 = none).
  bool link_capable = false;
  bool gpu_capable = false;  // its agent runs the `gpu` check (hello's diag_checks)
  bool diagnose_link = false;
  bool diagnose_in_place = false;
  int diagnose_observation = -1;
  int link_ref_id = 0;
  bool connected() const { return conn && !conn->closed() && !lost; }
};

// ControllerNode::slot of a node taken out of the job to be tested (a standby took its
// slot); healthy, it becomes a standby (-1), else it is quarantined and gone (-2).
inline constexpr int kSlotTesting = -3;

struct ControllerChaos {
  bool fired = false;
  double fired_at = 0;
  int attempt = -1;
  std::string incident;  // kind of the first incident detected after injection
  double detected_at = 0;
};

class ControllerImpl {
 public:
  using Node = ControllerNode;
  using ChaosState = ControllerChaos;
  ControllerImpl(JobSpec spec, ControllerOptions opts, Backend* backend, Store* store,
                 Clock* clock);

  Status Start();
  Result<RunResult> Run();
  bool RunOnce();
  void Cancel() { cancel_.store(true); }
  void RequestUpdate(JobSpec next, int verify_steps) {
    std::lock_guard<std::mutex> l(status_mu_);
    update_request_.emplace(std::move(next), verify_steps);
  }
  void Detach() { detach_.store(true); }
  ControllerStatus Snapshot() const;
  std::string Address() const;

 private:
  // kDiagnosing: a hang was reported; every agent is capturing its ranks' stacks
  // before the ranks are stopped, so the culprit can be localised.
  // kAdopting: the agents of an earlier controller are being dialled (Setup found them).
  enum class Stage { kAdopting, kProvisioning, kRunning, kDiagnosing, kStopping, kBackoff, kDone };
  static const char* StageName(Stage s);

  // Setup and teardown (controller.cc).
  Status Setup();
  void Shutdown();
  void PollOnce(double timeout_s);
  void Reconcile();
  // Waits for nodes (and capacity) before a launch; fails the job past the deadlines.
  void ProvisionAndLaunch(double now, const char* what);
  void Finish(JobPhase phase, const std::string& message);
  // Succeeded once every rank exited 0 and the catalog has settled.
  void MaybeSucceed();
  // Refreshes the Status() snapshot: at once when the stage, attempt or step changed
  // (or `force`), else at most every kStatusPeriodS (the ledger report it carries
  // is not free, and an operator runs hundreds of controllers).
  void PublishStatus(bool force = false);
  // Feeds the JobMetrics the nodes held, the cadence and the time (≤ 2/s unless forced).
  void TickMetrics(bool force);
  // A fault found from the metrics (controller_faults.cc): recorded, counted, alerted;
  // a loss spike with monitoring.lossSpikeRollback goes to the policy as a NaN would.
  void OnMetricVerdict(const MetricVerdict& v);
  // opts_.metrics_sd_file: rewritten when the set of targets changes.
  void WriteMetricsTargets();
  std::string metrics_targets_written_;
  // How long the loop may sleep in poll(): agent messages and connections wake it at
  // once, so the timeout only paces the time-driven work. Short while a backoff is
  // about to expire, a hang diagnosis runs or a chaos fault is due; else 0.25 s (an
  // operator runs hundreds of controllers: idle ones must not spin).
  double PollTimeout() const;
  bool CancelRequested();
  // Adoption (controller_adopt.cc).
  // Agents of an earlier controller: the store's (when it recorded this job unfinished)
  // merged with the backend's.
  std::vector<AdoptableNode> AdoptionCandidates(bool from_store);
  void BeginAdoption(const std::vector<AdoptableNode>& candidates);
  // Reads the dialled connections: a hello adopts the node, a refusal or a close fails it.
  void PumpAdoptions();
  bool AdoptionSettled() const;
  // Every candidate answered or the deadline passed: carry on with what runs.
  void FinishAdoption(double now);
  // Remembers where n's agent can be adopted (store, backend).
  void RecordAgent(const Node& n);
  // Agents and clients (controller_agents.cc).
  void AcceptAndGreet();
  // n's agent said `hello` on n.conn: liveness, endpoints, `welcome`, adoption report.
  void Greet(Node& n, const Json& hello);
  void HandleAgentMessage(Node& n, const Json& m);
  void HandleClientRequest(JsonLineConn& c, const Json& m);
  // Declares nodes whose agents went quiet for heartbeat_interval x misses lost. The
  // time the controller itself did not run (a gap between two calls over
  // kControllerStallS: the machine or this process was paused) is not held against the
  // agents: every node's last message moves forward by the gap (ControllerStalled).
  void CheckHeartbeats();
  void OnNodeGone(Node& n, const std::string& subtype, const std::string& reason,
                  double fault_time);
  void RunChaos();
  void FireChaos(size_t i);
  // Faults (controller_faults.cc).
  void OnFault(const Incident& inc, Json extra);
  void Act(const Incident& inc, Json extra);
  // A node loss that comes while this attempt stops for a crash, within kCascadeWindowS
  // of it, is the crash's root (the crashed rank's peer vanished): the crash's incident
  // is recast as the node loss (j: its record) and the crash is kept as a secondary
  // incident that names it. False (nothing done) otherwise.
  bool RecastAsRoot(const Incident& inc, Json j);
  void BeginDiagnosis(const Incident& inc, const Json& extra);
  void MergeDiagnosis(int slot, const Json& msg);
  void FinishDiagnosis();
  // Stop-diagnose (controller_diagnosis.cc, policy/diagnosis_policy.h). For an incident
  // whose cause may be the machine, marks its node to be tested and, with a standby
  // ready, turns *d into replacing it (else the relaunch waits for the verdict); the
  // incident's `diagnosis` record, or null when nothing is said.
  Json PlanDiagnosis(const Incident& inc, Decision* d);
  // Sends n `diagnose` (its ranks are stopped); in its slot unless a standby took it.
  void StartDiagnostics(Node& n);
  // n's `diagnosis` reply.
  void OnDiagnosis(Node& n, const Json& m);
  // Verdict: healthy -> it rejoins (a standby, or stays in its slot); else quarantined
  // through the backend and released (its slot is refilled by EnsureSlotsFilled).
  void FinishDiagnostics(Node& n, const std::vector<diag::CheckResult>& results);
  // n's incident's (or observation's) `diagnosis` record; null when it has none.
  Json* DiagnosisRecord(const Node& n);
  // Writes the verdict into n's incident's (or observation's) `diagnosis` record.
  void RecordDiagnosis(Node& n, const std::vector<diag::CheckResult>& results,
                       const diag::Verdict& v, const std::string& action, double now, bool charged);
  // Diagnostics past their deadline, or whose node was lost, fail.
  void CheckDiagnostics(double now);
  // Quarantines n through the backend (`reason` goes with it), shuts its agent down and
  // releases it; a slot it served is refilled by EnsureSlotsFilled. The event says "<id>
  // <why>; <action>". The action taken.
  std::string QuarantineAndRelease(Node& n, const std::string& reason, const std::string& why);
  // Replay (controller_replay.cc, policy/replay_check.h).
  // The incident's replay bundle (pins its checkpoint against retention).
  Json ReplayBundle(const Incident& inc);
  // After the decision on incidents_[index]: checks the re-run of inc's steps, when a
  // re-run can tell its cause.
  void BeginReplayCheck(const Incident& inc, const Decision& d, int index);
  // A loss into the record replay bundles are cut from (a NaN without digests is not kept).
  void RecordLoss(long step, int rank, double loss, StepDigests digests);
  // A loss of the running attempt: recorded, and compared while a check runs.
  void OnReplayLoss(long step, int rank, double loss, StepDigests digests);
  // An incident during a check: concludes it; the same fault again sets inc's cause.
  void ConcludeReplayWith(Incident* inc);
  void ConcludeReplay(const Classification& k, const Incident* again);
  // A replay found node_id's computation wrong: quarantined when out of the job.
  std::string QuarantineForReplay(const std::string& node_id, const std::string& evidence);
  // code_digest_ of spec_.workdir, unless known (cleared when an update switches code).
  void DigestCodeOnce();
  // `bulwark replay` runs (opts_.replay): the check and the first launch's resume step;
  // the report's `replay` section.
  void BeginReplayRun();
  Json ReplayReport() const;
  // The first step whose losses a bundle keeps (at most kMaxBundleSteps and losses).
  long BundleFrom(long checkpoint_step, long fault_step) const;
  // Rewrites an incident's bundle losses and digests once the stopped ranks' last
  // reports are in: another node's reports of the steps before the fault may come
  // after the incident was recorded. The report (and what `bulwark replay` reads of a
  // finished job) has the complete record.
  void RefreshReplayBundle(Json* incident) const;
  // Concludes a passed check whose remaining losses did not come in time.
  void ConcludeReplayWhenDue();
  Json replay_outcome_;  // a replay run's outcome once concluded
  LossWindow losses_;
  std::optional<ReplayCheck> replay_;
  int replay_incident_ = -1;  // the checked incident's index in incidents_
  // Mono time the check passed while other ranks' losses were still due (Complete());
  // -1 = not waiting. ConcludeReplayWhenDue ends the wait after kReplayLateLossesS.
  double replay_passed_at_ = -1;
  std::string replay_node_id_;  // the node it came from
  std::vector<long> pinned_;    // checkpoint steps the newest bundles need
  long attempt_resume_ = -1;    // the step the current attempt resumed from (-1: scratch)
  std::string code_digest_;
  int code_files_ = 0;
  int next_diagnose_id_ = 0;
  // The link check among the nodes of a diagnosis (controller_link.cc): one ring at a
  // time, members[0] the node under test, the others reference peers.
  struct LinkSession {
    uint64_t id = 0;
    std::vector<std::string> members;         // node ids, ring order
    std::map<std::string, int> diagnose_ids;  // per member, the `diagnose` it answers
    std::map<std::string, int> ports;         // link_listening
    std::vector<std::string> ring;            // the members in the ring sent (link_peers)
    std::map<std::string, std::vector<diag::CheckResult>> results;  // their link results
    bool peers_sent = false;
    double listen_deadline = 0;
    double ring_deadline = 0;  // link_peers + the budget: the peers have answered by then
    double deadline = 0;       // the node under test's
    std::string off;           // why the ring was called off ("" = it was not)
  };
  std::optional<LinkSession> link_;
  uint64_t next_link_session_ = 0;
  // Adds the link check to n's `diagnose` and sends its reference peers theirs; returns
  // what the event says ("" = no link check, *why_not says why).
  std::string PlanLinkCheck(Node& n, Json* diagnose, std::string* why_not);
  void OnLinkListening(Node& n, const Json& m);
  void SendLinkPeers();
  // A member's `diagnosis`: its link results are held for the ring's verdict. True when
  // n's whole verdict waits for the ring (n is the node under test).
  bool HoldForLink(Node& n, const std::vector<diag::CheckResult>& results);
  void CheckLinkSession(double now);
  void FinishLinkSession();
  // A straggler (the metric verdict) on `node`: DecideStraggler's reason; true when its
  // node is to be tested in place (StartInPlaceDiagnostics, once its record exists).
  bool StragglerTest(int node, double score, std::string* reason);
  void StartInPlaceDiagnostics(int node, int observation);
  // The bitwise alignment check (controller_diagnosis.cc): a rank's `digest` of its
  // parameters after a step. Once every rank of its group reported the step, equal
  // digests advance aligned_step_; a minority that differs is an sdc incident on its
  // node (no majority: on no node).
  void OnDigest(const Json& m);
  std::map<std::pair<std::string, long>, std::map<int, std::string>> digests_;  // this attempt
  std::map<std::string, std::set<int>> group_ranks_;  // named groups: the ranks seen in each
  long aligned_step_ = -1;  // the newest step whose digests agreed (across attempts)
  // Stops the attempt's ranks: all of them, or with `park` only regroup_.replace (the
  // survivors leave their generation alive, docs/protocol.md §1).
  void StopAll(bool park = false);
  // In-process recovery (controller_faults.cc). A rank that left its generation on its
  // own (a collective failed) is a fault only if no other incident explains it within
  // kParkGraceS; then it becomes a `collective_error` incident.
  void OnSpontaneousPark(const Node& n, const Json& m);
  void CheckSpontaneousPark(double now);
  // NaN attribution (controller_faults.cc). In data-parallel training a NaN on one rank
  // at step s reaches every rank's loss at s + 1 through the gradient all-reduce, and the
  // agents of different nodes report in their own time, so the first NaN to arrive need
  // not be the first that happened. An agent's NaN is held (HoldNan) until every rank's
  // reports reached the step before it and no step report showed an earlier NaN whose
  // incident has not come yet (an agent forwards a rank's step report, then its
  // incident), or kNanSettleS passed; then the NaN of the earliest step is the
  // incident and the others are its secondaries (SettleNan). While one is held the
  // steps are late reports, not progress.
  void HoldNan(const Incident& inc, Json extra);
  void SettleNan(double now, bool force);
  // The kept and replaced processes of the attempt that followed an in-process
  // recovery, from the agents' `started` reports, into the incident's report row.
  void RecordProcesses(const Json& started);
  // Warm ranks for standbys: `prepare` (the job's command) once the job runs.
  void PrepareSpares();
  // `prepare` to one agent: `code`'s command for its warm pool, as `version`.
  void SendPrepare(Node& n, const JobSpec& code, const std::string& version);
  // Code updates (controller_update.cc, docs/job-spec.md "Updating a running job").
  // Validates and starts an update; false with *reply saying why.
  bool BeginUpdate(const JobSpec& next, int verify_steps, std::string* reply);
  void HandleUpdateRequest(JsonLineConn& c, const Json& m);
  // Preparing: switch once every node's warm ranks run the new code (or the wait is
  // over); verifying: succeed after verify_steps new steps.
  void AdvanceUpdate(double now);
  // A fault while the new code is verified: roll back instead of the policy. True if
  // the fault was handled so.
  bool RollBackFailedUpdate(const Incident& inc, const Json& extra);
  // Elastic resize (controller_resize.cc): drops slots whose node waits for capacity
  // (true if it did); grows back onto a connected extra standby at a step boundary.
  bool MaybeShrink(double now);
  void MaybeGrow(double now);
  // The job now runs on `slots` (its nodes' slot fields already set): spec_.nodes, the
  // catalog's world, the report's `resizes`.
  void SetSize(std::vector<std::string> slots, double now, const std::string& why);
  // After a launch: the switch to new code (or back) has happened.
  void OnCodeLaunched(long resume);
  // Stops every rank (parked where possible) to relaunch with spec_'s code; `planned`:
  // no fault caused it (the ledger charges it to no incident).
  void SwitchCode(bool planned);
  // The version of the code the ranks run ("v0", then one more per update or rollback).
  std::string CodeVersion(int ahead = 0) const {
    return "v" + std::to_string(code_version_ + ahead);
  }
  // Nodes (controller_nodes.cc).
  bool EnsureSlotsFilled();
  void ReplenishSpares();
  // nullptr on failure, and without asking the backend while StartBackingOff().
  Node* StartNode(int slot);
  // Asks the backend to start n; false while it waits for capacity or on failure. A
  // failure (not "no capacity") backs further starts off: 0.5 s after the first of a
  // row, doubling to 10 s, so a backend that refuses every start is not asked at every
  // turn of the loop until the stage's deadline. A refused standby backs off only
  // standby starts (0.5 s doubling to 5 min): a slot's replacement is never held up
  // for the job's standbys, and a backend refusing only standbys is not asked, nor
  // NodeStartFailed logged, every 10 s of the run. The two rows are counted apart: a
  // standby that starts does not end a row of slot refusals, nor the reverse.
  bool TryStartNode(Node& n);
  bool StartBackingOff() const { return clock_->NowWall() < start_retry_at_; }
  // An agent the backend started ended before it said hello (it exited, its node went,
  // or it never connected). Backs further starts off as a refused start does; the
  // kMaxEarlyExits-th such end in a row of one slot fails the job (the agent cannot
  // start there: a bad flag, a run dir too long for its sockets, a missing library),
  // where each replacement would end the same way until the stage's deadline. A
  // standby's backs off only standby starts (to 5 min; StandbyStartFailed at the
  // kMaxEarlyExits-th): the job does not need standbys to run.
  void OnEarlyExit(const Node& n, const std::string& reason, double now);
  void RetryCapacityWaits();
  // The slot waiting longest for capacity beyond capacity_wait_s, as a failure
  // message; "" if none. *waiting tells whether any slot waits for capacity at all.
  std::string CapacityExceeded(double now, bool* waiting) const;
  int SparesReady() const;
  // The agent catalog requests go to: slot 0's, else the lowest connected slot's.
  std::string DesignatedAgent() const;
  // Newest step <= max_step (-1: any) that every rank's current node holds in its
  // memory tier (from the `stopped` reports); -1 if none.
  long NewestInMemory(long max_step) const { return MemoryResumeFor(max_step).step; }
  // The newest step every rank can restore from memory, and from where (policy/
  // memory_resume.h), from the slots' nodes' `stopped` inventories and the live peers'
  // replicas.
  MemoryResume MemoryResumeFor(long max_step) const;
  // The node (other than rank's own) holding a replica of (rank, step); null if none.
  const Node* ReplicaHolder(int rank, long step, const Node* own) const;
  // "rank 0 own 12..14, on node-1 11..13; rank 1 ..." (why memory was not used).
  std::string MemoryInventoryText() const;
  // Where slot s pushes its ranks' snapshots: the next slot's node, or for a
  // one-node job the first warm standby; null when there is none.
  const Node* PeerOf(int slot) const;
  // Checkpoints and launch (controller_launch.cc).
  // True when the resume step may be chosen now: the catalog is settled and an
  // object-tier restore, if one is worth it, has finished.
  bool ResumeReady();
  Status Launch();
  void OnCheckpointShard(int rank, long step, const std::string& tier);
  // A rank's disk persist of `step` was superseded by step `by`: an Event, rate-limited.
  void OnPersistSkipped(long step, long by);
  void DrainCatalog();
  void OnCatalogEvent(const CatalogEvent& ev);
  void MaybeAnnounceCadence(double now);
  // Helpers.
  void Event(const std::string& reason, const std::string& message);
  void Persist();
  // A store write's outcome: a failure is reported on stderr (the job goes on; its
  // record is rewritten on the next Persist, events and incidents are lost).
  void StoreWrote(const Status& st);
  // Appends j to incidents_ and adds it to the store.
  void RecordIncident(Json j);
  // Writes incidents_[i] to its store row again, after a change to it (a running job's
  // rows are what `bulwark describe` and `bulwark replay` read).
  void RewriteIncident(int i);
  Json BuildReport();

  JobSpec spec_;
  ControllerOptions opts_;
  Backend* backend_;
  Store* store_;
  Clock* clock_;
  RecoveryPolicy policy_;
  EttrLedger ledger_;
  JobMetrics metrics_;
  TensorBoardSink tb_;
  MetricFaultDetector metric_faults_;
  std::vector<Json> observations_;     // faults found from metrics that restarted nothing
  double metrics_tick_at_ = -1;        // mono time of the last JobMetrics::Tick
  double heartbeats_checked_at_ = -1;  // wall time of the last CheckHeartbeats
  JobRecord rec_;

  Fd listen_;
  std::string addr_;         // what agents dial: advertise (or bind) host and port
  std::string master_host_;  // advertise_host, else bind_host
  double capacity_wait_s_ = 0;
  bool started_ = false;
  Status start_status_;  // Setup()'s result
  std::map<std::string, std::unique_ptr<Node>> nodes_;
  std::vector<std::unique_ptr<JsonLineConn>> pending_;  // accepted, not yet identified
  std::set<const JsonLineConn*> answered_;              // of pending_: clients answered
  std::vector<std::string> slots_;
  int next_node_ = 0;
  int start_failures_ = 0;          // slot node starts the backend refused, in a row
  int standby_start_failures_ = 0;  // standby starts the backend refused, in a row
  double start_retry_at_ = 0;       // no start before (wall time)
  double standby_retry_at_ = 0;     // no standby start before (wall time)
  std::string start_error_;         // the last refusal ("" after a start succeeded)
  static constexpr int kMaxEarlyExits = 3;
  std::map<int, int> early_exits_;  // slot (-1: standbys) -> agents ended before hello, in a row
  std::string early_exit_failure_;  // why the job fails once a slot reached kMaxEarlyExits

  Stage stage_ = Stage::kProvisioning;
  double stage_deadline_ = 0;
  double backoff_until_ = 0;
  bool finish_after_stop_ = false;
  JobPhase final_phase_ = JobPhase::kFailed;
  std::string final_message_;
  Decision decision_;
  // Hang diagnosis in progress.
  Incident diag_incident_;
  Json diag_extra_;
  std::set<int> diag_waiting_;  // node slots whose stacks have not arrived
  std::map<int, std::string> diag_stacks_;
  std::set<int> diag_stopped_;

  double start_ = 0;
  double end_ = 0;
  int attempt_ = -1;
  long last_step_ = -1;
  long high_water_ = -1;
  double attempt_launched_at_ = 0;
  std::set<int> exited_ok_;
  std::map<std::pair<std::string, long>, std::set<int>> shards_;  // (tier, step) -> durable ranks
  std::vector<long> committed_;                                   // disk tier, ascending
  long last_committed_step_ = -1;
  std::string last_committed_tier_;
  double last_committed_time_ = 0;
  JobHistory history_;
  std::vector<Json> incidents_;
  std::vector<int64_t> incident_rows_;  // store row of incidents_[i]; -1: its write failed
  std::vector<ChaosState> chaos_;
  RunResult result_;
  std::unique_ptr<ckpt::ObjectTier> object_;     // checkpoint.objectStore, if set
  std::unique_ptr<CheckpointCatalog> catalog_;   // local or remote (remote_ then)
  RemoteCatalog* remote_ = nullptr;              // catalog_ when remote_checkpoint_fs
  int object_checked_attempt_ = -2;              // attempt whose object restore was decided
  bool list_wait_reported_ = false;              // a listing waiting for an agent was reported
  long object_restored_ = -1;                    // step restored from the object tier
  std::set<std::pair<int, long>> bad_replicas_;  // (rank, step) a peer failed to serve
  std::optional<CadenceTracker> cadence_;        // checkpoint.intervalSteps: auto
  // Superseded disk persists (`ckpt` with `superseded_by`): one Event per step at most every
  // kSkipEventEveryS, counting those in between.
  long last_skipped_step_ = -1;
  double next_skip_event_ = 0;
  int skipped_unreported_ = 0;
  // In-process recovery (policy/regroup.h).
  std::map<int, int> rank_pids_;     // rank -> pid in the current attempt (`started`)
  std::map<int, int> prev_pids_;     // ... in the attempt before it
  std::set<int> in_process_ranks_;   // ranks that declared in-process recovery (this attempt)
  std::set<int> dead_ranks_;         // ranks known dead in this attempt
  RegroupPlan regroup_;              // the plan of the last fault handled
  int regroup_attempt_ = -1;         // the attempt that plan launched (its `started` fill it)
  double spontaneous_park_at_ = -1;  // wall time a rank parked on its own; -1 = none
  std::vector<std::pair<Incident, Json>> held_nans_;  // HoldNan, in order of arrival
  double held_nan_until_ = 0;                         // when SettleNan stops waiting
  std::set<int> nan_ranks_;                           // ranks with a NaN reported in this attempt
  std::map<int, long> forwarded_step_;   // rank -> newest step forwarded in this attempt
  std::map<int, long> nan_report_step_;  // rank -> first step forwarded with a NaN loss
  // Code updates in progress (controller_update.cc).
  struct UpdateState {
    enum class Phase { kNone, kPreparing, kSwitching, kVerifying };
    Phase phase = Phase::kNone;
    int number = 0;         // this update's number (1, 2, ...)
    JobSpec next;           // the code it applies (command, args, env, workdir)
    JobSpec previous;       // the spec before the update (what a rollback restores)
    std::string yaml;       // the updated spec's text, when it came as one
    std::string fields;     // what changed: "args, env"
    int verify_steps = 20;  // new steps the new code must make before it is kept
    long base_step = -1;    // the high water when the new code started
    double requested_at = 0;
    double deadline = 0;    // preparing: the wait for warm ranks of the new code ends
    bool rollback = false;  // the switch in progress restores the previous code
    size_t log_index = 0;   // its entry in updates_log_
  };
  UpdateState update_;
  int code_version_ = 0;
  // Elastic resize: the size the job grows back to, whether the next launch has another
  // world size than the memory snapshots (then it resumes from the file tiers), and
  // every resize for the report.
  int max_nodes_ = 0;
  bool world_changed_ = false;
  Json resizes_ = Json::array();
  Json updates_log_ = Json::array();  // every update, for the report
  // An update asked for from another thread (Controller::RequestUpdate; status_mu_).
  std::optional<std::pair<JobSpec, int>> update_request_;
  int spontaneous_park_rank_ = -1;
  int spontaneous_park_node_ = -1;
  std::string spontaneous_park_error_;
  Json cadence_log_ = Json::array();  // the intervals announced, for the report

  std::atomic<bool> cancel_{false};  // any thread: Cancel()
  std::atomic<bool> detach_{false};  // any thread: Detach()
  bool detached_ = false;
  uint64_t cancel_generation_ = 0;  // RequestCancel() calls seen at construction
  mutable std::mutex status_mu_;    // guards status_ and address_ (any thread)
  ControllerStatus status_;
  double published_at_ = -1;  // mono time of the last PublishStatus (controller thread)
  std::string address_;
};

}  // namespace bulwark
