// Stop-diagnose for checkpoint writes (docs/diagnosis.md "A full checkpoint disk"):
// whether a failed shard write is a fault of its node's disk.
//
// A shard the agent could not write to the node's own disk tier (checkpoint.dir)
// because the disk is full (ENOSPC) is the node's fault: the job cannot checkpoint
// there, runs exposed, and every later write fails too -- an incident (fatal_log
// disk_full) whose node is tested. The same on the shared tier (sharedDir) is the
// shared volume's, not one node's (testing nodes would quarantine them all), and other
// errors may be transient: both stay events (CheckpointShardFailed).
//
// Pure and clock-free; shared by the controller and the simulator. Thread-compatible.
#pragma once

#include <string>

namespace bulwark {

struct CkptWriteVerdict {
  bool node_fault = false;
  std::string subtype;  // "disk_full" when node_fault
};

// `tier`: "disk", "shared" or "object"; `error`: the agent's error text.
CkptWriteVerdict ClassifyCheckpointWriteError(const std::string& tier, const std::string& error);

}  // namespace bulwark
