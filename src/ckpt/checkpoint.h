// Sharded, checksummed, atomically committed checkpoints (format version 1).
//
// On-disk layout (see docs/checkpoint-format.md for the byte layout):
//   <dir>/step-<012d step>/shard-<05d rank>-of-<05d world>.bws   one per rank
//   <dir>/step-<012d step>/COMMIT                                  written last
// A step is "committed" iff its COMMIT record parses, its checksum line matches and
// every shard it lists exists with the recorded size. A step directory without a
// valid COMMIT is never loaded.
//
// Thread-safety: all functions are stateless and safe to call concurrently for
// different (step, rank) pairs. Concurrent WriteShard calls for the same shard, or
// Retain racing a Commit of an older step, are the caller's to avoid.
// Every function returns an error Status instead of throwing.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

#include "common/status.h"

namespace bulwark::ckpt {

inline constexpr uint32_t kFormatVersion = 1;
inline constexpr uint64_t kDefaultChunkSize = 4ull << 20;  // 4 MiB

// A named byte range to save. Borrowed: `data` must stay valid during WriteShard.
struct Blob {
  std::string name;
  const void* data = nullptr;
  size_t size = 0;
};

// A blob read back from a shard; owns its bytes.
struct OwnedBlob {
  std::string name;
  std::vector<uint8_t> data;
};

struct WriteOptions {
  uint64_t chunk_size = kDefaultChunkSize;  // checksum granularity, > 0
};

struct ShardStats {
  std::string path;      // final shard path
  uint64_t bytes = 0;    // file size
  double write_s = 0.0;  // wall time of write + fsync + rename + dir fsync
};

// One shard as recorded in a COMMIT record.
struct CommitShard {
  int rank = 0;
  std::string file;  // file name relative to the step directory
  uint64_t size = 0;
  uint64_t index_xxh3 = 0;  // xxh3_64 of the shard's JSON index
};

struct CommitRecord {
  uint32_t format = kFormatVersion;
  long step = 0;
  int world = 0;
  std::vector<CommitShard> shards;  // sorted by rank, exactly `world` entries
  double time = 0.0;                // Unix seconds when committed
};

// "<dir>/step-000000000042"
std::string StepDir(const std::string& dir, long step);
// "shard-00003-of-00008.bws"
std::string ShardFileName(int rank, int world);

// Writes rank's shard of `step` durably: tmp file -> fsync -> rename -> fsync dir.
// Blob names must be unique and non-empty. If the step already has a COMMIT, it is
// removed first (the step becomes uncommitted until Commit runs again). `stats` may
// be null.
Status WriteShard(const std::string& dir, long step, int rank, int world,
                  const std::vector<Blob>& blobs, ShardStats* stats,
                  const WriteOptions& opts = WriteOptions());

// Reads a shard and verifies every checksum (header, index, every data chunk,
// footer, file size). Does not require a COMMIT; callers loading for resume should
// use ReadCommit first (the SDK does).
Result<std::vector<OwnedBlob>> ReadShard(const std::string& dir, long step, int rank, int world);

// Verifies a shard's structure: header, index and footer checksums and the file
// size; with `full_data` also every data chunk checksum.
Status VerifyShard(const std::string& dir, long step, int rank, int world, bool full_data = true);

// Verifies that every rank's shard of `step` exists and verifies (VerifyShard with
// `verify_data`), then writes COMMIT durably (tmp -> fsync -> rename -> fsync dir).
Status Commit(const std::string& dir, long step, int world, bool verify_data = false);

// Parses and checks the COMMIT record of `step` (checksum line, step, shard list)
// and that every listed shard exists with the recorded size.
Result<CommitRecord> ReadCommit(const std::string& dir, long step);

// Committed steps in ascending order. Step directories whose COMMIT is missing or
// invalid are skipped; if `skipped` is non-null, one human-readable reason per
// skipped step directory is appended. A missing `dir` yields an empty list.
Result<std::vector<long>> ListCommitted(const std::string& dir,
                                        std::vector<std::string>* skipped = nullptr);

// Newest committed step <= max_step (max_step = -1: any); -1 if there is none.
Result<long> NewestCommitted(const std::string& dir, long max_step = -1);

// Deletes committed steps older than the newest `keep` committed ones, and
// uncommitted step directories older than the newest committed step. Never deletes
// the newest committed step nor anything newer than it. keep must be >= 1.
// A deleted step loses its COMMIT first, so a crash mid-delete leaves it uncommitted.
Status Retain(const std::string& dir, int keep);

// ReadCommit plus a full VerifyShard of every shard, checking each shard's index
// checksum and size against the COMMIT record.
Status VerifyStep(const std::string& dir, long step);

}  // namespace bulwark::ckpt
