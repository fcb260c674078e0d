// Shard writer (format version 2).
//
// WRITE PROTOCOL (crash-consistent; docs/checkpoint-format.md has the analysis)
//   1. mkdir -p <root>/step-<012d>/ and fsync <root> so the step directory is durable.
//   2. If the step already has a COMMIT, unlink COMMIT then MANIFEST and fsync the
//      step directory: a step whose shards are being replaced must stop being
//      committed before any shard changes.
//   3. Hash every tensor chunk (xxh3_64) unless the caller supplies the hashes, pick
//      each chunk's location (local bytes, or a reference to the owner rank's shard
//      of this step for replicated tensors, or to an earlier step for unchanged
//      chunks), then write header | index | local chunks | footer to
//      "<shard>.tmp.<pid>".
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

struct Piece {
  const uint8_t* data;
  uint64_t len;
};

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

  // Step 3: index.
  ShardIndex index;
  index.step = step;
  index.rank = rank;
  index.world = world;
  index.chunk_size = opts.chunk_size;
  std::vector<Piece> pieces;
  uint64_t data_len = 0, logical = 0;
  double hash_s = 0;
  for (const TensorView& t : tensors) {
    TensorEntry e;
    e.meta = t.meta;
    const uint64_t nb = t.meta.nbytes();
    logical += nb;
    const uint8_t* p = static_cast<const uint8_t*>(t.data);
    const TensorEntry* old = prev != nullptr ? prev->Find(t.meta.name) : nullptr;
    if (old != nullptr && !SameMeta(old->meta, t.meta)) old = nullptr;
    const uint64_t n_chunks = internal::ChunkCount(nb, opts.chunk_size);
    for (uint64_t i = 0; i < n_chunks; ++i) {
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
        pieces.push_back({p + off, len});
      }
      e.chunks.push_back(loc);
    }
    index.tensors.push_back(std::move(e));
  }
  const std::string index_json = internal::EncodeIndex(index);
  internal::Header h;
  h.version = kFormatVersion;
  h.step = step;
  h.rank = rank;
  h.world = world;
  h.index_len = index_json.size();
  h.index_xxh3 = internal::Hash(index_json.data(), index_json.size());
  h.file_size = kHeaderSize + index_json.size() + data_len + kFooterSize;
  uint8_t header[kHeaderSize];
  internal::EncodeHeader(h, header);
  uint8_t footer[kFooterSize];
  internal::EncodeFooter({h.file_size, h.index_xxh3}, footer);

  const std::string final_path = step_dir + "/" + ShardFileName(rank, world);
  const std::string tmp = final_path + ".tmp." + std::to_string(::getpid());
  Status st;
  {
    BW_ASSIGN_OR_RETURN(auto f, env->NewWritableFile(tmp));
    st = f->Append(header, kHeaderSize);
    if (st.ok()) st = f->Append(index_json.data(), index_json.size());
    // Coalesce adjacent pieces (consecutive chunks of one tensor) into one write.
    for (size_t i = 0; st.ok() && i < pieces.size();) {
      const uint8_t* base = pieces[i].data;
      uint64_t len = pieces[i].len;
      size_t j = i + 1;
      while (j < pieces.size() && pieces[j].data == base + len && len < (64ull << 20)) {
        len += pieces[j].len;
        ++j;
      }
      st = f->Append(base, len);
      i = j;
    }
    if (st.ok()) st = f->Append(footer, kFooterSize);
    // Step 4.
    if (st.ok()) st = f->Sync();
    if (st.ok()) st = f->Close();
  }
  if (st.ok()) st = env->Rename(tmp, final_path);
  if (!st.ok()) {
    (void)env->RemoveFile(tmp);
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
  }
  return Status::Ok();
}

}  // namespace bulwark::ckpt
