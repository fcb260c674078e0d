// An in-memory ckpt::Env for the checkpoint fuzz target: a map from path to bytes,
// directories implied by the paths below them (plus those made by MkdirAll). Paths
// are used verbatim (callers pass clean absolute paths). Thread-safe (one mutex).
#pragma once

#include <map>
#include <memory>
#include <mutex>
#include <set>
#include <string>
#include <vector>

#include "ckpt/env.h"

namespace bulwark::fuzz {

class MemEnv : public ckpt::Env {
 public:
  // Replaces everything with `files` (path -> content).
  void Reset(std::map<std::string, std::string> files);
  std::map<std::string, std::string> Files() const;

  Result<std::unique_ptr<ckpt::WritableFile>> NewWritableFile(const std::string& path) override;
  Result<std::unique_ptr<ckpt::ReadableFile>> OpenReadable(const std::string& path) override;
  Status Rename(const std::string& from, const std::string& to) override;
  Status RemoveFile(const std::string& path) override;
  Status RemoveDir(const std::string& path) override;
  Status MkdirAll(const std::string& path) override;
  Status SyncDir(const std::string& path) override;
  Result<std::vector<std::string>> ListDir(const std::string& path) override;
  Result<uint64_t> FileSize(const std::string& path) override;
  bool IsDir(const std::string& path) override;

 private:
  friend class MemWritable;
  void Store(const std::string& path, std::string content);

  mutable std::mutex mu_;
  std::map<std::string, std::shared_ptr<std::string>> files_;
  std::set<std::string> dirs_;
};

}  // namespace bulwark::fuzz
