// Controller: incidents, hang diagnosis and the recovery decision.
#include <fstream>

#include "common/json_util.h"
#include "controller/controller_impl.h"
#include "controller/hang_localiser.h"
#include "controller/incident_json.h"

namespace bulwark {
namespace {

// How long a rank that parked on its own (a collective failed) waits for the incident
// that explains it (the crash or node loss of a peer) before it is one itself.
constexpr double kParkGraceS = 1.0;
// How long after a crash a node loss may be reported and still be the crash's root. A
// node that dies with its processes (its ranks SIGKILLed, the machine reset) makes its
// peers fail their next collective at once; its agent's connection closes, or the
// backend reports the loss, moments before or after their crash reports arrive.
constexpr double kCascadeWindowS = 2.0;
// How long a NaN waits at most for the reports of every rank up to the step before it
// (HoldNan): they come within a step time or two unless a node's reports stall.
constexpr double kNanSettleS = 2.0;

}  // namespace

void ControllerImpl::OnFault(const Incident& inc, Json extra) {
  spontaneous_park_at_ = -1;  // this incident explains any rank that parked on its own
  if (stage_ == Stage::kRunning && inc.kind == FaultKind::kNan && inc.subtype == "nan" &&
      inc.step >= 0 && spec_.world_size() > 1) {
    HoldNan(inc, std::move(extra));
    return;
  }
  SettleNan(clock_->NowWall(), /*force=*/true);  // a NaN held happened before this fault
  if (stage_ == Stage::kDiagnosing) {
    MergeDiagnosis(inc.node, extra);  // another node's report of the same hang
    Json j = IncidentToJson(inc);
    j["attempt"] = attempt_;
    j["secondary"] = true;
    StoreWrote(store_->AddIncident(spec_.name, attempt_, j.dump()).status());
    return;
  }
  if (stage_ == Stage::kRunning && inc.kind == FaultKind::kHang) {
    BeginDiagnosis(inc, extra);
    return;
  }
  Act(inc, std::move(extra));
}

void ControllerImpl::BeginDiagnosis(const Incident& inc, const Json& extra) {
  diag_incident_ = inc;
  diag_extra_ = extra;
  diag_stacks_.clear();
  diag_stopped_.clear();
  diag_waiting_.clear();
  MergeDiagnosis(inc.node, extra);
  for (int s = 0; s < spec_.nodes; ++s) {
    auto it = nodes_.find(slots_[s]);
    if (s == inc.node || it == nodes_.end() || !it->second->connected()) continue;
    IgnoreError(it->second->conn->Send(Json{{"type", "capture_stacks"}, {"attempt", attempt_}}),
                "a failed send closes the connection; the loop handles the peer's loss");
    diag_waiting_.insert(s);
  }
  stage_ = Stage::kDiagnosing;
  // Agents capture within their stack budget (1.8 s); a silent one is not waited for.
  stage_deadline_ = clock_->NowWall() + 3;
  Event("Diagnosing", "hang reported on node slot " + std::to_string(inc.node) +
                          "; collecting every rank's stack before stopping");
}

void ControllerImpl::MergeDiagnosis(int slot, const Json& msg) {
  diag_waiting_.erase(slot);
  if (!msg.is_object()) return;
  if (msg.contains("stacks") && msg["stacks"].is_object()) {
    for (auto it = msg["stacks"].begin(); it != msg["stacks"].end(); ++it) {
      int rank = std::atoi(it.key().c_str());
      if (it.value().is_string()) diag_stacks_[rank] = it.value().get<std::string>();
    }
  }
  if (msg.contains("stopped") && msg["stopped"].is_array()) {
    for (const auto& r : msg["stopped"]) {
      if (r.is_number_integer()) diag_stopped_.insert(r.get<int>());
    }
  }
}

void ControllerImpl::FinishDiagnosis() {
  Incident inc = diag_incident_;
  HangVerdict v = LocaliseHang(diag_stacks_, diag_stopped_);
  if (v.culprit >= 0) {
    inc.rank = v.culprit;
    inc.node = v.culprit / spec_.procs_per_node;
  }
  inc.detail += "; localised: " + v.reason;
  Json extra = diag_extra_.is_object() ? diag_extra_ : Json::object();
  Json all = Json::object();
  for (const auto& [rank, text] : diag_stacks_) all[std::to_string(rank)] = text;
  extra["stacks"] = all;
  Event("HangLocalised", v.reason);
  stage_ = Stage::kRunning;
  Act(inc, extra);
}

void ControllerImpl::OnMetricVerdict(const MetricVerdict& v) {
  const double now = clock_->NowWall();
  const int node = v.rank >= 0 ? v.rank / spec_.procs_per_node : -1;
  const std::string node_id =
      node >= 0 && node < static_cast<int>(slots_.size()) ? slots_[node] : std::string();
  if (v.kind == "loss_spike" && spec_.monitoring.loss_spike_rollback) {
    Incident inc;
    inc.kind = FaultKind::kNan;  // rolled back past and skipped like a NaN (PaLM)
    inc.subtype = "loss_spike";
    inc.rank = v.rank;
    inc.node = node;
    inc.step = v.step;
    inc.fault_time = inc.detect_time = now;
    inc.detail = v.evidence;
    OnFault(inc, Json::object());
    return;
  }
  std::string action = "observe", reason;
  bool test = false;  // the straggler's node is tested in place (controller_link.cc)
  if (v.kind == "straggler") {
    test = StragglerTest(node, v.value, &reason);
    if (test) action = "test_in_place";
    if (!test) {
      reason += "; the job continues at the straggler's pace; its node " + node_id +
                " is named so it can be drained (`bulwark chaos kill_agent --node " +
                std::to_string(node) + "` moves the job to a standby)";
    }
  } else if (v.kind == "throughput_collapse") {
    reason =
        "no rank is singled out and nothing crashed: look at the input pipeline, "
        "storage, the network and co-located work; the job continues";
  } else if (v.kind == "data_starvation") {
    reason =
        "the input pipeline, not the model, sets the pace: more data-loader workers, "
        "prefetching or faster storage; a restart would not help";
  } else {
    reason =
        "recorded and alerted; set monitoring.lossSpikeRollback: true to roll back to "
        "the checkpoint before it and skip the batches";
  }
  Json j = {{"kind", v.kind},
            {"rank", v.rank},
            {"node", node},
            {"node_id", node_id},
            {"step", v.step >= 0 ? v.step : last_step_},
            {"value", v.value},
            {"reference", v.reference},
            {"detail", v.evidence},
            {"detect_time", now},
            {"attempt", attempt_},
            {"observation", true},
            {"decision", {{"action", action}, {"reason", reason}}}};
  for (size_t i = 0; i < chaos_.size(); ++i) {  // the chaos injection it found, if any
    const ChaosFault& f = spec_.chaos[i];
    const bool match = ((f.kind == ChaosKind::kSlowRank || f.kind == ChaosKind::kSlowLink) &&
                        v.kind == "straggler") ||
                       (f.kind == ChaosKind::kSlowData && v.kind == "data_starvation") ||
                       (f.kind == ChaosKind::kLossSpike && v.kind == "loss_spike");
    if (match && chaos_[i].fired && chaos_[i].incident.empty() &&
        (f.rank == v.rank || v.kind == "loss_spike")) {
      chaos_[i].incident = v.kind;
      chaos_[i].detected_at = now;
      j["chaos"] = ChaosKindName(f.kind);
      j["since_injection_s"] = now - chaos_[i].fired_at;
    }
  }
  observations_.push_back(j);
  if (test) StartInPlaceDiagnostics(node, static_cast<int>(observations_.size()) - 1);
  StoreWrote(store_->AddIncident(spec_.name, attempt_, j.dump()).status());
  metrics_.OnIncident(v.kind);
  const char* reason_name = v.kind == "straggler"             ? "StragglerDetected"
                            : v.kind == "data_starvation"     ? "DataStarvation"
                            : v.kind == "throughput_collapse" ? "ThroughputCollapse"
                                                              : "LossSpike";
  Event(reason_name, v.evidence + (node_id.empty() ? "" : " (node " + node_id + ")") + "; " +
                         action + ": " + reason);
  tb_.OnIncident(j["step"].get<long>(), now,
                 "**" + v.kind + "** rank " + std::to_string(v.rank) + ": " + v.evidence + "\n\n*" +
                     action + "*: " + reason);
}

void ControllerImpl::Act(const Incident& fault, Json extra) {
  if (stage_ == Stage::kRunning && RollBackFailedUpdate(fault, extra)) return;
  Incident inc = fault;
  // A rank that died before reporting a step of this attempt died in the step after the
  // one the attempt resumed from.
  if (inc.kind == FaultKind::kCrash && inc.step < 0 && attempt_resume_ >= 0) {
    inc.step = attempt_resume_;
  }
  if (stage_ == Stage::kRunning) ConcludeReplayWith(&inc);  // may set inc.cause
  double now = clock_->NowWall();
  Json j = IncidentToJson(inc);
  j["attempt"] = attempt_;
  if (inc.node >= 0 && inc.node < static_cast<int>(slots_.size())) j["node_id"] = slots_[inc.node];
  for (const char* k : {"stacks", "log_tail"}) {
    if (extra.is_object() && extra.contains(k)) j[k] = extra[k];
  }
  // Attribute the fault to a chaos injection into this attempt, if any.
  for (size_t i = 0; i < chaos_.size(); ++i) {
    const ChaosKind ck = spec_.chaos[i].kind;
    if (ck == ChaosKind::kSlowRank || ck == ChaosKind::kSlowData || ck == ChaosKind::kSlowLink ||
        (ck == ChaosKind::kLossSpike && inc.subtype != "loss_spike")) {
      continue;  // found from the metrics (OnMetricVerdict), not as this fault
    }
    if (chaos_[i].fired && chaos_[i].attempt == attempt_ && chaos_[i].incident.empty()) {
      chaos_[i].incident = FaultKindName(inc.kind);
      chaos_[i].detected_at = inc.detect_time;
      j["chaos"] = ChaosKindName(spec_.chaos[i].kind);
      j["since_injection_s"] = inc.detect_time - chaos_[i].fired_at;
    }
  }
  // Stacks from every agent's report of this attempt go into one file, so a hang's
  // file holds every rank of the job: the blocked peers and the culprit alike.
  if (extra.is_object() && extra.contains("stacks") && extra["stacks"].is_object() &&
      !extra["stacks"].empty()) {
    std::string path =
        opts_.run_dir + "/logs/hang-attempt-" + std::to_string(attempt_) + "-stacks.txt";
    std::ofstream f(path, std::ios::app);
    std::string ranks;
    for (auto it = extra["stacks"].begin(); it != extra["stacks"].end(); ++it) {
      f << "===== rank " << it.key() << " =====\n"
        << (it.value().is_string() ? it.value().get<std::string>() : it.value().dump()) << "\n";
      ranks += (ranks.empty() ? "" : ",") + it.key();
    }
    j["stacks_file"] = path;
    Event("StacksCaptured", "stacks of ranks " + ranks + " stored in " + path);
  }
  if (stage_ != Stage::kRunning) {
    if (RecastAsRoot(inc, j)) return;
    // A consequence of a fault already being handled (peers of a crashed rank fail too).
    j["secondary"] = true;
    StoreWrote(store_->AddIncident(spec_.name, attempt_, j.dump()).status());
    return;
  }
  history_.spares_available = SparesReady();
  history_.memory_tier = spec_.checkpoint.memory_slots > 0;
  history_.restarts_used = rec_.restarts;
  Decision d = policy_.Decide(inc, history_, now);
  const Json diagnosis = PlanDiagnosis(inc, &d);  // may turn d into replacing the node
  RegroupInput ri;
  ri.enabled = spec_.fault_policy.in_process_restart;
  ri.world_size = spec_.world_size();
  ri.procs_per_node = spec_.procs_per_node;
  ri.capable = in_process_ranks_;
  ri.dead = dead_ranks_;
  if (inc.kind == FaultKind::kHang) ri.stopped = diag_stopped_;
  regroup_ = PlanRegroup(inc, d, ri);
  ledger_.OnFault(inc, ActionName(d.action));
  history_.incidents.push_back(inc);
  history_.progress_at_incident.push_back(high_water_);
  history_.consecutive_failures++;
  j["decision"] = {{"action", ActionName(d.action)},
                   {"backoff_s", d.backoff_seconds},
                   {"resume_step_max", d.resume_step_max},
                   {"reason", d.reason}};
  j["detection_s"] = inc.detect_time - inc.fault_time;
  if (!diagnosis.is_null()) j["diagnosis"] = diagnosis;
  if (inc.cause != FaultCause::kUnknown) {
    j["classification"] = {
        {"cause", FaultCauseName(inc.cause)},
        {"evidence", inc.cause_evidence},
        {"action", d.action == Action::kGiveUp ? "gave up: restarting cannot help"
                                               : "the data batches are skipped"}};
  }
  j["replay"] = ReplayBundle(inc);
  if (d.action != Action::kGiveUp) {
    j["processes"] = {{"in_process", regroup_.in_process},
                      {"keep", regroup_.keep},
                      {"replace", regroup_.replace},
                      {"reason", regroup_.reason}};
  }
  RecordIncident(j);
  BeginReplayCheck(inc, d, static_cast<int>(incidents_.size()) - 1);
  metrics_.OnIncident(MetricsIncidentKind(inc));
  std::string what = std::string(FaultKindName(inc.kind)) +
                     (inc.subtype.empty() ? "" : " (" + inc.subtype + ")") +
                     (inc.rank >= 0 ? " on rank " + std::to_string(inc.rank) : "") +
                     (inc.node >= 0 ? " on node slot " + std::to_string(inc.node) : "");
  Event("FaultDetected", what + ": " + inc.detail);
  Event("Decision", std::string(ActionName(d.action)) + ": " + d.reason +
                        (d.action == Action::kGiveUp ? "" : "; " + regroup_.reason));
  tb_.OnIncident(inc.step, now,
                 "**" + what + "**: " + inc.detail + "\n\n*" + ActionName(d.action) + "*: " +
                     d.reason + (d.action == Action::kGiveUp ? "" : "; " + regroup_.reason));
  decision_ = d;
  if (d.action == Action::kGiveUp) {
    finish_after_stop_ = true;
    final_phase_ = JobPhase::kFailed;
    final_message_ = d.reason;
  } else {
    rec_.restarts++;
    metrics_.OnRestart();
    metric_faults_.OnRestart();
    rec_.phase = JobPhase::kRestarting;
    if (d.action == Action::kReplaceNode && d.replace_node >= 0 && d.replace_node < spec_.nodes) {
      auto it = nodes_.find(slots_[d.replace_node]);
      if (it != nodes_.end()) it->second->retire = true;
    }
  }
  rec_.message = d.reason;
  backoff_until_ = inc.detect_time + d.backoff_seconds;
  StopAll(d.action != Action::kGiveUp && regroup_.in_process);
  Persist();
}

bool ControllerImpl::RecastAsRoot(const Incident& inc, Json j) {
  if (inc.kind != FaultKind::kNodeLost || inc.node < 0) return false;
  if (stage_ != Stage::kStopping && stage_ != Stage::kBackoff) return false;
  if (incidents_.empty() || history_.incidents.empty()) return false;
  const int idx = static_cast<int>(incidents_.size()) - 1;
  const Json crash_json = incidents_[idx];
  const Incident crash = history_.incidents.back();
  const std::string action = crash_json.contains("decision") && crash_json["decision"].is_object()
                                 ? crash_json["decision"].value("action", "")
                                 : "";
  if (crash.kind != FaultKind::kCrash || crash_json.value("kind", "") != "crash" ||
      crash_json.value("attempt", -1) != attempt_ ||
      crash_json.value("detect_time", -1.0) != crash.detect_time || action.empty() ||
      action == ActionName(Action::kGiveUp) ||
      inc.detect_time - crash.detect_time > kCascadeWindowS) {
    return false;
  }
  const std::string node_id = j.value("node_id", "slot " + std::to_string(inc.node));
  const std::string crashed = "rank " + std::to_string(crash.rank) + " (" +
                              (crash.subtype.empty() ? "crash" : crash.subtype) + ", node slot " +
                              std::to_string(crash.node) + ")";
  const std::string why =
      Fmt("%s was lost %.2f s after %s crashed: the crash followed from the loss", node_id.c_str(),
          inc.detect_time - crash.detect_time, crashed.c_str());
  // The node loss takes the crash's place: its decision (the stop is under way; the
  // relaunch fills the lost node's slot with another node), processes and diagnosis.
  Json d = crash_json["decision"];
  d["action"] = ActionName(Action::kReplaceNode);
  d["reason"] = why + "; its slot is filled by another node at the relaunch";
  j["decision"] = d;
  for (const char* k : {"processes", "diagnosis", "detection_s", "chaos", "since_injection_s"}) {
    if (crash_json.contains(k)) j[k] = crash_json[k];
  }
  j["cascade"] = Json::array({{{"kind", "crash"},
                               {"subtype", crash.subtype},
                               {"rank", crash.rank},
                               {"node", crash.node},
                               {"detect_time", crash.detect_time},
                               {"detail", crash.detail}}});
  incidents_[idx] = j;
  RewriteIncident(idx);
  if (replay_incident_ == idx) {  // a re-run cannot tell anything about a node's loss
    replay_.reset();
    replay_incident_ = -1;
  }
  // The crash stays on record, as a consequence.
  Json consequence = crash_json;
  for (const char* k : {"decision", "processes", "diagnosis", "replay"}) consequence.erase(k);
  consequence["secondary"] = true;
  consequence["caused_by"] = "node_lost: " + node_id;
  StoreWrote(store_->AddIncident(spec_.name, attempt_, consequence.dump()).status());
  history_.incidents.back() = inc;
  ledger_.RecastLastFault(inc, ActionName(Action::kReplaceNode));
  metrics_.OnIncident(MetricsIncidentKind(inc));
  for (ChaosState& c : chaos_) {
    if (c.fired && c.attempt == attempt_ && c.incident == FaultKindName(FaultKind::kCrash)) {
      c.incident = FaultKindName(FaultKind::kNodeLost);
    }
  }
  rec_.message = d["reason"];
  Event("RootCause", why + "; incident " + std::to_string(idx + 1) + " is the node loss");
  Persist();
  return true;
}

void ControllerImpl::StopAll(bool park) {
  Json stop = {
      {"type", "stop"}, {"attempt", attempt_}, {"grace_s", spec_.fault_policy.stop_grace_seconds}};
  if (park) {
    stop["park"] = true;
    stop["kill"] = regroup_.replace;
    stop["park_timeout_s"] = spec_.fault_policy.park_timeout_seconds;
  }
  for (auto& [id, n] : nodes_) {
    if (n->slot >= 0 && n->connected()) {
      IgnoreError(n->conn->Send(stop),
                  "a failed send closes the connection; the loop handles the peer's loss");
    }
  }
  stage_ = Stage::kStopping;
  const double wait =
      park ? spec_.fault_policy.park_timeout_seconds : spec_.fault_policy.stop_grace_seconds;
  stage_deadline_ = clock_->NowWall() + wait + 10;
}

void ControllerImpl::OnSpontaneousPark(const Node& n, const Json& m) {
  if (stage_ != Stage::kRunning || spontaneous_park_at_ >= 0) return;
  auto rank = JIntOr(m, "rank", -1);
  auto error = JStrOr(m, "error", "");
  spontaneous_park_at_ = clock_->NowWall();
  spontaneous_park_rank_ = rank.ok() ? static_cast<int>(*rank) : -1;
  spontaneous_park_node_ = n.slot;
  spontaneous_park_error_ = error.ok() ? *error : "";
}

void ControllerImpl::CheckSpontaneousPark(double now) {
  if (spontaneous_park_at_ < 0 || stage_ != Stage::kRunning) return;
  if (now - spontaneous_park_at_ < kParkGraceS) return;
  Incident inc;
  inc.kind = FaultKind::kCrash;
  inc.subtype = kCollectiveErrorSubtype;
  inc.rank = spontaneous_park_rank_;
  inc.node = spontaneous_park_node_;
  inc.step = last_step_;
  inc.fault_time = spontaneous_park_at_;
  inc.detect_time = now;
  inc.detail = "rank " + std::to_string(inc.rank) + " left its generation on its own (" +
               spontaneous_park_error_ + ") and no other fault was reported within 1 s";
  OnFault(inc, Json::object());
}

void ControllerImpl::HoldNan(const Incident& inc, Json extra) {
  if (inc.rank >= 0) nan_ranks_.insert(inc.rank);
  if (held_nans_.empty()) held_nan_until_ = clock_->NowWall() + kNanSettleS;
  held_nans_.emplace_back(inc, std::move(extra));
  SettleNan(clock_->NowWall(), /*force=*/false);
}

void ControllerImpl::SettleNan(double now, bool force) {
  if (held_nans_.empty()) return;
  size_t first = 0;
  for (size_t i = 1; i < held_nans_.size(); ++i) {
    if (held_nans_[i].first.step < held_nans_[first].first.step) first = i;
  }
  if (!force && now < held_nan_until_) {
    const long before = held_nans_[first].first.step - 1;
    for (const auto& [rank, step] : nan_report_step_) {
      if (step <= before) return;  // an earlier NaN's incident is on its way
    }
    for (int r = 0; r < spec_.world_size(); ++r) {
      if (nan_ranks_.count(r) || dead_ranks_.count(r)) continue;
      auto it = forwarded_step_.find(r);
      if (it == forwarded_step_.end() || it->second < before) return;  // may still come
    }
  }
  std::vector<std::pair<Incident, Json>> held = std::move(held_nans_);
  held_nans_.clear();
  Act(held[first].first, std::move(held[first].second));
  for (size_t i = 0; i < held.size(); ++i) {
    // Recorded as secondaries of the first once its recovery is under way.
    if (i != first && stage_ != Stage::kRunning) Act(held[i].first, std::move(held[i].second));
  }
}

void ControllerImpl::RecordProcesses(const Json& started) {
  if (!started.contains("ranks") || !started["ranks"].is_array()) return;
  bool changed = false;
  for (const Json& r : started["ranks"]) {
    auto rank = JIntOr(r, "rank", -1);
    auto pid = JIntOr(r, "pid", 0);
    auto how = JStrOr(r, "how", "spawned");
    if (!rank.ok() || !pid.ok() || *rank < 0) continue;
    rank_pids_[static_cast<int>(*rank)] = static_cast<int>(*pid);
    if (r.contains("in_process") && r["in_process"] == true) {
      in_process_ranks_.insert(static_cast<int>(*rank));
    }
    if (regroup_attempt_ != attempt_ || incidents_.empty()) continue;
    Json& procs = incidents_.back()["processes"];
    if (!procs.is_object()) continue;
    const int old = prev_pids_.count(*rank) ? prev_pids_[static_cast<int>(*rank)] : 0;
    Json entry = {{"rank", *rank}, {"pid", *pid}, {"how", how.ok() ? *how : "spawned"}};
    if (how.ok() && *how == "kept") {
      procs["kept_pids"].push_back(entry);
    } else {
      entry["old_pid"] = old;
      procs["replaced_pids"].push_back(entry);
    }
    changed = true;
  }
  if (changed) RewriteIncident(static_cast<int>(incidents_.size()) - 1);
}

void ControllerImpl::PrepareSpares() {
  if (spec_.fault_policy.WarmRanks(spec_.procs_per_node) <= 0 || high_water_ < 0) return;
  for (auto& [id, n] : nodes_) {
    if (n->slot != -1 || n->prepared || !n->connected()) continue;
    SendPrepare(*n, spec_, CodeVersion());
  }
}

void ControllerImpl::SendPrepare(Node& n, const JobSpec& code, const std::string& version) {
  std::vector<std::string> command = code.command;
  command.insert(command.end(), code.args.begin(), code.args.end());
  IgnoreError(n.conn->Send(Json{{"type", "prepare"},
                                {"command", command},
                                {"env", code.env},
                                {"workdir", code.workdir},
                                {"warm_ranks", code.fault_policy.WarmRanks(code.procs_per_node)},
                                {"nproc_per_node", code.procs_per_node},
                                {"version", version}}),
              "a failed send closes the connection; the loop handles the peer's loss");
  n.prepared = true;
}

}  // namespace bulwark
