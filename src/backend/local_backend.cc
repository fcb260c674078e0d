#include "backend/local_backend.h"

#include <signal.h>
#include <sys/stat.h>

#include <filesystem>
#include <set>

namespace bulwark {

LocalBackend::~LocalBackend() { (void)Teardown(1); }

Status LocalBackend::StartNode(const NodeRequest& req) {
  if (agents_.count(req.node_id)) return InvalidArgument("node " + req.node_id + " already exists");
  std::error_code ec;
  std::filesystem::create_directories(req.run_dir + "/" + req.node_id, ec);
  if (ec) return Internal("create " + req.run_dir + "/" + req.node_id + ": " + ec.message());
  SpawnOptions o;
  o.argv = {opts_.agent_binary,
            "--controller",
            req.controller_addr,
            "--node",
            req.node_id,
            "--run-dir",
            req.run_dir,
            "--heartbeat-interval",
            std::to_string(opts_.heartbeat_interval_s)};
  if (!opts_.python_dir.empty()) {
    o.argv.push_back("--python-dir");
    o.argv.push_back(opts_.python_dir);
  }
  if (!opts_.sdk_lib.empty()) {
    o.argv.push_back("--lib");
    o.argv.push_back(opts_.sdk_lib);
  }
  o.env = CurrentEnv();
  o.capture_output = false;
  o.new_process_group = true;
  o.die_with_parent = true;
  BW_ASSIGN_OR_RETURN(Child c, Spawn(o));
  agents_.emplace(req.node_id, std::move(c));
  return Status::Ok();
}

Status LocalBackend::KillNode(const std::string& node_id) {
  auto it = agents_.find(node_id);
  if (it == agents_.end()) return NotFound("no node " + node_id);
  // Node loss: the agent dies at once; its ranks follow through PR_SET_PDEATHSIG.
  if (::kill(it->second.pid, SIGKILL) != 0) return ErrnoStatus("kill agent " + node_id, errno);
  return Status::Ok();
}

Status LocalBackend::ReleaseNode(const std::string& node_id, double grace_s) {
  auto it = agents_.find(node_id);
  if (it == agents_.end()) return Status::Ok();
  auto e = WaitExit(it->second.pid, grace_s);
  if (!e) TerminateGroup(it->second.pid, it->second.pgid, 1);
  (void)SignalGroup(it->second.pgid, SIGKILL);
  agents_.erase(it);
  return Status::Ok();
}

std::vector<NodeLoss> LocalBackend::Poll() {
  std::vector<NodeLoss> gone;
  // Ranks orphaned by a lost agent are reparented to us (child subreaper): reap them.
  if (++polls_ % 50 == 0) {  // a /proc scan: not on every loop iteration
    std::set<pid_t> agents;
    for (const auto& [id, c] : agents_) agents.insert(c.pid);
    (void)ReapZombieChildren(agents);
  }
  for (auto it = agents_.begin(); it != agents_.end();) {
    if (Reap(it->second.pid)) {
      (void)SignalGroup(it->second.pgid, SIGKILL);
      gone.push_back({it->first, "agent exited"});
      it = agents_.erase(it);
    } else {
      ++it;
    }
  }
  return gone;
}

Status LocalBackend::Teardown(double grace_s) {
  std::vector<std::string> ids;
  for (auto& [id, c] : agents_) ids.push_back(id);
  for (auto& id : ids) (void)ReleaseNode(id, grace_s);
  return Status::Ok();
}

int LocalBackend::AgentPid(const std::string& node_id) const {
  auto it = agents_.find(node_id);
  return it == agents_.end() ? -1 : it->second.pid;
}

}  // namespace bulwark
