// FaultEnv: a fault-injecting Env for crash-consistency tests (test-only code,
// built into the static library bw_ckpt_testing; never linked into production).
//
// CONTRACT
//   FaultEnv wraps a base Env (not owned; must outlive it) and forwards every call
//   to it. It numbers the MUTATING operations issued through it, 1, 2, 3, ..., in
//   the order they are issued (a mutex serialises concurrent callers):
//     NewWritableFile, WritableFile::Append, WritableFile::WriteAt, WritableFile::Sync,
//     WritableFile::Close, Rename, RemoveFile, RemoveDir, MkdirAll, SyncDir.
//   Reads (OpenReadable, ReadableFile::ReadAt, ListDir, FileSize, IsDir) and
//   DropCache are forwarded and never counted. A WritableFile destroyed without an
//   explicit Close is closed by its base file and that close is not counted.
//   Every operation counts exactly once, whether it succeeds, fails or faults.
//
//   Unarmed (the default, or Arm(kNone, 0)) it only counts: ops() after a run is
//   the run's total, so a test can draw a fault point uniformly in [1, total] and
//   replay the same run armed. trace() (with set_trace(true)) names every counted
//   operation, "#<n> <Op> <path>[ <bytes>]", to map a fault point to a protocol
//   phase.
//
//   Arm(mode, n) makes operation number n the fault point:
//   kKill       Op n is performed PARTIALLY, then the process raises SIGKILL (no
//               destructors, no atexit handlers, no buffered-output flush). The
//               partial version, drawn from a generator seeded by (seed, n), so the
//               same (seed, n) always tears the same way:
//                 Append(k bytes)        writes a prefix of p bytes, p uniform in
//                                        [0, k) (nothing if k == 0);
//                 WriteAt(k bytes)       overwrites a prefix of p bytes, p as above;
//                 NewWritableFile,
//                 Rename, RemoveFile,
//                 RemoveDir, SyncDir     done or not done (each is atomic), 1/2 each;
//                 MkdirAll(path)         creates a random proper prefix of the
//                                        path's components (possibly none);
//                 Sync, Close            not done.
//   kPowerLoss  As kKill, and before dying truncates every file created through
//               this FaultEnv (followed across Rename, forgotten on RemoveFile) to
//               the length it had at its last successful Sync (0 if never synced):
//               the page cache's unsynced data is lost. Directory entries
//               (creates, renames, unlinks) are NOT rolled back — the model is a
//               file system that persists metadata in issue order. Requires the
//               base Env to operate on real paths (truncate(2) is used).
//   kError      Op n and every later mutating op fail with no effect, returning an
//               EIO Status (code INTERNAL, "injected I/O error at op #<n> (<Op>
//               <path>): Input/output error") — a disk that went bad or
//               read-only. Reads keep working. error_fired() tells whether it hit.
//   Arm resets neither the count nor the trace; ResetCount() does.
//
// Thread-safety: all methods are safe to call concurrently; a kill stops the whole
// process. Files returned are used by one thread at a time (as with any Env).
#pragma once

#include <cstdint>
#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

#include "ckpt/env.h"

namespace bulwark::ckpt {

class FaultEnv : public Env {
 public:
  enum class Mode { kNone, kKill, kPowerLoss, kError };

  // `seed` drives the partial-operation choices of kKill / kPowerLoss.
  explicit FaultEnv(Env* base, uint64_t seed = 1);
  ~FaultEnv() override;
  FaultEnv(const FaultEnv&) = delete;
  FaultEnv& operator=(const FaultEnv&) = delete;

  // Makes mutating operation number `op` (>= 1) the fault point; kNone or op == 0
  // disarms (count only).
  void Arm(Mode mode, uint64_t op);
  // Mutating operations issued so far.
  uint64_t ops() const;
  // Zeroes the count, the trace and error_fired() (the armed fault stays armed).
  void ResetCount();
  // True once a kError fault has triggered.
  bool error_fired() const;
  // Records a description of every counted operation while on (off by default).
  void set_trace(bool on);
  std::vector<std::string> trace() const;

  Result<std::unique_ptr<WritableFile>> NewWritableFile(const std::string& path) override;
  Result<std::unique_ptr<ReadableFile>> OpenReadable(const std::string& path) override;
  Status Rename(const std::string& from, const std::string& to) override;
  Status RemoveFile(const std::string& path) override;
  Status RemoveDir(const std::string& path) override;
  Status MkdirAll(const std::string& path) override;
  Status SyncDir(const std::string& path) override;
  Result<std::vector<std::string>> ListDir(const std::string& path) override;
  Result<uint64_t> FileSize(const std::string& path) override;
  bool IsDir(const std::string& path) override;
  void DropCache(const std::string& path) override;

 private:
  friend class FaultWritableFile;

  // What the caller of Next() must do with the operation it is about to issue.
  enum class Action {
    kProceed,  // perform it normally
    kFail,     // return `*error` without performing it
    kCrash,    // perform the partial version (chosen with `*draw`), then Crash()
  };
  // Unsynced-length bookkeeping for kPowerLoss, per file created through this Env.
  struct FileRecord;

  // Counts one mutating operation (`op` names it, `path` is its target, `bytes`
  // the size of an Append) and decides its fate.
  Action Next(const char* op, const std::string& path, uint64_t bytes, uint64_t* draw,
              Status* error);
  // kPowerLoss truncation if armed so, then raise(SIGKILL). Never returns.
  [[noreturn]] void Crash();
  // Starts tracking a file just created (or truncated) at `path`.
  std::shared_ptr<FileRecord> Track(const std::string& path);
  // Follows a rename / removal in the bookkeeping.
  void MoveRecord(const std::string& from, const std::string& to);
  void DropRecord(const std::string& path);

  Env* const base_;
  const uint64_t seed_;
  mutable std::mutex mu_;
  Mode mode_ = Mode::kNone;
  uint64_t fault_op_ = 0;
  uint64_t ops_ = 0;
  bool error_fired_ = false;
  bool trace_on_ = false;
  std::vector<std::string> trace_;
  std::map<std::string, std::shared_ptr<FileRecord>> files_;  // by current path
};

}  // namespace bulwark::ckpt
