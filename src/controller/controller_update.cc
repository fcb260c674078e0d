// Controller: code updates of a running job (`bulwark update`, an edited TrainJob).
//
// An update changes only what PlanJobUpdate allows in place (command, args, env,
// workdir). Its life (docs/job-spec.md, "Updating a running job"):
//   1. requested: validated against the running spec (refused with the field and why,
//      or because the job is not running or another update is in progress); every
//      agent gets `prepare` with the new code's version "v<N>", so its warm ranks are
//      made again for the new code while the old code keeps training;
//   2. preparing: once every slot's agent reports as many warm ranks of the new
//      version as it runs ranks (or after kPrepareWaitS), the code switches: every rank
//      leaves at its next step boundary (a park; those not under bulwark.run are
//      stopped), the next generation runs the new code from warm ranks, resuming from
//      the step just finished. The ledger charges the switch to restart and reinit,
//      to no incident (EttrLedger::OnPlannedRestart);
//   3. verifying: after verify_steps new steps the update is kept (UpdateSucceeded, the
//      store's spec becomes the new one). A fault before that rolls it back
//      (UpdateFailed with the fault and the rank's last log lines): the previous code
//      runs again, started at once; the fault costs no restart of the budget and does
//      not count as a repeat of anything — a broken update never fails the job.
#include <algorithm>

#include "common/json_util.h"
#include "controller/controller_impl.h"
#include "controller/incident_json.h"
#include "spec/job_update.h"

namespace bulwark {
namespace {

// How long an update waits for warm ranks of the new code before it switches anyway
// (the new ranks then start cold).
constexpr double kPrepareWaitS = 60;

void ApplyCode(const JobSpec& from, JobSpec* to) {
  to->command = from.command;
  to->args = from.args;
  to->env = from.env;
  to->workdir = from.workdir;
}

// The last lines of a rank's output from an incident, for an event.
std::string TailOf(const Json& extra, size_t lines) {
  auto tail = JStrOr(extra, "log_tail", "");
  if (!tail.ok() || tail->empty()) return "";
  std::string t = *tail;
  while (!t.empty() && t.back() == '\n') t.pop_back();
  size_t pos = t.size();
  for (size_t i = 0; i < lines && pos != std::string::npos && pos > 0; ++i) {
    pos = t.rfind('\n', pos - 1);
  }
  return pos == std::string::npos ? t : t.substr(pos + 1);
}

}  // namespace

bool ControllerImpl::BeginUpdate(const JobSpec& next, int verify_steps, std::string* reply) {
  if (stage_ != Stage::kRunning) {
    *reply = std::string("the job is not running (stage ") + StageName(stage_) +
             "); send the update again once it runs";
    return false;
  }
  if (update_.phase != UpdateState::Phase::kNone) {
    *reply = "update " + std::to_string(update_.number) + " (" + update_.fields +
             ") is still being applied; send this one once it succeeded or was rolled back";
    return false;
  }
  Result<JobUpdate> plan = PlanJobUpdate(spec_, next);
  if (!plan.ok()) {
    *reply = plan.status().message();
    return false;
  }
  const double now = clock_->NowWall();
  update_ = UpdateState{};
  update_.phase = UpdateState::Phase::kPreparing;
  update_.number = static_cast<int>(updates_log_.size()) + 1;
  update_.next = next;
  update_.previous = spec_;
  update_.fields = plan->Describe();
  update_.verify_steps = std::max(1, verify_steps);
  update_.requested_at = now;
  update_.deadline = now + kPrepareWaitS;
  update_.log_index = updates_log_.size();
  updates_log_.push_back({{"number", update_.number},
                          {"fields", update_.fields},
                          {"requested_at_s", now - start_},
                          {"from_step", high_water_},
                          {"verify_steps", update_.verify_steps},
                          {"result", "preparing"}});
  // The agents warm rank processes of the new code while the old code trains on.
  for (auto& [id, n] : nodes_) {
    if (n->connected()) SendPrepare(*n, next, CodeVersion(1));
  }
  *reply = "update " + std::to_string(update_.number) + " accepted (" + update_.fields +
           "): warming rank processes with the new code, then switching at a step boundary";
  Event("UpdateRequested", *reply);
  return true;
}

void ControllerImpl::HandleUpdateRequest(JsonLineConn& c, const Json& m) {
  Json reply = {{"type", "reply"}, {"ok", false}};
  auto yaml = JStr(m, "spec_yaml");
  auto base = JStrOr(m, "base_dir", "");
  auto verify = JIntOr(m, "verify_steps", 20);
  std::string text;
  if (!yaml.ok() || !base.ok() || !verify.ok()) {
    reply["code"] = "INVALID_ARGUMENT";
    text = (!yaml.ok() ? yaml.status() : !base.ok() ? base.status() : verify.status()).message();
  } else if (auto next = ParseJobSpec(*yaml, "update", *base); !next.ok()) {
    reply["code"] = "INVALID_ARGUMENT";
    text = "the updated spec is not valid:\n" + next.status().message();
  } else if (BeginUpdate(*next, static_cast<int>(*verify), &text)) {
    reply["ok"] = true;
    update_.yaml = *yaml;
  } else {
    reply["code"] =
        text.rfind("update refused", 0) == 0 ? "INVALID_ARGUMENT" : "FAILED_PRECONDITION";
    Event("UpdateRefused", text);
  }
  reply["message"] = text;
  IgnoreError(c.Send(reply),
              "a failed send closes the connection; the loop handles the peer's loss");
  IgnoreError(c.Flush(1),
              "best effort before the connection goes; an unsent message is the peer's loss");
}

void ControllerImpl::AdvanceUpdate(double now) {
  std::optional<std::pair<JobSpec, int>> asked;
  {
    std::lock_guard<std::mutex> l(status_mu_);
    asked.swap(update_request_);
  }
  std::string why;
  if (asked && !BeginUpdate(asked->first, asked->second, &why)) Event("UpdateRefused", why);
  if (update_.phase == UpdateState::Phase::kPreparing) {
    // Switch once every slot's agent holds warm ranks of the new code for its ranks.
    const int want =
        std::min(spec_.procs_per_node, spec_.fault_policy.WarmRanks(spec_.procs_per_node));
    bool warm = true;
    for (int s = 0; s < spec_.nodes; ++s) {
      auto it = nodes_.find(slots_[s]);
      if (it == nodes_.end() || !it->second->connected()) continue;
      const Node& n = *it->second;
      warm = warm && n.warm_version == CodeVersion(1) && n.warm_ready >= want;
    }
    if (!warm && now < update_.deadline) return;
    ApplyCode(update_.next, &spec_);
    ++code_version_;
    SwitchCode(/*planned=*/true);
  } else if (update_.phase == UpdateState::Phase::kVerifying &&
             high_water_ >= update_.base_step + update_.verify_steps) {
    update_.phase = UpdateState::Phase::kNone;
    Json& e = updates_log_[update_.log_index];
    e["result"] = "succeeded";
    e["verified_at_step"] = high_water_;
    if (!update_.yaml.empty()) rec_.spec_yaml = update_.yaml;
    Persist();
    Event("UpdateSucceeded", "update " + std::to_string(update_.number) + " (" + update_.fields +
                                 ") made " + std::to_string(update_.verify_steps) +
                                 " new steps; it is kept");
  }
}

void ControllerImpl::OnCodeLaunched(long resume) {
  if (update_.phase != UpdateState::Phase::kSwitching) return;
  code_digest_.clear();  // other code runs now: replay bundles name its digest
  DigestCodeOnce();
  Json& e = updates_log_[update_.log_index];
  if (update_.rollback) {
    update_.phase = UpdateState::Phase::kNone;
    e["rolled_back_at_s"] = clock_->NowWall() - start_;
    Event("UpdateRolledBack", "the previous code runs again (attempt " + std::to_string(attempt_) +
                                  ", resuming after step " + std::to_string(resume) + ")");
    return;
  }
  update_.phase = UpdateState::Phase::kVerifying;
  update_.base_step = high_water_;
  e["applied_at_s"] = clock_->NowWall() - start_;
  e["result"] = "verifying";
  Event("UpdateApplied", "update " + std::to_string(update_.number) + " (" + update_.fields +
                             ") runs in attempt " + std::to_string(attempt_) +
                             ", resuming after step " + std::to_string(resume) + "; kept after " +
                             std::to_string(update_.verify_steps) +
                             " new steps, rolled back if it fails before");
}

void ControllerImpl::SwitchCode(bool planned) {
  const double now = clock_->NowWall();
  update_.phase = UpdateState::Phase::kSwitching;
  updates_log_[update_.log_index][update_.rollback ? "rollback_at_s" : "switch_at_s"] =
      now - start_;
  if (planned) ledger_.OnPlannedRestart(now);
  // Every rank leaves at its next step boundary (a park) when all run under bulwark.run;
  // the parked processes run the old code, so the agents replace them all. A rollback
  // stops the new code's ranks outright.
  regroup_ = RegroupPlan{};
  bool all_capable = true;
  for (int r = 0; r < spec_.world_size(); ++r)
    all_capable = all_capable && in_process_ranks_.count(r);
  regroup_.in_process = all_capable && planned;
  backoff_until_ = now;
  decision_ = Decision{};
  StopAll(regroup_.in_process);
}

bool ControllerImpl::RollBackFailedUpdate(const Incident& inc, const Json& extra) {
  if (update_.phase != UpdateState::Phase::kVerifying) return false;
  const long made = std::max(0L, high_water_ - update_.base_step);
  const std::string what =
      std::string(FaultKindName(inc.kind)) + (inc.subtype.empty() ? "" : " (" + inc.subtype + ")") +
      (inc.rank >= 0 ? " on rank " + std::to_string(inc.rank) : "") + ": " + inc.detail;
  const std::string tail = TailOf(extra, 4);
  const std::string reason = "update " + std::to_string(update_.number) + " (" + update_.fields +
                             ") failed after " + std::to_string(made) + " new step(s): " + what +
                             (tail.empty() ? "" : "; its last output: " + tail) +
                             "; rolling back to the previous code";
  Json j = IncidentToJson(inc);
  j["attempt"] = attempt_;
  j["decision"] = {{"action", "rollback_update"}, {"backoff_s", 0}, {"reason", reason}};
  j["detection_s"] = inc.detect_time - inc.fault_time;
  if (extra.is_object() && extra.contains("log_tail")) j["log_tail"] = extra["log_tail"];
  RecordIncident(j);
  ledger_.OnFault(inc, "rollback_update");
  Json& e = updates_log_[update_.log_index];
  e["result"] = "rolled back";
  e["failure"] = what;
  Event("FaultDetected", what);
  Event("UpdateFailed", reason);
  ApplyCode(update_.previous, &spec_);
  ++code_version_;  // the restored code gets a version of its own: no pool holds it
  update_.rollback = true;
  for (auto& [id, n] : nodes_) {
    if (n->connected()) SendPrepare(*n, spec_, CodeVersion());
  }
  SwitchCode(/*planned=*/false);
  return true;
}

}  // namespace bulwark
