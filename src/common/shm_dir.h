// Owned directories on tmpfs (/dev/shm) that do not outlive their owner.
//
// A node agent keeps its memory checkpoint tier in /dev/shm/bulwark-<run>-<node>. Memory
// there is RAM, and it is not freed when the owner dies: an agent killed with SIGKILL
// (a lost node, an OOM kill, a test's teardown) used to leave its directory, hundreds of
// MB each, until the machine rebooted. A Kubernetes pod's /dev/shm is its own emptyDir,
// freed with the pod; a local or Slurm machine's is shared by every run on it.
//
// Protocol (shm_dir.cc): the owner holds an exclusive flock(2) on `<dir>/.owner` for as
// long as it uses the directory; the kernel drops the lock when the owner's process
// dies, however it dies. A sweeper (every agent, as it starts) treats a directory whose
// `.owner` it can lock as abandoned: it renames the directory, lock held, to a unique
// `.bulwark-trash-*` name in the same root (atomic), then deletes the renamed tree. An
// owner that locked `.owner` checks that the file it locked is still the one at
// `<dir>/.owner` (same device and inode); if a sweeper renamed the directory under it,
// it starts again with a new directory. So a directory with a live owner is never
// removed, and a directory is removed only after its owner is gone. Directories
// without `.owner` (being created, or left by a version before this one) are not
// touched until they are an hour old.
#pragma once

#include <string>

#include "common/clock.h"
#include "common/net.h"
#include "common/status.h"

namespace bulwark {

// A directory and the lock that owns it. Moving it moves the ownership; destroying it
// releases the lock (the directory stays: Remove() deletes it).
struct ShmDirLease {
  std::string path;
  Fd lock;
  // Deletes the directory, then releases the lock. OK if it is gone already.
  Status Remove();
};

// "bulwark-<hash of run_dir>-<node>": the name of a node's directory of one run. The
// hash is FNV-1a (the same in every build), decimal, below 10^9+7.
std::string ShmDirName(const std::string& run_dir, const std::string& node);

// Creates (or takes over) `root/name` and locks it. Waits up to `timeout_s` of `clock`'s
// time for another owner of the same name to go (a replaced agent still exiting).
// FAILED_PRECONDITION if it is still owned then; errors of mkdir/open/flock otherwise.
Result<ShmDirLease> AcquireShmDir(const std::string& root, const std::string& name,
                                  const Clock* clock, double timeout_s);

// Removes every directory of `root` named as ShmDirName names them
// ("bulwark-<digits>-<node>") that no live process owns (see the protocol), and every
// `.bulwark-trash-*` left by an interrupted sweep. Returns how many it removed. Never
// blocks on a lock; errors are skipped (the next sweep retries).
int SweepAbandonedShmDirs(const std::string& root, const Clock* clock);

}  // namespace bulwark
