// The command line of a node agent (`bulwark-agent`), as every backend that starts one
// as a process builds it: LocalBackend on this machine, SlurmBackend under `srun`.
// Pure; thread-safe.
#pragma once

#include <string>
#include <vector>

#include "backend/backend.h"

namespace bulwark {

struct AgentCommand {
  std::string agent_binary;  // path of bulwark-agent
  std::string python_dir;    // Bulwark's python/ directory (SDK module); "" = none
  std::string sdk_lib;       // path of libbulwark.so; "" = the agent's default
  double heartbeat_interval_s = 1;
  // The node's address on the training network: the agent's peer-replication and adopt
  // ports bind there and its ranks' rendezvous may run there. "" = the agent's default
  // (127.0.0.1).
  std::string peer_host;
  // Each agent serves /metrics on a free port of `peer_host` (127.0.0.1 when empty).
  bool agent_metrics = false;
};

// argv of the agent serving `req`: --controller, --node, --run-dir, --heartbeat-interval
// and the optional flags above.
std::vector<std::string> AgentArgv(const AgentCommand& c, const NodeRequest& req);

}  // namespace bulwark
