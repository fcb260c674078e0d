// Controller: the link check among the nodes of a diagnosis (docs/diagnosis.md "The link
// check", diag/link.h) and the straggler trigger (policy/link_policy.h).
//
// A diagnosis that wants the links tested (WantsLinkCheck: a hang, a failed
// collective, an NCCL timeout; and a straggler) forms a ring: the node under test first,
// then its reference peers -- for an incident, the other nodes of the job (up to 15);
// for a straggler, one peer: a ready warm standby, else another node of the job. The
// protocol (docs/protocol.md):
//   1. the node under test gets its `diagnose` with "link" among its checks and
//      "link": {"session": K}; each reference peer a `diagnose` with only "link";
//   2. each answers `link_listening` {id, port} once it has bound its listener;
//   3. once every member listens (or after kListenWaitS, with those that did, if the
//      node under test is one of at least two), each gets `link_peers` {id, index,
//      peers}; fewer than two, and the ring is called off (`link_peers` with no peers);
//   4. each runs its part and answers `diagnosis`; the ring's verdict (diag::JudgeLinks,
//      pure) is taken once every member in the ring answered (or is gone), or -- the node
//      under test having answered -- kLinkBudgetS + kRingReplySlackS after link_peers,
//      or at the deadline of the node under test (a member that never answers has its
//      links "not reported").
// The verdict is one more check of the node under test, "link": failed when the ring
// names it, with every link's MiB/s as evidence; a reference peer the ring names is
// reported (event LinkSuspect, the record's link.at_fault) but left alone.
#include <algorithm>
#include <cstdio>

#include "common/json_util.h"
#include "controller/controller_impl.h"
#include "diag/link.h"
#include "policy/link_policy.h"

namespace bulwark {
namespace {

constexpr double kListenWaitS = 5;      // for every member's link_listening
constexpr double kLinkBudgetS = 20;     // the link check's budget on every member
constexpr double kRingReplySlackS = 5;  // beyond it, for a peer's `diagnosis`

}  // namespace

std::string ControllerImpl::PlanLinkCheck(Node& n, Json* diagnose, std::string* why_not) {
  if (link_) {
    *why_not = "another link check is running";
    return "";
  }
  if (!n.link_capable) {
    *why_not = "its agent does not run the link check";
    return "";
  }
  auto usable = [&](const Node& p) {
    return &p != &n && p.connected() && p.link_capable && !p.diagnosing && !p.diagnose_pending &&
           p.link_ref_id == 0 && !p.quarantined;
  };
  std::vector<Node*> refs;
  Node* standby = nullptr;
  for (auto& [id, p] : nodes_) {
    if (!usable(*p)) continue;
    if (p->slot >= 0 && !n.diagnose_in_place) {
      if (refs.size() + 1 < static_cast<size_t>(diag::kMaxLinkMembers)) refs.push_back(p.get());
    } else if (p->slot == -1 && !standby) {
      standby = p.get();
    }
  }
  if (n.diagnose_in_place) {  // a straggler: one reference, an idle standby first
    Node* other = nullptr;
    for (auto& [id, p] : nodes_) {
      if (!other && usable(*p) && p->slot >= 0) other = p.get();
    }
    if (standby || other) refs = {standby ? standby : other};
  } else if (refs.empty() && standby) {
    refs = {standby};
  }
  if (refs.empty()) {
    *why_not = "no other node to test its links against";
    return "";
  }
  const double now = clock_->NowWall();
  LinkSession s;
  s.id = ++next_link_session_;
  s.members.push_back(n.id);
  s.diagnose_ids[n.id] = n.diagnose_id;
  s.listen_deadline = now + kListenWaitS;
  (*diagnose)["checks"].push_back("link");
  (*diagnose)["link"] = {{"session", s.id}};
  std::string names;
  for (Node* p : refs) {
    p->link_ref_id = ++next_diagnose_id_;
    s.members.push_back(p->id);
    s.diagnose_ids[p->id] = p->link_ref_id;
    names += (names.empty() ? "" : ", ") + p->id;
    IgnoreError(p->conn->Send(Json{{"type", "diagnose"},
                                   {"id", p->link_ref_id},
                                   {"checks", Json::array({"link"})},
                                   {"budget_s", kLinkBudgetS},
                                   {"link", {{"session", s.id}}}}),
                "a failed send closes the connection; the ring goes on without it");
  }
  link_ = std::move(s);
  return "a link check (ring all-reduce, MiB/s per link) with " + names;
}

void ControllerImpl::OnLinkListening(Node& n, const Json& m) {
  auto id = JIntOr(m, "id", -1);
  auto port = JIntOr(m, "port", 0);
  if (!link_ || link_->peers_sent || !id.ok() || !port.ok() || *port < 1 || *port > 65535) {
    std::fprintf(stderr, "[bulwark] %s: dropped link_listening (%s)\n", n.id.c_str(),
                 !link_ || link_->peers_sent ? "no ring is forming"
                                             : "fields 'id' and 'port' (1..65535) are required");
    return;
  }
  auto it = link_->diagnose_ids.find(n.id);
  if (it == link_->diagnose_ids.end() || it->second != *id) return;  // another request's
  link_->ports[n.id] = static_cast<int>(*port);
  if (link_->ports.size() == link_->members.size()) SendLinkPeers();
}

void ControllerImpl::SendLinkPeers() {
  LinkSession& s = *link_;
  s.peers_sent = true;
  s.ring_deadline = clock_->NowWall() + kLinkBudgetS + kRingReplySlackS;
  Json peers = Json::array();
  for (const std::string& id : s.members) {
    auto it = nodes_.find(id);
    if (!s.ports.count(id) || it == nodes_.end() || !it->second->connected()) continue;
    s.ring.push_back(id);
    const std::string host = it->second->peer_host.empty() ? "127.0.0.1" : it->second->peer_host;
    peers.push_back(host + ":" + std::to_string(s.ports[id]));
  }
  const bool off = s.ring.size() < 2 || s.ring.front() != s.members.front();
  if (off) {
    s.off = "the ring did not form: only " + std::to_string(s.ring.size()) + " of " +
            std::to_string(s.members.size()) + " nodes listened within " +
            std::to_string(static_cast<int>(kListenWaitS)) + " s";
    peers = Json::array();
  }
  for (size_t i = 0; i < s.members.size(); ++i) {
    auto it = nodes_.find(s.members[i]);
    if (!s.ports.count(s.members[i]) || it == nodes_.end() || !it->second->connected()) continue;
    const auto place = std::find(s.ring.begin(), s.ring.end(), s.members[i]) - s.ring.begin();
    IgnoreError(it->second->conn->Send(Json{{"type", "link_peers"},
                                            {"id", s.diagnose_ids[s.members[i]]},
                                            {"index", place},
                                            {"peers", peers}}),
                "a failed send closes the connection; its links are then not reported");
  }
  if (off) {
    s.ring.clear();
    if (s.results.count(s.members.front())) FinishLinkSession();
  }
}

bool ControllerImpl::HoldForLink(Node& n, const std::vector<diag::CheckResult>& results) {
  if (!link_ || !link_->diagnose_ids.count(n.id)) return false;
  LinkSession& s = *link_;
  s.results[n.id] = results;
  const bool under_test = s.members.front() == n.id;
  bool all = s.peers_sent;
  for (const std::string& id : s.ring) {  // a member that is gone answers no more
    auto it = nodes_.find(id);
    all = all && (s.results.count(id) || it == nodes_.end() || !it->second->connected());
  }
  if (all || (under_test && s.ring.empty())) FinishLinkSession();
  return under_test;
}

void ControllerImpl::CheckLinkSession(double now) {
  if (!link_) return;
  if (!link_->peers_sent && now > link_->listen_deadline) SendLinkPeers();
  if (!link_) return;
  // The peers' reports are late past ring_deadline: the verdict goes on without them
  // once the node under test answered (their links are "not reported").
  const bool under_test_in = link_->results.count(link_->members.front()) > 0;
  if ((under_test_in && link_->peers_sent && now > link_->ring_deadline) ||
      (link_->deadline > 0 && now > link_->deadline)) {
    FinishLinkSession();
  }
}

void ControllerImpl::FinishLinkSession() {
  LinkSession s = std::move(*link_);
  link_.reset();
  if (!s.peers_sent) {  // call the ring off for those that listen, so none waits for it
    for (const auto& [id, port] : s.ports) {
      auto p = nodes_.find(id);
      if (p == nodes_.end() || !p->second->connected()) continue;
      IgnoreError(
          p->second->conn->Send(
              Json{{"type", "link_peers"}, {"id", s.diagnose_ids[id]}, {"peers", Json::array()}}),
          "a failed send closes the connection; its agent's budget ends its wait");
    }
    if (s.off.empty()) s.off = "the node under test answered before the ring formed";
  }
  for (const std::string& id : s.members) {  // references that never answered: free again
    auto it = nodes_.find(id);
    if (it != nodes_.end() && id != s.members.front()) it->second->link_ref_id = 0;
  }
  auto it = nodes_.find(s.members.front());
  if (it == nodes_.end()) return;
  Node& n = *it->second;
  const bool answered = s.results.count(n.id) > 0;
  std::vector<diag::CheckResult> own;  // its other checks' results
  double link_s = 0;
  for (const diag::CheckResult& r : s.results[n.id]) {
    if (r.name == "link") {
      link_s = r.seconds;
    } else {
      own.push_back(r);
    }
  }
  Json record;
  if (s.ring.empty()) {
    record = {{"run", false}, {"reason", s.off.empty() ? "the ring did not form" : s.off}};
    Event("LinkCheck", n.id + ": no link check: " + record["reason"].get<std::string>());
  } else {
    std::vector<diag::LinkSample> samples;
    std::vector<int> silent;
    for (size_t i = 0; i < s.ring.size(); ++i) {
      auto got = s.results.find(s.ring[i]);
      if (got == s.results.end()) {
        silent.push_back(static_cast<int>(i));
        continue;
      }
      for (const diag::CheckResult& r : got->second) {
        if (r.name == "link") samples.insert(samples.end(), r.links.begin(), r.links.end());
      }
    }
    const diag::LinkVerdict v = diag::JudgeLinks(s.ring, samples, {0}, silent);
    Json at_fault = Json::array();
    bool named = false;
    for (int i : v.at_fault) {
      at_fault.push_back(s.ring[i]);
      named = named || i == 0;
      if (i != 0) {
        Event("LinkSuspect", s.ring[i] + " (a reference peer of " + n.id +
                                 "'s diagnosis) is named by the link check: " + v.summary);
      }
    }
    own.push_back({"link", !named, link_s, v.summary + " [" + v.evidence + "]"});
    record = {{"run", true},
              {"members", s.ring},
              {"summary", v.summary},
              {"evidence", v.evidence},
              {"median_mib_s", v.median_mib_s},
              {"at_fault", at_fault}};
    Event("LinkCheck", n.id + " and " + std::to_string(s.ring.size() - 1) +
                           " reference peer(s): " + v.summary + " [" + v.evidence + "]");
  }
  if (Json* rec = DiagnosisRecord(n)) (*rec)["link"] = record;
  RewriteIncident(n.diagnose_incident);
  if (!n.diagnosing) return;  // finished already (lost, or past its deadline)
  if (!answered) {
    own.push_back({"diagnostics", false, 0, "the node's checks did not answer"});
  }
  FinishDiagnostics(n, own);
}

bool ControllerImpl::StragglerTest(int node, double score, std::string* reason) {
  StragglerFacts f;
  f.node = node;
  f.score = score;
  f.diagnose_enabled = spec_.fault_policy.diagnose_suspect_nodes;
  f.link_session_free = !link_.has_value();
  Node* n = nullptr;
  if (node >= 0 && node < static_cast<int>(slots_.size())) {
    auto it = nodes_.find(slots_[node]);
    if (it != nodes_.end()) n = it->second.get();
  }
  if (!n) f.node = -1;
  f.node_testable = n && n->connected() && n->link_capable && !n->diagnosing &&
                    !n->diagnose_pending && n->link_ref_id == 0;
  for (const auto& [id, p] : nodes_) {
    const bool usable = p.get() != n && p->connected() && p->link_capable && !p->diagnosing &&
                        p->link_ref_id == 0 && !p->quarantined;
    if (usable && p->slot >= -1) ++f.reference_peers;
  }
  const StragglerDecision d = DecideStraggler(f);
  *reason = d.reason;
  return d.test && stage_ == Stage::kRunning;
}

void ControllerImpl::StartInPlaceDiagnostics(int node, int observation) {
  auto it = nodes_.find(slots_[node]);
  if (it == nodes_.end()) return;
  Node& n = *it->second;
  n.diagnose_incident = -1;
  n.diagnose_observation = observation;
  n.diagnose_in_place = true;
  n.diagnose_link = true;
  StartDiagnostics(n);
  observations_[observation]["diagnosis"] = {
      {"run", true},
      {"node_id", n.id},
      {"reason", "a persistent straggler: its links, compute and disks are tested"},
      {"state", "pending"},
      {"while", "the job goes on (tested in place)"}};
}

}  // namespace bulwark
