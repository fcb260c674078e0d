// Controller: adopting the agents of an earlier controller of the same job.
//
// Protocol (docs/protocol.md, "Adoption"). A controller that finds agents recorded for
// its job (its store: `bulwark run` restarted; or the backend: a new operator leader
// reading the job's pods) dials each at its adopt port and sends `adopt` {job, run_id,
// node}. The agent — orphaned since its controller's connection closed, its ranks still
// running — checks the names, makes this connection its controller's and answers with
// `hello` (adopted: true, the attempt it runs, its slot, ranks alive, state) followed by
// the running attempt's incidents and exits it had reported to the lost controller (which
// may have died before acting on them) and every report it made meanwhile. Once every candidate has
// answered or adopt_timeout_s has passed:
//   * the newest attempt a slot's agent runs carries on as this controller's attempt:
//     no `start` is sent, no rank restarts, the reports made meanwhile are handled as
//     if they had just arrived (an exit, an incident); a slot whose agent did not answer,
//     or answered without its ranks, is a fault of that attempt, handled by the
//     recovery policy as any other (the answered agents are kept);
//   * when no attempt runs (the controller was lost between attempts), the answered
//     agents fill their slots and the job launches as after any restart.
// Candidates that did not answer are killed through the backend and forgotten.
#include <algorithm>
#include <cstdio>

#include "common/json_util.h"
#include "controller/controller_impl.h"

namespace bulwark {

std::vector<AdoptableNode> ControllerImpl::AdoptionCandidates(bool from_store) {
  std::map<std::string, AdoptableNode> by_id;
  if (from_store) {
    auto recorded = store_->ListAgents(spec_.name);
    if (!recorded.ok()) {
      std::fprintf(stderr, "[bulwark] store: %s\n", recorded.status().ToString().c_str());
    } else {
      for (const AgentRecord& a : *recorded) {
        by_id[a.node] = {a.node, a.slot, a.host, a.adopt_port, a.pid};
      }
    }
  }
  for (const AdoptableNode& n : backend_->AdoptableNodes()) by_id[n.node_id] = n;
  std::vector<AdoptableNode> out;
  for (auto& [id, n] : by_id) {
    if (n.adopt_port > 0 && !n.host.empty()) out.push_back(n);
  }
  return out;
}

void ControllerImpl::BeginAdoption(const std::vector<AdoptableNode>& candidates) {
  const double now = clock_->NowWall();
  std::string names;
  for (const AdoptableNode& c : candidates) {
    auto n = std::make_unique<Node>();
    n->id = c.node_id;
    n->slot = c.slot >= 0 && c.slot < spec_.nodes && slots_[c.slot].empty() ? c.slot : -1;
    n->started_at = now;
    n->adopting = true;
    n->pid = c.pid;
    if (n->slot >= 0) slots_[n->slot] = n->id;
    // Node ids stay unique: new nodes are numbered after every adopted one.
    if (c.node_id.rfind("node-", 0) == 0) {
      next_node_ = std::max(next_node_, std::atoi(c.node_id.c_str() + 5) + 1);
    }
    backend_->AdoptNode(c);
    auto fd = TcpConnect(c.host, c.adopt_port, 1.0);
    if (!fd.ok()) {
      n->adopt_failure = "cannot reach its adopt port " + c.host + ":" +
                         std::to_string(c.adopt_port) + ": " + fd.status().message();
    } else {
      n->adopt_conn = std::make_unique<JsonLineConn>(std::move(fd).value());
      Status st = n->adopt_conn->Send(
          {{"type", "adopt"}, {"job", spec_.name}, {"run_id", rec_.run_id}, {"node", c.node_id}});
      if (!st.ok()) n->adopt_failure = "adopt not sent: " + st.message();
    }
    names +=
        (names.empty() ? "" : ", ") + c.node_id + "@" + c.host + ":" + std::to_string(c.adopt_port);
    nodes_[n->id] = std::move(n);
  }
  stage_ = Stage::kAdopting;
  stage_deadline_ = now + opts_.adopt_timeout_s;
  Event("Adopting", "agents of an earlier controller of this job found: " + names +
                        "; asking them to carry on under this one");
}

void ControllerImpl::PumpAdoptions() {
  for (auto& [id, n] : nodes_) {
    if (!n->adopt_conn) continue;
    std::vector<std::string> bad;
    std::vector<Json> msgs = n->adopt_conn->Read(&bad);
    for (size_t i = 0; i < msgs.size(); ++i) {
      const Json& m = msgs[i];
      if (m["type"] == "hello") {
        auto node = JStrOr(m, "node", "");
        if (!node.ok() || *node != n->id) {
          n->adopt_failure = "answered as " + (node.ok() ? *node : std::string("?"));
          n->adopt_conn.reset();
          break;
        }
        n->conn = std::move(n->adopt_conn);
        Greet(*n, m);
        for (size_t k = i + 1; k < msgs.size(); ++k) n->deferred.push_back(msgs[k]);
        break;
      }
      if (m["type"] == "refused") {
        auto why = JStrOr(m, "message", "");
        n->adopt_failure = "refused: " + (why.ok() ? *why : std::string("?"));
        n->adopt_conn.reset();
        break;
      }
    }
    if (n->adopt_conn && n->adopt_conn->closed()) {
      n->adopt_failure = "closed the connection without answering";
      n->adopt_conn.reset();
    }
  }
}

bool ControllerImpl::AdoptionSettled() const {
  for (const auto& [id, n] : nodes_) {
    if (n->adopting && !n->conn && n->adopt_failure.empty()) return false;
  }
  return true;
}

void ControllerImpl::FinishAdoption(double now) {
  // The attempt that carries on: the newest any slot's agent still runs.
  int attempt = -1;
  int answered = 0, kept = 0;
  for (auto& [id, n] : nodes_) {
    if (!n->adopting) continue;
    n->adopting = false;
    if (!n->conn) {
      if (n->adopt_failure.empty()) {
        n->adopt_failure = "no answer within " + std::to_string(opts_.adopt_timeout_s) + " s";
      }
      n->adopt_conn.reset();
      continue;
    }
    ++answered;
    if (n->slot >= 0 && n->adopted_state != "idle") attempt = std::max(attempt, n->adopted_attempt);
  }
  // Candidates that did not answer are gone for this controller.
  std::vector<Node*> unanswered;
  for (auto& [id, n] : nodes_) {
    if (!n->adopt_failure.empty() && !n->conn) unanswered.push_back(n.get());
  }
  for (Node* n : unanswered) {
    Event("AdoptionFailed", n->id + ": " + n->adopt_failure);
    if (n->slot < 0 || attempt < 0) {
      n->lost = true;
      IgnoreError(backend_->KillNode(n->id),
                  "the node is written off already; Teardown reaps what is left");
      StoreWrote(store_->DeleteAgent(spec_.name, n->id));
    }
  }
  if (attempt < 0) {
    // Nothing was running: launch as after any restart, on the agents that answered.
    stage_ = Stage::kProvisioning;
    stage_deadline_ = now + opts_.agent_connect_timeout_s;
    Event("Adopted", std::to_string(answered) + " agent(s) adopted, no attempt running; " +
                         "launching from the newest checkpoint");
    for (auto& [id, n] : nodes_) {
      for (const Json& m : n->deferred) HandleAgentMessage(*n, m);
      n->deferred.clear();
    }
    ReplenishSpares();
    Persist();
    return;
  }
  attempt_ = attempt;
  stage_ = Stage::kRunning;
  rec_.phase = JobPhase::kRunning;
  attempt_launched_at_ = now;
  ledger_.OnAttemptAdopted(now, high_water_);
  for (auto& [id, n] : nodes_) {
    if (n->slot >= 0 && n->connected() && n->adopted_attempt == attempt &&
        n->adopted_state != "idle") {
      ++kept;
    }
  }
  Event("Adopted", std::to_string(kept) + " of " + std::to_string(spec_.nodes) +
                       " node(s) carry on with attempt " + std::to_string(attempt) +
                       " under this controller; no rank restarted");
  Persist();
  // What happened while no controller was there, as if it had just been reported.
  for (auto& [id, n] : nodes_) {
    std::vector<Json> msgs;
    msgs.swap(n->deferred);
    for (const Json& m : msgs) {
      if (stage_ == Stage::kDone) return;
      HandleAgentMessage(*n, m);
    }
  }
  if (stage_ != Stage::kRunning) return;  // a reported fault is being handled
  // A slot without a running agent of this attempt is a fault of the attempt.
  for (int s = 0; s < spec_.nodes && stage_ == Stage::kRunning; ++s) {
    auto it = nodes_.find(slots_[s]);
    Node* n = it == nodes_.end() ? nullptr : it->second.get();
    bool finished = true;  // every rank of the slot exited 0
    for (int l = 0; l < spec_.procs_per_node; ++l) {
      finished = finished && exited_ok_.count(s * spec_.procs_per_node + l) > 0;
    }
    if (n && n->connected() && n->adopted_attempt == attempt &&
        (n->adopted_state != "idle" || finished)) {
      continue;
    }
    if (n && !n->lost && !n->connected()) {
      OnNodeGone(*n, "not_adopted", "not_adopted: " + n->adopt_failure, now);
      continue;
    }
    Incident inc;
    inc.kind = FaultKind::kCrash;
    inc.subtype = "exited_unobserved";
    inc.node = s;
    inc.rank = s * spec_.procs_per_node;
    inc.step = last_step_;
    inc.fault_time = now;
    inc.detect_time = now;
    inc.detail = "slot " + std::to_string(s) + (n ? " (" + n->id + ")" : std::string()) +
                 ": its ranks of attempt " + std::to_string(attempt) +
                 " were not running when this controller adopted the job";
    OnFault(inc, Json::object());
  }
  // The other candidates that did not answer are replaced when the attempt relaunches.
  for (Node* n : unanswered) {
    if (n->lost) continue;
    n->lost = true;
    IgnoreError(backend_->KillNode(n->id),
                "the node is written off already; Teardown reaps what is left");
    StoreWrote(store_->DeleteAgent(spec_.name, n->id));
  }
}

void ControllerImpl::RecordAgent(const Node& n) {
  if (n.adopt_port <= 0) return;
  Status st = store_->PutAgent({spec_.name, n.id, n.slot, n.peer_host, n.adopt_port, n.pid});
  if (!st.ok()) std::fprintf(stderr, "[bulwark] store: %s\n", st.ToString().c_str());
  backend_->OnAgentEndpoint(n.id, n.peer_host, n.adopt_port);
}

}  // namespace bulwark
