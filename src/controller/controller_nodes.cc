// Controller: node slots, warm spares, waits for capacity, and the agents' memory
// and replica inventories.
#include <algorithm>
#include <cmath>
#include <cstdio>

#include "controller/controller_impl.h"

namespace bulwark {
namespace {

std::string NodeId(int i) { return "node-" + std::to_string(i); }

// The wait before the next node start after `k` failed ones in a row: 0.5 s, doubling
// to 10 s.
double StartBackoffS(int k) { return std::min(10.0, 0.5 * std::pow(2.0, std::min(k - 1, 5))); }

// The wait before the next standby start after `k` standbys in a row ended before they
// connected: 0.5 s, doubling to 5 minutes (the job runs without standbys meanwhile).
double StandbyBackoffS(int k) { return std::min(300.0, 0.5 * std::pow(2.0, std::min(k - 1, 10))); }

}  // namespace

ControllerNode* ControllerImpl::StartNode(int slot) {
  if (StartBackingOff()) return nullptr;
  auto n = std::make_unique<Node>();
  n->id = NodeId(next_node_++);
  n->slot = slot;
  Node* raw = n.get();
  if (!TryStartNode(*raw) && !raw->awaiting_capacity) return nullptr;
  if (slot >= 0) slots_[slot] = raw->id;
  nodes_[raw->id] = std::move(n);
  return raw;
}

bool ControllerImpl::TryStartNode(Node& n) {
  const double now = clock_->NowWall();
  Status st = backend_->StartNode(NodeRequest{spec_.name, n.id, addr_, opts_.run_dir, n.slot});
  const std::string role =
      n.slot >= 0 ? "slot " + std::to_string(n.slot) : std::string("a warm standby");
  if (st.ok()) {
    n.started_at = now;
    // Each kind of start vouches only for its own kind (a standby's start says nothing
    // of why a slot's was refused, and the reverse).
    if (n.slot < 0) {
      standby_start_failures_ = 0;
    } else {
      start_failures_ = 0;
      start_error_.clear();
    }
    if (n.awaiting_capacity) {
      n.awaiting_capacity = false;
      char waited[32];
      std::snprintf(waited, sizeof waited, "%.1f", now - n.capacity_since);
      Event("CapacityAvailable",
            n.id + " started for " + role + " after waiting " + waited + " s for capacity");
      // The agent's connect deadline starts now, not when the wait began.
      stage_deadline_ = std::max(stage_deadline_, now + opts_.agent_connect_timeout_s);
    }
    return true;
  }
  if (st.code() == Code::kUnavailable) {
    if (!n.awaiting_capacity) {
      n.awaiting_capacity = true;
      n.capacity_since = now;
    }
    n.next_start_try = now + 1;
    if (st.message() != n.capacity_message) {
      n.capacity_message = st.message();
      Event("WaitingForCapacity", "waiting for capacity for " + role + ": " + st.message());
    }
    return false;
  }
  n.awaiting_capacity = false;
  // A refused standby holds up only standby starts (as one that ends early does).
  int k;
  double wait;
  if (n.slot < 0) {
    k = ++standby_start_failures_;
    wait = StandbyBackoffS(k);
    standby_retry_at_ = std::max(standby_retry_at_, now + wait);
  } else {
    k = ++start_failures_;
    wait = StartBackoffS(k);
    start_retry_at_ = now + wait;
    start_error_ = st.ToString();
  }
  char next[32];
  std::snprintf(next, sizeof next, "%.1f", wait);
  Event("NodeStartFailed", n.id + " for " + role + ": " + st.ToString() + " (" + std::to_string(k) +
                               " in a row; next try in " + next + " s)");
  return false;
}

void ControllerImpl::OnEarlyExit(const Node& n, const std::string& reason, double now) {
  const int k = ++early_exits_[n.slot];
  if (n.slot < 0) {
    // A standby's end holds up only standby starts, never a slot's replacement.
    const double wait = StandbyBackoffS(k);
    standby_retry_at_ = std::max(standby_retry_at_, now + wait);
    if (k == kMaxEarlyExits) {
      char next[32];
      std::snprintf(next, sizeof next, "%.1f", wait);
      Event("StandbyStartFailed",
            "standbys ended before connecting " + std::to_string(k) + " times in a row (last: " +
                n.id + ", " + reason + "); the job runs on without them; the next is started in " +
                next + " s, backing off to 300 s. The agent's own error is in its output (the " +
                "console of `bulwark run`; the pod's or the step's log on a cluster)");
    }
    return;
  }
  start_retry_at_ = std::max(start_retry_at_, now + StartBackoffS(k));
  if (k < kMaxEarlyExits || !early_exit_failure_.empty()) return;
  early_exit_failure_ = "the agent for slot " + std::to_string(n.slot) + " ended before " +
                        "connecting " + std::to_string(k) + " times in a row (last: " + n.id +
                        ", " + reason + "); it cannot start there: its own error is in its " +
                        "output (the console of `bulwark run`; the pod's or the step's log on "
                        "a cluster)";
}

void ControllerImpl::RetryCapacityWaits() {
  const double now = clock_->NowWall();
  for (auto& [id, n] : nodes_) {
    if (!n->awaiting_capacity || n->lost || now < n->next_start_try) continue;
    // A node that now fails outright is replaced like a lost one (EnsureSlotsFilled,
    // ReplenishSpares).
    if (!TryStartNode(*n) && !n->awaiting_capacity) n->lost = true;
  }
}

std::string ControllerImpl::CapacityExceeded(double now, bool* waiting) const {
  *waiting = false;
  std::string worst;
  double longest = capacity_wait_s_;
  for (const auto& [id, n] : nodes_) {
    if (!n->awaiting_capacity || n->lost || n->slot < 0) continue;
    *waiting = true;
    const double waited = now - n->capacity_since;
    if (waited > longest) {
      longest = waited;
      char limit[32];
      std::snprintf(limit, sizeof limit, "%g", capacity_wait_s_);
      worst = "no capacity for slot " + std::to_string(n->slot) + " within " + limit +
              " s: " + n->capacity_message;
    }
  }
  return worst;
}

int ControllerImpl::SparesReady() const {
  int k = 0;
  for (const auto& [id, n] : nodes_) k += (n->slot == -1 && n->connected()) ? 1 : 0;
  return k;
}

void ControllerImpl::ReplenishSpares() {
  int have = 0;
  for (const auto& [id, n] : nodes_) have += (n->slot == -1 && !n->lost) ? 1 : 0;
  auto backing_off = [&] { return StartBackingOff() || clock_->NowWall() < standby_retry_at_; };
  for (; have < spec_.fault_policy.spare_nodes && !backing_off(); ++have) {
    Node* n = StartNode(-1);
    if (n && !n->awaiting_capacity) Event("SpareStarted", n->id + " started as a warm standby");
  }
}

bool ControllerImpl::EnsureSlotsFilled() {
  bool all = true;
  for (int s = 0; s < spec_.nodes; ++s) {
    auto it = nodes_.find(slots_[s]);
    Node* cur = it == nodes_.end() ? nullptr : it->second.get();
    if (cur && !cur->lost && !cur->retire) {
      // Stop-diagnose without a standby: the relaunch waits for the verdict.
      if (cur->diagnose_pending && cur->connected()) StartDiagnostics(*cur);
      all = all && cur->connected() && !cur->diagnosing;
      continue;
    }
    if (cur && cur->retire && !cur->lost && cur->diagnose_pending && cur->connected()) {
      // Out of the job to be tested; a standby takes the slot below.
      cur->retire = false;
      cur->slot = kSlotTesting;
      StoreWrote(store_->DeleteAgent(spec_.name, cur->id));
      StartDiagnostics(*cur);
    } else if (cur && cur->retire && !cur->lost) {
      if (cur->conn) {
        IgnoreError(cur->conn->Send(Json{{"type", "shutdown"}}),
                    "a failed send closes the connection; the loop handles the peer's loss");
      }
      if (cur->conn) {
        IgnoreError(cur->conn->Flush(1),
                    "best effort before the connection goes; an unsent message is the peer's loss");
      }
      IgnoreError(backend_->ReleaseNode(cur->id, spec_.fault_policy.stop_grace_seconds + 2),
                  "the node is written off already; Teardown reaps what is left");
      cur->lost = true;
      StoreWrote(store_->DeleteAgent(spec_.name, cur->id));
      if (remote_) remote_->OnAgentLost(cur->id);
      Event("NodeReleased", cur->id + " released from slot " + std::to_string(s));
    }
    if (cur && cur->slot != kSlotTesting) cur->slot = -2;  // gone; kept for the report
    std::vector<std::string> ready;
    for (const auto& [id, n] : nodes_) {
      if (n->slot == -1 && n->connected()) ready.push_back(id);
    }
    if (!ready.empty()) {
      std::string pick = backend_->PreferredSpare(s, ready);
      if (std::find(ready.begin(), ready.end(), pick) == ready.end()) pick = ready.front();
      nodes_.at(pick)->slot = s;
      slots_[s] = pick;
      backend_->OnSlotAssigned(pick, s);
      RecordAgent(*nodes_.at(pick));
      Event("StandbyPromoted",
            pick + " takes slot " + std::to_string(s) + " (warm standby, already connected)");
    } else if (StartBackingOff()) {
      all = false;  // NodeStartFailed said when the next try is
    } else {
      Node* fresh = StartNode(s);
      Event("NodeProvisioned",
            (fresh ? fresh->id : std::string("(failed)")) + " started for slot " +
                std::to_string(s) + " (no spare ready" +
                (fresh && fresh->awaiting_capacity ? "; waiting for capacity)" : ")"));
      all = false;
    }
  }
  return all;
}

std::string ControllerImpl::DesignatedAgent() const {
  for (const std::string& id : slots_) {
    auto it = nodes_.find(id);
    if (it != nodes_.end() && it->second->slot >= 0 && it->second->connected()) return id;
  }
  return "";
}

MemoryResume ControllerImpl::MemoryResumeFor(long max_step) const {
  if (spec_.checkpoint.memory_slots <= 0) return {};
  std::vector<RankMemory> ranks;
  for (int s = 0; s < spec_.nodes; ++s) {
    auto it = nodes_.find(slots_[s]);
    if (it == nodes_.end()) return {};
    const Node& n = *it->second;
    for (int l = 0; l < spec_.procs_per_node; ++l) {
      const int rank = s * spec_.procs_per_node + l;
      RankMemory r;
      r.node = n.id;
      if (auto m = n.mem.find(rank); m != n.mem.end())
        r.own.insert(m->second.begin(), m->second.end());
      if (auto p = n.portable.find(rank); p != n.portable.end()) {
        for (const auto& [step, digest] : p->second) {
          if (!bad_replicas_.count({rank, step})) r.portable[step] = digest;  // failed as donor
        }
      }
      // Live peers' replicas of this rank, its own node's replica store first.
      std::set<long> steps;
      for (const auto& [id, p] : nodes_) {
        if (!p->connected() || p->peer_port <= 0) continue;
        auto x = p->replicas.find(rank);
        if (x != p->replicas.end()) steps.insert(x->second.begin(), x->second.end());
      }
      for (long step : steps) {
        if (const Node* h = ReplicaHolder(rank, step, &n)) r.replica[step] = h->id;
      }
      ranks.push_back(std::move(r));
    }
  }
  return ChooseMemoryResume(ranks, max_step);
}

std::string ControllerImpl::MemoryInventoryText() const {
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

const ControllerNode* ControllerImpl::ReplicaHolder(int rank, long step, const Node* own) const {
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

const ControllerNode* ControllerImpl::PeerOf(int slot) const {
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

}  // namespace bulwark
