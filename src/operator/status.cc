#include "operator/status.h"

#include <algorithm>
#include <cmath>

#include "common/clock.h"
#include "trainjob/render.h"

namespace bulwark::op {
namespace {

std::string Time(double t) { return FormatRfc3339(t); }

struct Cond {
  const char* type;
  bool value;
  std::string reason;
  std::string message;
};

// The conditions for a phase. Every type is always present (True or False), so
// `kubectl describe` shows the whole picture and `kubectl wait --for=condition=X` works.
std::vector<Cond> Conditions(const Observed& o) {
  const Phase p = o.phase;
  // A job that failed before any admission (InvalidSpec, Unschedulable: an unknown queue)
  // was never admitted.
  const bool admitted = p != Phase::kPending && !(p == Phase::kFailed && o.start_time == 0);
  const bool terminal = p == Phase::kSucceeded || p == Phase::kFailed;
  std::vector<Cond> c;
  c.push_back({"Admitted", admitted, admitted ? "Admitted" : o.reason,
               admitted ? o.admission_reason : o.message});
  c.push_back({"Running", p == Phase::kRunning,
               p == Phase::kRunning    ? "RanksRunning"
               : terminal              ? "Finished"
               : p == Phase::kPending  ? "NotAdmitted"
               : p == Phase::kAdmitted ? "Provisioning"
                                       : "Restarting",
               p == Phase::kRunning ? "every rank is running" : o.message});
  c.push_back({"Restarting", p == Phase::kRestarting,
               p == Phase::kRestarting ? o.reason : "NotRestarting",
               p == Phase::kRestarting ? o.message : ""});
  c.push_back({"Succeeded", p == Phase::kSucceeded,
               p == Phase::kSucceeded ? o.reason : "NotSucceeded",
               p == Phase::kSucceeded ? o.message : ""});
  c.push_back({"Failed", p == Phase::kFailed, p == Phase::kFailed ? o.reason : "NotFailed",
               p == Phase::kFailed ? o.message : ""});
  for (Cond& x : c) {
    if (x.reason.empty()) x.reason = x.value ? "True" : "Unknown";
  }
  return c;
}

const Json* FindCondition(const Json& old_status, const std::string& type) {
  if (!old_status.is_object() || !old_status.contains("conditions") ||
      !old_status["conditions"].is_array()) {
    return nullptr;
  }
  for (const Json& c : old_status["conditions"]) {
    if (c.is_object() && c.value("type", "") == type) return &c;
  }
  return nullptr;
}

}  // namespace

const char* PhaseName(Phase p) {
  switch (p) {
    case Phase::kPending:
      return "Pending";
    case Phase::kAdmitted:
      return "Admitted";
    case Phase::kRunning:
      return "Running";
    case Phase::kRestarting:
      return "Restarting";
    case Phase::kSucceeded:
      return "Succeeded";
    case Phase::kFailed:
      return "Failed";
  }
  return "Unknown";
}

namespace {

// status.lastIncident from the controller's record `x` (the report's incident row):
// strings only, each a sentence, so `kubectl describe` reads it.
Json LastIncident(const Json& x, int number) {
  auto str = [](const Json& j, const char* k) {
    return j.is_object() && j.contains(k) && j[k].is_string() ? j[k].get<std::string>()
                                                              : std::string();
  };
  Json out = {{"number", number},
              {"kind", str(x, "kind")},
              {"step", x.value("step", -1L)},
              {"rank", x.value("rank", -1)},
              {"detail", str(x, "detail")}};
  if (!str(x, "node_id").empty()) out["node"] = str(x, "node_id");
  const Json d = x.value("decision", Json());
  if (d.is_object()) {
    out["action"] = str(d, "action");
    out["reason"] = str(d, "reason");
  }
  const Json dg = x.value("diagnosis", Json());
  if (dg.is_object() && dg.value("run", false)) {
    out["diagnosis"] =
        str(dg, "node_id") + ": " +
        (str(dg, "verdict").empty() ? "being tested"
                                    : str(dg, "verdict") + " (" + str(dg, "summary") + ")") +
        (str(dg, "action").empty() ? "" : "; " + str(dg, "action"));
  } else if (dg.is_object() && !str(dg, "reason").empty()) {
    out["diagnosis"] = "not tested: " + str(dg, "reason");
  }
  const Json c = x.value("classification", Json());
  if (c.is_object() && !str(c, "cause").empty()) {
    out["cause"] = str(c, "cause");
    out["causeEvidence"] =
        str(c, "evidence") + (str(c, "action").empty() ? "" : "; " + str(c, "action"));
  }
  return out;
}

}  // namespace

Json BuildStatus(const Json& old_status, const Observed& o, long generation, double now) {
  Json s = Json::object();
  s["phase"] = PhaseName(o.phase);
  s["observedGeneration"] = generation;
  if (!o.message.empty()) s["message"] = o.message;
  Json conds = Json::array();
  for (const Cond& c : Conditions(o)) {
    const std::string status = c.value ? "True" : "False";
    const Json* prev = FindCondition(old_status, c.type);
    std::string since = Time(now);
    if (prev && prev->value("status", "") == status && prev->contains("lastTransitionTime") &&
        (*prev)["lastTransitionTime"].is_string()) {
      since = (*prev)["lastTransitionTime"].get<std::string>();
    }
    conds.push_back({{"type", c.type},
                     {"status", status},
                     {"reason", c.reason},
                     {"message", c.message},
                     {"lastTransitionTime", since},
                     {"observedGeneration", generation}});
  }
  s["conditions"] = std::move(conds);
  s["restarts"] = o.restarts;
  if (o.current_step >= 0) s["currentStep"] = o.current_step;
  if (o.start_time > 0) s["startTime"] = Time(o.start_time);
  if (o.completion_time > 0) s["completionTime"] = Time(o.completion_time);
  if (o.checkpoint_step >= 0) {
    Json ck = {{"step", o.checkpoint_step}, {"tier", o.checkpoint_tier}};
    if (o.checkpoint_time > 0) ck["time"] = Time(o.checkpoint_time);
    s["lastCheckpoint"] = std::move(ck);
  }
  if (!o.nodes.empty()) {
    s["admission"] = {{"nodes", o.nodes}, {"standby", o.standby}, {"reason", o.admission_reason}};
  }
  if (o.last_incident.is_object()) s["lastIncident"] = LastIncident(o.last_incident, o.incidents);
  if (o.replay.is_object()) s["replay"] = o.replay;
  if (o.has_ledger && o.ledger.wall_s > 0) {
    Json lost = Json::object();
    for (const auto& [cat, sec] : o.ledger.seconds) {
      if (cat != TimeCategory::kProductive) lost[TimeCategoryName(cat)] = std::round(sec * 10) / 10;
    }
    s["ettr"] = {
        {"ratio", std::round(o.ledger.ettr() * 10000) / 10000},
        {"productiveSeconds", std::round(o.ledger.seconds.at(TimeCategory::kProductive) * 10) / 10},
        {"wallSeconds", std::round(o.ledger.wall_s * 10) / 10},
        {"lostSeconds", std::move(lost)}};
  }
  return s;
}

bool MaterialChange(const Json& a, const Json& b) {
  auto strip = [](Json j) {
    if (j.is_object()) {
      j.erase("currentStep");
      j.erase("ettr");
    }
    return j;
  };
  return strip(a) != strip(b);
}

bool StatusWriteDue(const Json& old_status, const Json& next_status, double since_last_write_s,
                    const StatusWriteIntervals& intervals) {
  if (next_status == old_status) return false;
  if (MaterialChange(old_status, next_status)) return true;
  auto step = [](const Json& s) { return s.is_object() ? s.value("currentStep", Json()) : Json(); };
  const bool stepped = step(old_status) != step(next_status);
  const double interval =
      stepped ? intervals.progress_s : std::max(intervals.progress_s, intervals.idle_s);
  return since_last_write_s >= interval;
}

}  // namespace bulwark::op
