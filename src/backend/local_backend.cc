#include "backend/local_backend.h"

#include <signal.h>
#include <sys/stat.h>

#include <cstdio>
#include <filesystem>
#include <set>

#include "backend/agent_command.h"
#include "common/clock.h"

namespace bulwark {

LocalBackend::~LocalBackend() {
  IgnoreError(
      Teardown(1),
      "the end of the job: Teardown kills and reaps what it can, and nothing is left to tell");
}

Status LocalBackend::QuarantineNode(const std::string& node_id, const std::string& reason) {
  if (!agents_.count(node_id) && !adopted_.count(node_id)) {
    return NotFound("node " + node_id + " is not one of this backend's");
  }
  quarantined_[node_id] = reason;
  return Status::Ok();
}

Status LocalBackend::StartNode(const NodeRequest& req) {
  if (agents_.count(req.node_id)) return InvalidArgument("node " + req.node_id + " already exists");
  if (quarantined_.count(req.node_id)) {
    return FailedPrecondition("node " + req.node_id +
                              " is quarantined: " + quarantined_[req.node_id]);
  }
  if (opts_.machines > 0) {
    const double now = SystemClock::Get()->NowMono();
    std::string back;  // the machine that comes back first
    double back_at = 0;
    for (auto it = down_.begin(); it != down_.end();) {
      if (it->second <= now) {
        it = down_.erase(it);
        continue;
      }
      if (back.empty() || it->second < back_at) {
        back = it->first;
        back_at = it->second;
      }
      ++it;
    }
    size_t busy = adopted_.size() + down_.size() + quarantined_.size();
    for (const auto& [id, child] : agents_) busy += quarantined_.count(id) ? 0 : 1;
    if (busy >= static_cast<size_t>(opts_.machines)) {
      // One message per state (the controller logs each new one): no countdown.
      char repair[64];
      std::snprintf(repair, sizeof repair, "%g", opts_.repair_s);
      return Unavailable(
          "all " + std::to_string(opts_.machines) + " local machines are busy, down" +
          (quarantined_.empty() ? std::string()
                                : " or quarantined (" + std::to_string(quarantined_.size()) + ")") +
          (back.empty()
               ? std::string()
               : "; " + back + "'s machine is under repair (" + repair + " s from its loss)"));
    }
  }
  std::error_code ec;
  std::filesystem::create_directories(req.run_dir + "/" + req.node_id, ec);
  if (ec) return Internal("create " + req.run_dir + "/" + req.node_id + ": " + ec.message());
  SpawnOptions o;
  o.argv = AgentArgv(opts_.Agent(), req);
  o.env = CurrentEnv();
  o.capture_output = false;
  o.new_process_group = true;
  o.die_with_parent = false;  // a killed controller leaves them to be adopted
  BW_ASSIGN_OR_RETURN(Child c, Spawn(o));
  agents_.emplace(req.node_id, std::move(c));
  return Status::Ok();
}

namespace {

// An adopted agent (not our child) is gone once its pid is gone or a zombie.
bool Gone(pid_t pid) {
  const char st = ProcState(pid);
  return st == '?' || st == 'Z' || st == 'X';
}

}  // namespace

void LocalBackend::AdoptNode(const AdoptableNode& n) {
  if (n.pid > 0 && !agents_.count(n.node_id)) adopted_[n.node_id] = n.pid;
}

Status LocalBackend::KillNode(const std::string& node_id) {
  if (auto a = adopted_.find(node_id); a != adopted_.end()) {
    IgnoreError(SignalGroup(a->second, SIGKILL),
                "the process may be gone already");  // it leads its process group
    ::kill(a->second, SIGKILL);
    return Status::Ok();
  }
  auto it = agents_.find(node_id);
  if (it == agents_.end()) return NotFound("no node " + node_id);
  // Node loss: the agent dies at once; its ranks follow through PR_SET_PDEATHSIG.
  if (::kill(it->second.pid, SIGKILL) != 0) return ErrnoStatus("kill agent " + node_id, errno);
  if (opts_.machines > 0 && opts_.repair_s > 0) {
    down_[node_id] = SystemClock::Get()->NowMono() + opts_.repair_s;
  }
  return Status::Ok();
}

Status LocalBackend::ReleaseNode(const std::string& node_id, double grace_s) {
  if (auto a = adopted_.find(node_id); a != adopted_.end()) {
    const pid_t pid = a->second;
    const double deadline = SystemClock::Get()->NowMono() + grace_s;
    while (!Gone(pid) && SystemClock::Get()->NowMono() < deadline) PollReadable({}, 0.02);
    if (!Gone(pid)) IgnoreError(SignalGroup(pid, SIGKILL), "the process may be gone already");
    adopted_.erase(a);
    return Status::Ok();
  }
  auto it = agents_.find(node_id);
  if (it == agents_.end()) return Status::Ok();
  auto e = WaitExit(it->second.pid, grace_s);
  if (!e) TerminateGroup(it->second.pid, it->second.pgid, 1);
  IgnoreError(SignalGroup(it->second.pgid, SIGKILL), "the process may be gone already");
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
  for (auto it = adopted_.begin(); it != adopted_.end();) {
    if (Gone(it->second)) {
      IgnoreError(SignalGroup(it->second, SIGKILL), "the process may be gone already");
      gone.push_back({it->first, "agent exited"});
      it = adopted_.erase(it);
    } else {
      ++it;
    }
  }
  for (auto it = agents_.begin(); it != agents_.end();) {
    if (const std::optional<ExitInfo> e = Reap(it->second.pid)) {
      IgnoreError(SignalGroup(it->second.pgid, SIGKILL), "the process may be gone already");
      gone.push_back({it->first, "agent exited (" + e->Describe() + ")"});
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
  for (auto& [id, pid] : adopted_) ids.push_back(id);
  for (auto& id : ids) {
    IgnoreError(ReleaseNode(id, grace_s),
                "the end of the job: what a release leaves, the agents' own orphan timeout ends");
  }
  return Status::Ok();
}

int LocalBackend::AgentPid(const std::string& node_id) const {
  if (auto a = adopted_.find(node_id); a != adopted_.end()) return a->second;
  auto it = agents_.find(node_id);
  return it == agents_.end() ? -1 : it->second.pid;
}

}  // namespace bulwark
