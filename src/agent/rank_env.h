// The `start` message in typed form, and the environment a rank is launched with
// (docs/protocol.md sections 1 and 3). Pure functions; thread-safe.
#pragma once

#include <map>
#include <string>
#include <vector>

#include "common/net.h"
#include "common/status.h"

namespace bulwark {

struct StartSpec {
  int attempt = 0;
  std::string run_id;
  std::string job;
  std::vector<std::string> command;
  std::map<std::string, std::string> env;
  std::string workdir;  // "" = the agent's working directory
  std::string log_dir;
  std::string master_addr;
  int master_port = 0;
  int nnodes = 1;
  int group_rank = 0;
  int nproc_per_node = 1;
  int world_size = 1;
  int restart_count = 0;
  int max_restarts = 0;
  long resume_step = -1;
  std::string ckpt_dir;
  long ckpt_interval_steps = 0;
  // Controller-chosen disk cadence (checkpoint.intervalSteps: auto): the agent also
  // persists every staged step >= cadence_from_step divisible by cadence_steps (0 = off).
  // Updated mid-attempt by `cadence` messages.
  long cadence_steps = 0;
  long cadence_from_step = 0;
  bool persist_by_agent = false;   // ranks get BULWARK_CKPT_PERSIST=agent
  int memory_slots = 0;            // staging ring size K per rank; 0 = no memory tier
  std::string shared_dir;          // shared checkpoint tier ("" = none)
  std::string object_store;        // object tier URL ("" = none)
  long object_interval_steps = 0;  // upload persisted steps divisible by this (0 = all)
  std::string peer_host;           // push sealed snapshots to this PeerServer ("" / 0 = none)
  int peer_port = 0;
  double peer_push_share = 1;  // ckpt::PersistConfig::peer_push_share
  // Memory-tier snapshots to fetch from peers before the ranks start (a replacement
  // node restoring its ranks' state from another node's memory).
  struct Fetch {
    int rank = 0;
    long step = 0;
    std::string host;
    int port = 0;
    std::string from;    // the peer's node id, for messages
    int from_rank = -1;  // a donor: stage this rank's copy as `rank`'s (-1: `rank`'s own)
  };
  std::vector<Fetch> fetch;
  long skip_from = -1;
  long skip_to = -1;
  double hang_floor_s = 30;
  double hang_multiplier = 10;
  double startup_timeout_s = 300;
  double stop_grace_s = 5;
  // In-process recovery: the job's long-lived store (a TCPStore server on the slot-0
  // agent's host) where generations re-form their process group under a per-generation
  // prefix; port 0 = none yet (ranks rendezvous on master_addr:master_port).
  std::string store_host;
  int store_port = 0;
  // Warm rank processes this agent keeps ready (docs/agent.md, "Warm ranks").
  int warm_ranks = 0;
  // The code version (`bulwark update`): a parked rank or a warm rank made for another
  // version is not reused.
  std::string version;
  // Elastic jobs: the world size the job grows back to (>= world_size; 0 = world_size).
  int max_world_size = 0;

  int GlobalRank(int local_rank) const { return group_rank * nproc_per_node + local_rank; }
};

// Parses and validates a `start` message; InvalidArgument names the bad field. An
// empty (or absent) `log_dir` becomes `default_log_dir` (the agent's <run-dir>/logs;
// a controller without this node's file system sends ""); an error if both are empty.
// An empty `workdir` means the agent's own working directory.
Result<StartSpec> ParseStartMessage(const Json& msg, const std::string& default_log_dir = "");

// Where the agent's per-node files live.
struct AgentPaths {
  std::string node;         // "node-0"
  std::string agent_sock;   // <sock_dir>/agent.sock
  std::string node_dir;     // <run-dir>/<node>
  std::string python_dir;   // Bulwark Python package root ("" = do not touch PYTHONPATH)
  std::string lib_path;     // libbulwark.so ("" = leave BULWARK_LIB unset)
  std::string staging_dir;  // memory tier: this node's staging rings ("" = none)
  // The agent's and the ranks' sockets: node_dir ("" means that too), or the node's
  // tmpfs directory where node_dir is too long for a socket path.
  std::string sock_dir;
};

std::string RankSockPath(const AgentPaths& paths, int global_rank);
std::string StackFilePath(const StartSpec& spec, int global_rank);
std::string RankLogPath(const StartSpec& spec, int global_rank);

// The complete environment of local rank `local_rank`: `base` (the agent's own
// environment), overlaid with spec.env, then the torchrun and BULWARK_* variables.
// With an empty `base` it is exactly what changes from one generation to the next
// (what the agent sends a kept rank in `generation`).
std::map<std::string, std::string> BuildRankEnv(const StartSpec& spec, int local_rank,
                                                const AgentPaths& paths,
                                                std::map<std::string, std::string> base);

}  // namespace bulwark
