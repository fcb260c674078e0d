// Controller: stop-diagnose (docs/diagnosis.md). An incident whose cause may be the
// machine (policy/diagnosis_policy.h) sends its node to its checks once its ranks are
// stopped:
//   * a warm standby is ready: the standby takes the node's slot and the job relaunches
//     at once; the node, out of the job (kSlotTesting), runs its checks meanwhile and
//     costs the job nothing;
//   * none is ready: the node keeps its slot and the relaunch waits for the verdict
//     (the ledger's `diagnosis` time).
// Healthy, the node rejoins: a warm standby again, or the relaunch proceeds on it.
// Unhealthy (a check failed, no answer by the deadline, or the node was lost while it
// was tested), it is quarantined through the backend (Backend::QuarantineNode),
// released and replaced. The verdict, its evidence and the action go into the incident's
// `diagnosis` record, the events and the report.
#include <algorithm>
#include <cstdio>

#include "common/json_util.h"
#include "controller/controller_impl.h"
#include "policy/diagnosis_policy.h"
#include "policy/link_policy.h"

namespace bulwark {
namespace {

constexpr double kCheckBudgetS = 20;  // per check; a hung check fails at its budget
constexpr double kReplySlackS = 5;    // beyond the sum of the budgets

std::string Seconds(double s) {
  char b[32];
  std::snprintf(b, sizeof b, "%.1f", s);
  return b;
}

}  // namespace

Json ControllerImpl::PlanDiagnosis(const Incident& inc, Decision* d) {
  if (inc.node < 0 || inc.node >= static_cast<int>(slots_.size())) return Json();
  auto it = nodes_.find(slots_[inc.node]);
  if (it == nodes_.end()) return Json();
  Node& n = *it->second;
  int earlier = 0;  // this machine's earlier incidents (not NaNs, not node losses)
  for (const Json& j : incidents_) {
    const std::string kind = j.value("kind", "");
    if (j.value("node_id", "") == n.id && kind != "nan" && kind != "node_lost") ++earlier;
  }
  DiagnosisDecision dd = ShouldDiagnose(inc, earlier, *d);
  if (dd.run && !spec_.fault_policy.diagnose_suspect_nodes) {
    return Json{{"run", false},
                {"reason", dd.reason + "; not tested: faultPolicy.diagnoseSuspectNodes is false"}};
  }
  if (!dd.run) {
    return dd.reason.empty() ? Json() : Json{{"run", false}, {"reason", dd.reason}};
  }
  Json rec = {{"run", true}, {"node_id", n.id}, {"reason", dd.reason}, {"state", "pending"}};
  if (!n.connected() || n.diagnose_pending || n.diagnosing) {
    rec["run"] = false;
    rec["reason"] = dd.reason + "; not tested: " +
                    (n.connected() ? "its diagnostics already run" : "its agent is not connected");
    return rec;
  }
  n.diagnose_pending = true;
  n.diagnose_incident = static_cast<int>(incidents_.size());  // Act appends it next
  n.diagnose_observation = -1;
  n.diagnose_in_place = false;
  n.diagnose_link = WantsLinkCheck(inc);
  const std::string slot = std::to_string(inc.node);
  if (d->action == Action::kReplaceNode || SparesReady() > 0) {
    if (d->action != Action::kReplaceNode) {
      d->action = Action::kReplaceNode;
      d->replace_node = inc.node;
    }
    rec["while"] = "a warm standby takes slot " + slot;
    d->reason += "; " + n.id + " leaves slot " + slot + " for a warm standby and is tested " +
                 "meanwhile (" + dd.reason + ")";
  } else {
    rec["while"] = "the relaunch waits (no warm standby is ready)";
    d->reason += "; the relaunch waits for " + n.id + "'s diagnostics (" + dd.reason +
                 "; no warm standby is ready)";
  }
  return rec;
}

void ControllerImpl::StartDiagnostics(Node& n) {
  const double now = clock_->NowWall();
  n.diagnose_pending = false;
  n.diagnosing = true;
  n.diagnose_id = ++next_diagnose_id_;
  n.diagnose_started = now;
  Json dirs = Json::array({spec_.checkpoint.dir});
  if (!spec_.checkpoint.shared_dir.empty()) dirs.push_back(spec_.checkpoint.shared_dir);
  Json diagnose = {{"type", "diagnose"},
                   {"id", n.diagnose_id},
                   {"checks", n.gpu_capable ? Json::array({"matmul", "disk", "gpu"})
                                            : Json::array({"matmul", "disk"})},
                   {"dirs", dirs},
                   {"budget_s", kCheckBudgetS}};
  std::string no_link;
  const std::string link = n.diagnose_link ? PlanLinkCheck(n, &diagnose, &no_link) : "";
  const size_t checks = 1 + dirs.size() + (link.empty() ? 0 : 1) + (n.gpu_capable ? 1 : 0);
  n.diagnose_deadline = now + kCheckBudgetS * static_cast<double>(checks) + kReplySlackS;
  if (link_ && link_->members.front() == n.id) link_->deadline = n.diagnose_deadline;
  IgnoreError(n.conn->Send(diagnose),
              "a failed send closes the connection; CheckDiagnostics fails the node");
  const bool waits = n.slot >= 0 && !n.diagnose_in_place;  // the relaunch waits for it
  if (waits) {
    ledger_.OnDiagnosisWait(now, true);
    stage_deadline_ = std::max(stage_deadline_, n.diagnose_deadline + 1);
  }
  Event(
      "DiagnosticsStarted",
      n.id +
          (n.diagnose_in_place ? " (slot " + std::to_string(n.slot) + ", in place: the job goes on)"
           : waits             ? " (slot " + std::to_string(n.slot) + ", the relaunch waits)"
                               : " (out of the job; a standby took its slot)") +
          ": compute self-test and a write/fsync/read of " + dirs.dump() +
          (link.empty() ? (no_link.empty() ? "" : "; no link check: " + no_link) : "; " + link) +
          ", " + Seconds(kCheckBudgetS) + " s budget each");
}

void ControllerImpl::OnDiagnosis(Node& n, const Json& m) {
  auto id = JIntOr(m, "id", -1);
  const bool reference = n.link_ref_id != 0 && id.ok() && *id == n.link_ref_id;
  if (!reference && (!n.diagnosing || !id.ok() || *id != n.diagnose_id)) {
    std::fprintf(stderr, "[bulwark] %s: dropped a diagnosis that answers no request\n",
                 n.id.c_str());
    return;
  }
  std::vector<diag::CheckResult> results;
  auto error = JStrOr(m, "error", "");
  if (error.ok() && !error->empty()) {
    results.push_back({"diagnostics", false, 0, "the agent refused: " + *error});
  } else if (!m.contains("results") || !m["results"].is_array() || m["results"].empty()) {
    results.push_back({"diagnostics", false, 0, "the agent's answer holds no results"});
  } else {
    for (const Json& r : m["results"]) {
      auto parsed = diag::CheckResultFromJson(r);
      results.push_back(parsed.ok()
                            ? *parsed
                            : diag::CheckResult{"diagnostics", false, 0,
                                                "malformed result: " + parsed.status().message()});
    }
  }
  if (reference) n.link_ref_id = 0;
  if (HoldForLink(n, results) || reference) return;  // the ring's verdict finishes it
  FinishDiagnostics(n, results);
}

void ControllerImpl::FinishDiagnostics(Node& n, const std::vector<diag::CheckResult>& results) {
  const double now = clock_->NowWall();
  n.diagnosing = false;
  const bool in_slot = n.slot >= 0;
  const bool in_place = n.diagnose_in_place;  // its ranks ran meanwhile: nothing waited
  n.diagnose_in_place = false;
  if (in_slot && !in_place) ledger_.OnDiagnosisWait(now, false);
  const diag::Verdict v = diag::Judge(results);
  std::string action;
  if (v.healthy) {
    if (n.slot == kSlotTesting) {
      n.slot = -1;
      n.prepared = false;  // warm ranks for the job's code again
      RecordAgent(n);      // adoptable again, as a standby
      action = "rejoined as a warm standby";
    } else {
      action = "kept in slot " + std::to_string(n.slot) +
               (in_place ? " (tested in place; the job went on)" : "");
    }
    Event("NodeHealthy", n.id + " passed its diagnostics (" + v.summary + "); " + action);
  } else {
    if (in_place && in_slot && !n.lost && stage_ == Stage::kRunning) {
      // Tested while its ranks ran: the job leaves it as it leaves a lost node (the
      // recovery policy: a standby takes its slot, the job resumes from its checkpoint).
      const std::string reason = "bulwark: failed diagnostics: " + v.summary;
      Status q = backend_->QuarantineNode(n.id, reason);
      n.quarantined = true;
      action = (q.ok() ? std::string("quarantined")
                       : "excluded (the backend could not quarantine it: " + q.message() + ")") +
               "; the job leaves it (a standby or a new node takes slot " + std::to_string(n.slot) +
               ")";
      Event("NodeQuarantined", n.id + " failed its diagnostics: " + v.summary + "; " + action);
      RecordDiagnosis(n, results, v, action, now, false);
      OnNodeGone(n, "quarantined", "failed its diagnostics: " + v.summary, now);
      return;
    }
    action = QuarantineAndRelease(n, "bulwark: failed diagnostics: " + v.summary,
                                  "failed its diagnostics: " + v.summary);
  }
  RecordDiagnosis(n, results, v, action, now, in_slot && !in_place);
}

Json* ControllerImpl::DiagnosisRecord(const Node& n) {
  if (n.diagnose_incident >= 0 && n.diagnose_incident < static_cast<int>(incidents_.size())) {
    return &incidents_[n.diagnose_incident]["diagnosis"];
  }
  if (n.diagnose_observation >= 0 &&
      n.diagnose_observation < static_cast<int>(observations_.size())) {
    return &observations_[n.diagnose_observation]["diagnosis"];
  }
  return nullptr;
}

void ControllerImpl::RecordDiagnosis(Node& n, const std::vector<diag::CheckResult>& results,
                                     const diag::Verdict& v, const std::string& action, double now,
                                     bool charged) {
  Json* rec = DiagnosisRecord(n);
  if (rec) {
    Json checks = Json::array();
    for (const diag::CheckResult& r : results) checks.push_back(diag::ToJson(r));
    (*rec)["state"] = "done";
    (*rec)["checks"] = checks;
    (*rec)["verdict"] = v.healthy ? "healthy" : "unhealthy";
    (*rec)["summary"] = v.summary;
    (*rec)["seconds"] = now - n.diagnose_started;
    (*rec)["action"] = action;
    (*rec)["charged_s"] = charged ? now - n.diagnose_started : 0.0;
  }
  RewriteIncident(n.diagnose_incident);
  n.diagnose_incident = -1;
  n.diagnose_observation = -1;
}

std::string ControllerImpl::QuarantineAndRelease(Node& n, const std::string& reason,
                                                 const std::string& why) {
  const bool in_slot = n.slot >= 0;
  Status q = backend_->QuarantineNode(n.id, reason);
  n.quarantined = true;
  std::string action = q.ok()
                           ? "quarantined"
                           : "excluded (the backend could not quarantine it: " + q.message() + ")";
  action += in_slot ? "; a new node takes slot " + std::to_string(n.slot) : "";
  if (n.conn && !n.lost) {
    IgnoreError(n.conn->Send(Json{{"type", "shutdown"}}),
                "a failed send closes the connection; the node is released anyway");
    IgnoreError(n.conn->Flush(1), "best effort before the node is released");
  }
  if (!n.lost) {
    IgnoreError(backend_->ReleaseNode(n.id, spec_.fault_policy.stop_grace_seconds + 2),
                "the node is written off already; Teardown reaps what is left");
    StoreWrote(store_->DeleteAgent(spec_.name, n.id));
    if (remote_) remote_->OnAgentLost(n.id);
  }
  n.lost = true;
  if (!in_slot) n.slot = -2;  // in its slot, EnsureSlotsFilled replaces it
  Event("NodeQuarantined", n.id + " " + why + "; " + action);
  if (stage_ == Stage::kRunning) ReplenishSpares();
  return action;
}

void ControllerImpl::CheckDiagnostics(double now) {
  CheckLinkSession(now);
  for (auto& [id, n] : nodes_) {
    if (!n->diagnosing) continue;
    if (n->lost || (n->conn && n->conn->closed())) {
      FinishDiagnostics(*n, {{"diagnostics", false, now - n->diagnose_started,
                              "the node was lost while it was tested"}});
    } else if (now > n->diagnose_deadline) {
      FinishDiagnostics(
          *n, {{"diagnostics", false, now - n->diagnose_started,
                "no verdict within " + Seconds(n->diagnose_deadline - n->diagnose_started) +
                    " s: the node's checks are stuck"}});
    }
  }
}

}  // namespace bulwark

namespace bulwark {

void ControllerImpl::OnDigest(const Json& m) {
  if (stage_ != Stage::kRunning) return;  // a stopping attempt's late reports
  auto attempt = JIntOr(m, "attempt", -1);
  if (!attempt.ok() || *attempt != attempt_) return;  // an earlier attempt's, delivered late
  auto rank = JInt(m, "rank");
  auto step = JInt(m, "step");
  auto digest = JStr(m, "digest");
  auto group = JStrOr(m, "group", "");
  if (!rank.ok() || !step.ok() || !digest.ok() || !group.ok() || *rank < 0 ||
      *rank >= spec_.world_size() || *step < 0) {
    std::fprintf(stderr, "[bulwark] dropped a malformed digest: %s\n", m.dump().c_str());
    return;
  }
  const int r = static_cast<int>(*rank);
  auto& seen = digests_[{*group, *step}];
  seen[r] = *digest;
  size_t expected = static_cast<size_t>(spec_.world_size());
  if (!group->empty()) {
    std::set<int>& members = group_ranks_[*group];
    members.insert(r);
    expected = std::max<size_t>(2, members.size());
  }
  // Bounded: reports of steps that never complete (a rank that died) are dropped.
  while (digests_.size() > 64) digests_.erase(digests_.begin());
  if (seen.size() < expected) return;
  std::map<std::string, std::vector<int>> by_digest;
  for (const auto& [k, d] : seen) by_digest[d].push_back(k);
  const std::map<int, std::string> reports = seen;
  digests_.erase({*group, *step});
  if (by_digest.size() == 1) {
    aligned_step_ = std::max(aligned_step_, *step);
    return;
  }
  auto majority = std::max_element(by_digest.begin(), by_digest.end(), [](auto& a, auto& b) {
    return a.second.size() < b.second.size();
  });
  const bool clear = majority->second.size() * 2 > reports.size();
  std::vector<int> odd;
  for (const auto& [k, d] : reports) {
    if (d != majority->first) odd.push_back(k);
  }
  auto list = [](const std::vector<int>& v) {
    std::string s;
    for (int x : v) s += (s.empty() ? "" : ", ") + std::to_string(x);
    return s;
  };
  Incident inc;
  inc.kind = FaultKind::kSdc;
  inc.subtype = "bitwise_alignment";
  inc.step = *step;
  inc.good_step = aligned_step_;
  inc.fault_time = inc.detect_time = clock_->NowWall();
  const std::string where = group->empty() ? "" : " of group " + *group;
  const std::string last = aligned_step_ >= 0
                               ? "; they last agreed after step " + std::to_string(aligned_step_)
                               : "; no earlier step was verified";
  if (clear) {
    inc.rank = odd.front();
    inc.node = inc.rank / spec_.procs_per_node;
    inc.detail = "after step " + std::to_string(*step) + " the parameters of rank" +
                 (odd.size() > 1 ? "s " : " ") + list(odd) + " differ bit for bit from those of " +
                 "rank" + (majority->second.size() > 1 ? "s " : " ") + list(majority->second) +
                 where + " (digest " + reports.at(odd.front()) + " vs " + majority->first + ")" +
                 last;
  } else {
    inc.detail = "after step " + std::to_string(*step) + " the ranks" + where +
                 " hold parameters of " + std::to_string(by_digest.size()) +
                 " different digests and no majority: which rank is wrong cannot be told" + last;
  }
  digests_.clear();
  OnFault(inc, Json::object());
}

}  // namespace bulwark
