// Agent: `diagnose` (stop-diagnose, docs/diagnosis.md) and chaos `sdc`, `slow_link`.
//
// The controller sends `diagnose` to a node it took out of the job (its ranks are
// stopped), or to a reference peer of a link check: {"type": "diagnose", "id": N,
// "checks": ["matmul", "disk", "link"], "dirs": [DIR...], "budget_s": S, "link":
// {"session": K}}. Each check runs in its own `bulwark-agent
// diagnose` process, killed at its budget (diag::RunChecks), on diag_thread_ so
// heartbeats go on; the reply is {"type": "diagnosis", "id": N, "results":
// [CheckResult...]} or, for a request that cannot run, {"type": "diagnosis", "id": N,
// "error": "..."}. At most 3 checks, 8 directories, 120 s per check; an agent shutting
// down starts no further check, so its exit waits at most one check's budget.
//
// `link` (diag/link.h): the agent binds a TCP listener at once and answers
// {"type": "link_listening", "id": N, "port": P}; the controller, once every member
// listens, sends {"type": "link_peers", "id": N, "index": I, "peers": ["host:port",
// ...]} (ring order; I is this node's place), or "peers": [] to call the ring off (the
// link check is then "not run"). The link check runs first (every member at about the same time),
// on the listener, then the other checks. No `link_peers` within the budget fails the
// link check. Agents that know `link` say so in their hello ("diag_checks").
#include "agent/agent.h"
#include "common/install_paths.h"
#include "common/json_util.h"
#include "diag/diag.h"

namespace bulwark {

void Agent::HandleDiagnose(const Json& msg) {
  auto id = JIntOr(msg, "id", -1);
  Json reply = {{"type", "diagnosis"}, {"id", id.ok() ? *id : -1}};
  auto fail = [&](const std::string& why) {
    Warn("controller: diagnose refused: " + why);
    reply["error"] = why;
    std::lock_guard<std::mutex> l(outbox_mu_);
    outbox_.push_back(reply);
  };
  if (!id.ok()) return fail(id.status().message());
  if (diag_busy_.load()) return fail("diagnostics are already running on this node");
  if (diag_thread_.joinable()) diag_thread_.join();  // finished: diag_busy_ is false
  auto budget = JNumOr(msg, "budget_s", 30);
  if (!budget.ok() || !(*budget > 0 && *budget <= 120)) {
    return fail("field 'budget_s' must be a number of seconds in (0, 120]");
  }
  std::vector<diag::CheckSpec> checks;
  const Json empty = Json::array();
  const Json& names = msg.contains("checks") ? msg["checks"] : empty;
  const Json& dirs = msg.contains("dirs") ? msg["dirs"] : empty;
  if (!names.is_array() || !dirs.is_array()) {
    return fail("fields 'checks' and 'dirs' must be arrays of strings");
  }
  if (names.size() > 4 || dirs.size() > 8) {
    return fail("at most the 4 checks and 8 directories (fields 'checks', 'dirs')");
  }
  Fd listener;
  for (const Json& c : names) {
    if (!c.is_string()) return fail("field 'checks' must hold strings");
    const std::string name = c.get<std::string>();
    if (name == "matmul") {
      diag::CheckSpec spec{"matmul", "", *budget, sdc_injected_ ? "sdc" : ""};
      spec.cuda_runtime = opts_.cuda_runtime;
      spec.cublas = opts_.cublas;
      checks.push_back(spec);
    } else if (name == "disk") {
      for (const Json& d : dirs) {
        if (!d.is_string() || d.get<std::string>().empty()) {
          return fail("field 'dirs' must hold directory paths");
        }
        checks.push_back({"disk", d.get<std::string>(), *budget, ""});
      }
    } else if (name == "gpu") {
      // Without an NVML library to load (--nvml-library ""), there is no GPU to test.
      if (!opts_.nvml_library.empty()) checks.push_back({"gpu", opts_.nvml_library, *budget, ""});
    } else if (name == "link") {
      const Json& l = msg.contains("link") ? msg["link"] : empty;
      auto session = JIntOr(l, "session", -1);
      if (!l.is_object() || !session.ok() || *session < 0) {
        return fail("field 'link' must be {\"session\": K} with K >= 0");
      }
      auto bound = TcpListen("0.0.0.0", 0);
      auto port = bound.ok() ? LocalPort(bound->get()) : Result<int>(bound.status());
      if (!port.ok()) return fail("link: could not listen: " + port.status().message());
      listener = std::move(*bound);
      diag::CheckSpec spec{"link", "", *budget, ""};
      spec.link_session = static_cast<uint64_t>(*session);
      spec.link_throttle_mib_s = link_throttle_mib_s_;
      checks.insert(checks.begin(), spec);  // first: every member at about the same time
      {
        std::lock_guard<std::mutex> g(link_mu_);
        link_id_ = static_cast<int>(*id);
        link_peers_.clear();
      }
      std::lock_guard<std::mutex> g(outbox_mu_);
      outbox_.push_back({{"type", "link_listening"}, {"id", *id}, {"port", *port}});
    } else {
      return fail("check '" + name + "' is unknown; the checks are matmul, disk, link and gpu");
    }
  }
  if (checks.empty()) return fail("no check to run: field 'checks' is empty");
  diag::RunOptions o;
  o.agent_command = opts_.self_command.empty() ? SelfCommand() : opts_.self_command;
  o.cancel = &diag_cancel_;
  diag_busy_.store(true);
  const bool throttled = link_throttle_mib_s_ > 0;
  diag_thread_ = std::thread([this, checks, o, reply, l = std::move(listener)]() mutable {
    std::vector<diag::CheckResult> results;
    if (!checks.empty() && checks[0].check == "link") {
      // Wait for the ring (bounded by the link check's budget), then run it on `l`.
      const auto until =
          std::chrono::steady_clock::now() + std::chrono::duration<double>(checks[0].budget_s);
      std::string peers;
      int index = 0;
      while (peers.empty() && !diag_cancel_.load() && std::chrono::steady_clock::now() < until) {
        std::this_thread::sleep_for(std::chrono::milliseconds(20));
        std::lock_guard<std::mutex> g(link_mu_);
        peers = link_peers_;
        index = link_index_;
      }
      if (peers.empty() || peers == "-") {
        results.push_back({"link",
                           false,
                           0,
                           peers.empty()
                               ? "no ring: the controller sent no link_peers within the budget"
                               : "not run: the controller called the ring off",
                           {}});
      } else {
        checks[0].link_index = index;
        checks[0].link_peers = peers;
        checks[0].link_listen_fd = l.get();
        results = diag::RunChecks({checks[0]}, o);
      }
      l.Reset();
      checks.erase(checks.begin());
      std::lock_guard<std::mutex> g(link_mu_);
      link_id_ = -1;
    }
    for (diag::CheckResult& r : diag::RunChecks(checks, o)) results.push_back(std::move(r));
    Json out = Json::array();
    for (const diag::CheckResult& r : results) out.push_back(ToJson(r));
    reply["results"] = std::move(out);
    {
      std::lock_guard<std::mutex> g(outbox_mu_);
      outbox_.push_back(std::move(reply));
    }
    diag_busy_.store(false);
  });
  Warn("diagnose: running " + std::to_string(checks.size()) + " check(s)" +
       (sdc_injected_ ? " (chaos sdc: this node's compute is bad)" : "") +
       (throttled ? " (chaos slow_link: this node's links are slow)" : ""));
}

void Agent::HandleLinkPeers(const Json& msg) {
  auto id = JInt(msg, "id");
  const bool array = msg.contains("peers") && msg["peers"].is_array();
  if (id.ok() && array && msg["peers"].empty()) {  // the ring is called off
    std::lock_guard<std::mutex> g(link_mu_);
    if (*id == link_id_) link_peers_ = "-";
    return;
  }
  auto index = JInt(msg, "index");
  std::string ring;
  for (size_t i = 0; array && i < msg["peers"].size(); ++i) {
    const Json& p = msg["peers"][i];
    ring += (ring.empty() ? "" : ",") + (p.is_string() ? p.get<std::string>() : std::string());
  }
  auto parsed = diag::ParseLinkPeers(ring);
  if (!id.ok() || !array || !parsed.ok()) {
    Warn("controller: dropped link_peers: " +
         (!id.ok() ? id.status().message()
                   : "field 'peers' must be an array of \"host:port\" strings: " +
                         (array ? parsed.status().message() : std::string("missing"))));
    return;
  }
  if (!index.ok() || *index < 0 || *index >= static_cast<long>(parsed->size())) {
    Warn(
        "controller: dropped link_peers: field 'index' must be this node's place in "
        "'peers' (0.." +
        std::to_string(parsed->size() - 1) + ")");
    return;
  }
  std::lock_guard<std::mutex> g(link_mu_);
  if (*id != link_id_) {
    Warn("controller: dropped link_peers for request " + std::to_string(*id) +
         ", which is not the link check waiting here");
    return;
  }
  link_peers_ = ring;
  link_index_ = static_cast<int>(*index);
}

}  // namespace bulwark
