// The object tier: a file tier's step layout mirrored on S3 (object_tier.h).
//
// "Not committed" on the object tier is exactly NOT_FOUND (no COMMIT) or DATA_LOSS
// (COMMIT/MANIFEST/shards do not verify). Any other error (S3 unreachable, access
// denied, ...) is propagated by ListCommitted, NewestCommitted and Retain instead of
// skipping the step, so a transient failure never makes Retain delete a committed step.
#include "ckpt/object_tier.h"

#include <algorithm>
#include <cstdio>
#include <map>
#include <set>
#include <utility>

#include "ckpt/format.h"

namespace bulwark::ckpt {
namespace {

using Objects = std::map<std::string, uint64_t>;  // name inside a step prefix -> size

// "step-000000000042"
std::string StepKey(long step) {
  char buf[32];
  std::snprintf(buf, sizeof(buf), "step-%012ld", step);
  return buf;
}

// Splits "step-<12 digits>/<name>" (name non-empty); false for any other key.
bool ParseStepKey(const std::string& key, long* step, std::string* name) {
  if (key.size() < 19 || key.compare(0, 5, "step-") != 0 || key[17] != '/') return false;
  for (size_t i = 5; i < 17; ++i) {
    if (key[i] < '0' || key[i] > '9') return false;
  }
  *step = std::stol(key.substr(5, 12));
  *name = key.substr(18);
  return true;
}

bool NotCommittedCode(const Status& st) {
  return st.code() == Code::kNotFound || st.code() == Code::kDataLoss;
}

// A step as committed on the object tier: the decoded MANIFEST and the exact bytes.
struct Committed {
  Manifest manifest;
  std::string manifest_bytes;
  std::string commit_bytes;
};

bool SameShards(const Manifest& a, const Manifest& b) {
  if (a.world != b.world || a.shards.size() != b.shards.size()) return false;
  for (size_t i = 0; i < a.shards.size(); ++i) {
    if (a.shards[i].size != b.shards[i].size || a.shards[i].index_xxh3 != b.shards[i].index_xxh3) {
      return false;
    }
  }
  return true;
}

// Removes a local step directory, COMMIT first. Best effort: the caller is already
// returning an error.
void RemoveLocalStep(Env* env, const std::string& root, long step) {
  const std::string dir = StepDir(root, step);
  constexpr const char* kWhy =
      "best effort: the caller returns its own error, and a step "
      "left without COMMIT is never read and is removed by retention";
  if (env->RemoveFile(dir + "/" + internal::kCommitName).ok()) IgnoreError(env->SyncDir(dir), kWhy);
  IgnoreError(RemoveTree(env, dir), kWhy);
  IgnoreError(env->SyncDir(root), kWhy);
}

}  // namespace

struct ObjectTier::Impl {
  std::unique_ptr<objstore::S3Client> client;
  Env* env = nullptr;

  std::string Url(const std::string& key) const {
    const objstore::S3Config& c = client->config();
    return "s3://" + c.bucket + "/" + c.prefix + key;
  }

  // Every object of the tier, by step. Keys outside "step-<12 digits>/" are ignored.
  Result<std::map<long, Objects>> ListTier() const {
    BW_ASSIGN_OR_RETURN(std::vector<objstore::ObjectInfo> objs, client->List("step-"));
    std::map<long, Objects> out;
    for (const objstore::ObjectInfo& o : objs) {
      long step = 0;
      std::string name;
      if (ParseStepKey(o.key, &step, &name)) out[step][name] = o.size;
    }
    return out;
  }

  Result<Objects> ListStep(long step) const {
    BW_ASSIGN_OR_RETURN(std::vector<objstore::ObjectInfo> objs, client->List(StepKey(step) + "/"));
    Objects out;
    for (const objstore::ObjectInfo& o : objs) {
      long s = 0;
      std::string name;
      if (ParseStepKey(o.key, &s, &name) && s == step) out[name] = o.size;
    }
    return out;
  }

  // COMMIT -> MANIFEST -> shard sizes. `objects`: the step's listing if already known.
  Result<Committed> ReadCommitted(long step, const Objects* objects) const {
    const std::string ckey = StepKey(step) + "/" + internal::kCommitName;
    const std::string mkey = StepKey(step) + "/" + internal::kManifestName;
    Committed c;
    Result<std::string> craw = client->Get(ckey);
    if (!craw.ok()) {
      if (craw.status().code() == Code::kNotFound) {
        return NotFound(Url(ckey) + " is missing (step not committed)");
      }
      return craw.status();
    }
    c.commit_bytes = std::move(*craw);
    BW_ASSIGN_OR_RETURN(internal::CommitPin pin,
                        internal::DecodeCommit(c.commit_bytes, step, Url(ckey)));
    Result<std::string> mraw = client->Get(mkey);
    if (!mraw.ok()) {
      if (mraw.status().code() == Code::kNotFound) {
        return DataLoss(Url(ckey) + ": committed MANIFEST " + Url(mkey) + " is missing");
      }
      return mraw.status();
    }
    c.manifest_bytes = std::move(*mraw);
    BW_ASSIGN_OR_RETURN(c.manifest,
                        internal::DecodeManifest(c.manifest_bytes, step, pin, Url(mkey)));
    Objects listed;
    if (objects == nullptr) {
      BW_ASSIGN_OR_RETURN(listed, ListStep(step));
      objects = &listed;
    }
    for (const ManifestShard& s : c.manifest.shards) {
      const std::string key = StepKey(step) + "/" + s.file;
      auto it = objects->find(s.file);
      if (it == objects->end()) {
        return DataLoss(Url(mkey) + ": committed shard " + Url(key) +
                        " is missing (re-upload it and commit the step again)");
      }
      if (it->second != s.size) {
        return DataLoss(Url(key) + ": has " + std::to_string(it->second) +
                        " bytes, MANIFEST records " + std::to_string(s.size) +
                        " (re-upload it and commit the step again)");
      }
    }
    return c;
  }

  // Fetches one step into `root` and writes MANIFEST and COMMIT once every shard
  // verified. Leaves no COMMIT on failure.
  Status DownloadStep(long step, const Committed& c, const std::string& root) const {
    const std::string dir = StepDir(root, step);
    const std::string what = "download step " + std::to_string(step) + " into " + root;
    BW_RETURN_IF_ERROR(env->MkdirAll(dir).Annotate(what));
    BW_RETURN_IF_ERROR(env->SyncDir(root).Annotate(what));
    BW_RETURN_IF_ERROR(env->RemoveFile(dir + "/" + internal::kCommitName).Annotate(what));
    BW_RETURN_IF_ERROR(env->RemoveFile(dir + "/" + internal::kManifestName).Annotate(what));
    BW_RETURN_IF_ERROR(env->SyncDir(dir).Annotate(what));
    for (const ManifestShard& s : c.manifest.shards) {
      const std::string key = StepKey(step) + "/" + s.file;
      const std::string path = dir + "/" + s.file;
      BW_RETURN_IF_ERROR(client->GetToFile(key, path).Annotate(what));
      internal::Header h;
      ShardIndex idx;
      Status st = internal::CheckShardFile(env, path, step, s.rank, c.manifest.world, &h, &idx);
      if (st.ok() && (h.file_size != s.size || h.index_xxh3 != s.index_xxh3)) {
        st = DataLoss(path + ": size or index xxh3 differs from the MANIFEST");
      }
      if (st.ok()) st = internal::VerifyLocalChunks(env, path, idx, h);
      if (!st.ok()) {
        const Code code = st.code() == Code::kNotFound ? Code::kDataLoss : st.code();
        return Status(code, what + ": " + Url(key) + " does not verify (" + st.message() +
                                "); the object is corrupt: restore it or use another step");
      }
    }
    BW_RETURN_IF_ERROR(env->SyncDir(dir).Annotate(what));
    BW_RETURN_IF_ERROR(
        WriteFileAtomic(env, dir, internal::kManifestName, c.manifest_bytes).Annotate(what));
    return WriteFileAtomic(env, dir, internal::kCommitName, c.commit_bytes).Annotate(what);
  }
};

ObjectTier::ObjectTier(std::unique_ptr<Impl> impl) : impl_(std::move(impl)) {}
ObjectTier::~ObjectTier() = default;

Result<std::unique_ptr<ObjectTier>> ObjectTier::Open(objstore::S3Config cfg, Env* env) {
  auto impl = std::make_unique<Impl>();
  BW_ASSIGN_OR_RETURN(impl->client, objstore::S3Client::Create(std::move(cfg)));
  impl->env = env != nullptr ? env : Env::Default();
  return std::unique_ptr<ObjectTier>(new ObjectTier(std::move(impl)));
}

Result<std::unique_ptr<ObjectTier>> ObjectTier::OpenUrl(const std::string& url, Env* env) {
  BW_ASSIGN_OR_RETURN(objstore::S3Config cfg, objstore::ParseS3Url(url));
  return Open(std::move(cfg), env);
}

objstore::S3Client* ObjectTier::client() const { return impl_->client.get(); }

std::string ObjectTier::Url(const std::string& key) const { return impl_->Url(key); }

Status ObjectTier::UploadShard(const std::string& file_root, long step, int rank, int world) {
  const std::string what = "upload step " + std::to_string(step) + " rank " + std::to_string(rank) +
                           " to " + Url(StepKey(step) + "/");
  if (step < 0) return InvalidArgument(what + ": step must be >= 0");
  if (world < 1 || world > 99999 || rank < 0 || rank >= world) {
    return InvalidArgument(what + ": rank " + std::to_string(rank) + " of world " +
                           std::to_string(world) + " is out of range");
  }
  const std::string file = ShardFileName(rank, world);
  const std::string path = StepDir(file_root, step) + "/" + file;
  Status st = internal::CheckShardFile(impl_->env, path, step, rank, world, nullptr, nullptr);
  if (!st.ok()) {
    return Status(st.code(), what + ": the local shard does not verify (" + st.message() +
                                 "); write it again with WriteShard");
  }
  const std::string step_key = StepKey(step) + "/";
  BW_RETURN_IF_ERROR(impl_->client->Delete(step_key + internal::kCommitName).Annotate(what));
  BW_RETURN_IF_ERROR(impl_->client->Delete(step_key + internal::kManifestName).Annotate(what));
  return impl_->client->PutFile(step_key + file, path).Annotate(what);
}

Status ObjectTier::Commit(const std::string& file_root, long step) {
  const std::string what =
      "refusing to commit step " + std::to_string(step) + " on " + Url(StepKey(step) + "/");
  Env* env = impl_->env;
  Result<Manifest> local = ckpt::ReadCommitted(env, file_root, step);
  if (!local.ok()) {
    return FailedPrecondition(what + ": it is not committed on file tier " + file_root + " (" +
                              local.status().ToString() + "); commit it there first");
  }
  // Re-decode the exact bytes to upload: they must be the pair ReadCommitted verified.
  const std::string dir = StepDir(file_root, step);
  const std::string cpath = dir + "/" + internal::kCommitName;
  const std::string mpath = dir + "/" + internal::kManifestName;
  Committed c;
  BW_ASSIGN_OR_RETURN(c.commit_bytes, ReadWholeFile(env, cpath));
  BW_ASSIGN_OR_RETURN(c.manifest_bytes, ReadWholeFile(env, mpath));
  Result<internal::CommitPin> pin = internal::DecodeCommit(c.commit_bytes, step, cpath);
  Result<Manifest> m = pin.ok() ? internal::DecodeManifest(c.manifest_bytes, step, *pin, mpath)
                                : Result<Manifest>(pin.status());
  if (!m.ok()) {
    return Status(m.status().code(),
                  what + ": the file tier's COMMIT/MANIFEST changed while reading them: " +
                      m.status().message());
  }
  BW_ASSIGN_OR_RETURN(Objects objects, impl_->ListStep(step));
  for (const ManifestShard& s : m->shards) {
    const std::string key = StepKey(step) + "/" + s.file;
    auto it = objects.find(s.file);
    if (it == objects.end()) {
      return FailedPrecondition(what + ": " + Url(key) + " is missing; upload rank " +
                                std::to_string(s.rank) + "'s shard (UploadShard) first");
    }
    if (it->second != s.size) {
      return FailedPrecondition(what + ": " + Url(key) + " has " + std::to_string(it->second) +
                                " bytes, the MANIFEST records " + std::to_string(s.size) +
                                "; upload rank " + std::to_string(s.rank) + "'s shard again");
    }
  }
  for (long d : m->depends) {
    Result<Committed> dc = impl_->ReadCommitted(d, nullptr);
    if (!dc.ok()) {
      if (!NotCommittedCode(dc.status())) return dc.status().Annotate(what);
      return FailedPrecondition(what + ": it references step " + std::to_string(d) +
                                ", which is not committed on the object tier (" +
                                dc.status().message() + "); upload and commit step " +
                                std::to_string(d) + " first");
    }
  }
  BW_RETURN_IF_ERROR(impl_->client
                         ->Put(StepKey(step) + "/" + internal::kManifestName,
                               c.manifest_bytes.data(), c.manifest_bytes.size())
                         .Annotate("commit step " + std::to_string(step)));
  return impl_->client
      ->Put(StepKey(step) + "/" + internal::kCommitName, c.commit_bytes.data(),
            c.commit_bytes.size())
      .Annotate("commit step " + std::to_string(step));
}

Result<Manifest> ObjectTier::ReadCommitted(long step) {
  BW_ASSIGN_OR_RETURN(Committed c, impl_->ReadCommitted(step, nullptr));
  return std::move(c.manifest);
}

Result<std::vector<ObjectTier::StepState>> ObjectTier::Scan() {
  BW_ASSIGN_OR_RETURN(auto tier, impl_->ListTier());
  std::vector<StepState> out;
  for (const auto& [step, objects] : tier) {
    StepState st;
    st.step = step;
    Result<Committed> c = impl_->ReadCommitted(step, &objects);
    if (c.ok()) {
      st.manifest = std::move(c->manifest);
    } else if (NotCommittedCode(c.status())) {
      st.status = c.status();
    } else {
      return c.status();
    }
    out.push_back(std::move(st));
  }
  return out;
}

Result<std::vector<long>> ObjectTier::ListCommitted(std::vector<std::string>* skipped) {
  BW_ASSIGN_OR_RETURN(std::vector<StepState> steps, Scan());
  std::vector<long> out;
  for (const StepState& s : steps) {
    if (s.status.ok()) {
      out.push_back(s.step);
    } else if (skipped != nullptr) {
      skipped->push_back("step " + std::to_string(s.step) + ": " + s.status.ToString());
    }
  }
  return out;
}

Result<long> ObjectTier::NewestCommitted(long max_step) {
  BW_ASSIGN_OR_RETURN(auto tier, impl_->ListTier());
  for (auto it = tier.rbegin(); it != tier.rend(); ++it) {
    if (max_step >= 0 && it->first > max_step) continue;
    Result<Committed> c = impl_->ReadCommitted(it->first, &it->second);
    if (c.ok()) return it->first;
    if (!NotCommittedCode(c.status())) return c.status();
  }
  return -1L;
}

Status ObjectTier::Retain(const RetainOptions& opts, std::vector<long>* removed) {
  if (opts.keep < 1) {
    return InvalidArgument("retention keep must be >= 1, got " + std::to_string(opts.keep));
  }
  BW_ASSIGN_OR_RETURN(auto tier, impl_->ListTier());
  std::map<long, std::vector<long>> deps;
  std::vector<long> all;
  for (const auto& [step, objects] : tier) {
    all.push_back(step);
    Result<Committed> c = impl_->ReadCommitted(step, &objects);
    if (c.ok()) {
      deps[step] = c->manifest.depends;
    } else if (!NotCommittedCode(c.status())) {
      return c.status().Annotate("retain on " + Url(""));
    }
  }
  const std::vector<long> doomed = PlanRetain(deps, all, opts);
  const size_t first = removed != nullptr ? removed->size() : 0;
  Status st;
  for (auto it = doomed.rbegin(); st.ok() && it != doomed.rend(); ++it) {
    const std::string step_key = StepKey(*it) + "/";
    const std::string what = "retain: remove step " + std::to_string(*it);
    st = impl_->client->Delete(step_key + internal::kCommitName).Annotate(what);
    for (const auto& [name, size] : tier[*it]) {
      if (!st.ok()) break;
      if (name != internal::kCommitName) st = impl_->client->Delete(step_key + name).Annotate(what);
    }
    if (st.ok() && removed != nullptr) removed->push_back(*it);
  }
  if (removed != nullptr) std::sort(removed->begin() + static_cast<long>(first), removed->end());
  return st;
}

Status ObjectTier::Download(long step, const std::string& file_root) {
  const std::string what = "download step " + std::to_string(step) + " from " + Url("");
  Env* env = impl_->env;
  // The dependency closure, as committed on the object tier.
  std::map<long, Committed> plan;
  std::vector<long> todo = {step};
  while (!todo.empty()) {
    const long s = todo.back();
    todo.pop_back();
    if (plan.count(s) != 0) continue;
    Result<Committed> c = impl_->ReadCommitted(s, nullptr);
    if (!c.ok()) {
      if (s == step) return c.status().Annotate(what);
      const Code code =
          c.status().code() == Code::kNotFound ? Code::kFailedPrecondition : c.status().code();
      return Status(code,
                    what + ": it depends on step " + std::to_string(s) +
                        ", which is not committed on the object tier: " + c.status().message());
    }
    for (long d : c->manifest.depends) todo.push_back(d);
    plan.emplace(s, std::move(*c));
  }
  BW_RETURN_IF_ERROR(env->MkdirAll(file_root).Annotate(what));
  bool downloaded_top = false;
  for (const auto& [s, c] : plan) {  // oldest first: dependencies before dependents
    Result<Manifest> local = ckpt::ReadCommitted(env, file_root, s);
    if (local.ok()) {
      if (SameShards(*local, c.manifest)) continue;
      return FailedPrecondition(what + ": step " + std::to_string(s) + " is committed on " +
                                file_root + " with other shards than on the object tier; " +
                                "remove " + StepDir(file_root, s) +
                                " or download into another root");
    }
    Status st = impl_->DownloadStep(s, c, file_root);
    if (!st.ok()) {
      RemoveLocalStep(env, file_root, s);
      return st;
    }
    if (s == step) downloaded_top = true;
  }
  VerifyReport report;
  Status st = VerifyStep(env, file_root, step, /*full=*/true, &report);
  if (!st.ok()) {
    if (downloaded_top) RemoveLocalStep(env, file_root, step);
    return Status(st.code(), what + ": the local copy in " + file_root + " does not verify: " +
                                 st.message() + (downloaded_top ? " (removed it)" : ""));
  }
  return Status::Ok();
}

}  // namespace bulwark::ckpt
