#include "ckpt/tier_ops.h"

namespace bulwark::ckpt {

TierOpResult ListFileTier(Env* env, const std::string& root) {
  TierOpResult r;
  Result<std::vector<long>> steps = ListCommitted(env, root);
  r.status = steps.status();
  if (steps.ok()) {
    r.listed = true;
    r.committed = std::move(steps).value();
  }
  return r;
}

TierOpResult CommitFileTier(Env* env, const std::string& root, long step, int world,
                            const RetainOptions& retain) {
  TierOpResult r;
  r.status = Commit(env, root, step, world);
  if (!r.status.ok()) return r;
  r.retain = Retain(env, root, retain, &r.removed);
  TierOpResult listed = ListFileTier(env, root);
  r.listed = listed.listed;
  r.committed = std::move(listed.committed);
  return r;
}

TierOpResult CommitObjectTier(ObjectTier* tier, const std::string& disk_root, long step,
                              const RetainOptions& retain) {
  TierOpResult r;
  r.status = tier->Commit(disk_root, step);
  if (r.status.ok()) r.retain = tier->Retain(retain, &r.removed);
  return r;
}

TierOpResult DownloadToFileTier(ObjectTier* tier, long step, Env* env,
                                const std::string& disk_root) {
  TierOpResult r;
  r.status = tier->Download(step, disk_root);
  TierOpResult listed = ListFileTier(env, disk_root);
  r.listed = listed.listed;
  r.committed = std::move(listed.committed);
  return r;
}

}  // namespace bulwark::ckpt
