// Agent: `diagnose` (stop-diagnose, docs/diagnosis.md) and chaos `sdc`.
//
// The controller sends `diagnose` to a node it took out of the job (its ranks are
// stopped): {"type": "diagnose", "id": N, "checks": ["matmul", "disk"], "dirs": [DIR...],
// "budget_s": S}. Each check runs in its own `bulwark-agent diagnose` process, killed at
// its budget (diag::RunChecks), on diag_thread_ so heartbeats go on; the reply is
// {"type": "diagnosis", "id": N, "results": [CheckResult...]} or, for a request that
// cannot run, {"type": "diagnosis", "id": N, "error": "..."}.
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
  if (!budget.ok() || !(*budget > 0 && *budget <= 600)) {
    return fail("field 'budget_s' must be a number of seconds in (0, 600]");
  }
  std::vector<diag::CheckSpec> checks;
  const Json empty = Json::array();
  const Json& names = msg.contains("checks") ? msg["checks"] : empty;
  const Json& dirs = msg.contains("dirs") ? msg["dirs"] : empty;
  if (!names.is_array() || !dirs.is_array()) {
    return fail("fields 'checks' and 'dirs' must be arrays of strings");
  }
  for (const Json& c : names) {
    if (!c.is_string()) return fail("field 'checks' must hold strings");
    const std::string name = c.get<std::string>();
    if (name == "matmul") {
      checks.push_back({"matmul", "", *budget, sdc_injected_ ? "sdc" : ""});
    } else if (name == "disk") {
      for (const Json& d : dirs) {
        if (!d.is_string() || d.get<std::string>().empty()) {
          return fail("field 'dirs' must hold directory paths");
        }
        checks.push_back({"disk", d.get<std::string>(), *budget, ""});
      }
    } else {
      return fail("check '" + name + "' is unknown; the checks are matmul and disk");
    }
  }
  if (checks.empty()) return fail("no check to run: field 'checks' is empty");
  diag::RunOptions o;
  o.agent_command = opts_.self_command.empty() ? SelfCommand() : opts_.self_command;
  diag_busy_.store(true);
  diag_thread_ = std::thread([this, checks, o, reply]() mutable {
    Json results = Json::array();
    for (const diag::CheckResult& r : diag::RunChecks(checks, o)) results.push_back(ToJson(r));
    reply["results"] = std::move(results);
    {
      std::lock_guard<std::mutex> l(outbox_mu_);
      outbox_.push_back(std::move(reply));
    }
    diag_busy_.store(false);
  });
  Warn("diagnose: running " + std::to_string(checks.size()) + " check(s)" +
       (sdc_injected_ ? " (chaos sdc: this node's compute is bad)" : ""));
}

}  // namespace bulwark
