// Sharded, checksummed, atomically committed checkpoints (format version 2).
//
// A tier root (a local disk or shared directory; the object tier mirrors the same
// key layout, see object_tier.h) holds, per step (docs/checkpoint-format.md has the bytes):
//   <root>/step-<012d>/shard-<05d rank>-of-<05d world>.bws   one per rank
//   <root>/step-<012d>/MANIFEST    shards, sizes, index checksums, dependencies
//   <root>/step-<012d>/COMMIT      written last; pins the MANIFEST by size + xxh3
// A step is committed iff COMMIT and MANIFEST verify and every shard listed exists
// with its recorded size. Shards hold named tensors (dtype, shape, and for sharded
// tensors the global shape and this piece's offsets) in chunks, each with an xxh3.
// A chunk may be a reference instead of bytes: to the owner rank's shard of the
// same step (replicated tensors are written once, spread over ranks) or to an
// earlier step (incremental saves); MANIFEST lists the steps a step depends on so
// retention keeps them.
//
// Thread-safety: functions are stateless; concurrent calls for different
// (step, rank) pairs are safe. Retain racing a Commit of an older step is the
// caller's to avoid. Every function returns a Status instead of throwing.
#pragma once

#include <cstddef>
#include <cstdint>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "ckpt/env.h"
#include "common/status.h"

namespace bulwark::ckpt {

inline constexpr uint32_t kFormatVersion = 2;
inline constexpr uint64_t kDefaultChunkSize = 4ull << 20;  // 4 MiB
// The tensor bulwark.checkpoint.save stores the pickled rest of a state dict in (its
// skeleton and non-tensor values): one uint8 tensor per rank, never flagged replicated.
inline constexpr char kObjectsBlobName[] = "__bulwark_objects__";

enum class DType : uint8_t { kU8, kI8, kI16, kI32, kI64, kF16, kBF16, kF32, kF64, kBool };
const char* DTypeName(DType d);  // "uint8", "float32", ...
Result<DType> ParseDType(const std::string& s);
size_t DTypeSize(DType d);

// Metadata of one tensor (or of a raw byte blob: dtype uint8, shape {n}).
struct TensorMeta {
  std::string name;
  DType dtype = DType::kU8;
  std::vector<int64_t> shape;         // this piece
  std::vector<int64_t> global_shape;  // empty: not sharded (= shape)
  std::vector<int64_t> offsets;       // this piece's origin in the global tensor; empty = 0s
  bool replicated = false;            // identical on every rank: stored once across ranks
  uint64_t nbytes() const;
  // Global shape / offsets with the defaults filled in.
  std::vector<int64_t> GlobalShape() const;
  std::vector<int64_t> Offsets() const;
  // "[4,4] at [0,0] of [8,4]": the piece, its offsets and the global shape (messages).
  std::string PieceString() const;
  // Checks name, shape, global shape and offsets are consistent.
  Status Validate() const;
};

// A tensor to save. `data` is borrowed and must hold meta.nbytes() bytes.
struct TensorView {
  TensorMeta meta;
  const void* data = nullptr;
  // Optional precomputed xxh3 per chunk (from the staging seal); empty = hash here.
  const uint64_t* chunk_hashes = nullptr;
};

// Where a chunk's bytes live. Local: `offset` into this shard's data region.
// Reference: the same tensor's same chunk in shard (ref_step, ref_rank).
struct ChunkLoc {
  uint64_t hash = 0;
  uint64_t offset = 0;
  long ref_step = -1;  // >= 0: reference
  int ref_rank = -1;
  bool local() const { return ref_step < 0; }
};

struct TensorEntry {
  TensorMeta meta;
  std::vector<ChunkLoc> chunks;
};

// A shard's index: what it holds and where each chunk is.
struct ShardIndex {
  long step = 0;
  int rank = 0;
  int world = 1;
  uint64_t chunk_size = kDefaultChunkSize;
  std::vector<TensorEntry> tensors;
  const TensorEntry* Find(const std::string& name) const;
};

struct WriteOptions {
  uint64_t chunk_size = kDefaultChunkSize;
  // Replicated tensors: write only the chunks this rank owns, reference the rest.
  bool dedup_replicated = true;
  // Incremental: this rank's index of an earlier step committed on the same root
  // with the same world; chunks with an equal hash are referenced, not rewritten.
  const ShardIndex* previous = nullptr;
};

struct ShardStats {
  std::string path;
  uint64_t file_bytes = 0;     // shard file size
  uint64_t logical_bytes = 0;  // tensor bytes described
  uint64_t written_bytes = 0;  // chunk bytes written to this file
  double hash_s = 0;           // time spent hashing
  double write_s = 0;          // total wall time
  // Every chunk's xxh3, per tensor in input order (computed or as supplied).
  std::vector<std::vector<uint64_t>> chunk_hashes;
};

// The chunk checksum (xxh3_64).
uint64_t ChunkHash(const void* data, size_t n);

// "<root>/step-000000000042"
std::string StepDir(const std::string& root, long step);
// "shard-00003-of-00008.bws"
std::string ShardFileName(int rank, int world);

// Writes rank's shard of `step` durably (tmp -> fsync -> rename -> fsync dir).
// Tensor names must be unique. If the step has a COMMIT it is removed first.
Status WriteShard(Env* env, const std::string& root, long step, int rank, int world,
                  const std::vector<TensorView>& tensors, const WriteOptions& opts,
                  ShardStats* stats = nullptr);

// Structure check of a shard (header, index, footer, size); fills `index`.
Result<ShardIndex> ReadShardIndex(Env* env, const std::string& root, long step, int rank,
                                  int world);

struct ManifestShard {
  int rank = 0;
  std::string file;
  uint64_t size = 0;
  uint64_t index_xxh3 = 0;
};

struct Manifest {
  uint32_t format = kFormatVersion;
  long step = 0;
  int world = 0;
  std::vector<ManifestShard> shards;  // by rank, exactly `world`
  std::vector<long> depends;          // earlier steps whose shards chunks reference
  uint64_t logical_bytes = 0;
  uint64_t stored_bytes = 0;  // sum of shard file sizes
  double time = 0;
};

// Verifies every rank's shard of `step` (structure; with `verify_data` every chunk
// including references), then writes MANIFEST and COMMIT durably.
Status Commit(Env* env, const std::string& root, long step, int world, bool verify_data = false);

// COMMIT -> MANIFEST checks, and every listed shard exists with its size.
Result<Manifest> ReadCommitted(Env* env, const std::string& root, long step);

// Committed steps, ascending. Invalid step directories are skipped; with
// `skipped`, one reason per skipped directory is appended.
Result<std::vector<long>> ListCommitted(Env* env, const std::string& root,
                                        std::vector<std::string>* skipped = nullptr);
// Newest committed step <= max_step (-1: any); -1 if none.
Result<long> NewestCommitted(Env* env, const std::string& root, long max_step = -1);

struct RetainOptions {
  int keep = 3;           // newest committed steps kept (>= 1)
  long golden_every = 0;  // > 0: committed steps divisible by this are never removed
  // Committed steps never removed either: those an incident's replay bundle needs
  // (docs/diagnosis.md, "Replay").
  std::vector<long> pinned;
};
// Deletes committed steps outside {newest `keep`} ∪ golden ∪ their dependencies,
// and uncommitted step directories older than the newest committed step. Never
// deletes the newest committed step or anything newer. COMMIT goes first, so a
// crash mid-delete leaves the step uncommitted. `removed` (optional) gets the steps.
Status Retain(Env* env, const std::string& root, const RetainOptions& opts,
              std::vector<long>* removed = nullptr);

// The retention decision, shared by every tier (Retain above, ObjectTier::Retain).
// Pure: no I/O. `committed_deps` maps each committed step to its MANIFEST `depends`;
// `all_steps` lists every step present on the tier, committed or not (committed
// steps missing from it are added). Returns, ascending, the steps to delete: every
// step older than the newest committed one that is not among the newest `keep`
// committed steps (keep < 1 counts as 1), not golden (committed, divisible by
// golden_every > 0) and not in the dependency closure of those. Nothing when no
// step is committed. Callers delete newest first (reverse order), removing COMMIT
// before anything else of a step, so a crash part-way never leaves a committed step
// whose dependencies are gone.
std::vector<long> PlanRetain(const std::map<long, std::vector<long>>& committed_deps,
                             const std::vector<long>& all_steps, const RetainOptions& opts);

struct VerifyReport {
  uint64_t chunks = 0;
  uint64_t bytes = 0;
  std::vector<std::string> problems;  // empty = verified
};
// ReadCommitted, then every shard's structure and index checksum against the
// MANIFEST, and (full) every chunk's bytes, references resolved.
Status VerifyStep(Env* env, const std::string& root, long step, bool full = true,
                  VerifyReport* report = nullptr);

// Reads tensors of one committed step. Opens the MANIFEST and every shard's index
// (no chunk data) up front.
//
// Thread-safety: not thread-safe; use one reader per thread.
class StepReader {
 public:
  static Result<std::unique_ptr<StepReader>> Open(Env* env, const std::string& root, long step);
  ~StepReader();

  const Manifest& manifest() const;
  // The index of `rank`'s shard.
  const ShardIndex& index(int rank) const;

  // Fills dst (`want` gives the dtype, the wanted piece's shape, the global shape
  // and the piece's offsets in it) from the saved pieces of the tensor named
  // want.name, whatever world and sharding saved them (resharding): a saved piece
  // equal to `want` is read straight into dst; otherwise every saved piece that
  // overlaps the wanted region contributes its part, along any dimensions. Every
  // chunk read is checked against its xxh3; DATA_LOSS names the file and chunk,
  // or the ranks whose distinct pieces overlap. `prefer_rank` picks which rank's
  // copy of a piece several ranks saved (replicas) to read. INVALID_ARGUMENT for
  // another dtype or global shape; NOT_FOUND if the saved pieces do not cover the
  // wanted region (nothing is written to dst then).
  Status Load(const TensorMeta& want, void* dst, int prefer_rank = -1);
  // Bytes read from files so far.
  uint64_t bytes_read() const;

  struct Impl;

 private:
  explicit StepReader(std::unique_ptr<Impl> impl);
  std::unique_ptr<Impl> impl_;
};

// Convenience: raw named blobs (dtype uint8, 1-D), as the SDK's byte API uses.
struct Blob {
  std::string name;
  const void* data = nullptr;
  size_t size = 0;
};
struct OwnedBlob {
  std::string name;
  std::vector<uint8_t> data;
};
std::vector<TensorView> BlobsToTensors(const std::vector<Blob>& blobs);
// Every tensor `rank` saved in `step`, as raw bytes (resolving references).
Result<std::vector<OwnedBlob>> ReadRankTensors(Env* env, const std::string& root, long step,
                                               int rank);

}  // namespace bulwark::ckpt
