// Controller: setup, the loop, reconciliation and the status snapshot.
#include "controller/controller.h"

#include <algorithm>
#include <atomic>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <sstream>

#include "common/json_util.h"
#include "controller/controller_impl.h"
#include "sched/scheduler.h"

namespace bulwark {
namespace {

// Incremented by RequestCancel(); every controller compares it with the value it saw.
std::atomic<uint64_t> g_cancel_generation{0};

bool EndsWith(const std::string& s, const std::string& suffix) {
  return s.size() >= suffix.size() &&
         s.compare(s.size() - suffix.size(), suffix.size(), suffix) == 0;
}

}  // namespace

bool IsWarningEvent(const std::string& reason) {
  static const std::set<std::string> kFaultHandling = {
      "FaultDetected",  "Decision",          "Diagnosing",         "HangLocalised",
      "StacksCaptured", "MemoryTierNotUsed", "RendezvousFallback", "ControllerStalled"};
  return EndsWith(reason, "Failed") || EndsWith(reason, "Lost") || kFaultHandling.count(reason);
}

void Controller::RequestCancel() { g_cancel_generation.fetch_add(1); }

Controller::Controller(JobSpec spec, ControllerOptions opts, Backend* backend, Store* store,
                       Clock* clock)
    : impl_(std::make_unique<ControllerImpl>(std::move(spec), std::move(opts), backend, store,
                                             clock)) {}
Controller::~Controller() = default;
bulwark::Status Controller::Start() { return impl_->Start(); }
Result<RunResult> Controller::Run() { return impl_->Run(); }
bool Controller::RunOnce() { return impl_->RunOnce(); }
void Controller::Cancel() { impl_->Cancel(); }
void Controller::RequestUpdate(JobSpec next, int verify_steps) {
  impl_->RequestUpdate(std::move(next), verify_steps);
}
void Controller::Detach() { impl_->Detach(); }
ControllerStatus Controller::Status() const { return impl_->Snapshot(); }
std::string Controller::Address() const { return impl_->Address(); }

ControllerImpl::ControllerImpl(JobSpec spec, ControllerOptions opts, Backend* backend, Store* store,
                               Clock* clock)
    : spec_(std::move(spec)),
      opts_(std::move(opts)),
      backend_(backend),
      store_(store),
      clock_(clock),
      policy_(spec_.fault_policy, opts_.seed),
      ledger_(clock->NowWall()),
      metrics_(spec_, clock->NowWall()),
      tb_(opts_.tensorboard_dir,
          [this](const std::string& why) { Event("TensorBoardFailed", why); }),
      metric_faults_(MetricFaultConfig{.straggler_threshold = spec_.monitoring.straggler_threshold,
                                       .data_wait_threshold = spec_.monitoring.data_wait_threshold,
                                       .loss_spike_factor = spec_.monitoring.loss_spike_factor}),
      chaos_(spec_.chaos.size()),
      cancel_generation_(g_cancel_generation.load()) {
  capacity_wait_s_ =
      opts_.capacity_wait_s < 0 ? opts_.agent_connect_timeout_s : opts_.capacity_wait_s;
}

const char* ControllerImpl::StageName(Stage s) {
  switch (s) {
    case Stage::kAdopting:
      return "Adopting";
    case Stage::kProvisioning:
      return "Provisioning";
    case Stage::kRunning:
      return "Running";
    case Stage::kDiagnosing:
      return "Diagnosing";
    case Stage::kStopping:
      return "Stopping";
    case Stage::kBackoff:
      return "Backoff";
    case Stage::kDone:
      return "Done";
  }
  return "?";
}

void ControllerImpl::Event(const std::string& reason, const std::string& message) {
  double t = clock_->NowWall();
  if (opts_.echo_events) {
    std::fprintf(stderr, "[bulwark %7.1fs] %s: %s\n", t - start_, reason.c_str(), message.c_str());
  }
  StoreWrote(store_->AddEvent({t, spec_.name, reason, message}));
  if (opts_.on_event) opts_.on_event(reason, message, IsWarningEvent(reason));
}

void ControllerImpl::StoreWrote(const Status& st) {
  if (!st.ok()) std::fprintf(stderr, "[bulwark] store: %s\n", st.ToString().c_str());
}

void ControllerImpl::RecordIncident(Json j) {
  Result<int64_t> row = store_->AddIncident(spec_.name, j.value("attempt", attempt_), j.dump());
  StoreWrote(row.status());
  incidents_.push_back(std::move(j));
  incident_rows_.push_back(row.ok() ? *row : -1);
}

void ControllerImpl::RewriteIncident(int i) {
  if (i < 0 || i >= static_cast<int>(incidents_.size()) || incident_rows_[i] < 0) return;
  StoreWrote(store_->UpdateIncident(spec_.name, incident_rows_[i], incidents_[i].dump()));
}

void ControllerImpl::Persist() {
  rec_.attempt = attempt_;
  rec_.high_water_step = high_water_;
  rec_.last_committed_step = committed_.empty() ? -1 : committed_.back();
  rec_.updated = clock_->NowWall();
  StoreWrote(store_->PutJob(rec_));
}

Status ControllerImpl::Start() {
  if (started_) return FailedPrecondition("controller for job " + spec_.name + " already started");
  started_ = true;
  start_status_ = Setup();
  if (!start_status_.ok()) stage_ = Stage::kDone;
  PublishStatus(/*force=*/true);
  return start_status_;
}

Status ControllerImpl::Setup() {
  start_ = clock_->NowWall();
  std::error_code ec;
  std::filesystem::create_directories(opts_.run_dir + "/logs", ec);
  if (ec) return Internal("create run dir " + opts_.run_dir + ": " + ec.message());
  BW_ASSIGN_OR_RETURN(listen_, TcpListen(opts_.bind_host, 0));
  BW_ASSIGN_OR_RETURN(int port, LocalPort(listen_.get()));
  master_host_ = opts_.advertise_host.empty() ? opts_.bind_host : opts_.advertise_host;
  addr_ = master_host_ + ":" + std::to_string(port);
  std::ofstream(opts_.run_dir + "/controller.addr") << addr_ << "\n";
  BeginReplayRun();
  DigestCodeOnce();  // the code the ranks start with, for replay bundles
  {
    std::lock_guard<std::mutex> l(status_mu_);
    address_ = addr_;
  }

  // Carry on from the store when the job exists and is not finished.
  BW_ASSIGN_OR_RETURN(auto existing, store_->GetJob(spec_.name));
  std::ifstream f(spec_.source_path);
  std::stringstream yaml;
  yaml << f.rdbuf();
  if (existing && !IsTerminal(existing->phase)) {
    rec_ = *existing;
    attempt_ = rec_.attempt;
    high_water_ = rec_.high_water_step;
    history_.restarts_used = rec_.restarts;
    history_.high_water_step = high_water_;
    Event("Resumed", "job found in the store at attempt " + std::to_string(attempt_) + " (" +
                         JobPhaseName(rec_.phase) + "); carrying on");
  } else {
    rec_ = JobRecord{};
    rec_.name = spec_.name;
    rec_.created = start_;
    rec_.run_id = spec_.name + "-" + std::to_string(static_cast<long>(start_));
  }
  const bool carry_on = existing && !IsTerminal(existing->phase);
  if (!opts_.run_id.empty()) rec_.run_id = opts_.run_id;
  rec_.spec_yaml = yaml.str();
  rec_.spec_path = spec_.source_path;
  rec_.run_dir = opts_.run_dir;
  rec_.phase = JobPhase::kPending;
  if (!spec_.checkpoint.object_store.empty()) {
    auto ot = ckpt::ObjectTier::OpenUrl(spec_.checkpoint.object_store, opts_.ckpt_env);
    if (!ot.ok()) {
      return InvalidArgument("checkpoint.objectStore: " + ot.status().message() +
                             " (set AWS_ACCESS_KEY_ID and AWS_SECRET_ACCESS_KEY for the "
                             "controller and agents)");
    }
    object_ = std::move(*ot);
    Status b = object_->client()->CreateBucket();
    if (!b.ok()) {
      return Unavailable("checkpoint.objectStore: cannot use bucket " +
                         object_->client()->config().bucket + ": " + b.ToString());
    }
  }
  CatalogConfig cc;
  cc.disk_dir = spec_.checkpoint.dir;
  cc.shared_dir = spec_.checkpoint.shared_dir;
  cc.world = spec_.world_size();
  cc.retain = {spec_.checkpoint.keep, spec_.checkpoint.golden_every, {}};
  cc.object_store = object_ ? spec_.checkpoint.object_store : "";
  if (opts_.remote_checkpoint_fs) {
    CatalogTransport t;
    t.designated = [this] { return DesignatedAgent(); };
    t.send = [this](const std::string& node, const Json& msg) -> Status {
      auto it = nodes_.find(node);
      if (it == nodes_.end() || !it->second->connected()) {
        return Unavailable(node + " is not connected");
      }
      return it->second->conn->Send(msg);
    };
    auto remote = std::make_unique<RemoteCatalog>(std::move(cc), std::move(t), clock_);
    remote_ = remote.get();
    catalog_ = std::move(remote);
  } else {
    catalog_ = NewLocalCatalog(std::move(cc), opts_.ckpt_env, object_.get(), clock_);
  }
  BW_RETURN_IF_ERROR(catalog_->Open());
  DrainCatalog();
  if (spec_.checkpoint.interval_auto) {
    cadence_.emplace(spec_.nodes, spec_.fault_policy.failures_per_node_day);
  }
  if (spec_.fault_policy.spare_nodes_auto) {
    const FaultPolicySpec& fp = spec_.fault_policy;
    spec_.fault_policy.spare_nodes =
        sched::StandbyNodes(spec_.nodes, fp.failures_per_node_day, fp.replacement_lead_seconds);
    char buf[200];
    std::snprintf(buf, sizeof buf,
                  "%d warm standby: the P99 of node failures among %d nodes within the %.0f s "
                  "replacement lead time at %.4g failures per node-day",
                  fp.spare_nodes, spec_.nodes, fp.replacement_lead_seconds,
                  fp.failures_per_node_day);
    Event("StandbySized", buf);
  }
  Persist();
  Event("Created", "job " + spec_.name + ": " + std::to_string(spec_.nodes) + " nodes x " +
                       std::to_string(spec_.procs_per_node) + " ranks, " +
                       std::to_string(spec_.fault_policy.spare_nodes) + " spare; controller " +
                       addr_ + "; backend " + backend_->Name());
  slots_.assign(spec_.nodes, "");
  max_nodes_ = spec_.nodes;
  const std::vector<AdoptableNode> candidates = AdoptionCandidates(carry_on);
  if (!candidates.empty()) {
    BeginAdoption(candidates);
    return Status::Ok();
  }
  for (int s = 0; s < spec_.nodes; ++s) {
    if (!StartNode(s)) return Unavailable("could not start node for slot " + std::to_string(s));
  }
  ReplenishSpares();
  stage_ = Stage::kProvisioning;
  stage_deadline_ = clock_->NowWall() + opts_.agent_connect_timeout_s;
  return Status::Ok();
}

bool ControllerImpl::CancelRequested() {
  bool asked = cancel_.exchange(false);
  const uint64_t g = g_cancel_generation.load();
  if (g != cancel_generation_) {
    cancel_generation_ = g;
    asked = true;
  }
  return asked;
}

void ControllerImpl::Finish(JobPhase phase, const std::string& message) {
  double now = clock_->NowWall();
  for (auto& [id, n] : nodes_) {
    if (n->connected()) {
      IgnoreError(n->conn->Send(Json{{"type", "shutdown"}}),
                  "a failed send closes the connection; the loop handles the peer's loss");
    }
    StoreWrote(store_->DeleteAgent(spec_.name, id));  // nothing is left to adopt
  }
  ledger_.OnEnd(now);
  end_ = now;
  rec_.phase = phase;
  rec_.message = message;
  stage_ = Stage::kDone;
  Event(JobPhaseName(phase), message);
  result_.phase = phase;
  result_.message = message;
  result_.ledger = ledger_.Report(now);
  result_.report = BuildReport();
  rec_.report_json = result_.report.dump();
  Persist();
}

void ControllerImpl::MaybeSucceed() {
  if (stage_ != Stage::kRunning || static_cast<int>(exited_ok_.size()) != spec_.world_size() ||
      !held_nans_.empty()) {
    return;
  }
  // The last checkpoints' commits may still be in flight (remote catalog): a job is
  // not reported Succeeded before they end (each request has a deadline).
  if (!catalog_->Settled()) return;
  // A node still being tested gets its verdict (and its quarantine) before the job's
  // record closes; CheckDiagnostics bounds the wait.
  for (const auto& [id, n] : nodes_) {
    if (n->diagnosing) return;
  }
  Finish(JobPhase::kSucceeded, "all " + std::to_string(spec_.world_size()) +
                                   " ranks exited 0 at step " + std::to_string(last_step_));
}

void ControllerImpl::ProvisionAndLaunch(double now, const char* what) {
  const bool relaunch = stage_ == Stage::kBackoff;
  bool ready = EnsureSlotsFilled();
  if (!ready && MaybeShrink(now)) ready = EnsureSlotsFilled();
  if (relaunch) ReplenishSpares();
  if (ready && ResumeReady()) {
    Status st = Launch();
    if (!st.ok())
      Finish(JobPhase::kFailed, std::string("could not ") + what + ": " + st.ToString());
    return;
  }
  if (!early_exit_failure_.empty()) {
    Finish(JobPhase::kFailed, early_exit_failure_);
    return;
  }
  bool waiting = false;
  std::string capacity = CapacityExceeded(now, &waiting);
  if (!capacity.empty()) {
    Finish(JobPhase::kFailed, capacity);
    return;
  }
  if (waiting || now <= stage_deadline_) return;
  if (ready) {
    // Every node is there; the checkpoint catalog is not settled. Commits and downloads
    // end by their own deadlines; the listing is asked again until it answers, so
    // waiting for it is bounded here.
    if (catalog_->Listed() || now <= stage_deadline_ + opts_.agent_connect_timeout_s) return;
    Finish(JobPhase::kFailed, "the committed checkpoints could not be listed in time: " +
                                  catalog_->Waiting() + "; check the agents' logs");
  } else if (!relaunch) {
    Finish(JobPhase::kFailed, "agents did not connect within " +
                                  std::to_string(static_cast<int>(opts_.agent_connect_timeout_s)) +
                                  " s; check the agent binary and the logs in " + opts_.run_dir);
  } else if (!start_error_.empty()) {
    Finish(JobPhase::kFailed, "could not start a replacement node (" +
                                  std::to_string(start_failures_) +
                                  " tries in a row): " + start_error_);
  } else {
    Finish(JobPhase::kFailed, "replacement nodes did not connect in time");
  }
}

void ControllerImpl::Reconcile() {
  double now = clock_->NowWall();
  if (CancelRequested() && stage_ != Stage::kDone) {
    StopAll();
    finish_after_stop_ = true;
    final_phase_ = JobPhase::kCancelled;
    final_message_ = "cancelled by the user";
  }
  RetryCapacityWaits();
  CheckDiagnostics(now);
  switch (stage_) {
    case Stage::kAdopting:
      if (AdoptionSettled() || now > stage_deadline_) FinishAdoption(now);
      break;
    case Stage::kProvisioning:
      ProvisionAndLaunch(now, "launch");
      break;
    case Stage::kRunning:
      SettleNan(now, /*force=*/false);
      if (stage_ != Stage::kRunning) break;
      MaybeAnnounceCadence(now);
      CheckSpontaneousPark(now);
      ReplenishSpares();  // a standby lost while the job runs is restocked now
      PrepareSpares();
      AdvanceUpdate(now);
      MaybeGrow(now);
      MaybeSucceed();
      break;
    case Stage::kDiagnosing:
      if (diag_waiting_.empty() || now > stage_deadline_) FinishDiagnosis();
      break;
    case Stage::kStopping: {
      bool all = true;
      for (auto& [id, n] : nodes_) {
        if (n->slot >= 0 && n->connected() && n->stopped_attempt != attempt_) all = false;
      }
      if (all || now > stage_deadline_) {
        if (finish_after_stop_) {
          Finish(final_phase_, final_message_);
        } else {
          stage_ = Stage::kBackoff;
          stage_deadline_ = std::max(backoff_until_, now) + opts_.agent_connect_timeout_s;
        }
      }
      break;
    }
    case Stage::kBackoff:
      if (now >= backoff_until_) ProvisionAndLaunch(now, "relaunch");
      break;
    case Stage::kDone:
      break;
  }
}

void ControllerImpl::PollOnce(double timeout_s) {
  std::vector<int> fds = {listen_.get()};
  for (auto& p : pending_) fds.push_back(p->fd());
  for (auto& [id, n] : nodes_) {
    if (n->connected()) fds.push_back(n->conn->fd());
  }
  for (auto& [id, n] : nodes_) {
    if (n->adopt_conn) fds.push_back(n->adopt_conn->fd());
  }
  clock_->WaitReadable(fds, timeout_s);
  AcceptAndGreet();
  PumpAdoptions();
  for (auto& [id, n] : nodes_) {
    if (!n->conn || n->lost) continue;
    std::vector<std::string> bad;
    auto msgs = n->conn->Read(&bad);
    for (const auto& b : bad)
      std::fprintf(stderr, "[bulwark] %s sent a bad message: %s\n", id.c_str(), b.c_str());
    for (const auto& m : msgs) {
      if (stage_ == Stage::kAdopting) {  // judged once every candidate has answered
        n->deferred.push_back(m);
        continue;
      }
      HandleAgentMessage(*n, m);
      if (stage_ == Stage::kDone) return;
    }
  }
}

double ControllerImpl::PollTimeout() const {
  constexpr double kIdle = 0.25, kBusy = 0.02;
  const double now = clock_->NowWall();
  double t = kIdle;
  if (stage_ == Stage::kBackoff) t = std::min(t, std::max(kBusy, backoff_until_ - now));
  if (stage_ == Stage::kDiagnosing || stage_ == Stage::kStopping || stage_ == Stage::kAdopting ||
      !held_nans_.empty()) {
    t = kBusy;
  }
  if (stage_ == Stage::kRunning) {
    const double elapsed = now - start_;
    for (size_t i = 0; i < spec_.chaos.size(); ++i) {
      if (!chaos_[i].fired && spec_.chaos[i].at_seconds >= 0) {
        t = std::min(t, std::max(kBusy, spec_.chaos[i].at_seconds - elapsed));
      }
    }
  }
  return t;
}

bool ControllerImpl::RunOnce() {
  if (!started_ || !start_status_.ok() || stage_ == Stage::kDone || detached_) return false;
  if (detach_.load()) {
    // Let go without stopping anything: the agents keep their ranks running until a
    // new controller adopts them (or their orphan timeout ends).
    detached_ = true;
    Event("Detached",
          "the controller let go of the job; its agents keep " +
              std::string(attempt_ >= 0 ? "attempt " + std::to_string(attempt_) + " running"
                                        : "waiting") +
              " for the next controller to adopt them");
    for (auto& [id, n] : nodes_) {
      if (n->conn) {
        IgnoreError(n->conn->Flush(0.5),
                    "best effort before the connection goes; an unsent message is the peer's loss");
      }
      n->conn.reset();
      n->adopt_conn.reset();
    }
    pending_.clear();
    answered_.clear();
    listen_.Reset();
    Persist();
    PublishStatus(true);
    return false;
  }
  PollOnce(PollTimeout());
  if (stage_ != Stage::kDone) {
    CheckHeartbeats();
    ConcludeReplayWhenDue();
    RunChaos();
    DrainCatalog();
    Reconcile();
  }
  TickMetrics(stage_ == Stage::kDone);
  PublishStatus(stage_ == Stage::kDone);
  return stage_ != Stage::kDone;
}

Result<RunResult> ControllerImpl::Run() {
  if (!started_) IgnoreError(Start(), "kept in start_status_, which Run returns");
  if (!start_status_.ok()) return start_status_;
  while (RunOnce()) {
  }
  if (detached_) return Aborted("detached: job " + spec_.name + " left to its agents for adoption");
  Shutdown();
  return result_;
}

void ControllerImpl::Shutdown() {
  std::error_code ec;
  std::filesystem::remove(opts_.run_dir + "/controller.addr", ec);  // nobody listens now
  for (auto& [id, n] : nodes_) {
    if (n->connected()) {
      IgnoreError(n->conn->Flush(1),
                  "best effort before the connection goes; an unsent message is the peer's loss");
    }
  }
  IgnoreError(
      backend_->Teardown(spec_.fault_policy.stop_grace_seconds + 3),
      "the end of the job: Teardown kills and reaps what it can, and nothing is left to tell");
}

void ControllerImpl::TickMetrics(bool force) {
  constexpr double kTickPeriodS = 0.5;
  const double mono = clock_->NowMono();
  if (!force && metrics_tick_at_ >= 0 && mono - metrics_tick_at_ < kTickPeriodS) return;
  metrics_tick_at_ = mono;
  int slots = 0, standbys = 0;
  for (const auto& [id, n] : nodes_) {
    if (n->lost) continue;
    if (n->slot >= 0) ++slots;
    if (n->slot == -1) ++standbys;
  }
  metrics_.SetNodes(slots, standbys);
  metrics_.SetCadence(cadence_ ? cadence_->interval_steps() : spec_.checkpoint.interval_steps);
  const LedgerReport& settled = stage_ == Stage::kDone ? result_.ledger : ledger_.Settled();
  metrics_.Tick(clock_->NowWall(), settled);
  const JobMetricsSnapshot snap = metrics_.Snapshot();
  tb_.OnTick(clock_->NowWall(), snap, settled, force);
  if (stage_ == Stage::kRunning) {
    for (const MetricVerdict& v : metric_faults_.Evaluate(clock_->NowWall(), snap.straggler_score,
                                                          snap.rank_data_wait, snap.tokens_per_s)) {
      OnMetricVerdict(v);
    }
  }
  WriteMetricsTargets();
}

void ControllerImpl::WriteMetricsTargets() {
  if (opts_.metrics_sd_file.empty()) return;
  Json agents = Json::array();
  for (const auto& [id, n] : nodes_) {
    if (n->connected() && n->metrics_port > 0) {
      agents.push_back((n->peer_host.empty() ? "127.0.0.1" : n->peer_host) + ":" +
                       std::to_string(n->metrics_port));
    }
  }
  Json targets = Json::array();
  if (!opts_.metrics_self.empty()) {
    targets.push_back({{"targets", {opts_.metrics_self}},
                       {"labels", {{"bulwark_job", spec_.name}, {"bulwark_role", "controller"}}}});
  }
  if (!agents.empty()) {
    targets.push_back({{"targets", agents},
                       {"labels", {{"bulwark_job", spec_.name}, {"bulwark_role", "agent"}}}});
  }
  std::string text = targets.dump(2) + "\n";
  if (text == metrics_targets_written_) return;
  const std::string tmp = opts_.metrics_sd_file + ".tmp";
  {
    std::ofstream f(tmp, std::ios::trunc);
    f << text;
    if (!f.flush()) {
      if (metrics_targets_written_ != "!") {
        Event("MetricsTargetsFailed",
              "cannot write " + tmp + "; Prometheus will not find " + "the agents");
      }
      metrics_targets_written_ = "!";
      return;
    }
  }
  std::error_code ec;
  std::filesystem::rename(tmp, opts_.metrics_sd_file, ec);
  metrics_targets_written_ = ec ? "!" : text;
}

void ControllerImpl::PublishStatus(bool force) {
  constexpr double kStatusPeriodS = 0.25;
  const double now = clock_->NowMono();
  {
    std::lock_guard<std::mutex> l(status_mu_);
    const bool changed = status_.stage != StageName(stage_) || status_.attempt != attempt_ ||
                         status_.current_step != last_step_ ||
                         status_.last_committed_step != last_committed_step_;
    if (!force && !changed && published_at_ >= 0 && now - published_at_ < kStatusPeriodS) return;
  }
  published_at_ = now;
  ControllerStatus s;
  s.stage = StageName(stage_);
  s.phase = rec_.phase;
  s.attempt = attempt_;
  s.restarts = rec_.restarts;
  s.current_step = last_step_;
  s.last_committed_step = last_committed_step_;
  s.last_committed_tier = last_committed_tier_;
  s.last_committed_time = last_committed_time_;
  s.start_time = start_;
  s.end_time = end_;
  s.slot_nodes = slots_;
  for (const auto& [id, n] : nodes_) {
    if (n->slot == -1 && !n->lost) s.spare_nodes.push_back(id);
  }
  s.ledger = stage_ == Stage::kDone ? result_.ledger : ledger_.Report(clock_->NowWall());
  s.settled = stage_ == Stage::kDone ? result_.ledger : ledger_.Settled();
  s.metrics = metrics_.Snapshot();
  s.incidents = Json(incidents_);
  s.observations = Json(observations_);
  s.committed_steps = committed_;
  s.message = rec_.message;
  s.replay = ReplayReport();
  std::lock_guard<std::mutex> l(status_mu_);
  status_ = std::move(s);
}

ControllerStatus ControllerImpl::Snapshot() const {
  std::lock_guard<std::mutex> l(status_mu_);
  return status_;
}

std::string ControllerImpl::Address() const {
  std::lock_guard<std::mutex> l(status_mu_);
  return address_;
}

}  // namespace bulwark
