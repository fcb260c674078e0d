// Checkpoint catalog operations: the commit-then-retain, listing and restore steps
// the controller orders on a tier, one call each. They run in the controller when it
// shares the checkpoint file system with the agents (local backend), or in an agent
// when it does not (Kubernetes; docs/protocol.md "Checkpoint catalog"): the same
// code either way, so both make the same decisions.
//
// Thread-safety: stateless; the ckpt.h rules apply (a Retain racing a Commit of an
// older step on the same root is the caller's to avoid: run one root's operations
// from one thread). Blocking: each call does the tier's I/O before returning.
#pragma once

#include <string>
#include <vector>

#include "ckpt/checkpoint.h"
#include "ckpt/env.h"
#include "ckpt/object_tier.h"
#include "common/status.h"

namespace bulwark::ckpt {

struct TierOpResult {
  Status status;              // the commit, download or listing itself
  Status retain;              // retention after a successful commit (OK: clean or not run)
  std::vector<long> removed;  // steps retention deleted, ascending
  bool listed = false;        // `committed` is the tier's committed steps after the op
  std::vector<long> committed;
};

// Lists the committed steps of file tier `root` (ListCommitted; a missing directory
// has none).
TierOpResult ListFileTier(Env* env, const std::string& root);

// Commits `step` on file tier `root` (Commit: every rank's shard verified, then
// MANIFEST and COMMIT), then applies retention, then lists the tier. A failed commit
// neither retains nor lists.
TierOpResult CommitFileTier(Env* env, const std::string& root, long step, int world,
                            const RetainOptions& retain);

// Commits `step` on the object tier from file tier `disk_root`, where it must be
// committed already (ObjectTier::Commit), then ObjectTier::Retain. Never lists (a
// listing of the object tier is a network scan; the controller asks for the newest
// step itself when it needs one).
TierOpResult CommitObjectTier(ObjectTier* tier, const std::string& disk_root, long step,
                              const RetainOptions& retain);

// Downloads committed `step` and its dependencies from the object tier into file tier
// `disk_root` (ObjectTier::Download), then lists `disk_root` (also after a failure,
// since dependencies may have been committed there).
TierOpResult DownloadToFileTier(ObjectTier* tier, long step, Env* env,
                                const std::string& disk_root);

}  // namespace bulwark::ckpt
