// Shard writer (format version 2).
//
// WRITE PROTOCOL (crash-consistent; docs/checkpoint-format.md has the analysis)
//   1. mkdir -p <root>/step-<012d>/ and fsync <root> so the step directory is durable.
//   2. If the step already has a COMMIT, unlink COMMIT then MANIFEST and fsync the
//      step directory: a step whose shards are being replaced must stop being
//      committed before any shard changes.
//   3. Write "<shard>.tmp.<pid>": a placeholder header and index region (sized
//      from an upper bound of the index), then each tensor chunk in turn: hash it
//      (xxh3_64) unless the caller supplies the hashes, pick its location (local
//      bytes, or a reference to the owner rank's shard of this step for replicated
//      tensors, or to an earlier step for unchanged chunks) and append it if
//      local; then the footer; then overwrite the region with the index (padded
//      with spaces) and the header with the real one.
//   4. fsync the tmp file, rename it onto "<shard>", fsync the step directory.
// Only after step 4 is the shard reported durable. A crash before the rename
// leaves a ".tmp.<pid>" file that readers ignore and Retain removes; a crash after
// it leaves a complete shard in an uncommitted step, never loaded until Commit
// (commit.cc) writes MANIFEST and COMMIT the same tmp -> fsync -> rename way.
#include <unistd.h>

#include <algorithm>
#include <cstdio>
#include <set>

#include "ckpt/checkpoint.h"
#include "ckpt/format.h"
#include "common/clock.h"

namespace bulwark::ckpt {

using internal::kFooterSize;
using internal::kHeaderSize;

std::string StepDir(const std::string& root, long step) {
  char buf[32];
  std::snprintf(buf, sizeof(buf), "step-%012ld", step);
  return root + "/" + buf;
}

std::string ShardFileName(int rank, int world) {
  char buf[48];
  std::snprintf(buf, sizeof(buf), "shard-%05d-of-%05d.bws", rank, world);
  return buf;
}

namespace {

Status CheckArgs(long step, int rank, int world) {
  if (step < 0 || step > 999999999999L) {
    return InvalidArgument("checkpoint step " + std::to_string(step) +
                           " is out of range [0, 999999999999]");
  }
  if (world < 1 || world > 99999) {
    return InvalidArgument("world size " + std::to_string(world) + " is out of range [1, 99999]");
  }
  if (rank < 0 || rank >= world) {
    return InvalidArgument("rank " + std::to_string(rank) + " is out of range [0, " +
                           std::to_string(world) + ")");
  }
  return Status::Ok();
}

bool SameMeta(const TensorMeta& a, const TensorMeta& b) {
  return a.dtype == b.dtype && a.shape == b.shape && a.GlobalShape() == b.GlobalShape() &&
         a.Offsets() == b.Offsets();
}

// Largest single write of consecutive local chunks.
constexpr uint64_t kWriteRun = 16ull << 20;

// Decimal digits of v.
uint64_t Digits(uint64_t v) {
  uint64_t d = 1;
  while (v >= 10) {
    v /= 10;
    ++d;
  }
  return d;
}

// An upper bound of EncodeIndex's length once every chunk location is known,
// whatever each chunk turns out to be (local at any offset up to the logical
// size, or a reference to any step <= `step` and rank < `world`). `index` holds
// the tensors' metas with no chunks; it is returned unchanged.
uint64_t IndexBound(ShardIndex* index, const std::vector<TensorView>& tensors, uint64_t chunk_size,
                    long step, int world) {
  const uint64_t skeleton = internal::EncodeIndex(*index).size();
  uint64_t total = 0, chunks = 0;
  for (const TensorView& t : tensors) {
    total += t.meta.nbytes();
    chunks += internal::ChunkCount(t.meta.nbytes(), chunk_size);
  }
  // ["<16 hex>",<offset>] or ["<16 hex>",<step>,<rank>], plus a separating comma.
  const uint64_t local = 2 + 18 + 1 + Digits(total) + 1;
  const uint64_t ref = 2 + 18 + 1 + Digits(static_cast<uint64_t>(step)) + 1 +
                       Digits(static_cast<uint64_t>(world)) + 1;
  return skeleton + chunks * std::max(local, ref) + 64;
}

}  // namespace

Status WriteShard(Env* env, const std::string& root, long step, int rank, int world,
                  const std::vector<TensorView>& tensors, const WriteOptions& opts,
                  ShardStats* stats) {
  const Clock* clk = SystemClock::Get();
  const double t0 = clk->NowMono();
  BW_RETURN_IF_ERROR(CheckArgs(step, rank, world));
  if (opts.chunk_size == 0) return InvalidArgument("WriteOptions.chunk_size must be > 0");
  const ShardIndex* prev = opts.previous;
  if (prev != nullptr && (prev->world != world || prev->rank != rank ||
                          prev->chunk_size != opts.chunk_size || prev->step >= step)) {
    prev = nullptr;  // not comparable: write in full
  }
  std::set<std::string> names;
  for (const TensorView& t : tensors) {
    BW_RETURN_IF_ERROR(t.meta.Validate());
    if (!names.insert(t.meta.name).second) {
      return InvalidArgument("duplicate tensor name '" + t.meta.name +
                             "'; tensor names must be unique");
    }
    if (t.meta.nbytes() > 0 && t.data == nullptr) {
      return InvalidArgument("tensor '" + t.meta.name + "' has bytes but null data");
    }
  }

  // Steps 1-2.
  const std::string step_dir = StepDir(root, step);
  BW_RETURN_IF_ERROR(env->MkdirAll(step_dir));
  BW_RETURN_IF_ERROR(env->SyncDir(root));
  if (env->FileSize(step_dir + "/" + internal::kCommitName).ok() ||
      env->FileSize(step_dir + "/" + internal::kManifestName).ok()) {
    BW_RETURN_IF_ERROR(env->RemoveFile(step_dir + "/" + internal::kCommitName));
    BW_RETURN_IF_ERROR(env->RemoveFile(step_dir + "/" + internal::kManifestName));
    BW_RETURN_IF_ERROR(env->SyncDir(step_dir));
  }

  // Step 3. The index precedes the data but is only known once every chunk is
  // hashed, so the region it occupies is sized first from an upper bound
  // (IndexBound) and the index is written into it, space-padded, after the data.
  // Hashing a chunk and writing it alternate, while the kernel writes back
  // earlier chunks (PosixEnv starts writeback as data arrives): checksums cost
  // CPU time the disk would otherwise idle through.
  ShardIndex index;
  index.step = step;
  index.rank = rank;
  index.world = world;
  index.chunk_size = opts.chunk_size;
  for (const TensorView& t : tensors) {
    TensorEntry e;
    e.meta = t.meta;
    index.tensors.push_back(std::move(e));
  }
  const uint64_t index_cap = IndexBound(&index, tensors, opts.chunk_size, step, world);
  const std::string final_path = step_dir + "/" + ShardFileName(rank, world);
  const std::string tmp = final_path + ".tmp." + std::to_string(::getpid());
  uint64_t data_len = 0, logical = 0;
  double hash_s = 0;
  std::vector<std::vector<uint64_t>> all_hashes(tensors.size());
  internal::Header h;
  Status st;
  {
    BW_ASSIGN_OR_RETURN(auto f, env->NewWritableFile(tmp));
    // Placeholder header and index region, overwritten below.
    st = f->Append(std::string(kHeaderSize + index_cap, ' ').data(), kHeaderSize + index_cap);
    for (size_t ti = 0; st.ok() && ti < tensors.size(); ++ti) {
      const TensorView& t = tensors[ti];
      TensorEntry& e = index.tensors[ti];
      const uint64_t nb = t.meta.nbytes();
      logical += nb;
      const uint8_t* p = static_cast<const uint8_t*>(t.data);
      const TensorEntry* old = prev != nullptr ? prev->Find(t.meta.name) : nullptr;
      if (old != nullptr && !SameMeta(old->meta, t.meta)) old = nullptr;
      const uint64_t n_chunks = internal::ChunkCount(nb, opts.chunk_size);
      all_hashes[ti].reserve(n_chunks);
      // Pending run of consecutive local chunks, written as one Append.
      const uint8_t* run = nullptr;
      uint64_t run_len = 0;
      for (uint64_t i = 0; st.ok() && i < n_chunks; ++i) {
        const uint64_t off = i * opts.chunk_size;
        const uint64_t len = std::min(opts.chunk_size, nb - off);
        ChunkLoc loc;
        if (t.chunk_hashes != nullptr) {
          loc.hash = t.chunk_hashes[i];
        } else {
          const double h0 = clk->NowMono();
          loc.hash = internal::Hash(p + off, len);
          hash_s += clk->NowMono() - h0;
        }
        all_hashes[ti].push_back(loc.hash);
        const int owner = t.meta.replicated && opts.dedup_replicated
                              ? internal::ReplicaOwner(t.meta.name, i, world)
                              : rank;
        if (owner != rank) {
          loc.ref_step = step;
          loc.ref_rank = owner;
        } else if (old != nullptr && old->chunks[i].hash == loc.hash) {
          const ChunkLoc& o = old->chunks[i];
          loc.ref_step = o.local() ? prev->step : o.ref_step;
          loc.ref_rank = o.local() ? rank : o.ref_rank;
        } else {
          loc.offset = data_len;
          data_len += len;
          if (run != nullptr && run + run_len != p + off) {
            st = f->Append(run, run_len);
            run = nullptr;
            run_len = 0;
          }
          if (run == nullptr) run = p + off;
          run_len += len;
          if (run_len >= kWriteRun) {
            st = f->Append(run, run_len);
            run = nullptr;
            run_len = 0;
          }
        }
        e.chunks.push_back(loc);
      }
      if (st.ok() && run != nullptr) st = f->Append(run, run_len);
    }
    std::string index_json;
    if (st.ok()) {
      index_json = internal::EncodeIndex(index);
      if (index_json.size() > index_cap) {
        st = Internal("shard index of " + std::to_string(index_json.size()) +
                      " bytes exceeds its bound " + std::to_string(index_cap) + " (a bug)");
      }
      index_json.resize(index_cap, ' ');
    }
    h.version = kFormatVersion;
    h.step = step;
    h.rank = rank;
    h.world = world;
    h.index_len = index_cap;
    h.index_xxh3 = internal::Hash(index_json.data(), index_json.size());
    h.file_size = kHeaderSize + index_cap + data_len + kFooterSize;
    uint8_t header[kHeaderSize];
    internal::EncodeHeader(h, header);
    uint8_t footer[kFooterSize];
    internal::EncodeFooter({h.file_size, h.index_xxh3}, footer);
    if (st.ok()) st = f->Append(footer, kFooterSize);
    if (st.ok()) st = f->WriteAt(kHeaderSize, index_json.data(), index_json.size());
    if (st.ok()) st = f->WriteAt(0, header, kHeaderSize);
    // Step 4.
    if (st.ok()) st = f->Sync();
    if (st.ok()) st = f->Close();
  }
  if (st.ok()) st = env->Rename(tmp, final_path);
  if (!st.ok()) {
    IgnoreError(env->RemoveFile(tmp),
                "cleanup after the error that is returned; a stale temporary file is overwritten");
    return st.Annotate("write shard rank " + std::to_string(rank) + " step " +
                       std::to_string(step));
  }
  BW_RETURN_IF_ERROR(env->SyncDir(step_dir));
  if (stats != nullptr) {
    stats->path = final_path;
    stats->file_bytes = h.file_size;
    stats->logical_bytes = logical;
    stats->written_bytes = data_len;
    stats->hash_s = hash_s;
    stats->write_s = clk->NowMono() - t0;
    stats->chunk_hashes = std::move(all_hashes);
  }
  return Status::Ok();
}

}  // namespace bulwark::ckpt
