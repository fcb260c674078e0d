// Backend: how the controller obtains and loses nodes. The controller decides; the
// backend only acts. A node is an agent process (local) or an agent pod (Kubernetes).
//
// Contract: StartNode returns once the node's agent has been launched; the agent
// itself connects back to `controller_addr` and says hello with `node_id`. KillNode is
// abrupt (chaos: node loss); ReleaseNode is the orderly end of a node the controller
// no longer needs (the controller has already asked its agent to shut down). Poll
// reaps/observes without blocking and returns the nodes that disappeared since the
// last call. Teardown releases every node and leaves no process or object behind;
// it is bounded in time. Called from the controller's thread only.
#pragma once

#include <string>
#include <vector>

#include "common/status.h"

namespace bulwark {

struct NodeRequest {
  std::string job;
  std::string node_id;          // unique per job, e.g. "node-3"
  std::string controller_addr;  // host:port the agent connects to
  std::string run_dir;          // per-job scratch directory (sockets, logs)
};

class Backend {
 public:
  virtual ~Backend() = default;
  virtual const char* Name() const = 0;
  virtual Status StartNode(const NodeRequest& req) = 0;
  virtual Status KillNode(const std::string& node_id) = 0;
  virtual Status ReleaseNode(const std::string& node_id, double grace_s) = 0;
  virtual std::vector<std::string> Poll() = 0;
  virtual Status Teardown(double grace_s) = 0;
};

}  // namespace bulwark
