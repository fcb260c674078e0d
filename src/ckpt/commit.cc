// COMMIT records, listing and retention.
//
// COMMIT file = one JSON line + one checksum line:
//   {"format":1,"step":S,"world":W,"shards":[{"rank":0,"file":"shard-00000-of-0000W.bws",
//     "size":N,"index_xxh3":"<16 hex>"},...],"time":T}\n
//   xxh3 <16 hex digits of xxh3_64 over the JSON line, excluding its newline>\n
// It is written via tmp -> fsync -> rename -> fsync dir (internal::WriteFileAtomic)
// only after every shard verifies, so its presence is the single commit point.
#include <dirent.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <filesystem>
#include <nlohmann/json.hpp>

#include "ckpt/checkpoint.h"
#include "ckpt/format.h"
#include "common/clock.h"

namespace bulwark::ckpt {
namespace {

// Steps of every "step-<12 digits>" directory under `dir`, ascending.
Result<std::vector<long>> ListStepDirs(const std::string& dir) {
  std::vector<long> steps;
  DIR* d = ::opendir(dir.c_str());
  if (d == nullptr) {
    if (errno == ENOENT) return steps;
    return ErrnoStatus("open checkpoint directory " + dir, errno);
  }
  while (dirent* e = ::readdir(d)) {
    std::string name = e->d_name;
    if (name.size() != 17 || name.compare(0, 5, "step-") != 0) continue;
    if (!std::all_of(name.begin() + 5, name.end(), [](char c) { return c >= '0' && c <= '9'; })) {
      continue;
    }
    steps.push_back(std::stol(name.substr(5)));
  }
  ::closedir(d);
  std::sort(steps.begin(), steps.end());
  return steps;
}

std::string EncodeCommit(const CommitRecord& r) {
  nlohmann::json shards = nlohmann::json::array();
  for (const CommitShard& s : r.shards) {
    shards.push_back({{"rank", s.rank},
                      {"file", s.file},
                      {"size", s.size},
                      {"index_xxh3", internal::Hex64(s.index_xxh3)}});
  }
  nlohmann::json j = {{"format", r.format},
                      {"step", r.step},
                      {"world", r.world},
                      {"shards", std::move(shards)},
                      {"time", r.time}};
  std::string line = j.dump();
  return line + "\nxxh3 " + internal::Hex64(internal::Hash(line.data(), line.size())) + "\n";
}

Status RemoveStep(const std::string& dir, long step) {
  const std::string step_dir = StepDir(dir, step);
  const std::string commit = step_dir + "/" + internal::kCommitName;
  if (::unlink(commit.c_str()) == 0) {
    BW_RETURN_IF_ERROR(internal::FsyncDir(step_dir));
  } else if (errno != ENOENT) {
    return ErrnoStatus("unlink " + commit, errno);
  }
  std::error_code ec;
  std::filesystem::remove_all(step_dir, ec);
  if (ec) return Internal("remove " + step_dir + ": " + ec.message());
  return Status::Ok();
}

}  // namespace

Status Commit(const std::string& dir, long step, int world, bool verify_data) {
  if (world < 1 || world > 99999) {
    return InvalidArgument("world size " + std::to_string(world) + " is out of range [1, 99999]");
  }
  if (step < 0) return InvalidArgument("commit step must be >= 0, got " + std::to_string(step));
  const std::string step_dir = StepDir(dir, step);
  CommitRecord rec;
  rec.step = step;
  rec.world = world;
  for (int rank = 0; rank < world; ++rank) {
    CommitShard s;
    s.rank = rank;
    s.file = ShardFileName(rank, world);
    internal::Header h;
    Status st = internal::CheckShardFile(step_dir + "/" + s.file, step, rank, world, verify_data,
                                         &h, nullptr);
    if (!st.ok()) {
      return Status(st.code(), "refusing to commit step " + std::to_string(step) + ": rank " +
                                   std::to_string(rank) + ": " + st.message());
    }
    s.size = h.file_size;
    s.index_xxh3 = h.index_xxh3;
    rec.shards.push_back(std::move(s));
  }
  rec.time = SystemClock::Get()->NowWall();
  return internal::WriteFileAtomic(step_dir, internal::kCommitName, EncodeCommit(rec))
      .Annotate("commit step " + std::to_string(step));
}

Result<CommitRecord> ReadCommit(const std::string& dir, long step) {
  const std::string step_dir = StepDir(dir, step);
  const std::string path = step_dir + "/" + internal::kCommitName;
  BW_ASSIGN_OR_RETURN(std::string content, internal::ReadFile(path));
  size_t nl = content.find('\n');
  if (nl == std::string::npos) return DataLoss(path + ": no checksum line (truncated)");
  const std::string line = content.substr(0, nl);
  const std::string want =
      "xxh3 " + internal::Hex64(internal::Hash(line.data(), line.size())) + "\n";
  if (content.substr(nl + 1) != want) {
    return DataLoss(path + ": checksum line missing or mismatched (truncated or corrupted)");
  }
  CommitRecord rec;
  try {
    nlohmann::json j = nlohmann::json::parse(line);
    rec.format = j.at("format").get<uint32_t>();
    rec.step = j.at("step").get<long>();
    rec.world = j.at("world").get<int>();
    rec.time = j.at("time").get<double>();
    for (const auto& s : j.at("shards")) {
      CommitShard cs;
      cs.rank = s.at("rank").get<int>();
      cs.file = s.at("file").get<std::string>();
      cs.size = s.at("size").get<uint64_t>();
      if (!internal::ParseHex64(s.at("index_xxh3").get<std::string>(), &cs.index_xxh3)) {
        return DataLoss(path + ": malformed index_xxh3 for rank " + std::to_string(cs.rank));
      }
      rec.shards.push_back(std::move(cs));
    }
  } catch (const std::exception& e) {
    return DataLoss(path + ": malformed COMMIT JSON: " + e.what());
  }
  if (rec.format != kFormatVersion) {
    return DataLoss(path + ": unsupported COMMIT format " + std::to_string(rec.format));
  }
  if (rec.step != step) {
    return DataLoss(path + ": records step " + std::to_string(rec.step) + " but lives in " +
                    step_dir);
  }
  if (rec.world < 1 || rec.shards.size() != static_cast<size_t>(rec.world)) {
    return DataLoss(path + ": lists " + std::to_string(rec.shards.size()) + " shards for world " +
                    std::to_string(rec.world));
  }
  for (int r = 0; r < rec.world; ++r) {
    const CommitShard& s = rec.shards[r];
    if (s.rank != r || s.file != ShardFileName(r, rec.world)) {
      return DataLoss(path + ": shard entry " + std::to_string(r) + " is malformed");
    }
    struct stat st;
    const std::string shard = step_dir + "/" + s.file;
    if (::stat(shard.c_str(), &st) != 0) {
      return DataLoss(path + ": committed shard " + shard + " is missing");
    }
    if (static_cast<uint64_t>(st.st_size) != s.size) {
      return DataLoss(shard + ": has " + std::to_string(st.st_size) + " bytes, COMMIT records " +
                      std::to_string(s.size));
    }
  }
  return rec;
}

Result<std::vector<long>> ListCommitted(const std::string& dir, std::vector<std::string>* skipped) {
  BW_ASSIGN_OR_RETURN(std::vector<long> steps, ListStepDirs(dir));
  std::vector<long> out;
  for (long step : steps) {
    Result<CommitRecord> r = ReadCommit(dir, step);
    if (r.ok()) {
      out.push_back(step);
    } else if (skipped != nullptr) {
      skipped->push_back("step " + std::to_string(step) + ": " + r.status().ToString());
    }
  }
  return out;
}

Result<long> NewestCommitted(const std::string& dir, long max_step) {
  BW_ASSIGN_OR_RETURN(std::vector<long> steps, ListCommitted(dir));
  for (auto it = steps.rbegin(); it != steps.rend(); ++it) {
    if (max_step < 0 || *it <= max_step) return *it;
  }
  return -1L;
}

Status Retain(const std::string& dir, int keep) {
  if (keep < 1) return InvalidArgument("retain keep must be >= 1, got " + std::to_string(keep));
  BW_ASSIGN_OR_RETURN(std::vector<long> all, ListStepDirs(dir));
  BW_ASSIGN_OR_RETURN(std::vector<long> committed, ListCommitted(dir));
  if (committed.empty()) return Status::Ok();
  const long newest = committed.back();
  std::vector<long> keep_steps(
      committed.end() - std::min<size_t>(committed.size(), static_cast<size_t>(keep)),
      committed.end());
  for (long step : all) {
    if (step >= newest) continue;
    if (std::find(keep_steps.begin(), keep_steps.end(), step) != keep_steps.end()) continue;
    BW_RETURN_IF_ERROR(RemoveStep(dir, step));
  }
  return internal::FsyncDir(dir);
}

Status VerifyStep(const std::string& dir, long step) {
  BW_ASSIGN_OR_RETURN(CommitRecord rec, ReadCommit(dir, step));
  const std::string step_dir = StepDir(dir, step);
  for (const CommitShard& s : rec.shards) {
    internal::Header h;
    BW_RETURN_IF_ERROR(internal::CheckShardFile(step_dir + "/" + s.file, step, s.rank, rec.world,
                                                true, &h, nullptr));
    if (h.index_xxh3 != s.index_xxh3 || h.file_size != s.size) {
      return DataLoss(step_dir + "/" + s.file + ": does not match the shard recorded in COMMIT");
    }
  }
  return Status::Ok();
}

}  // namespace bulwark::ckpt
