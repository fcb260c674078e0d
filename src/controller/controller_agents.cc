// Controller: agent and client messages, liveness (heartbeats, backend reports) and
// chaos injection.
#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <limits>
#include <map>

#include "common/json_util.h"
#include "common/str_format.h"
#include "controller/controller_impl.h"
#include "controller/incident_json.h"
#include "policy/ckpt_fault.h"

namespace bulwark {
namespace {

// A forwarded step report's fields (the agent checked the optional ones' ranges).
StepSample StepSampleFromJson(const Json& m, long rank, long step, double t, double step_time,
                              double stall, double tokens) {
  StepSample s;
  s.rank = static_cast<int>(rank);
  s.step = step;
  s.t = t;
  s.step_time = step_time;
  s.ckpt_stall = stall;
  s.tokens = tokens;
  s.loss =
      m.contains("loss") && m["loss"].is_number() ? m["loss"].get<double>() : StepSample::kNone;
  for (auto [key, field] : {std::pair<const char*, double*>{"samples", &s.samples},
                            {"lr", &s.lr},
                            {"grad_norm", &s.grad_norm},
                            {"data_wait", &s.data_wait},
                            {"compute", &s.compute},
                            {"optimizer", &s.optimizer},
                            {"busy", &s.busy}}) {
    if (m.contains(key) && m[key].is_number()) *field = m[key].get<double>();
  }
  s.inferred = m.contains("inferred") && m["inferred"].is_boolean() && m["inferred"].get<bool>();
  return s;
}

// {"<rank>": [step, ...]} from an agent report; malformed entries are skipped.
std::map<int, std::vector<long>> StepsByRank(const Json& j) {
  std::map<int, std::vector<long>> out;
  if (!j.is_object()) return out;
  for (const auto& [rank, steps] : j.items()) {
    if (!steps.is_array()) continue;
    for (const auto& s : steps) {
      if (s.is_number_integer()) out[std::atoi(rank.c_str())].push_back(s.get<long>());
    }
  }
  return out;
}

// A port in `m[field]` within [1, 65535]; 0 when absent or malformed.
int PortField(const Json& m, const char* field) {
  auto p = JIntOr(m, field, 0);
  return p.ok() && *p > 0 && *p < 65536 ? static_cast<int>(*p) : 0;
}

// A digest the step report carries as 16 lowercase hex digits (the agent checked them);
// 0 when absent or malformed.
uint64_t HexDigestOr0(const Json& m, const char* key) {
  uint64_t d = 0;
  return m.contains(key) && ParseDigestHex(m[key], &d) ? d : 0;
}

// The replay evidence a step report (or one of its `earlier` steps) carries.
StepDigests ReportedDigests(const Json& m) {
  StepDigests d{HexDigestOr0(m, "rng"), HexDigestOr0(m, "data")};
  if (m.contains("sums") && m["sums"].is_string()) {
    d.sums = ParseSumOrder(m["sums"].get<std::string>());
  }
  return d;
}

}  // namespace

void ControllerImpl::AcceptAndGreet() {
  while (true) {
    Fd c = TcpAcceptNonBlocking(listen_.get());
    if (!c.valid()) break;
    pending_.push_back(std::make_unique<JsonLineConn>(std::move(c)));
  }
  for (auto it = pending_.begin(); it != pending_.end();) {
    std::vector<std::string> bad;
    auto msgs = (*it)->Read(&bad);
    for (const auto& b : bad)
      std::fprintf(stderr, "[bulwark] dropped a bad message: %s\n", b.c_str());
    bool greeted = false;
    for (size_t i = 0; i < msgs.size() && !greeted; ++i) {
      const Json& m = msgs[i];
      if (m["type"] == "hello") {
        auto id = JStr(m, "node");
        auto nit = id.ok() ? nodes_.find(*id) : nodes_.end();
        if (nit == nodes_.end() || nit->second->conn) {
          std::fprintf(stderr, "[bulwark] hello from unknown or duplicate node %s; closing\n",
                       id.ok() ? id->c_str() : "(no node field)");
          (*it)->Send(Json{{"type", "shutdown"}}).ok();
          break;
        }
        Node& n = *nit->second;
        n.conn = std::move(*it);
        greeted = true;
        Greet(n, m);
        for (size_t k = i + 1; k < msgs.size(); ++k) HandleAgentMessage(n, msgs[k]);
      } else if (answered_.count(it->get())) {
        // One request per connection (docs/protocol.md): a client reads one reply.
        std::fprintf(stderr, "[bulwark] dropped a second request on one client connection\n");
      } else {
        HandleClientRequest(**it, m);
        answered_.insert(it->get());
      }
    }
    if (greeted || (*it)->closed()) {
      answered_.erase(it->get());
      it = pending_.erase(it);
    } else {
      ++it;
    }
  }
}

void ControllerImpl::Greet(Node& n, const Json& m) {
  n.last_heartbeat = clock_->NowWall();
  early_exits_.erase(n.slot);
  auto peer_host = JStrOr(m, "peer_host", "");
  n.peer_host = peer_host.ok() ? *peer_host : "";
  n.link_capable = m.contains("diag_checks") && m["diag_checks"].is_array() &&
                   std::count(m["diag_checks"].begin(), m["diag_checks"].end(), Json("link")) > 0;
  n.gpu_capable = m.contains("diag_checks") && m["diag_checks"].is_array() &&
                  std::count(m["diag_checks"].begin(), m["diag_checks"].end(), Json("gpu")) > 0;
  n.peer_port = PortField(m, "peer_port");
  n.free_port = PortField(m, "free_port");
  n.adopt_port = PortField(m, "adopt_port");
  n.metrics_port = PortField(m, "metrics_port");
  if (m.contains("gpus") && m["gpus"].is_array()) {
    std::vector<std::string> names;
    for (const Json& g : m["gpus"]) {
      if (g.is_string()) names.push_back(g.get<std::string>());
    }
    metrics_.OnGpuNames(names);
  }
  auto pid = JIntOr(m, "pid", 0);
  n.pid = pid.ok() ? static_cast<int>(*pid) : 0;
  IgnoreError(n.conn->Send(Json{{"type", "welcome"}, {"job", spec_.name}, {"run_id", rec_.run_id}}),
              "a failed send closes the connection; the loop handles the peer's loss");
  RecordAgent(n);
  const bool adopted = m.contains("adopted") && m["adopted"].is_boolean() && m["adopted"];
  if (!adopted || !n.adopting) {
    Event("NodeReady", n.id + (n.slot >= 0 ? " serves slot " + std::to_string(n.slot)
                                           : std::string(" is a warm standby")));
    return;
  }
  auto attempt = JIntOr(m, "attempt", -1);
  auto ranks = JIntOr(m, "ranks_alive", 0);
  auto state = JStrOr(m, "state", "idle");
  n.adopted_attempt = attempt.ok() ? static_cast<int>(*attempt) : -1;
  n.adopted_ranks = ranks.ok() ? static_cast<int>(*ranks) : 0;
  n.adopted_state = state.ok() ? *state : "idle";
  Event("NodeAdopted", n.id +
                           (n.slot >= 0 ? " (slot " + std::to_string(n.slot) + ")"
                                        : std::string(" (warm standby)")) +
                           ": " + n.adopted_state + ", attempt " +
                           std::to_string(n.adopted_attempt) + ", " +
                           std::to_string(n.adopted_ranks) + " rank(s) alive");
}

void ControllerImpl::HandleClientRequest(JsonLineConn& c, const Json& m) {
  std::string type = m["type"].get<std::string>();
  Json reply = {{"type", "reply"}, {"ok", false}};
  if (type == "chaos_request") {
    auto action = JStr(m, "action");
    auto rank = JIntOr(m, "rank", 0);
    auto node = JIntOr(m, "node", 0);
    if (!action.ok() || !rank.ok() || !node.ok()) {
      reply["message"] = !action.ok()
                             ? action.status().message()
                             : (!rank.ok() ? rank.status().message() : node.status().message());
    } else if (stage_ != Stage::kRunning) {
      reply["message"] = std::string("job is not running (stage ") + StageName(stage_) +
                         "); try again in a moment";
    } else {
      ChaosFault f;
      f.rank = static_cast<int>(*rank);
      f.node = static_cast<int>(*node);
      std::string a = *action;
      bool known = true;
      if (a == "kill_rank")
        f.kind = ChaosKind::kKillRank;
      else if (a == "hang_rank")
        f.kind = ChaosKind::kHangRank;
      else if (a == "nan_loss")
        f.kind = ChaosKind::kNanLoss;
      else if (a == "kill_agent")
        f.kind = ChaosKind::kKillAgent;
      else if (a == "sdc")
        f.kind = ChaosKind::kSdc;
      else if (a == "slow_rank" || a == "slow_link") {
        f.kind = a == "slow_rank" ? ChaosKind::kSlowRank : ChaosKind::kSlowLink;
        f.factor = 3;  // the spec's default (docs/job-spec.md)
      } else {
        known = false;
      }
      if (!known) {
        reply["message"] = "unknown action '" + a +
                           "'; use kill_rank, hang_rank, nan_loss, kill_agent, sdc, slow_rank "
                           "or slow_link";
      } else if (f.kind != ChaosKind::kKillAgent && (f.rank < 0 || f.rank >= spec_.world_size())) {
        reply["message"] = "rank " + std::to_string(f.rank) +
                           " out of range; the job has ranks 0.." +
                           std::to_string(spec_.world_size() - 1);
      } else if (f.kind == ChaosKind::kKillAgent && (f.node < 0 || f.node >= spec_.nodes)) {
        reply["message"] = "node " + std::to_string(f.node) +
                           " out of range; the job has nodes 0.." + std::to_string(spec_.nodes - 1);
      } else {
        spec_.chaos.push_back(f);
        chaos_.emplace_back();
        FireChaos(chaos_.size() - 1);
        reply["ok"] = true;
        reply["message"] = "injected " + a + " into job " + spec_.name;
      }
    }
  } else if (type == "update_request") {
    HandleUpdateRequest(c, m);
    return;
  } else if (type == "cancel_request") {
    Cancel();  // the loop ends the attempt as for SIGINT: agents stopped, phase Cancelled
    reply["ok"] = true;
    reply["message"] = "cancelling job " + spec_.name + " at step " + std::to_string(last_step_);
  } else if (type == "status_request") {
    reply["ok"] = true;
    reply["message"] = std::string(JobPhaseName(rec_.phase)) + " attempt " +
                       std::to_string(attempt_) + " step " + std::to_string(last_step_);
    reply["report"] = BuildReport();
  } else {
    reply["message"] = "unknown request type '" + type + "'";
  }
  IgnoreError(c.Send(reply),
              "a failed send closes the connection; the loop handles the peer's loss");
  IgnoreError(c.Flush(1),
              "best effort before the connection goes; an unsent message is the peer's loss");
}

void ControllerImpl::HandleAgentMessage(Node& n, const Json& m) {
  std::string type = m["type"].get<std::string>();
  double now = clock_->NowWall();
  n.last_heartbeat = now;       // any message proves liveness
  if (type == "ckpt_result") {  // a checkpoint catalog reply: not tied to an attempt
    if (remote_) remote_->OnMessage(n.id, m);
    return;
  }
  auto attempt = JIntOr(m, "attempt", -1);
  if (!attempt.ok()) {
    std::fprintf(stderr, "[bulwark] %s: %s\n", n.id.c_str(), attempt.status().message().c_str());
    return;
  }
  bool current = *attempt == attempt_;
  if ((type == "heartbeat" || type == "stopped") && m.contains("replicas")) {
    n.replicas = StepsByRank(m["replicas"]);
  }
  if (type == "heartbeat" || type == "store") {  // the long-lived store its agent serves
    if (m.contains("store_port") || type == "store") {
      n.store_port = PortField(m, type == "store" ? "port" : "store_port");
    }
  }
  if (type == "warm") {  // its warm ranks: how many are ready, for which code
    auto version = JStrOr(m, "version", "");
    auto ready = JIntOr(m, "ready", 0);
    if (version.ok() && ready.ok()) {
      n.warm_version = *version;
      n.warm_ready = static_cast<int>(*ready);
    }
    return;
  }
  if (type == "diagnosis") {  // stop-diagnose: a node's checks (controller_diagnosis.cc)
    OnDiagnosis(n, m);
    return;
  }
  if (type == "link_listening") {  // the link check's ring forms (controller_link.cc)
    OnLinkListening(n, m);
    return;
  }
  if (type == "digest") {  // the bitwise alignment check
    OnDigest(m);
    return;
  }
  if (type == "heartbeat" || type == "hello" || type == "store") return;
  if (type == "started") {
    if (!current) return;
    RecordProcesses(m);
    int kept = 0, warm = 0, fresh = 0;
    if (m.contains("ranks") && m["ranks"].is_array()) {
      for (const Json& r : m["ranks"]) {
        auto how = JStrOr(r, "how", "spawned");
        const std::string h = how.ok() ? *how : "spawned";
        (h == "kept" ? kept : h == "warm" ? warm : fresh)++;
      }
    }
    Event("RanksStarted", n.id + " started its ranks for attempt " + std::to_string(attempt_) +
                              " (" + std::to_string(kept) + " kept, " + std::to_string(warm) +
                              " from the warm pool, " + std::to_string(fresh) + " new)");
    return;
  }
  if (type == "rank_info") {
    auto rank = JIntOr(m, "rank", -1);
    if (current && rank.ok() && *rank >= 0 && m.contains("in_process") && m["in_process"] == true) {
      in_process_ranks_.insert(static_cast<int>(*rank));
    }
    return;
  }
  if (type == "parked") {  // a rank left its generation on its own
    if (current) OnSpontaneousPark(n, m);
    return;
  }
  if (type == "stopped") {
    n.stopped_attempt = static_cast<int>(*attempt);
    if (const int fp = PortField(m, "free_port")) n.free_port = fp;
    n.mem.clear();
    n.portable.clear();
    if (m.contains("mem")) n.mem = StepsByRank(m["mem"]);
    if (m.contains("portable") && m["portable"].is_object()) {
      for (const auto& [rank, steps] : m["portable"].items()) {
        if (!steps.is_object()) continue;
        for (const auto& [step, digest] : steps.items()) {
          uint64_t d = 0;
          char* end = nullptr;
          const long s = std::strtol(step.c_str(), &end, 10);
          if (step.empty() || *end != '\0' || s < 0 || !ParseDigestHex(digest, &d)) continue;
          n.portable[std::atoi(rank.c_str())][s] = d;
        }
      }
    }
    return;
  }
  if (type == "fetched") {
    auto rank = JInt(m, "rank");
    auto step = JInt(m, "step");
    if (!rank.ok() || !step.ok()) return;
    // Typed reads: a malformed report must not throw (json::value would).
    auto from_r = JStrOr(m, "from", "a peer");
    auto error_r = JStrOr(m, "error", "unknown error");
    const std::string from = from_r.ok() ? *from_r : "a peer";
    const std::string error = error_r.ok() ? *error_r : "unknown error";
    const bool ok = m.contains("ok") && m["ok"].is_boolean() && m["ok"].get<bool>();
    if (ok) {
      Event("PeerRestored", n.id + " fetched rank " + std::to_string(*rank) + " step " +
                                std::to_string(*step) + " from " + from + "'s memory");
    } else {
      // A donor's copy (from_rank) that failed is not offered again either.
      auto donor = JIntOr(m, "from_rank", -1);
      if (donor.ok() && *donor >= 0) bad_replicas_.insert({static_cast<int>(*donor), *step});
      bad_replicas_.insert({static_cast<int>(*rank), *step});
      Event("PeerRestoreFailed", n.id + " could not fetch rank " + std::to_string(*rank) +
                                     " step " + std::to_string(*step) + " from " + from + ": " +
                                     error + "; that replica is not used again");
    }
    return;
  }
  if (type == "stacks") {
    if (current && stage_ == Stage::kDiagnosing) MergeDiagnosis(n.slot, m);
    return;
  }
  if (!current) return;  // stale report from an earlier attempt
  if (type == "step") {
    auto rank = JInt(m, "rank");
    auto step = JInt(m, "step");
    auto st = JNumOr(m, "step_time", 0);
    auto stall = JNumOr(m, "ckpt_stall", 0);
    auto tokens = JNumOr(m, "tokens", 0);
    auto t = JNumOr(m, "t", now);
    for (const Status* s : {&rank.status(), &step.status(), &st.status(), &stall.status(),
                            &tokens.status(), &t.status()}) {
      if (!s->ok()) {
        std::fprintf(stderr, "[bulwark] %s: dropped step report: %s\n", n.id.c_str(),
                     s->message().c_str());
        return;
      }
    }
    const StepSample sample =
        StepSampleFromJson(m, *rank, *step, std::min(*t, now), *st, *stall, *tokens);
    // After a fault the steps are lost work, but the ranks of the other nodes report
    // their last ones in their own time: those losses still go to the record (the replay
    // bundle is refreshed from it at the relaunch), and nothing else does.
    // A NaN held for attribution (HoldNan) makes these steps late too.
    const bool late = stage_ != Stage::kRunning || !held_nans_.empty();
    const bool known_rank = *rank >= 0 && *rank < spec_.world_size();
    if (known_rank) {
      long& forwarded = forwarded_step_.try_emplace(static_cast<int>(*rank), *step).first->second;
      forwarded = std::max(forwarded, static_cast<long>(*step));
    }
    // A NaN/Inf loss is forwarded as null, and its incident follows (SettleNan waits
    // for it).
    auto nan_reported = [&](long s) {
      if (!known_rank) return;
      long& first = nan_report_step_.try_emplace(static_cast<int>(*rank), s).first->second;
      first = std::min(first, s);
    };
    if (m.contains("loss") && m["loss"].is_null()) nan_reported(*step);
    if (!late) metrics_.OnStep(sample);
    auto loss = [&](long s, double l, StepDigests d) {
      if (late) {
        RecordLoss(s, static_cast<int>(*rank), l, d);
      } else {
        OnReplayLoss(s, static_cast<int>(*rank), l, d);
      }
    };
    // Steps the agent merged into this report (a burst faster than it forwards) keep
    // their losses and digests for the loss record and the replay check.
    if (m.contains("earlier") && m["earlier"].is_array()) {
      for (const Json& e : m["earlier"]) {
        if (!e.is_object()) continue;
        auto es = JInt(e, "step");
        auto el = JNumOr(e, "loss", std::numeric_limits<double>::quiet_NaN());
        if (!es.ok() || !el.ok() || *es >= *step) continue;
        if (e.contains("loss") && e["loss"].is_null()) nan_reported(*es);
        loss(*es, *el, ReportedDigests(e));
      }
    }
    loss(*step, sample.loss, ReportedDigests(m));
    if (late) {
      SettleNan(now, /*force=*/false);  // this report may be the last one it waits for
      return;
    }
    if (*rank != 0) return;
    tb_.OnStep(sample);
    if (auto v = metric_faults_.OnLoss(*step, sample.loss)) OnMetricVerdict(*v);
    if (stage_ != Stage::kRunning) return;  // the verdict started a recovery
    ledger_.OnStep(std::min(*t, now), *step, *st, *stall, *tokens);
    if (cadence_) cadence_->OnStep(*st, *stall);
    last_step_ = *step;
    if (*step > high_water_) {
      high_water_ = *step;
      history_.consecutive_failures = 0;
    }
    history_.high_water_step = high_water_;
    for (size_t i = 0; i < spec_.chaos.size(); ++i) {
      if (!chaos_[i].fired && spec_.chaos[i].at_step >= 0 && *step >= spec_.chaos[i].at_step)
        FireChaos(i);
    }
  } else if (type == "ckpt") {
    auto rank = JInt(m, "rank");
    auto step = JInt(m, "step");
    auto tier = JStrOr(m, "tier", "disk");
    if (!rank.ok() || !step.ok() || !tier.ok() ||
        (*tier != "disk" && *tier != "shared" && *tier != "object")) {
      std::fprintf(stderr, "[bulwark] %s: dropped ckpt report: %s\n", n.id.c_str(),
                   (!rank.ok()   ? rank.status().message()
                    : !step.ok() ? step.status().message()
                    : !tier.ok() ? tier.status().message()
                                 : "field 'tier' must be disk, shared or object")
                       .c_str());
      return;
    }
    if (m.contains("superseded_by")) {  // a newer step replaced it in the queue: not a failure
      auto by = JInt(m, "superseded_by");
      if (by.ok()) {
        OnPersistSkipped(*step, *by);
      } else {
        std::fprintf(stderr, "[bulwark] %s: dropped ckpt report: %s\n", n.id.c_str(),
                     by.status().message().c_str());
      }
      return;
    }
    if (m.contains("error")) {
      Event("CheckpointShardFailed", "rank " + std::to_string(*rank) + " step " +
                                         std::to_string(*step) + " (" + *tier +
                                         "): " + m["error"].dump());
      const std::string error = m["error"].is_string() ? m["error"].get<std::string>() : "";
      const CkptWriteVerdict v = ClassifyCheckpointWriteError(*tier, error);
      if (v.node_fault && stage_ == Stage::kRunning && n.slot >= 0) {  // its disk: tested
        Incident inc;
        inc.kind = FaultKind::kFatalLog;
        inc.subtype = v.subtype;
        inc.rank = static_cast<int>(*rank);
        inc.node = n.slot;
        inc.step = last_step_;
        inc.fault_time = inc.detect_time = now;
        inc.detail = "rank " + std::to_string(*rank) + "'s checkpoint of step " +
                     std::to_string(*step) + " could not be written to " + n.id +
                     "'s disk: " + error;
        OnFault(inc, Json::object());
      }
      return;
    }
    if (cadence_ && *tier == "disk") {
      auto write_s = JNumOr(m, "write_s", -1);
      if (write_s.ok()) cadence_->OnPersist(*write_s);
    }
    auto bytes = JNumOr(m, "bytes", 0);
    auto write_s = JNumOr(m, "write_s", 0);
    metrics_.OnCheckpointShard(*tier, bytes.ok() ? *bytes : 0, write_s.ok() ? *write_s : 0);
    OnCheckpointShard(static_cast<int>(*rank), *step, *tier);
  } else if (type == "model") {
    auto fpt = JNum(m, "flops_per_token");
    if (fpt.ok()) metrics_.OnModel(*fpt);
  } else if (type == "exited") {
    auto rank = JInt(m, "rank");
    if (rank.ok()) exited_ok_.insert(static_cast<int>(*rank));
    MaybeSucceed();
  } else if (type == "incident") {
    Result<Incident> inc = IncidentFromJson(m);
    if (!inc.ok()) {
      std::fprintf(stderr, "[bulwark] %s: dropped incident: %s\n", n.id.c_str(),
                   inc.status().message().c_str());
      return;
    }
    inc->node = n.slot;
    if (inc->kind == FaultKind::kCrash && inc->rank >= 0) dead_ranks_.insert(inc->rank);
    if (inc->detect_time <= 0) inc->detect_time = now;
    if (inc->fault_time <= 0 || inc->fault_time > inc->detect_time)
      inc->fault_time = inc->detect_time;
    OnFault(*inc, m);
  }
}

void ControllerImpl::OnNodeGone(Node& n, const std::string& subtype, const std::string& reason,
                                double fault_time) {
  if (n.lost) return;
  n.lost = true;
  StoreWrote(store_->DeleteAgent(spec_.name, n.id));
  if (remote_) remote_->OnAgentLost(n.id);
  double now = clock_->NowWall();
  IgnoreError(
      backend_->KillNode(n.id),
      "the node is written off already; Teardown reaps what is left");  // make sure a half-dead
                                                                        // node is really gone
  if (!n.conn && !n.retire && subtype != "not_adopted") OnEarlyExit(n, reason, now);
  if (n.slot < 0) {
    Event("SpareLost", n.id + " (" + reason + ")");
    return;
  }
  if (n.retire) return;  // we are releasing it ourselves
  for (int l = 0; l < spec_.procs_per_node; ++l)
    dead_ranks_.insert(n.slot * spec_.procs_per_node + l);
  Event("NodeLost", n.id + " (slot " + std::to_string(n.slot) + "): " + reason);
  Incident inc;
  inc.kind = FaultKind::kNodeLost;
  inc.subtype = subtype;
  inc.node = n.slot;
  inc.step = last_step_;
  inc.fault_time = fault_time;
  inc.detect_time = now;
  inc.detail = n.id + " (slot " + std::to_string(n.slot) + ") lost: " + reason;
  OnFault(inc, Json::object());
}

void ControllerImpl::CheckHeartbeats() {
  // A loop turn waits at most 0.25 s for messages; a longer gap is the controller's own.
  constexpr double kControllerStallS = 1.5;
  double now = clock_->NowWall();
  double limit =
      spec_.fault_policy.heartbeat_interval_seconds * spec_.fault_policy.heartbeat_misses;
  const double gap = heartbeats_checked_at_ < 0 ? 0 : now - heartbeats_checked_at_;
  heartbeats_checked_at_ = now;
  if (gap > kControllerStallS) {
    // Nobody listened meanwhile: the agents' messages of the gap may not even have been
    // sent yet (a paused machine pauses them too). Silence counts from before the gap
    // and again from now, so a node that is really gone is still found, `gap` later.
    for (auto& [id, n] : nodes_) n->last_heartbeat = std::min(now, n->last_heartbeat + gap);
    Event("ControllerStalled",
          Fmt("the controller did not run for %.1f s (a paused machine, a starved process or "
              "a call that blocked its loop); the agents' silence meanwhile is not counted "
              "against them",
              gap));
  }
  for (auto& [id, n] : nodes_) {
    if (n->lost || n->awaiting_capacity || n->adopting) continue;
    if (n->conn && n->conn->closed()) {
      OnNodeGone(*n, "connection_lost", "connection_lost: the agent's connection closed", now);
    } else if (n->conn && now - n->last_heartbeat > limit) {
      char why[160];
      std::snprintf(why, sizeof why, "heartbeat_timeout: no message for %.1f s (limit %.1f s)",
                    now - n->last_heartbeat, limit);
      OnNodeGone(*n, "heartbeat_timeout", why, n->last_heartbeat);
    } else if (!n->conn && now - n->started_at > opts_.agent_connect_timeout_s) {
      OnNodeGone(*n, "never_connected",
                 "never_connected: the agent did not connect within " +
                     std::to_string(static_cast<int>(opts_.agent_connect_timeout_s)) + " s",
                 n->started_at);
    }
  }
  // The backend's reason is both the subtype and the detail: "agent exited (exit 2)" (local),
  // "node gke-a-3 NotReady: kubelet stopped posting node status" (Kubernetes).
  for (const NodeLoss& loss : backend_->Poll()) {
    auto it = nodes_.find(loss.node_id);
    if (it != nodes_.end()) OnNodeGone(*it->second, loss.reason, loss.reason, now);
  }
}

void ControllerImpl::FireChaos(size_t i) {
  const ChaosFault& f = spec_.chaos[i];
  ChaosState& c = chaos_[i];
  c.fired = true;
  c.fired_at = clock_->NowWall();
  c.attempt = attempt_;
  std::string what = ChaosKindName(f.kind);
  if (f.kind == ChaosKind::kKillAgent) {
    std::string id = f.node < static_cast<int>(slots_.size()) ? slots_[f.node] : "";
    Event("ChaosInjected", what + " on node slot " + std::to_string(f.node) + " (" + id + ")");
    if (!id.empty()) {
      IgnoreError(backend_->KillNode(id),
                  "the node is written off already; Teardown reaps what is left");
    }
    return;
  }
  int slot = f.rank / spec_.procs_per_node;
  auto it = nodes_.find(slots_[slot]);
  Event("ChaosInjected", what + " on rank " + std::to_string(f.rank));
  if (it != nodes_.end() && it->second->connected()) {
    Json msg = {{"type", "chaos"}, {"action", what}, {"rank", f.rank}};
    if (f.factor > 0) msg["factor"] = f.factor;
    if (f.delay_seconds > 0) msg["delay_s"] = f.delay_seconds;
    IgnoreError(it->second->conn->Send(msg),
                "a failed send closes the connection; the loop handles the peer's loss");
  }
}

void ControllerImpl::RunChaos() {
  if (stage_ != Stage::kRunning) return;
  double elapsed = clock_->NowWall() - start_;
  for (size_t i = 0; i < spec_.chaos.size(); ++i) {
    if (!chaos_[i].fired && spec_.chaos[i].at_seconds >= 0 && elapsed >= spec_.chaos[i].at_seconds)
      FireChaos(i);
  }
}

void ControllerImpl::OnPersistSkipped(long step, long by) {
  constexpr double kSkipEventEveryS = 60;
  if (step == last_skipped_step_) return;  // the same step, another rank
  last_skipped_step_ = step;
  const double now = clock_->NowWall();
  if (now < next_skip_event_) {
    ++skipped_unreported_;
    return;
  }
  next_skip_event_ = now + kSkipEventEveryS;
  std::string msg = "the disk write of step " + std::to_string(step) + " was skipped: step " +
                    std::to_string(by) +
                    " was staged before it began and is written instead (the disk is slower "
                    "than the checkpoint cadence)";
  if (skipped_unreported_ > 0) {
    msg += "; " + std::to_string(skipped_unreported_) + " more since the last such event";
  }
  skipped_unreported_ = 0;
  Event("CheckpointPersistSkipped", msg);
}

}  // namespace bulwark
