// File-system seam for the checkpoint engine (after LevelDB's Env).
//
// Every byte the checkpoint code reads or writes on a file-system tier goes
// through an Env, so tests can inject I/O errors and kill the writer at any
// operation (fault_env.h), and benchmarks can drop a file's page cache.
//
// Thread-safety: Env implementations are safe to call concurrently. A
// WritableFile / ReadableFile is used by one thread at a time.
// Ownership: files are returned as unique_ptr and closed on destruction.
#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "common/status.h"

namespace bulwark::ckpt {

class WritableFile {
 public:
  virtual ~WritableFile() = default;
  virtual Status Append(const void* data, size_t n) = 0;
  // Overwrites n bytes at `offset`, which must lie within what was appended.
  virtual Status WriteAt(uint64_t offset, const void* data, size_t n) = 0;
  // Makes everything appended so far durable (fsync).
  virtual Status Sync() = 0;
  virtual Status Close() = 0;
};

class ReadableFile {
 public:
  virtual ~ReadableFile() = default;
  // Reads exactly n bytes at `offset`; DATA_LOSS if the file ends first.
  virtual Status ReadAt(uint64_t offset, void* dst, size_t n) = 0;
  virtual uint64_t Size() const = 0;
};

class Env {
 public:
  virtual ~Env() = default;
  // The process-wide POSIX Env. Never null; not owned.
  static Env* Default();

  // Creates or truncates `path` for writing.
  virtual Result<std::unique_ptr<WritableFile>> NewWritableFile(const std::string& path) = 0;
  // NOT_FOUND if `path` does not exist.
  virtual Result<std::unique_ptr<ReadableFile>> OpenReadable(const std::string& path) = 0;
  // Atomic replace (rename(2)).
  virtual Status Rename(const std::string& from, const std::string& to) = 0;
  // Removes a file; OK if it does not exist.
  virtual Status RemoveFile(const std::string& path) = 0;
  // Removes an empty directory; OK if it does not exist.
  virtual Status RemoveDir(const std::string& path) = 0;
  virtual Status MkdirAll(const std::string& path) = 0;
  // fsync of a directory, making its entries (creates, renames, unlinks) durable.
  virtual Status SyncDir(const std::string& path) = 0;
  // Entry names (no "." / ".."); an empty list if `path` does not exist.
  virtual Result<std::vector<std::string>> ListDir(const std::string& path) = 0;
  // NOT_FOUND if absent.
  virtual Result<uint64_t> FileSize(const std::string& path) = 0;
  virtual bool IsDir(const std::string& path) = 0;
  // Best effort: evicts the file's clean pages from the page cache (benchmarks).
  virtual void DropCache(const std::string& path) { (void)path; }
};

// Whole-file helpers over any Env.
Result<std::string> ReadWholeFile(Env* env, const std::string& path);
// Writes `content` to `dir/name` durably: "<name>.tmp" -> Sync -> Rename -> SyncDir.
Status WriteFileAtomic(Env* env, const std::string& dir, const std::string& name,
                       const std::string& content);
// Removes a directory tree (files first, then the directory). OK if absent.
Status RemoveTree(Env* env, const std::string& path);

}  // namespace bulwark::ckpt
