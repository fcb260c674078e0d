// LocalBackend: every node is a `bulwark-agent` process on this machine.
//
// The agents inherit stdout/stderr (their `[node/rank]` lines reach the console) and
// are each the leader of their own process group. They outlive a controller killed
// without a chance to stop them (SIGKILL): their ranks keep training for the agents'
// orphan timeout, and a restarted `bulwark run` adopts them (AdoptNode; they are not
// its children then, so they are watched and signalled by pid, and reaped by whoever
// their parent is).
//
// Capacity: by default every StartNode gets a machine. With `machines` > 0 the backend
// models a fixed set of machines: an agent occupies one while it runs, and a node lost
// to KillNode (chaos: the machine died) keeps its machine down for `repair_s` before it
// is free again. StartNode without a free machine answers UNAVAILABLE (no capacity
// yet), as a cluster would: the controller waits, or an elastic job shrinks.
// Not thread-safe: the controller's thread only.
#pragma once

#include <map>
#include <string>

#include "backend/agent_command.h"
#include "backend/backend.h"
#include "common/proc.h"

namespace bulwark {

struct LocalBackendOptions {
  std::string agent_binary;  // path of bulwark-agent
  std::string python_dir;    // Bulwark's python/ directory (SDK module)
  std::string sdk_lib;       // path of libbulwark.so
  double heartbeat_interval_s = 1;
  int machines = 0;            // 0 = unlimited
  double repair_s = 0;         // a killed node's machine is down this long
  bool agent_metrics = false;  // each agent serves /metrics on a free port of 127.0.0.1
  // The agent command line these options give (what StartNode runs; the Slurm backend
  // runs the same agent).
  AgentCommand Agent() const {
    AgentCommand a;
    a.agent_binary = agent_binary;
    a.python_dir = python_dir;
    a.sdk_lib = sdk_lib;
    a.heartbeat_interval_s = heartbeat_interval_s;
    a.agent_metrics = agent_metrics;
    return a;
  }
};

class LocalBackend : public Backend {
 public:
  explicit LocalBackend(LocalBackendOptions opts) : opts_(std::move(opts)) {}
  ~LocalBackend() override;
  const char* Name() const override { return "local"; }
  Status StartNode(const NodeRequest& req) override;
  Status KillNode(const std::string& node_id) override;
  Status ReleaseNode(const std::string& node_id, double grace_s) override;
  std::vector<NodeLoss> Poll() override;  // reason "agent exited (exit 2)" / "(SIGKILL)"
  Status Teardown(double grace_s) override;
  void AdoptNode(const AdoptableNode& n) override;
  // With `machines` > 0 the node's machine leaves the pool for good (StartNode counts it
  // busy); either way the node id is never started again.
  Status QuarantineNode(const std::string& node_id, const std::string& reason) override;
  // node id -> why it was quarantined.
  const std::map<std::string, std::string>& quarantined() const { return quarantined_; }
  // pid of a node's agent, or -1.
  int AgentPid(const std::string& node_id) const;

 private:
  LocalBackendOptions opts_;
  std::map<std::string, Child> agents_;
  std::map<std::string, pid_t> adopted_;            // agents of an earlier controller, by node id
  std::map<std::string, double> down_;              // node id -> when its machine is back (mono)
  std::map<std::string, std::string> quarantined_;  // node id -> reason
  long polls_ = 0;
};

}  // namespace bulwark
