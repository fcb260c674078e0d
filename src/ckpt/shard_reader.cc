// Shard reader, step reader (with dim-0 resharding) and verifier. Every check
// failure is a DATA_LOSS Status naming the file and what did not match; a missing
// file is NOT_FOUND. Chunk bytes are checked against their xxh3 before the caller
// sees them, so garbage is never returned.
#include <algorithm>
#include <cstring>
#include <map>

#include "ckpt/checkpoint.h"
#include "ckpt/format.h"

namespace bulwark::ckpt {

using internal::kFooterSize;
using internal::kHeaderSize;

namespace internal {

Status CheckShardFile(Env* env, const std::string& path, long step, int rank, int world,
                      Header* h_out, ShardIndex* idx_out) {
  BW_ASSIGN_OR_RETURN(auto f, env->OpenReadable(path));
  const uint64_t size = f->Size();
  if (size < kHeaderSize + kFooterSize) {
    return DataLoss(path + ": file has " + std::to_string(size) +
                    " bytes, smaller than header + footer (truncated)");
  }
  Header h;
  uint8_t hb[kHeaderSize];
  BW_RETURN_IF_ERROR(f->ReadAt(0, hb, kHeaderSize));
  BW_RETURN_IF_ERROR(DecodeHeader(hb, path, &h));
  if (h.file_size != size) {
    return DataLoss(path + ": header records " + std::to_string(h.file_size) +
                    " bytes but the file has " + std::to_string(size) + " (truncated or extended)");
  }
  if ((step >= 0 && h.step != step) || (rank >= 0 && h.rank != rank) ||
      (world >= 0 && h.world != world)) {
    return DataLoss(path + ": header says step " + std::to_string(h.step) + " rank " +
                    std::to_string(h.rank) + " of " + std::to_string(h.world) + ", expected step " +
                    std::to_string(step) + " rank " + std::to_string(rank) + " of " +
                    std::to_string(world));
  }
  if (h.index_len > size - kHeaderSize - kFooterSize) {
    return DataLoss(path + ": index length exceeds the file");
  }
  uint8_t fb[kFooterSize];
  BW_RETURN_IF_ERROR(f->ReadAt(size - kFooterSize, fb, kFooterSize));
  Footer ft;
  BW_RETURN_IF_ERROR(DecodeFooter(fb, path, &ft));
  if (ft.file_size != size || ft.index_xxh3 != h.index_xxh3) {
    return DataLoss(path + ": footer does not match header");
  }
  std::string index_json(h.index_len, '\0');
  BW_RETURN_IF_ERROR(f->ReadAt(kHeaderSize, index_json.data(), h.index_len));
  if (Hash(index_json.data(), index_json.size()) != h.index_xxh3) {
    return DataLoss(path + ": index checksum mismatch");
  }
  ShardIndex idx;
  const uint64_t data_len = size - kHeaderSize - h.index_len - kFooterSize;
  BW_RETURN_IF_ERROR(DecodeIndex(index_json, data_len, path, &idx));
  if (idx.step != h.step || idx.rank != h.rank || idx.world != h.world) {
    return DataLoss(path + ": index and header disagree on step/rank/world");
  }
  if (h_out != nullptr) *h_out = h;
  if (idx_out != nullptr) *idx_out = std::move(idx);
  return Status::Ok();
}

Status VerifyLocalChunks(Env* env, const std::string& path, const ShardIndex& idx,
                         const Header& h) {
  BW_ASSIGN_OR_RETURN(auto f, env->OpenReadable(path));
  std::vector<uint8_t> buf;
  const uint64_t data_start = kHeaderSize + h.index_len;
  for (const TensorEntry& e : idx.tensors) {
    const uint64_t nb = e.meta.nbytes();
    for (size_t i = 0; i < e.chunks.size(); ++i) {
      if (!e.chunks[i].local()) continue;
      const uint64_t len = std::min(idx.chunk_size, nb - i * idx.chunk_size);
      buf.resize(len);
      BW_RETURN_IF_ERROR(f->ReadAt(data_start + e.chunks[i].offset, buf.data(), len));
      if (Hash(buf.data(), len) != e.chunks[i].hash) {
        return DataLoss(path + ": tensor '" + e.meta.name + "' chunk " + std::to_string(i) +
                        " checksum mismatch");
      }
    }
  }
  return Status::Ok();
}

}  // namespace internal

Result<ShardIndex> ReadShardIndex(Env* env, const std::string& root, long step, int rank,
                                  int world) {
  ShardIndex idx;
  BW_RETURN_IF_ERROR(
      internal::CheckShardFile(env, StepDir(root, step) + "/" + ShardFileName(rank, world), step,
                               rank, world, nullptr, &idx));
  return idx;
}

namespace {

// An opened, structure-checked shard.
struct Shard {
  std::string path;
  ShardIndex index;
  uint64_t data_start = 0;
  std::unique_ptr<ReadableFile> file;
};

}  // namespace

struct StepReader::Impl {
  Env* env;
  std::string root;
  Manifest manifest;
  std::map<std::pair<long, int>, std::unique_ptr<Shard>> shards;  // (step, rank)
  uint64_t bytes_read = 0;
  std::vector<uint8_t> bounce;

  // Opens (step, rank) of this world, checking structure (and, for the step being
  // read, the index checksum the MANIFEST pinned).
  Result<Shard*> Get(long step, int rank, uint64_t want_index_xxh3) {
    auto key = std::make_pair(step, rank);
    auto it = shards.find(key);
    if (it != shards.end()) return it->second.get();
    auto s = std::make_unique<Shard>();
    s->path = StepDir(root, step) + "/" + ShardFileName(rank, manifest.world);
    internal::Header h;
    BW_RETURN_IF_ERROR(
        internal::CheckShardFile(env, s->path, step, rank, manifest.world, &h, &s->index));
    if (want_index_xxh3 != 0 && h.index_xxh3 != want_index_xxh3) {
      return DataLoss(s->path +
                      ": index checksum differs from the one MANIFEST recorded "
                      "(the shard was replaced after commit)");
    }
    s->data_start = kHeaderSize + h.index_len;
    BW_ASSIGN_OR_RETURN(s->file, env->OpenReadable(s->path));
    Shard* raw = s.get();
    shards.emplace(key, std::move(s));
    return raw;
  }

  // Reads chunk `i` of tensor `name` as stored by `shard` into dst (len bytes),
  // following references, and checks it against `hash`.
  Status ReadChunk(Shard* shard, const std::string& name, uint64_t i, uint64_t hash, uint8_t* dst,
                   uint64_t len) {
    for (int hop = 0; hop < 16; ++hop) {
      const TensorEntry* e = shard->index.Find(name);
      if (e == nullptr || i >= e->chunks.size()) {
        return DataLoss(shard->path + ": referenced tensor '" + name + "' chunk " +
                        std::to_string(i) + " is missing");
      }
      const ChunkLoc& loc = e->chunks[i];
      if (loc.hash != hash) {
        return DataLoss(shard->path + ": tensor '" + name + "' chunk " + std::to_string(i) +
                        " checksum disagrees with the referencing shard");
      }
      if (loc.local()) {
        BW_RETURN_IF_ERROR(shard->file->ReadAt(shard->data_start + loc.offset, dst, len));
        bytes_read += len;
        if (internal::Hash(dst, len) != hash) {
          return DataLoss(shard->path + ": tensor '" + name + "' chunk " + std::to_string(i) +
                          " checksum mismatch (bytes " +
                          std::to_string(shard->data_start + loc.offset) + ".." +
                          std::to_string(shard->data_start + loc.offset + len) + ")");
        }
        return Status::Ok();
      }
      BW_ASSIGN_OR_RETURN(shard, Get(loc.ref_step, loc.ref_rank, 0));
    }
    return DataLoss("tensor '" + name + "' chunk " + std::to_string(i) +
                    ": reference chain longer than 16");
  }

  // Reads bytes [off, off+len) of a tensor piece into dst, chunk by chunk.
  Status ReadRange(Shard* shard, const TensorEntry& e, uint64_t off, uint64_t len, uint8_t* dst) {
    const uint64_t cs = shard->index.chunk_size;
    const uint64_t nb = e.meta.nbytes();
    while (len > 0) {
      const uint64_t i = off / cs;
      const uint64_t c0 = i * cs;
      const uint64_t clen = std::min(cs, nb - c0);
      const uint64_t within = off - c0;
      const uint64_t take = std::min(len, clen - within);
      if (within == 0 && take == clen) {
        BW_RETURN_IF_ERROR(ReadChunk(shard, e.meta.name, i, e.chunks[i].hash, dst, clen));
      } else {
        bounce.resize(clen);
        BW_RETURN_IF_ERROR(ReadChunk(shard, e.meta.name, i, e.chunks[i].hash, bounce.data(), clen));
        std::memcpy(dst, bounce.data() + within, take);
      }
      dst += take;
      off += take;
      len -= take;
    }
    return Status::Ok();
  }
};

StepReader::StepReader(std::unique_ptr<Impl> impl) : impl_(std::move(impl)) {}
StepReader::~StepReader() = default;

Result<std::unique_ptr<StepReader>> StepReader::Open(Env* env, const std::string& root, long step) {
  auto impl = std::make_unique<Impl>();
  impl->env = env;
  impl->root = root;
  BW_ASSIGN_OR_RETURN(impl->manifest, ReadCommitted(env, root, step));
  for (const ManifestShard& s : impl->manifest.shards) {
    BW_RETURN_IF_ERROR(impl->Get(step, s.rank, s.index_xxh3).status());
  }
  return std::unique_ptr<StepReader>(new StepReader(std::move(impl)));
}

const Manifest& StepReader::manifest() const { return impl_->manifest; }

const ShardIndex& StepReader::index(int rank) const {
  return impl_->shards.at({impl_->manifest.step, rank})->index;
}

uint64_t StepReader::bytes_read() const { return impl_->bytes_read; }

namespace {}  // namespace

Status StepReader::Load(const TensorMeta& want, void* dst_void, int prefer_rank) {
  BW_RETURN_IF_ERROR(want.Validate());
  uint8_t* dst = static_cast<uint8_t*>(dst_void);
  const long step = impl_->manifest.step;
  std::vector<std::pair<Shard*, const TensorEntry*>> pieces;
  for (const ManifestShard& ms : impl_->manifest.shards) {
    Shard* s = impl_->shards.at({step, ms.rank}).get();
    if (const TensorEntry* e = s->index.Find(want.name)) pieces.emplace_back(s, e);
  }
  if (pieces.empty()) {
    return NotFound("tensor '" + want.name + "' is not in step " + std::to_string(step));
  }
  const std::vector<int64_t> g = want.GlobalShape(), o = want.Offsets();
  for (const auto& [s, e] : pieces) {
    if (e->meta.dtype != want.dtype) {
      return InvalidArgument("tensor '" + want.name + "' was saved as " + DTypeName(e->meta.dtype) +
                             ", asked for " + DTypeName(want.dtype));
    }
    if (e->meta.GlobalShape() != g) {
      return InvalidArgument("tensor '" + want.name + "' was saved with global shape " +
                             internal::Dims(e->meta.GlobalShape()) + ", asked for " +
                             internal::Dims(g));
    }
  }
  // Exact piece: read straight into dst, preferring the asked-for rank's copy.
  std::stable_sort(pieces.begin(), pieces.end(), [&](const auto& a, const auto& b) {
    return (a.first->index.rank == prefer_rank) > (b.first->index.rank == prefer_rank);
  });
  for (const auto& [s, e] : pieces) {
    if (e->meta.shape == want.shape && e->meta.Offsets() == o) {
      return impl_->ReadRange(s, *e, 0, want.nbytes(), dst);
    }
  }
  // Resharding along dim 0: every piece and the target span all other dims.
  if (want.shape.empty()) return NotFound("scalar tensor '" + want.name + "' has no exact piece");
  uint64_t row_bytes = DTypeSize(want.dtype);
  for (size_t d = 1; d < g.size(); ++d) {
    row_bytes *= static_cast<uint64_t>(g[d]);
    if (o[d] != 0 || want.shape[d] != g[d]) {
      return InvalidArgument("tensor '" + want.name + "': only dim-0 sharding can be resharded; " +
                             "asked for shape " + internal::Dims(want.shape) + " at " +
                             internal::Dims(o));
    }
  }
  const int64_t a = o[0], b = o[0] + want.shape[0];
  std::vector<std::pair<int64_t, int64_t>> covered;
  std::map<int64_t, bool> done_origin;  // one copy per piece origin (replicas)
  bool split_elsewhere = false;         // a piece split along another dim was skipped
  for (const auto& [s, e] : pieces) {
    const auto po = e->meta.Offsets();
    bool full_rows = true;
    for (size_t d = 1; d < po.size(); ++d) {
      full_rows = full_rows && po[d] == 0 && e->meta.shape[d] == g[d];
    }
    split_elsewhere = split_elsewhere || !full_rows;
    if (!full_rows || done_origin.count(po[0])) continue;
    const int64_t pa = po[0], pb = po[0] + e->meta.shape[0];
    const int64_t lo = std::max(a, pa), hi = std::min(b, pb);
    if (lo >= hi) continue;
    done_origin[po[0]] = true;
    BW_RETURN_IF_ERROR(impl_->ReadRange(s, *e, static_cast<uint64_t>(lo - pa) * row_bytes,
                                        static_cast<uint64_t>(hi - lo) * row_bytes,
                                        dst + static_cast<uint64_t>(lo - a) * row_bytes));
    covered.emplace_back(lo, hi);
  }
  std::sort(covered.begin(), covered.end());
  int64_t at = a;
  for (const auto& [lo, hi] : covered) {
    if (lo > at) break;
    at = std::max(at, hi);
  }
  if (at < b && split_elsewhere) {
    return InvalidArgument("tensor '" + want.name + "' was saved in pieces split along a " +
                           "dimension other than 0 in step " + std::to_string(step) +
                           "; only dim-0 sharding can be resharded: load it with the " +
                           "saving ranks' exact shapes and offsets");
  }
  if (at < b) {
    return NotFound("tensor '" + want.name + "': rows " + std::to_string(at) + ".." +
                    std::to_string(b) + " of dim 0 were not saved by any rank of step " +
                    std::to_string(step));
  }
  return Status::Ok();
}

Result<std::vector<OwnedBlob>> ReadRankTensors(Env* env, const std::string& root, long step,
                                               int rank) {
  BW_ASSIGN_OR_RETURN(auto reader, StepReader::Open(env, root, step));
  if (rank < 0 || rank >= reader->manifest().world) {
    return InvalidArgument("rank " + std::to_string(rank) + " is not in step " +
                           std::to_string(step) + " (world " +
                           std::to_string(reader->manifest().world) + ")");
  }
  std::vector<OwnedBlob> out;
  for (const TensorEntry& e : reader->index(rank).tensors) {
    OwnedBlob b;
    b.name = e.meta.name;
    b.data.resize(e.meta.nbytes());
    BW_RETURN_IF_ERROR(reader->Load(e.meta, b.data.data(), rank));
    out.push_back(std::move(b));
  }
  return out;
}

Status VerifyStep(Env* env, const std::string& root, long step, bool full, VerifyReport* report) {
  VerifyReport local;
  VerifyReport* r = report != nullptr ? report : &local;
  BW_ASSIGN_OR_RETURN(auto reader, StepReader::Open(env, root, step));
  if (!full) return Status::Ok();
  std::vector<uint8_t> buf;
  for (const ManifestShard& ms : reader->manifest().shards) {
    for (const TensorEntry& e : reader->index(ms.rank).tensors) {
      buf.resize(e.meta.nbytes());
      Status st = reader->Load(e.meta, buf.data(), ms.rank);
      if (!st.ok()) {
        r->problems.push_back(st.message());
        continue;
      }
      r->chunks += e.chunks.size();
      r->bytes += e.meta.nbytes();
    }
  }
  if (!r->problems.empty()) {
    return DataLoss("step " + std::to_string(step) + ": " + r->problems.front() +
                    (r->problems.size() > 1
                         ? " (and " + std::to_string(r->problems.size() - 1) + " more)"
                         : ""));
  }
  return Status::Ok();
}

}  // namespace bulwark::ckpt
