// MANIFEST and COMMIT records, listing and retention.
//
// COMMIT PROTOCOL (run once per step and tier, by whoever knows that every rank's
// shard is durable on that tier — the controller):
//   1. Check every rank's shard (structure, or every chunk with verify_data) and
//      that every step its chunks reference is itself committed.
//   2. Write MANIFEST (one JSON line + "xxh3 <hex>" line) via tmp -> fsync ->
//      rename -> fsync dir.
//   3. Write COMMIT = {"format","step","manifest_size","manifest_xxh3"} + checksum
//      line, the same way. COMMIT's rename is the single commit point.
// A crash before 3 completes leaves the step uncommitted (readers skip it; Retain
// removes it once a newer step commits). A torn or unsynced file fails its
// checksum line. MANIFEST changed after commit fails COMMIT's size/xxh3 pin; a
// shard changed after commit fails MANIFEST's size (ReadCommitted) or index xxh3
// (StepReader::Open); chunk bytes fail their chunk xxh3.
#include <algorithm>
#include <nlohmann/json.hpp>
#include <set>

#include "ckpt/checkpoint.h"
#include "ckpt/format.h"
#include "common/clock.h"

namespace bulwark::ckpt {
namespace {

using Json = nlohmann::json;

// Steps of every "step-<12 digits>" directory under `root`, ascending.
Result<std::vector<long>> ListStepDirs(Env* env, const std::string& root) {
  BW_ASSIGN_OR_RETURN(std::vector<std::string> names, env->ListDir(root));
  std::vector<long> steps;
  for (const std::string& name : names) {
    if (name.size() != 17 || name.compare(0, 5, "step-") != 0) continue;
    if (!std::all_of(name.begin() + 5, name.end(), [](char c) { return c >= '0' && c <= '9'; })) {
      continue;
    }
    steps.push_back(std::stol(name.substr(5)));
  }
  std::sort(steps.begin(), steps.end());
  return steps;
}

std::string WithChecksum(const std::string& line) {
  return line + "\nxxh3 " + internal::Hex64(internal::Hash(line.data(), line.size())) + "\n";
}

// Splits "<json>\nxxh3 <hex>\n", checking the checksum line.
Result<Json> ParseChecked(const std::string& content, const std::string& path) {
  size_t nl = content.find('\n');
  if (nl == std::string::npos) return DataLoss(path + ": no checksum line (truncated)");
  const std::string line = content.substr(0, nl);
  if (content.substr(nl + 1) !=
      "xxh3 " + internal::Hex64(internal::Hash(line.data(), line.size())) + "\n") {
    return DataLoss(path + ": checksum line missing or mismatched (truncated or corrupted)");
  }
  try {
    return Json::parse(line);
  } catch (const std::exception& e) {
    return DataLoss(path + ": malformed JSON: " + e.what());
  }
}

Status RemoveStep(Env* env, const std::string& root, long step) {
  const std::string dir = StepDir(root, step);
  BW_RETURN_IF_ERROR(env->RemoveFile(dir + "/" + internal::kCommitName));
  BW_RETURN_IF_ERROR(env->SyncDir(dir));
  return RemoveTree(env, dir);
}

}  // namespace

namespace internal {

std::string EncodeManifest(const Manifest& m) {
  Json shards = Json::array();
  for (const ManifestShard& s : m.shards) {
    shards.push_back({{"rank", s.rank},
                      {"file", s.file},
                      {"size", s.size},
                      {"index_xxh3", internal::Hex64(s.index_xxh3)}});
  }
  Json j = {{"format", m.format},
            {"step", m.step},
            {"world", m.world},
            {"shards", std::move(shards)},
            {"depends", m.depends},
            {"logical_bytes", m.logical_bytes},
            {"stored_bytes", m.stored_bytes},
            {"time", m.time}};
  return WithChecksum(j.dump());
}

std::string EncodeCommit(long step, const std::string& manifest) {
  Json c = {{"format", kFormatVersion},
            {"step", step},
            {"manifest_size", manifest.size()},
            {"manifest_xxh3", Hex64(Hash(manifest.data(), manifest.size()))}};
  return WithChecksum(c.dump());
}

Result<CommitPin> DecodeCommit(const std::string& content, long step, const std::string& what) {
  BW_ASSIGN_OR_RETURN(Json c, ParseChecked(content, what));
  CommitPin pin;
  try {
    if (c.at("format").get<uint32_t>() != kFormatVersion) {
      return DataLoss(what + ": unsupported COMMIT format " + c.at("format").dump());
    }
    if (c.at("step").get<long>() != step) return DataLoss(what + ": records another step");
    pin.manifest_size = c.at("manifest_size").get<uint64_t>();
    if (!ParseHex64(c.at("manifest_xxh3").get<std::string>(), &pin.manifest_xxh3)) {
      return DataLoss(what + ": malformed manifest_xxh3");
    }
  } catch (const std::exception& e) {
    return DataLoss(what + ": malformed COMMIT: " + e.what());
  }
  return pin;
}

Result<Manifest> DecodeManifest(const std::string& content, long step, const CommitPin& pin,
                                const std::string& what) {
  if (content.size() != pin.manifest_size ||
      Hash(content.data(), content.size()) != pin.manifest_xxh3) {
    return DataLoss(what + ": does not match the size/xxh3 COMMIT pinned (changed after commit)");
  }
  BW_ASSIGN_OR_RETURN(Json j, ParseChecked(content, what));
  Manifest m;
  try {
    m.format = j.at("format").get<uint32_t>();
    m.step = j.at("step").get<long>();
    m.world = j.at("world").get<int>();
    m.time = j.at("time").get<double>();
    m.depends = j.at("depends").get<std::vector<long>>();
    m.logical_bytes = j.at("logical_bytes").get<uint64_t>();
    m.stored_bytes = j.at("stored_bytes").get<uint64_t>();
    for (const auto& s : j.at("shards")) {
      ManifestShard ms;
      ms.rank = s.at("rank").get<int>();
      ms.file = s.at("file").get<std::string>();
      ms.size = s.at("size").get<uint64_t>();
      if (!ParseHex64(s.at("index_xxh3").get<std::string>(), &ms.index_xxh3)) {
        return DataLoss(what + ": malformed index_xxh3 for rank " + std::to_string(ms.rank));
      }
      m.shards.push_back(std::move(ms));
    }
  } catch (const std::exception& e) {
    return DataLoss(what + ": malformed MANIFEST: " + e.what());
  }
  if (m.format != kFormatVersion || m.step != step) {
    return DataLoss(what + ": wrong format or step");
  }
  if (m.world < 1 || m.shards.size() != static_cast<size_t>(m.world)) {
    return DataLoss(what + ": lists " + std::to_string(m.shards.size()) + " shards for world " +
                    std::to_string(m.world));
  }
  for (int r = 0; r < m.world; ++r) {
    const ManifestShard& s = m.shards[r];
    if (s.rank != r || s.file != ShardFileName(r, m.world)) {
      return DataLoss(what + ": shard entry " + std::to_string(r) + " is malformed");
    }
  }
  return m;
}

}  // namespace internal

Status Commit(Env* env, const std::string& root, long step, int world, bool verify_data) {
  if (world < 1 || world > 99999) {
    return InvalidArgument("world size " + std::to_string(world) + " is out of range [1, 99999]");
  }
  if (step < 0) return InvalidArgument("commit step must be >= 0, got " + std::to_string(step));
  const std::string step_dir = StepDir(root, step);
  Manifest m;
  m.step = step;
  m.world = world;
  std::set<long> deps;
  for (int rank = 0; rank < world; ++rank) {
    ManifestShard s;
    s.rank = rank;
    s.file = ShardFileName(rank, world);
    internal::Header h;
    ShardIndex idx;
    Status st = internal::CheckShardFile(env, step_dir + "/" + s.file, step, rank, world, &h, &idx);
    if (!st.ok()) {
      return Status(st.code(), "refusing to commit step " + std::to_string(step) + ": rank " +
                                   std::to_string(rank) + ": " + st.message());
    }
    s.size = h.file_size;
    s.index_xxh3 = h.index_xxh3;
    m.stored_bytes += h.file_size;
    for (const TensorEntry& t : idx.tensors) {
      m.logical_bytes += t.meta.nbytes();
      for (const ChunkLoc& c : t.chunks) {
        if (!c.local() && c.ref_step != step) deps.insert(c.ref_step);
      }
    }
    if (verify_data) {
      st = internal::VerifyLocalChunks(env, step_dir + "/" + s.file, idx, h);
      if (!st.ok()) {
        return Status(st.code(), "refusing to commit step " + std::to_string(step) + ": rank " +
                                     std::to_string(rank) + ": " + st.message());
      }
    }
    m.shards.push_back(std::move(s));
  }
  for (long d : deps) {
    Result<Manifest> dm = ReadCommitted(env, root, d);
    if (!dm.ok()) {
      return FailedPrecondition("refusing to commit step " + std::to_string(step) +
                                ": it references step " + std::to_string(d) +
                                ", which is not committed: " + dm.status().message());
    }
  }
  m.depends.assign(deps.begin(), deps.end());
  m.time = SystemClock::Get()->NowWall();
  const std::string manifest = internal::EncodeManifest(m);
  BW_RETURN_IF_ERROR(WriteFileAtomic(env, step_dir, internal::kManifestName, manifest)
                         .Annotate("commit step " + std::to_string(step)));
  BW_RETURN_IF_ERROR(
      WriteFileAtomic(env, step_dir, internal::kCommitName, internal::EncodeCommit(step, manifest))
          .Annotate("commit step " + std::to_string(step)));
  return Status::Ok();
}

Result<Manifest> ReadCommitted(Env* env, const std::string& root, long step) {
  const std::string step_dir = StepDir(root, step);
  const std::string cpath = step_dir + "/" + internal::kCommitName;
  const std::string mpath = step_dir + "/" + internal::kManifestName;
  Result<std::string> craw = ReadWholeFile(env, cpath);
  if (!craw.ok()) {
    if (craw.status().code() == Code::kNotFound) {
      return NotFound(cpath + " is missing (step not committed)");
    }
    return craw.status();
  }
  BW_ASSIGN_OR_RETURN(internal::CommitPin pin, internal::DecodeCommit(*craw, step, cpath));
  Result<std::string> mraw = ReadWholeFile(env, mpath);
  if (!mraw.ok()) {
    return DataLoss(cpath + ": committed MANIFEST is unreadable: " + mraw.status().message());
  }
  BW_ASSIGN_OR_RETURN(Manifest m, internal::DecodeManifest(*mraw, step, pin, mpath));
  for (const ManifestShard& s : m.shards) {
    const std::string shard = step_dir + "/" + s.file;
    Result<uint64_t> size = env->FileSize(shard);
    if (!size.ok()) return DataLoss(mpath + ": committed shard " + shard + " is missing");
    if (*size != s.size) {
      return DataLoss(shard + ": has " + std::to_string(*size) + " bytes, MANIFEST records " +
                      std::to_string(s.size));
    }
  }
  return m;
}

Result<std::vector<long>> ListCommitted(Env* env, const std::string& root,
                                        std::vector<std::string>* skipped) {
  BW_ASSIGN_OR_RETURN(std::vector<long> steps, ListStepDirs(env, root));
  std::vector<long> out;
  for (long step : steps) {
    Result<Manifest> r = ReadCommitted(env, root, step);
    if (r.ok()) {
      out.push_back(step);
    } else if (skipped != nullptr) {
      skipped->push_back("step " + std::to_string(step) + ": " + r.status().ToString());
    }
  }
  return out;
}

Result<long> NewestCommitted(Env* env, const std::string& root, long max_step) {
  BW_ASSIGN_OR_RETURN(std::vector<long> steps, ListCommitted(env, root));
  for (auto it = steps.rbegin(); it != steps.rend(); ++it) {
    if (max_step < 0 || *it <= max_step) return *it;
  }
  return -1L;
}

Status Retain(Env* env, const std::string& root, const RetainOptions& opts,
              std::vector<long>* removed) {
  if (opts.keep < 1) {
    return InvalidArgument("retention keep must be >= 1, got " + std::to_string(opts.keep));
  }
  BW_ASSIGN_OR_RETURN(std::vector<long> all, ListStepDirs(env, root));
  std::map<long, std::vector<long>> deps;  // committed step -> direct dependencies
  for (long s : all) {
    Result<Manifest> m = ReadCommitted(env, root, s);
    if (m.ok()) deps[s] = m->depends;
  }
  if (deps.empty()) return Status::Ok();
  const std::vector<long> doomed = PlanRetain(deps, all, opts);
  // Newest first (see PlanRetain): dependents go before their dependencies.
  const size_t first = removed != nullptr ? removed->size() : 0;
  Status st;
  for (auto it = doomed.rbegin(); st.ok() && it != doomed.rend(); ++it) {
    st = RemoveStep(env, root, *it);
    if (st.ok() && removed != nullptr) removed->push_back(*it);
  }
  if (removed != nullptr) std::sort(removed->begin() + static_cast<long>(first), removed->end());
  BW_RETURN_IF_ERROR(st);
  return env->SyncDir(root);
}

std::vector<long> PlanRetain(const std::map<long, std::vector<long>>& committed_deps,
                             const std::vector<long>& all_steps, const RetainOptions& opts) {
  if (committed_deps.empty()) return {};
  const long newest = committed_deps.rbegin()->first;
  const int keep_newest = std::max(opts.keep, 1);
  std::set<long> keep;
  int n = 0;
  for (auto it = committed_deps.rbegin(); it != committed_deps.rend(); ++it) {
    if (n++ < keep_newest || (opts.golden_every > 0 && it->first % opts.golden_every == 0) ||
        std::find(opts.pinned.begin(), opts.pinned.end(), it->first) != opts.pinned.end()) {
      keep.insert(it->first);
    }
  }
  std::vector<long> todo(keep.begin(), keep.end());
  while (!todo.empty()) {
    long s = todo.back();
    todo.pop_back();
    auto it = committed_deps.find(s);
    if (it == committed_deps.end()) continue;
    for (long d : it->second) {
      if (keep.insert(d).second) todo.push_back(d);
    }
  }
  std::set<long> present(all_steps.begin(), all_steps.end());
  for (const auto& [s, d] : committed_deps) present.insert(s);
  std::vector<long> doomed;
  for (long step : present) {
    if (step < newest && !keep.count(step)) doomed.push_back(step);
  }
  return doomed;
}

}  // namespace bulwark::ckpt
