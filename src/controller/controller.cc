#include "controller/controller.h"

#include <signal.h>

#include <algorithm>
#include <atomic>
#include <cmath>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <map>
#include <optional>
#include <sstream>

#include "ckpt/checkpoint.h"
#include "ckpt/object_tier.h"
#include "common/json_util.h"
#include "controller/cadence_tracker.h"
#include "controller/hang_localiser.h"
#include "controller/incident_json.h"
#include "sched/scheduler.h"

namespace bulwark {
namespace {

std::atomic<bool> g_cancel{false};

std::string NodeId(int i) { return "node-" + std::to_string(i); }

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

}  // namespace

void Controller::RequestCancel() { g_cancel.store(true); }

// One agent the controller knows of.
struct Controller::Node {
  std::string id;
  std::unique_ptr<JsonLineConn> conn;  // null until hello
  double started_at = 0;               // when the backend was asked to start it
  double last_heartbeat = 0;
  int slot = -1;  // node slot it serves, -1 = spare
  bool lost = false;
  bool retire = false;  // release once the current attempt is stopped
  int stopped_attempt = -1;
  // Memory tier: rank -> steps sealed in this node's staging rings, as reported
  // in `stopped` (valid until the next attempt starts).
  std::map<int, std::vector<long>> mem;
  // Peer replication: where this agent's PeerServer listens (from hello), and the
  // replicas of other nodes' ranks it holds (rank -> sealed steps; from heartbeats
  // and `stopped`).
  std::string peer_host;
  int peer_port = 0;
  std::map<int, std::vector<long>> replicas;
  bool connected() const { return conn && !conn->closed() && !lost; }
};

struct Controller::ChaosState {
  bool fired = false;
  double fired_at = 0;
  int attempt = -1;
  std::string incident;  // kind of the first incident detected after injection
  double detected_at = 0;
};

class Controller::Impl {
 public:
  Impl(JobSpec spec, ControllerOptions opts, Backend* backend, Store* store, Clock* clock)
      : spec_(std::move(spec)),
        opts_(std::move(opts)),
        backend_(backend),
        store_(store),
        clock_(clock),
        policy_(spec_.fault_policy, opts_.seed),
        ledger_(clock->NowWall()),
        chaos_(spec_.chaos.size()) {}

  Result<RunResult> Run();

 private:
  // kDiagnosing: a hang was reported; every agent is capturing its ranks' stacks
  // before the ranks are stopped, so the culprit can be localised.
  enum class Stage { kProvisioning, kRunning, kDiagnosing, kStopping, kBackoff, kDone };

  // Setup and teardown.
  Status Setup();
  void Shutdown();
  // Loop pieces.
  void PollOnce(double timeout_s);
  void AcceptAndGreet();
  void HandleAgentMessage(Node& n, const Json& m);
  void HandleClientRequest(JsonLineConn& c, const Json& m);
  void CheckHeartbeats();
  void RunChaos();
  void Reconcile();
  // Actions.
  Status Launch();
  void StopAll();
  void OnFault(const Incident& inc, Json extra);
  void Act(const Incident& inc, Json extra);
  void BeginDiagnosis(const Incident& inc, const Json& extra);
  void MergeDiagnosis(int slot, const Json& msg);
  void FinishDiagnosis();
  void OnNodeGone(Node& n, const std::string& subtype, double fault_time);
  void OnCheckpointShard(int rank, long step, const std::string& tier);
  // checkpoint.intervalSteps: auto — announce a new disk interval when it changes.
  void MaybeAnnounceCadence(double now);
  // Newest step <= max_step (-1: any) that every rank's current node holds in its
  // memory tier (from the `stopped` reports); -1 if none.
  long NewestInMemory(long max_step) const;
  // The node (other than rank's own) holding a replica of (rank, step); null if none.
  const Node* ReplicaHolder(int rank, long step, const Node* own) const;
  // "rank 0 own 12..14, on node-1 11..13; rank 1 ..." (why memory was not used).
  std::string MemoryInventoryText() const;
  // Where slot s pushes its ranks' snapshots: the next slot's node, or for a
  // one-node job the first warm standby; null when there is none.
  const Node* PeerOf(int slot) const;
  void Finish(JobPhase phase, const std::string& message);
  void FireChaos(size_t i);
  bool EnsureSlotsFilled();
  void ReplenishSpares();
  Node* StartNode(int slot);
  // Helpers.
  void Event(const std::string& reason, const std::string& message);
  void Persist();
  int SparesReady() const;
  Json BuildReport();

  JobSpec spec_;
  ControllerOptions opts_;
  Backend* backend_;
  Store* store_;
  Clock* clock_;
  RecoveryPolicy policy_;
  EttrLedger ledger_;
  JobRecord rec_;

  Fd listen_;
  std::string addr_;
  std::map<std::string, std::unique_ptr<Node>> nodes_;
  std::vector<std::unique_ptr<JsonLineConn>> pending_;  // accepted, not yet identified
  std::vector<std::string> slots_;
  int next_node_ = 0;

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
  int attempt_ = -1;
  long last_step_ = -1;
  long high_water_ = -1;
  double attempt_launched_at_ = 0;
  std::set<int> exited_ok_;
  std::map<std::pair<std::string, long>, std::set<int>> shards_;  // (tier, step) -> durable ranks
  std::vector<long> committed_;
  JobHistory history_;
  std::vector<Json> incidents_;
  std::vector<ChaosState> chaos_;
  RunResult result_;
  std::unique_ptr<ckpt::ObjectTier> object_;     // checkpoint.objectStore, if set
  std::set<std::pair<int, long>> bad_replicas_;  // (rank, step) a peer failed to serve
  std::optional<CadenceTracker> cadence_;        // checkpoint.intervalSteps: auto
  Json cadence_log_ = Json::array();             // the intervals announced, for the report
};

Controller::Controller(JobSpec spec, ControllerOptions opts, Backend* backend, Store* store,
                       Clock* clock)
    : impl_(std::make_unique<Impl>(std::move(spec), std::move(opts), backend, store, clock)) {}
Controller::~Controller() = default;
Result<RunResult> Controller::Run() { return impl_->Run(); }

void Controller::Impl::Event(const std::string& reason, const std::string& message) {
  double t = clock_->NowWall();
  if (opts_.echo_events) {
    std::fprintf(stderr, "[bulwark %7.1fs] %s: %s\n", t - start_, reason.c_str(), message.c_str());
  }
  Status st = store_->AddEvent({t, spec_.name, reason, message});
  if (!st.ok()) std::fprintf(stderr, "[bulwark] store: %s\n", st.ToString().c_str());
}

void Controller::Impl::Persist() {
  rec_.attempt = attempt_;
  rec_.high_water_step = high_water_;
  rec_.last_committed_step = committed_.empty() ? -1 : committed_.back();
  rec_.updated = clock_->NowWall();
  Status st = store_->PutJob(rec_);
  if (!st.ok()) std::fprintf(stderr, "[bulwark] store: %s\n", st.ToString().c_str());
}

Status Controller::Impl::Setup() {
  start_ = clock_->NowWall();
  std::error_code ec;
  std::filesystem::create_directories(opts_.run_dir + "/logs", ec);
  if (ec) return Internal("create run dir " + opts_.run_dir + ": " + ec.message());
  std::filesystem::create_directories(spec_.checkpoint.dir, ec);
  if (ec) return Internal("create checkpoint dir " + spec_.checkpoint.dir + ": " + ec.message());
  BW_ASSIGN_OR_RETURN(listen_, TcpListen(opts_.bind_host, 0));
  BW_ASSIGN_OR_RETURN(int port, LocalPort(listen_.get()));
  addr_ = opts_.bind_host + ":" + std::to_string(port);
  std::ofstream(opts_.run_dir + "/controller.addr") << addr_ << "\n";

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
  rec_.spec_yaml = yaml.str();
  rec_.spec_path = spec_.source_path;
  rec_.phase = JobPhase::kPending;
  if (!spec_.checkpoint.object_store.empty()) {
    auto ot = ckpt::ObjectTier::OpenUrl(spec_.checkpoint.object_store);
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
  BW_ASSIGN_OR_RETURN(committed_, ckpt::ListCommitted(ckpt::Env::Default(), spec_.checkpoint.dir));
  history_.committed_steps = committed_;
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
  for (int s = 0; s < spec_.nodes; ++s) {
    if (!StartNode(s)) return Unavailable("could not start node for slot " + std::to_string(s));
  }
  ReplenishSpares();
  stage_ = Stage::kProvisioning;
  stage_deadline_ = clock_->NowWall() + opts_.agent_connect_timeout_s;
  return Status::Ok();
}

Controller::Node* Controller::Impl::StartNode(int slot) {
  auto n = std::make_unique<Node>();
  n->id = NodeId(next_node_++);
  n->slot = slot;
  n->started_at = clock_->NowWall();
  Status st = backend_->StartNode(NodeRequest{spec_.name, n->id, addr_, opts_.run_dir});
  if (!st.ok()) {
    Event("NodeStartFailed", n->id + ": " + st.ToString());
    return nullptr;
  }
  Node* raw = n.get();
  if (slot >= 0) slots_[slot] = n->id;
  nodes_[n->id] = std::move(n);
  return raw;
}

int Controller::Impl::SparesReady() const {
  int k = 0;
  for (const auto& [id, n] : nodes_) k += (n->slot < 0 && n->connected()) ? 1 : 0;
  return k;
}

void Controller::Impl::ReplenishSpares() {
  int have = 0;
  for (const auto& [id, n] : nodes_) have += (n->slot < 0 && !n->lost) ? 1 : 0;
  for (; have < spec_.fault_policy.spare_nodes; ++have) {
    Node* n = StartNode(-1);
    if (n) Event("SpareStarted", n->id + " started as a warm standby");
  }
}

void Controller::Impl::AcceptAndGreet() {
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
    bool adopted = false;
    for (size_t i = 0; i < msgs.size() && !adopted; ++i) {
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
        n.last_heartbeat = clock_->NowWall();
        auto peer_host = JStrOr(m, "peer_host", "");
        auto peer_port = JIntOr(m, "peer_port", 0);
        n.peer_host = peer_host.ok() ? *peer_host : "";
        n.peer_port = peer_port.ok() && *peer_port > 0 && *peer_port < 65536
                          ? static_cast<int>(*peer_port)
                          : 0;
        adopted = true;
        Event("NodeReady", n.id + (n.slot >= 0 ? " serves slot " + std::to_string(n.slot)
                                               : std::string(" is a warm standby")));
        for (size_t k = i + 1; k < msgs.size(); ++k) HandleAgentMessage(n, msgs[k]);
      } else {
        HandleClientRequest(**it, m);
      }
    }
    if (adopted || (*it)->closed()) {
      it = pending_.erase(it);
    } else {
      ++it;
    }
  }
}

void Controller::Impl::HandleClientRequest(JsonLineConn& c, const Json& m) {
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
      reply["message"] = "job is not running (stage " + std::to_string(static_cast<int>(stage_)) +
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
      else
        known = false;
      if (!known) {
        reply["message"] =
            "unknown action '" + a + "'; use kill_rank, hang_rank, nan_loss or kill_agent";
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
  } else if (type == "status_request") {
    reply["ok"] = true;
    reply["message"] = std::string(JobPhaseName(rec_.phase)) + " attempt " +
                       std::to_string(attempt_) + " step " + std::to_string(last_step_);
    reply["report"] = BuildReport();
  } else {
    reply["message"] = "unknown request type '" + type + "'";
  }
  (void)c.Send(reply);
  (void)c.Flush(1);
}

void Controller::Impl::HandleAgentMessage(Node& n, const Json& m) {
  std::string type = m["type"].get<std::string>();
  double now = clock_->NowWall();
  n.last_heartbeat = now;  // any message proves liveness
  auto attempt = JIntOr(m, "attempt", -1);
  if (!attempt.ok()) {
    std::fprintf(stderr, "[bulwark] %s: %s\n", n.id.c_str(), attempt.status().message().c_str());
    return;
  }
  bool current = *attempt == attempt_;
  if ((type == "heartbeat" || type == "stopped") && m.contains("replicas")) {
    n.replicas = StepsByRank(m["replicas"]);
  }
  if (type == "heartbeat" || type == "hello") return;
  if (type == "started") {
    if (current)
      Event("RanksStarted", n.id + " started its ranks for attempt " + std::to_string(attempt_));
    return;
  }
  if (type == "stopped") {
    n.stopped_attempt = static_cast<int>(*attempt);
    n.mem.clear();
    if (m.contains("mem")) n.mem = StepsByRank(m["mem"]);
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
    if (*rank != 0 || stage_ != Stage::kRunning) return;  // steps after a fault are lost work
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
    if (m.contains("error")) {
      Event("CheckpointShardFailed", "rank " + std::to_string(*rank) + " step " +
                                         std::to_string(*step) + " (" + *tier +
                                         "): " + m["error"].dump());
      return;
    }
    if (cadence_ && *tier == "disk") {
      auto write_s = JNumOr(m, "write_s", -1);
      if (write_s.ok()) cadence_->OnPersist(*write_s);
    }
    OnCheckpointShard(static_cast<int>(*rank), *step, *tier);
  } else if (type == "exited") {
    auto rank = JInt(m, "rank");
    if (rank.ok()) exited_ok_.insert(static_cast<int>(*rank));
    if (static_cast<int>(exited_ok_.size()) == spec_.world_size() && stage_ == Stage::kRunning) {
      Finish(JobPhase::kSucceeded, "all " + std::to_string(spec_.world_size()) +
                                       " ranks exited 0 at step " + std::to_string(last_step_));
    }
  } else if (type == "incident") {
    Result<Incident> inc = IncidentFromJson(m);
    if (!inc.ok()) {
      std::fprintf(stderr, "[bulwark] %s: dropped incident: %s\n", n.id.c_str(),
                   inc.status().message().c_str());
      return;
    }
    inc->node = n.slot;
    if (inc->detect_time <= 0) inc->detect_time = now;
    if (inc->fault_time <= 0 || inc->fault_time > inc->detect_time)
      inc->fault_time = inc->detect_time;
    OnFault(*inc, m);
  }
}

void Controller::Impl::OnCheckpointShard(int rank, long step, const std::string& tier) {
  auto key = std::make_pair(tier, step);
  auto& s = shards_[key];
  s.insert(rank);
  if (static_cast<int>(s.size()) != spec_.world_size()) return;
  shards_.erase(key);
  // Older steps still collecting shards on this tier can no longer commit usefully.
  for (auto it = shards_.begin(); it != shards_.end();) {
    it = (it->first.first == tier && it->first.second < step) ? shards_.erase(it) : std::next(it);
  }
  ckpt::Env* env = ckpt::Env::Default();
  const ckpt::RetainOptions retain{spec_.checkpoint.keep, spec_.checkpoint.golden_every};
  if (tier == "object") {
    if (!object_) return;
    // The shards were uploaded from the disk tier, where this step committed first.
    Status st = object_->Commit(spec_.checkpoint.dir, step);
    if (!st.ok()) {
      Event("CheckpointCommitFailed", "object step " + std::to_string(step) + ": " + st.ToString());
      return;
    }
    if (opts_.echo_events) {
      Event("CheckpointUploaded",
            "step " + std::to_string(step) + " committed on " + object_->Url(""));
    }
    Status r = object_->Retain(retain);
    if (!r.ok()) Event("CheckpointRetentionFailed", "object: " + r.ToString());
    return;
  }
  const std::string& root = tier == "shared" ? spec_.checkpoint.shared_dir : spec_.checkpoint.dir;
  Status st = ckpt::Commit(env, root, step, spec_.world_size());
  if (!st.ok()) {
    Event("CheckpointCommitFailed", tier + " step " + std::to_string(step) + ": " + st.ToString());
    return;
  }
  if (tier == "shared") {
    Status r = ckpt::Retain(env, root, {spec_.checkpoint.keep, spec_.checkpoint.golden_every});
    if (!r.ok()) Event("CheckpointRetentionFailed", "shared: " + r.ToString());
    return;
  }
  if (committed_.empty() || committed_.back() < step) committed_.push_back(step);
  history_.committed_steps = committed_;
  (void)store_->AddCheckpoint(spec_.name, step, clock_->NowWall());
  Status r = ckpt::Retain(env, root, {spec_.checkpoint.keep, spec_.checkpoint.golden_every});
  if (!r.ok()) Event("CheckpointRetentionFailed", r.ToString());
  auto listed = ckpt::ListCommitted(ckpt::Env::Default(), spec_.checkpoint.dir);
  if (listed.ok()) committed_ = *listed;
  history_.committed_steps = committed_;
  rec_.last_committed_step = step;
  if (opts_.echo_events &&
      step % (spec_.checkpoint.interval_steps * 10 > 0 ? spec_.checkpoint.interval_steps * 10
                                                       : 1) ==
          0) {
    Event("CheckpointCommitted", "step " + std::to_string(step) + " committed by all " +
                                     std::to_string(spec_.world_size()) + " ranks");
  }
  Persist();
}

void Controller::Impl::MaybeAnnounceCadence(double now) {
  if (!cadence_) return;
  const double node_days = spec_.nodes * std::max(0.0, now - start_) / 86400.0;
  auto u = cadence_->Evaluate(now, static_cast<int>(incidents_.size()), node_days, last_step_);
  if (!u) return;
  for (int s = 0; s < spec_.nodes; ++s) {
    auto it = nodes_.find(slots_[s]);
    if (it == nodes_.end() || !it->second->connected()) continue;
    (void)it->second->conn->Send(Json{{"type", "cadence"},
                                      {"attempt", attempt_},
                                      {"interval_steps", u->interval_steps},
                                      {"from_step", u->from_step}});
  }
  cadence_log_.push_back({{"t", now - start_},
                          {"interval_steps", u->interval_steps},
                          {"from_step", u->from_step},
                          {"failures_per_node_day", u->failures_per_node_day},
                          {"reason", u->reason}});
  Event("CheckpointCadence", u->reason);
}

void Controller::Impl::OnFault(const Incident& inc, Json extra) {
  if (stage_ == Stage::kDiagnosing) {
    MergeDiagnosis(inc.node, extra);  // another node's report of the same hang
    Json j = IncidentToJson(inc);
    j["attempt"] = attempt_;
    j["secondary"] = true;
    (void)store_->AddIncident(spec_.name, attempt_, j.dump());
    return;
  }
  if (stage_ == Stage::kRunning && inc.kind == FaultKind::kHang) {
    BeginDiagnosis(inc, extra);
    return;
  }
  Act(inc, std::move(extra));
}

void Controller::Impl::BeginDiagnosis(const Incident& inc, const Json& extra) {
  diag_incident_ = inc;
  diag_extra_ = extra;
  diag_stacks_.clear();
  diag_stopped_.clear();
  diag_waiting_.clear();
  MergeDiagnosis(inc.node, extra);
  for (int s = 0; s < spec_.nodes; ++s) {
    auto it = nodes_.find(slots_[s]);
    if (s == inc.node || it == nodes_.end() || !it->second->connected()) continue;
    (void)it->second->conn->Send(Json{{"type", "capture_stacks"}, {"attempt", attempt_}});
    diag_waiting_.insert(s);
  }
  stage_ = Stage::kDiagnosing;
  // Agents capture within their stack budget (1.8 s); a silent one is not waited for.
  stage_deadline_ = clock_->NowWall() + 3;
  Event("Diagnosing", "hang reported on node slot " + std::to_string(inc.node) +
                          "; collecting every rank's stack before stopping");
}

void Controller::Impl::MergeDiagnosis(int slot, const Json& msg) {
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

void Controller::Impl::FinishDiagnosis() {
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

void Controller::Impl::Act(const Incident& inc, Json extra) {
  double now = clock_->NowWall();
  Json j = IncidentToJson(inc);
  j["attempt"] = attempt_;
  for (const char* k : {"stacks", "log_tail"}) {
    if (extra.is_object() && extra.contains(k)) j[k] = extra[k];
  }
  // Attribute the fault to a chaos injection into this attempt, if any.
  for (size_t i = 0; i < chaos_.size(); ++i) {
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
    // A consequence of a fault already being handled (peers of a crashed rank fail too).
    j["secondary"] = true;
    (void)store_->AddIncident(spec_.name, attempt_, j.dump());
    return;
  }
  history_.spares_available = SparesReady();
  history_.restarts_used = rec_.restarts;
  Decision d = policy_.Decide(inc, history_, now);
  ledger_.OnFault(inc, ActionName(d.action));
  history_.incidents.push_back(inc);
  history_.progress_at_incident.push_back(high_water_);
  history_.consecutive_failures++;
  j["decision"] = {{"action", ActionName(d.action)},
                   {"backoff_s", d.backoff_seconds},
                   {"resume_step_max", d.resume_step_max},
                   {"reason", d.reason}};
  j["detection_s"] = inc.detect_time - inc.fault_time;
  incidents_.push_back(j);
  (void)store_->AddIncident(spec_.name, attempt_, j.dump());
  std::string what = std::string(FaultKindName(inc.kind)) +
                     (inc.subtype.empty() ? "" : " (" + inc.subtype + ")") +
                     (inc.rank >= 0 ? " on rank " + std::to_string(inc.rank) : "") +
                     (inc.node >= 0 ? " on node slot " + std::to_string(inc.node) : "");
  Event("FaultDetected", what + ": " + inc.detail);
  Event("Decision", std::string(ActionName(d.action)) + ": " + d.reason);
  decision_ = d;
  if (d.action == Action::kGiveUp) {
    finish_after_stop_ = true;
    final_phase_ = JobPhase::kFailed;
    final_message_ = d.reason;
  } else {
    rec_.restarts++;
    rec_.phase = JobPhase::kRestarting;
    if (d.action == Action::kReplaceNode && d.replace_node >= 0 && d.replace_node < spec_.nodes) {
      auto it = nodes_.find(slots_[d.replace_node]);
      if (it != nodes_.end()) it->second->retire = true;
    }
  }
  rec_.message = d.reason;
  backoff_until_ = inc.detect_time + d.backoff_seconds;
  StopAll();
  Persist();
}

void Controller::Impl::StopAll() {
  for (auto& [id, n] : nodes_) {
    if (n->slot >= 0 && n->connected()) {
      (void)n->conn->Send(Json{{"type", "stop"},
                               {"attempt", attempt_},
                               {"grace_s", spec_.fault_policy.stop_grace_seconds}});
    }
  }
  stage_ = Stage::kStopping;
  stage_deadline_ = clock_->NowWall() + spec_.fault_policy.stop_grace_seconds + 10;
}

void Controller::Impl::OnNodeGone(Node& n, const std::string& subtype, double fault_time) {
  if (n.lost) return;
  n.lost = true;
  double now = clock_->NowWall();
  (void)backend_->KillNode(n.id);  // make sure a half-dead node is really gone
  if (n.slot < 0) {
    Event("SpareLost", n.id + " (" + subtype + ")");
    return;
  }
  if (n.retire) return;  // we are releasing it ourselves
  Incident inc;
  inc.kind = FaultKind::kNodeLost;
  inc.subtype = subtype;
  inc.node = n.slot;
  inc.step = last_step_;
  inc.fault_time = fault_time;
  inc.detect_time = now;
  inc.detail = n.id + " (slot " + std::to_string(n.slot) + ") lost: " + subtype;
  OnFault(inc, Json::object());
}

void Controller::Impl::CheckHeartbeats() {
  double now = clock_->NowWall();
  double limit =
      spec_.fault_policy.heartbeat_interval_seconds * spec_.fault_policy.heartbeat_misses;
  for (auto& [id, n] : nodes_) {
    if (n->lost) continue;
    if (n->conn && n->conn->closed()) {
      OnNodeGone(*n, "connection_lost", now);
    } else if (n->conn && now - n->last_heartbeat > limit) {
      OnNodeGone(*n, "heartbeat_timeout", n->last_heartbeat);
    } else if (!n->conn && now - n->started_at > opts_.agent_connect_timeout_s) {
      OnNodeGone(*n, "never_connected", n->started_at);
    }
  }
  for (const std::string& id : backend_->Poll()) {
    auto it = nodes_.find(id);
    if (it != nodes_.end()) OnNodeGone(*it->second, "agent_exited", now);
  }
}

void Controller::Impl::FireChaos(size_t i) {
  const ChaosFault& f = spec_.chaos[i];
  ChaosState& c = chaos_[i];
  c.fired = true;
  c.fired_at = clock_->NowWall();
  c.attempt = attempt_;
  std::string what = ChaosKindName(f.kind);
  if (f.kind == ChaosKind::kKillAgent) {
    std::string id = f.node < static_cast<int>(slots_.size()) ? slots_[f.node] : "";
    Event("ChaosInjected", what + " on node slot " + std::to_string(f.node) + " (" + id + ")");
    if (!id.empty()) (void)backend_->KillNode(id);
    return;
  }
  int slot = f.rank / spec_.procs_per_node;
  auto it = nodes_.find(slots_[slot]);
  Event("ChaosInjected", what + " on rank " + std::to_string(f.rank));
  if (it != nodes_.end() && it->second->connected()) {
    (void)it->second->conn->Send(Json{{"type", "chaos"}, {"action", what}, {"rank", f.rank}});
  }
}

void Controller::Impl::RunChaos() {
  if (stage_ != Stage::kRunning) return;
  double elapsed = clock_->NowWall() - start_;
  for (size_t i = 0; i < spec_.chaos.size(); ++i) {
    if (!chaos_[i].fired && spec_.chaos[i].at_seconds >= 0 && elapsed >= spec_.chaos[i].at_seconds)
      FireChaos(i);
  }
}

bool Controller::Impl::EnsureSlotsFilled() {
  bool all = true;
  for (int s = 0; s < spec_.nodes; ++s) {
    auto it = nodes_.find(slots_[s]);
    Node* cur = it == nodes_.end() ? nullptr : it->second.get();
    if (cur && !cur->lost && !cur->retire) {
      all = all && cur->connected();
      continue;
    }
    if (cur && cur->retire && !cur->lost) {
      if (cur->conn) (void)cur->conn->Send(Json{{"type", "shutdown"}});
      if (cur->conn) (void)cur->conn->Flush(1);
      (void)backend_->ReleaseNode(cur->id, spec_.fault_policy.stop_grace_seconds + 2);
      cur->lost = true;
      Event("NodeReleased", cur->id + " released from slot " + std::to_string(s));
    }
    if (cur) cur->slot = -2;  // gone; keep the record for the report
    Node* spare = nullptr;
    for (auto& [id, n] : nodes_) {
      if (n->slot == -1 && n->connected()) {
        spare = n.get();
        break;
      }
    }
    if (spare) {
      spare->slot = s;
      slots_[s] = spare->id;
      Event("StandbyPromoted",
            spare->id + " takes slot " + std::to_string(s) + " (warm standby, already connected)");
    } else {
      Node* fresh = StartNode(s);
      Event("NodeProvisioned", (fresh ? fresh->id : std::string("(failed)")) +
                                   " started for slot " + std::to_string(s) + " (no spare ready)");
      all = false;
    }
  }
  return all;
}

long Controller::Impl::NewestInMemory(long max_step) const {
  if (spec_.checkpoint.memory_slots <= 0) return -1;
  std::set<long> common;
  for (int s = 0; s < spec_.nodes; ++s) {
    auto it = nodes_.find(slots_[s]);
    if (it == nodes_.end()) return -1;
    const Node& n = *it->second;
    for (int l = 0; l < spec_.procs_per_node; ++l) {
      const int rank = s * spec_.procs_per_node + l;
      // Own node's rings, plus any live peer's replicas of this rank.
      std::set<long> have;
      if (auto m = n.mem.find(rank); m != n.mem.end())
        have.insert(m->second.begin(), m->second.end());
      for (const auto& [id, p] : nodes_) {
        if (!p->connected() || p->peer_port <= 0) continue;
        auto r = p->replicas.find(rank);
        if (r == p->replicas.end()) continue;
        for (long x : r->second) {
          if (!bad_replicas_.count({rank, x})) have.insert(x);
        }
      }
      if (rank == 0) {
        common = have;
      } else {
        std::set<long> both;
        for (long x : common) {
          if (have.count(x)) both.insert(x);
        }
        common.swap(both);
      }
    }
  }
  for (auto it = common.rbegin(); it != common.rend(); ++it) {
    if (max_step < 0 || *it <= max_step) return *it;
  }
  return -1;
}

std::string Controller::Impl::MemoryInventoryText() const {
  auto span = [](const std::vector<long>& v) {
    if (v.empty()) return std::string("none");
    const auto [lo, hi] = std::minmax_element(v.begin(), v.end());
    return std::to_string(*lo) + ".." + std::to_string(*hi);
  };
  std::string out;
  for (int s = 0; s < spec_.nodes; ++s) {
    auto it = nodes_.find(slots_[s]);
    for (int l = 0; l < spec_.procs_per_node; ++l) {
      const int rank = s * spec_.procs_per_node + l;
      std::string r = "rank " + std::to_string(rank) + " own ";
      if (it != nodes_.end()) {
        auto m = it->second->mem.find(rank);
        r += m == it->second->mem.end() ? "none" : span(m->second);
      }
      for (const auto& [id, p] : nodes_) {
        auto x = p->replicas.find(rank);
        if (p->connected() && x != p->replicas.end()) r += ", on " + id + " " + span(x->second);
      }
      out += (out.empty() ? "" : "; ") + r;
    }
  }
  return out;
}

const Controller::Node* Controller::Impl::ReplicaHolder(int rank, long step,
                                                        const Node* own) const {
  if (bad_replicas_.count({rank, step})) return nullptr;
  const Node* best = nullptr;
  for (const auto& [id, p] : nodes_) {
    if (!p->connected() || p->peer_port <= 0) continue;
    auto r = p->replicas.find(rank);
    if (r == p->replicas.end() ||
        std::find(r->second.begin(), r->second.end(), step) == r->second.end()) {
      continue;
    }
    if (p.get() == own) return p.get();  // its own replica store: no network hop
    if (!best) best = p.get();
  }
  return best;
}

const Controller::Node* Controller::Impl::PeerOf(int slot) const {
  if (!spec_.checkpoint.peer_replication || spec_.checkpoint.memory_slots <= 0) return nullptr;
  const Node* peer = nullptr;
  if (spec_.nodes >= 2) {
    auto it = nodes_.find(slots_[(slot + 1) % spec_.nodes]);
    if (it != nodes_.end()) peer = it->second.get();
  } else {
    for (const auto& [id, n] : nodes_) {
      if (n->slot < 0 && n->connected()) {
        peer = n.get();
        break;
      }
    }
  }
  return peer && peer->connected() && peer->peer_port > 0 ? peer : nullptr;
}

Status Controller::Impl::Launch() {
  attempt_++;
  long max_step = decision_.resume_step_max;
  BW_ASSIGN_OR_RETURN(long resume,
                      ckpt::NewestCommitted(ckpt::Env::Default(), spec_.checkpoint.dir, max_step));
  std::string resume_tier = resume >= 0 ? "disk" : "";
  if (!spec_.checkpoint.shared_dir.empty()) {
    Result<long> shared =
        ckpt::NewestCommitted(ckpt::Env::Default(), spec_.checkpoint.shared_dir, max_step);
    if (shared.ok() && *shared > resume) {
      resume = *shared;
      resume_tier = "shared";
    }
  }
  long mem = NewestInMemory(max_step);
  if (object_ && !decision_.resume_from_scratch) {
    // The object tier is the slowest: used only when it holds a newer step than every
    // other tier (e.g. a new cluster, or lost local disks). It is downloaded into the
    // disk tier, from which the ranks then load.
    Result<long> obj = object_->NewestCommitted(max_step);
    if (obj.ok() && *obj > resume && *obj > mem) {
      const double t0 = clock_->NowMono();
      Status d = object_->Download(*obj, spec_.checkpoint.dir);
      if (d.ok()) {
        resume = *obj;
        resume_tier = "object";
        Event("CheckpointDownloaded", "step " + std::to_string(*obj) + " from " + object_->Url("") +
                                          " into the disk tier in " +
                                          std::to_string(clock_->NowMono() - t0).substr(0, 5) +
                                          " s");
      } else {
        Event("CheckpointDownloadFailed", "step " + std::to_string(*obj) + ": " + d.ToString());
      }
      // The download held the loop: heartbeats queued meanwhile are not misses.
      for (auto& [id, n] : nodes_) n->last_heartbeat = clock_->NowWall();
    } else if (!obj.ok()) {
      Event("CheckpointListFailed", "object tier: " + obj.status().ToString());
    }
  }
  if (mem > resume) {
    resume = mem;
    resume_tier = "memory";
  } else if (spec_.checkpoint.memory_slots > 0 && attempt_ > 0 &&
             (max_step < 0 || resume < max_step)) {  // memory could have done better
    Event("MemoryTierNotUsed", "no step newer than " + std::to_string(resume) +
                                   " is in memory for every rank: " + MemoryInventoryText());
  }
  if (decision_.resume_from_scratch) resume = -1;
  // Replacement nodes restore from a peer's memory: which ranks fetch from where.
  std::map<int, Json> fetches;  // slot -> fetch list
  std::string fetched_from;
  if (resume_tier == "memory" && resume >= 0) {
    for (int s = 0; s < spec_.nodes; ++s) {
      const Node& n = *nodes_.at(slots_[s]);
      Json list = Json::array();
      for (int l = 0; l < spec_.procs_per_node; ++l) {
        const int rank = s * spec_.procs_per_node + l;
        auto m = n.mem.find(rank);
        if (m != n.mem.end() &&
            std::find(m->second.begin(), m->second.end(), resume) != m->second.end()) {
          continue;
        }
        const Node* h = ReplicaHolder(rank, resume, &n);
        if (!h) continue;  // cannot happen: NewestInMemory found one
        list.push_back({{"rank", rank},
                        {"step", resume},
                        {"host", h->peer_host},
                        {"port", h->peer_port},
                        {"from", h->id}});
        fetched_from += (fetched_from.empty() ? "" : ", ") + std::string("rank ") +
                        std::to_string(rank) + " from " + h->id;
      }
      if (!list.empty()) fetches[s] = std::move(list);
    }
  }
  for (auto& [id, n] : nodes_) n->mem.clear();
  BW_ASSIGN_OR_RETURN(int port, PickFreePort(opts_.bind_host));
  exited_ok_.clear();
  shards_.clear();
  for (int s = 0; s < spec_.nodes; ++s) {
    Node& n = *nodes_.at(slots_[s]);
    Json start = {{"type", "start"},
                  {"attempt", attempt_},
                  {"run_id", rec_.run_id},
                  {"job", spec_.name},
                  {"command",
                   [&] {
                     std::vector<std::string> c = spec_.command;
                     c.insert(c.end(), spec_.args.begin(), spec_.args.end());
                     return c;
                   }()},
                  {"env", spec_.env},
                  {"workdir", spec_.workdir},
                  {"log_dir", opts_.run_dir + "/logs"},
                  {"master_addr", opts_.bind_host},
                  {"master_port", port},
                  {"nnodes", spec_.nodes},
                  {"group_rank", s},
                  {"nproc_per_node", spec_.procs_per_node},
                  {"world_size", spec_.world_size()},
                  {"restart_count", rec_.restarts},
                  {"max_restarts", spec_.fault_policy.restart_budget},
                  {"resume_step", resume},
                  {"ckpt_dir", spec_.checkpoint.dir},
                  // auto: the ranks save every step to memory, the agents persist.
                  {"ckpt_interval_steps", cadence_ ? 1 : spec_.checkpoint.interval_steps},
                  {"persist_by_agent", cadence_.has_value()},
                  {"cadence_steps", cadence_ ? cadence_->interval_steps() : 0},
                  {"cadence_from_step", cadence_ ? cadence_->from_step() : 0},
                  {"memory_slots", spec_.checkpoint.memory_slots},
                  {"shared_dir", spec_.checkpoint.shared_dir},
                  {"object_store", object_ ? spec_.checkpoint.object_store : ""},
                  {"object_interval_steps", spec_.checkpoint.object_interval_steps},
                  {"peer_host", PeerOf(s) ? PeerOf(s)->peer_host : ""},
                  {"peer_port", PeerOf(s) ? PeerOf(s)->peer_port : 0},
                  {"fetch", fetches.count(s) ? fetches[s] : Json::array()},
                  {"skip_from", decision_.skip_batches_from},
                  {"skip_to", decision_.skip_batches_to},
                  {"hang_floor_s", spec_.fault_policy.hang_timeout_floor_seconds},
                  {"hang_multiplier", spec_.fault_policy.hang_timeout_multiplier},
                  {"startup_timeout_s", spec_.fault_policy.startup_timeout_seconds},
                  {"stop_grace_s", spec_.fault_policy.stop_grace_seconds}};
    BW_RETURN_IF_ERROR(n.conn->Send(start).Annotate("start on " + n.id));
  }
  double now = clock_->NowWall();
  attempt_launched_at_ = now;
  ledger_.OnAttemptLaunched(now, resume);
  if (!incidents_.empty() && incidents_.back()["resumed_from"].is_null()) {
    incidents_.back()["resumed_from"] = resume;
  }
  stage_ = Stage::kRunning;
  rec_.phase = JobPhase::kRunning;
  Event("AttemptStarted",
        "attempt " + std::to_string(attempt_) + " on " + std::to_string(spec_.nodes) +
            " nodes, rendezvous port " + std::to_string(port) +
            (resume >= 0 ? ", resuming after step " + std::to_string(resume) + " from the " +
                               resume_tier + " tier" +
                               (fetched_from.empty() ? "" : " (peer memory: " + fetched_from + ")")
                         : ", from scratch"));
  decision_ = Decision{};
  Persist();
  return Status::Ok();
}

void Controller::Impl::Finish(JobPhase phase, const std::string& message) {
  double now = clock_->NowWall();
  for (auto& [id, n] : nodes_) {
    if (n->connected()) (void)n->conn->Send(Json{{"type", "shutdown"}});
  }
  ledger_.OnEnd(now);
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

void Controller::Impl::Reconcile() {
  double now = clock_->NowWall();
  if (g_cancel.load() && stage_ != Stage::kDone) {
    StopAll();
    finish_after_stop_ = true;
    final_phase_ = JobPhase::kCancelled;
    final_message_ = "cancelled by the user";
    g_cancel.store(false);
  }
  switch (stage_) {
    case Stage::kProvisioning: {
      if (EnsureSlotsFilled()) {
        Status st = Launch();
        if (!st.ok()) Finish(JobPhase::kFailed, "could not launch: " + st.ToString());
      } else if (now > stage_deadline_) {
        Finish(JobPhase::kFailed,
               "agents did not connect within " +
                   std::to_string(static_cast<int>(opts_.agent_connect_timeout_s)) +
                   " s; check the agent binary and the logs in " + opts_.run_dir);
      }
      break;
    }
    case Stage::kRunning:
      MaybeAnnounceCadence(now);
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
    case Stage::kBackoff: {
      if (now < backoff_until_) break;
      bool ready = EnsureSlotsFilled();
      ReplenishSpares();
      if (ready) {
        Status st = Launch();
        if (!st.ok()) Finish(JobPhase::kFailed, "could not relaunch: " + st.ToString());
      } else if (now > stage_deadline_) {
        Finish(JobPhase::kFailed, "replacement nodes did not connect in time");
      }
      break;
    }
    case Stage::kDone:
      break;
  }
}

void Controller::Impl::PollOnce(double timeout_s) {
  std::vector<int> fds = {listen_.get()};
  for (auto& p : pending_) fds.push_back(p->fd());
  for (auto& [id, n] : nodes_) {
    if (n->connected()) fds.push_back(n->conn->fd());
  }
  PollReadable(fds, timeout_s);
  AcceptAndGreet();
  for (auto& [id, n] : nodes_) {
    if (!n->conn || n->lost) continue;
    std::vector<std::string> bad;
    auto msgs = n->conn->Read(&bad);
    for (const auto& b : bad)
      std::fprintf(stderr, "[bulwark] %s sent a bad message: %s\n", id.c_str(), b.c_str());
    for (const auto& m : msgs) {
      HandleAgentMessage(*n, m);
      if (stage_ == Stage::kDone) return;
    }
  }
}

Result<RunResult> Controller::Impl::Run() {
  BW_RETURN_IF_ERROR(Setup());
  while (stage_ != Stage::kDone) {
    PollOnce(0.02);
    if (stage_ == Stage::kDone) break;
    CheckHeartbeats();
    RunChaos();
    Reconcile();
  }
  Shutdown();
  return result_;
}

void Controller::Impl::Shutdown() {
  std::error_code ec;
  std::filesystem::remove(opts_.run_dir + "/controller.addr", ec);  // nobody listens now
  for (auto& [id, n] : nodes_) {
    if (n->connected()) (void)n->conn->Flush(1);
  }
  (void)backend_->Teardown(spec_.fault_policy.stop_grace_seconds + 3);
}

}  // namespace bulwark

namespace bulwark {

Json Controller::Impl::BuildReport() {
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
    x["rework_steps"] = row.rework_steps;
    x["resumed_from_step"] = row.resumed_from_step;
    x["lost_s"] = row.total_s();
    rows.push_back(x);
  }
  j["incidents"] = rows;
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
  j["checkpoints"] = {{"dir", spec_.checkpoint.dir}, {"committed", committed_}};
  return j;
}

}  // namespace bulwark
