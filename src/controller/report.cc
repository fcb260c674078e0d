#include <algorithm>
#include <cmath>
#include <cstdio>
#include <sstream>

#include "common/json_util.h"
#include "controller/controller.h"
#include "controller/controller_impl.h"
#include "controller/incident_json.h"

namespace bulwark {
namespace {

std::string Fmt(const char* f, double v) {
  char buf[64];
  std::snprintf(buf, sizeof(buf), f, v);
  return buf;
}

double Num(const Json& j, const char* k) {
  return j.contains(k) && j[k].is_number() ? j[k].get<double>() : 0.0;
}

std::string Str(const Json& j, const char* k) {
  return j.is_object() && j.contains(k) && j[k].is_string() ? j[k].get<std::string>() : "";
}

}  // namespace

std::string FormatIncidentDiagnosis(const Json& x, const std::string& job, int number,
                                    const std::string& indent) {
  std::string o;
  const Json d = x.value("diagnosis", Json());
  if (d.is_object() && d.value("run", false)) {
    std::string checks;
    if (d.contains("checks") && d["checks"].is_array()) {
      for (const Json& c : d["checks"]) {
        checks += (checks.empty() ? "" : "; ") + Str(c, "name") +
                  (c.value("ok", false) ? " ok" : " FAILED") + " (" + Str(c, "evidence") + ")";
      }
    }
    o += indent + "tested: " + Str(d, "node_id") + " (" + Str(d, "reason") + "; " +
         Str(d, "while") +
         "): " + (Str(d, "verdict").empty() ? "still running" : Str(d, "verdict") + ": " + checks) +
         (Str(d, "action").empty() ? "" : "; " + Str(d, "action")) + "\n";
  } else if (d.is_object() && !Str(d, "reason").empty()) {
    o += indent + "not tested: " + Str(d, "reason") + "\n";
  }
  const Json c = x.value("classification", Json());
  if (c.is_object()) {
    o += indent + "cause: " + Str(c, "cause") + ": " + Str(c, "evidence") +
         (Str(c, "action").empty() ? "" : "; " + Str(c, "action")) + "\n";
  }
  const Json b = x.value("replay", Json());
  const long ckpt = b.is_object() ? b.value("checkpoint_step", -1L) : -1L;
  if (b.is_object() && (ckpt >= 0 || b.value("from_scratch", false)) && !job.empty()) {
    o += indent + "replay: `bulwark replay " + job + " " + std::to_string(number) +
         "` re-runs steps " + std::to_string(std::max(ckpt, 0L) + 1) + "-" +
         std::to_string(b.value("fault_step", -1L)) + " from " +
         (ckpt >= 0 ? "checkpoint step " + std::to_string(ckpt) : std::string("scratch")) + "\n";
  }
  return o;
}

namespace {

// "in process: kept ranks 0 (pid 11), 2 (pid 13); replaced rank 1 (pid 12 -> 40, warm)".
std::string ProcessesLine(const Json& p) {
  auto pids = [&](const char* key, bool replaced) {
    std::string s;
    if (!p.contains(key) || !p[key].is_array()) return s;
    for (const Json& e : p[key]) {
      s += (s.empty() ? "" : ", ") + std::to_string(e.value("rank", -1)) + " (pid ";
      if (replaced) s += std::to_string(e.value("old_pid", 0)) + " -> ";
      s += std::to_string(e.value("pid", 0));
      if (replaced) s += ", " + e.value("how", std::string("spawned"));
      s += ")";
    }
    return s;
  };
  const std::string kept = pids("kept_pids", false);
  const std::string replaced = pids("replaced_pids", true);
  std::string out = p.value("in_process", false) ? "in process: " : "every rank restarted: ";
  if (!kept.empty()) out += "kept rank(s) " + kept;
  if (!replaced.empty())
    out += (kept.empty() ? "" : "; ") + std::string("new process for rank(s) ") + replaced;
  if (kept.empty() && replaced.empty()) out += p.value("reason", std::string());
  return out;
}

}  // namespace

std::string FormatReport(const Json& r) {
  std::ostringstream o;
  double wall = Num(r, "wall_s");
  o << "\n=== Bulwark ETTR report: job " << r.value("job", "?") << " — " << r.value("phase", "?")
    << " ===\n";
  o << r.value("message", "") << "\n";
  o << "wall clock " << Fmt("%.1f", wall) << " s, " << r.value("attempts", 0) << " attempts, "
    << r.value("restarts", 0) << " restarts, " << r.value("steps_completed", 0L) << " steps ("
    << r.value("steps_reworked", 0L) << " reworked), " << Fmt("%.0f", Num(r, "tokens"))
    << " tokens\n";
  if (r.value("steps_inferred", false)) {
    o << "(steps inferred from torch.optim's optimizer steps: the script does not use the SDK; "
         "docs/monitoring.md)\n";
  }
  o << "\nETTR " << Fmt("%.3f", Num(r, "ettr"));
  if (r.contains("metrics") && Num(r["metrics"], "mfu") > 0) {
    o << "   MFU " << Fmt("%.3f", Num(r["metrics"], "mfu"));
  }
  if (r.contains("metrics") && Num(r["metrics"], "cost_dollars") > 0) {
    o << "   cost $" << Fmt("%.2f", Num(r["metrics"], "cost_dollars")) << " ($"
      << Fmt("%.2f", Num(r["metrics"], "cost_per_productive_gpu_hour"))
      << " per productive GPU-hour)";
  }
  o << "\n\n";
  o << "  category      seconds   share\n";
  const char* order[] = {"productive", "checkpoint", "detection", "restart",
                         "reinit",     "rework",     "diagnosis", "idle"};
  for (const char* c : order) {
    double s = r.contains("seconds") ? Num(r["seconds"], c) : 0;
    o << "  " << c << std::string(12 - std::string(c).size(), ' ') << Fmt("%9.1f", s)
      << Fmt("  %5.1f%%", wall > 0 ? 100 * s / wall : 0) << "\n";
  }
  if (r.contains("incidents") && !r["incidents"].empty()) {
    o << "\n  # kind       rank node  step  detect_s restart_s reinit_s rework_s (steps) lost_s  "
         "action -> resumed from\n";
    int i = 0;
    for (const auto& x : r["incidents"]) {
      char line[512];
      std::snprintf(line, sizeof(line),
                    "  %d %-10s %4d %4d %5ld %9.2f %9.2f %8.2f %8.2f (%5ld) %6.1f  %s -> %ld\n",
                    ++i, x.value("kind", "?").c_str(), x.value("rank", -1), x.value("node", -1),
                    x.value("step", -1L), Num(x, "detection_s"), Num(x, "restart_s"),
                    Num(x, "reinit_s"), Num(x, "rework_s"), x.value("rework_steps", 0L),
                    Num(x, "lost_s"), x.value("action", "?").c_str(),
                    x.value("resumed_from_step", -1L));
      o << line;
      if (x.contains("decision") && x["decision"].contains("reason")) {
        o << "      " << x["decision"]["reason"].get<std::string>() << "\n";
      }
      if (x.contains("processes") && x["processes"].is_object()) {
        o << "      " << ProcessesLine(x["processes"]) << "\n";
      }
      o << FormatIncidentDiagnosis(x, r.value("job", std::string()), i, "      ");
    }
  }
  if (r.contains("resizes") && r["resizes"].is_array()) {
    o << "\n  resize      at_s  nodes    at_step  why\n";
    for (const auto& x : r["resizes"]) {
      char line[128];
      std::snprintf(line, sizeof(line), "  %-8s %7.1f  %2ld -> %-2ld %8ld  ",
                    x.value("to_nodes", 0) < x.value("from_nodes", 0) ? "shrink" : "grow",
                    Num(x, "at_s"), x.value("from_nodes", 0L), x.value("to_nodes", 0L),
                    x.value("at_step", -1L));
      o << line << x.value("why", "") << "\n";
    }
  }
  if (r.contains("updates") && r["updates"].is_array()) {
    o << "\n  update  fields                     from_step  result\n";
    for (const auto& x : r["updates"]) {
      char line[160];
      std::snprintf(line, sizeof(line), "  %6ld  %-26s %9ld  ", x.value("number", 0L),
                    x.value("fields", "").c_str(), x.value("from_step", -1L));
      o << line << x.value("result", "") << "\n";
    }
  }
  if (r.contains("observations") && r["observations"].is_array() && !r["observations"].empty()) {
    o << "\n  found from the metrics (no restart):\n";
    for (const auto& x : r["observations"]) {
      o << "  " << x.value("kind", "?") << " rank " << x.value("rank", -1) << " node "
        << x.value("node_id", std::string("?")) << " step " << x.value("step", -1L) << ": "
        << x.value("detail", "") << "\n      "
        << (x.contains("decision")
                ? x["decision"].value("action", "") + ": " + x["decision"].value("reason", "")
                : std::string())
        << "\n";
    }
  }
  if (r.contains("chaos") && !r["chaos"].empty()) {
    o << "\n  chaos fault   injected_at  detected_as  latency_s\n";
    for (const auto& c : r["chaos"]) {
      char line[256];
      std::snprintf(line, sizeof(line), "  %-12s %11.1f  %-11s %9.2f\n",
                    c.value("kind", "?").c_str(), Num(c, "fired_at_s"),
                    c.value("detected_as", "-").c_str(), Num(c, "detection_latency_s"));
      o << line;
    }
  }
  return o.str();
}

// Sends one client request to the controller at addr and returns its reply; a refusal
// (ok false) is FailedPrecondition, or InvalidArgument when the reply's
// `code` says so.
Result<Json> SendClientRequestReply(const std::string& addr, const Json& request,
                                    double timeout_s) {
  size_t colon = addr.rfind(':');
  if (colon == std::string::npos) {
    return InvalidArgument("controller address '" + addr + "' must be HOST:PORT");
  }
  int port = 0;
  try {
    port = std::stoi(addr.substr(colon + 1));
  } catch (...) {
    return InvalidArgument("controller address '" + addr + "': port is not a number");
  }
  BW_ASSIGN_OR_RETURN(Fd fd, TcpConnect(addr.substr(0, colon), port, timeout_s));
  JsonLineConn c(std::move(fd));
  BW_RETURN_IF_ERROR(c.Send(request));
  BW_RETURN_IF_ERROR(c.Flush(timeout_s));
  for (int i = 0; i < static_cast<int>(timeout_s * 20) + 1; ++i) {
    PollReadable({c.fd()}, 0.05);
    for (const auto& m : c.Read()) {
      if (m["type"] != "reply") continue;
      auto msg = JStrOr(m, "message", "");
      const std::string text = msg.ok() ? *msg : "";
      if (m.contains("ok") && m["ok"] == true) return m;
      auto code = JStrOr(m, "code", "");
      if (code.ok() && *code == "INVALID_ARGUMENT") return InvalidArgument(text);
      return FailedPrecondition(text);
    }
    if (c.closed()) return Unavailable("controller closed the connection without a reply");
  }
  return DeadlineExceeded("no reply from the controller at " + addr);
}

Result<std::string> SendClientRequest(const std::string& addr, const Json& request,
                                      double timeout_s) {
  BW_ASSIGN_OR_RETURN(Json reply, SendClientRequestReply(addr, request, timeout_s));
  auto msg = JStrOr(reply, "message", "");
  return msg.ok() ? *msg : std::string();
}

Result<Json> SendStatusRequest(const std::string& addr, double timeout_s) {
  BW_ASSIGN_OR_RETURN(Json reply,
                      SendClientRequestReply(addr, Json{{"type", "status_request"}}, timeout_s));
  if (!reply.contains("report") || !reply["report"].is_object()) {
    return FailedPrecondition("the controller at " + addr + " sent no report");
  }
  return reply["report"];
}

Result<std::string> SendChaosRequest(const std::string& addr, const std::string& action, int rank,
                                     int node, double timeout_s) {
  return SendClientRequest(
      addr, Json{{"type", "chaos_request"}, {"action", action}, {"rank", rank}, {"node", node}},
      timeout_s);
}

Result<std::string> SendCancelRequest(const std::string& addr, double timeout_s) {
  return SendClientRequest(addr, Json{{"type", "cancel_request"}}, timeout_s);
}

Result<std::string> SendUpdateRequest(const std::string& addr, const std::string& spec_yaml,
                                      const std::string& base_dir, int verify_steps,
                                      double timeout_s) {
  return SendClientRequest(addr,
                           Json{{"type", "update_request"},
                                {"spec_yaml", spec_yaml},
                                {"base_dir", base_dir},
                                {"verify_steps", verify_steps}},
                           timeout_s);
}

Json ControllerImpl::BuildReport() {
  double now = clock_->NowWall();
  LedgerReport r = ledger_.Report(now);
  Json j;
  j["job"] = spec_.name;
  j["run_id"] = rec_.run_id;
  j["phase"] = JobPhaseName(rec_.phase);
  j["message"] = rec_.message;
  j["nodes"] = spec_.nodes;
  j["procs_per_node"] = spec_.procs_per_node;
  j["attempts"] = attempt_ + 1;
  j["restarts"] = rec_.restarts;
  j["wall_s"] = r.wall_s;
  j["ettr"] = r.ettr();
  j["steps_completed"] = r.steps_completed;
  j["steps_reworked"] = r.steps_reworked;
  j["last_step"] = last_step_;
  j["tokens"] = r.tokens;
  const JobMetricsSnapshot m = metrics_.Snapshot();
  j["steps_inferred"] = m.inferred_steps;
  j["observations"] = observations_;
  j["total_steps"] = opts_.total_steps;
  if (last_committed_step_ >= 0) {
    j["last_checkpoint"] = {{"step", last_committed_step_},
                            {"tier", last_committed_tier_},
                            {"time", last_committed_time_}};
  }
  j["metrics"] = {{"loss", std::isfinite(m.loss) ? Json(m.loss) : Json(nullptr)},
                  {"tokens_total", m.tokens_total},
                  {"samples_total", m.samples_total},
                  {"tokens_per_s", m.tokens_per_s},
                  {"mfu", m.mfu},
                  {"cost_dollars", m.cost_total},
                  {"cost_per_productive_gpu_hour", m.cost_per_productive_gpu_hour}};
  Json cats = Json::object();
  for (const auto& [c, s] : r.seconds) cats[TimeCategoryName(c)] = s;
  j["seconds"] = cats;
  Json rows = Json::array();
  for (size_t i = 0; i < r.incidents.size(); ++i) {
    const IncidentRow& row = r.incidents[i];
    Json x = i < incidents_.size() ? incidents_[i] : IncidentToJson(row.incident);
    x.erase("stacks");
    x.erase("log_tail");
    x["action"] = row.action;
    x["detection_s"] = row.detection_s;
    x["restart_s"] = row.restart_s;
    x["reinit_s"] = row.reinit_s;
    x["rework_s"] = row.rework_s;
    x["diagnosis_s"] = row.diagnosis_s;
    x["rework_steps"] = row.rework_steps;
    x["resumed_from_step"] = row.resumed_from_step;
    x["lost_s"] = row.total_s();
    rows.push_back(x);
  }
  j["incidents"] = rows;
  if (Json replay = ReplayReport(); !replay.is_null()) j["replay"] = replay;
  if (cadence_) j["cadence"] = cadence_log_;
  Json chaos = Json::array();
  for (size_t i = 0; i < spec_.chaos.size(); ++i) {
    const ChaosState& c = chaos_[i];
    Json x = {{"kind", ChaosKindName(spec_.chaos[i].kind)}, {"fired", c.fired}};
    if (c.fired) {
      x["fired_at_s"] = c.fired_at - start_;
      x["detected_as"] = c.incident;
      if (!c.incident.empty()) x["detection_latency_s"] = c.detected_at - c.fired_at;
    }
    chaos.push_back(x);
  }
  j["chaos"] = chaos;
  if (!updates_log_.empty()) j["updates"] = updates_log_;
  if (!resizes_.empty()) j["resizes"] = resizes_;
  j["max_nodes"] = max_nodes_;
  j["checkpoints"] = {{"dir", spec_.checkpoint.dir}, {"committed", committed_}};
  return j;
}

}  // namespace bulwark
