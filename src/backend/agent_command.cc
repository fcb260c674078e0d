#include "backend/agent_command.h"

namespace bulwark {

std::vector<std::string> AgentArgv(const AgentCommand& c, const NodeRequest& req) {
  std::vector<std::string> argv = {c.agent_binary,
                                   "--controller",
                                   req.controller_addr,
                                   "--node",
                                   req.node_id,
                                   "--run-dir",
                                   req.run_dir,
                                   "--heartbeat-interval",
                                   std::to_string(c.heartbeat_interval_s)};
  if (!c.python_dir.empty()) argv.insert(argv.end(), {"--python-dir", c.python_dir});
  if (!c.sdk_lib.empty()) argv.insert(argv.end(), {"--lib", c.sdk_lib});
  if (!c.peer_host.empty()) argv.insert(argv.end(), {"--peer-host", c.peer_host});
  if (c.agent_metrics) {
    argv.insert(argv.end(),
                {"--metrics-addr", (c.peer_host.empty() ? "127.0.0.1" : c.peer_host) + ":0"});
  }
  return argv;
}

}  // namespace bulwark
